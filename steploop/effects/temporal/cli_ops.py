"""``steploop temporal interrupt | status | check | trace | gc``: what an operator does to turns
that run (or ran) on Temporal.

- ``interrupt WORKFLOW_ID [--kind hard|submit]``: the ``interrupt`` signal (a hard interrupt is
  Esc): running tools are cancelled and stop within about a second.
- ``status WORKFLOW_ID``: the workflow's status, and the turn's phase, rounds, steps and pending
  questions (a query: a worker must answer it), or its terminal once it ended.
- ``check HISTORY.json... [--workflow ID]...``: Temporal's Replayer and steploop's exact replay
  over the histories (files, as ``temporal workflow show --output json`` or
  ``WorkflowHistory.to_json()`` write them, the workflow id being the file's stem; or fetched
  from the server, every run); ``--save DIR`` keeps the fetched ones. Exit 0 when both pass, 1
  when either fails (:mod:`steploop.effects.temporal.history`), 2 for a file it cannot read.
- ``trace WORKFLOW_ID [-o FILE]``: the turn's trace, from the history.
- ``gc [--grace S]``: remove the payloads of workflows the server no longer knows.

A workflow the server does not know is a usage error (one line, status 2).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from steploop.effects.cli_common import EXIT_FAILED, EXIT_OK, CliError
from steploop.effects.temporal.cli import (
    common,
    connect_args,
    need_temporal,
    one_line,
    run_to_exit,
    store_of,
)

__all__ = ["register"]


def register(sub: Any) -> None:
    i = sub.add_parser("interrupt", help="interrupt a running turn (its tools stop at once)")
    common(i, queue=False)
    i.add_argument("workflow_id")
    i.add_argument("--kind", choices=("hard", "submit"), default="hard")
    i.set_defaults(handler=cmd_interrupt)
    s = sub.add_parser("status", help="where a turn stands")
    common(s, queue=False)
    s.add_argument("workflow_id")
    s.set_defaults(handler=cmd_status)
    c = sub.add_parser(
        "check", help="Temporal's Replayer and steploop's exact replay over turns' histories"
    )
    common(c, queue=False)
    c.add_argument("histories", nargs="*", metavar="HISTORY.json")
    c.add_argument(
        "--workflow", action="append", default=[], metavar="ID", help="fetch every run of ID"
    )
    c.add_argument("--save", metavar="DIR", help="keep the fetched histories there")
    c.set_defaults(handler=cmd_check)
    t = sub.add_parser("trace", help="write a turn's trace from its workflow's history")
    common(t, queue=False)
    t.add_argument("workflow_id")
    t.add_argument("-o", "--out", metavar="FILE", help="default: standard output")
    t.add_argument("--turn", help="which turn (a workflow of one's own may run several)")
    t.set_defaults(handler=cmd_trace)
    g = sub.add_parser("gc", help="remove the payloads of workflows past their retention")
    common(g, queue=False)
    g.add_argument(
        "--grace", type=float, default=3600.0, metavar="S", help="keep objects newer (default 1 h)"
    )
    g.set_defaults(handler=cmd_gc)


def _not_found(args: argparse.Namespace, e: Any) -> CliError:
    return CliError(f"workflow {args.workflow_id}: {one_line(e)}")


async def _handle(client: Any, args: argparse.Namespace) -> tuple[Any, Any]:
    """The workflow's handle and description; a workflow the server does not know is a usage
    error."""
    from temporalio.service import RPCError, RPCStatusCode

    handle = client.get_workflow_handle(args.workflow_id)
    try:
        return handle, await handle.describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            raise _not_found(args, e) from None
        raise


# ----------------------------------------------------------------------------------------------


def cmd_interrupt(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    run_to_exit(_interrupt(args, out), out)


async def _interrupt(args: argparse.Namespace, out: TextIO) -> int:
    from temporalio.client import WorkflowExecutionStatus

    client = await connect_args(args)
    handle, desc = await _handle(client, args)
    if desc.status != WorkflowExecutionStatus.RUNNING:
        raise CliError(f"workflow {args.workflow_id} is not running ({desc.status.name.lower()})")
    await handle.signal("interrupt", args=[args.kind, int(time.time() * 1000)])
    print(f"interrupted {args.workflow_id} ({args.kind})", file=out)
    return EXIT_OK


def cmd_status(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    run_to_exit(_status(args, out), out)


async def _status(args: argparse.Namespace, out: TextIO) -> int:
    from datetime import timedelta

    from temporalio.client import WorkflowExecutionStatus
    from temporalio.service import RPCError

    client = await connect_args(args)
    handle, desc = await _handle(client, args)
    status = desc.status.name.lower() if desc.status is not None else "unknown"
    print(f"workflow {args.workflow_id}: {status} ({desc.workflow_type})", file=out)
    if desc.status == WorkflowExecutionStatus.RUNNING:
        try:
            progress = await handle.query("progress", rpc_timeout=timedelta(seconds=5))
            pending = await handle.query("pending_permissions", rpc_timeout=timedelta(seconds=5))
        except (TimeoutError, RPCError) as e:
            print(f"  no worker answered ({one_line(e)})", file=out)
            return EXIT_OK
        print(
            f"  phase {progress['phase']}, round {progress['turn_count']}, "
            f"{progress['steps']} steps, {progress['items']} items, run {progress['runs']}",
            file=out,
        )
        for ask in pending:
            what = "started, not finished: run again?" if ask.get("unfinished") else "permission?"
            print(f"  waits: {ask['name']} {ask['tool_use_id']} ({what})", file=out)
    elif desc.status == WorkflowExecutionStatus.COMPLETED:
        result = await handle.result()
        terminal = result.get("terminal", {}) if isinstance(result, dict) else {}
        steps = result.get("steps", "?") if isinstance(result, dict) else "?"
        print(f"  terminal {terminal.get('type', '?')} ({steps} steps)", file=out)
    return EXIT_OK


# ----------------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    from temporalio.client import WorkflowHistory

    if not args.histories and not args.workflow:
        raise CliError("give HISTORY.json files or --workflow ID")
    histories = []
    for name in args.histories:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
            histories.append(WorkflowHistory.from_json(path.stem, text))
            if not histories[-1].events:
                raise ValueError("no events")
        except (OSError, ValueError, TypeError, KeyError) as e:
            raise CliError(f"{name}: not a workflow history: {one_line(e)}") from None
    run_to_exit(_check(args, histories, out), out)


async def _check(args: argparse.Namespace, histories: list[Any], out: TextIO) -> int:
    from steploop.effects.temporal.client import fetch_histories
    from steploop.effects.temporal.history import check_histories
    from steploop.effects.temporal.plugin import data_converter
    from steploop.effects.temporal.storage import PayloadStore

    store = PayloadStore(store_of(args) / "payloads")
    converter = data_converter(store)
    if args.workflow:
        client = await connect_args(args)
        converter = client.data_converter
        for wid in args.workflow:
            fetched = await fetch_histories(client, wid)
            if args.save:
                folder = Path(args.save)
                folder.mkdir(parents=True, exist_ok=True)
                for k, h in enumerate(fetched, 1):
                    (folder / f"{wid}.run{k}.json").write_text(h.to_json(), encoding="utf-8")
            histories.extend(fetched)
    report = await check_histories(histories, data_converter=converter)
    for problem in report.problems:
        print(f"✗ {problem}", file=out)
    verdict = "both checks passed" if report.ok else f"{len(report.problems)} problem(s)"
    print(
        f"{report.histories} histories, {report.turns} turn(s), {report.steps} steps: {verdict}",
        file=out,
    )
    return EXIT_OK if report.ok else EXIT_FAILED


# ----------------------------------------------------------------------------------------------


def cmd_trace(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    if args.out and Path(args.out).exists():
        raise CliError(f"{args.out} exists")
    run_to_exit(_trace(args, out), out)


async def _trace(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.effects.temporal.client import traces

    client = await connect_args(args)
    await _handle(client, args)
    found = await traces(client, args.workflow_id)
    if args.turn is not None:
        found = [t for t in found if t.turn_id == args.turn]
    if not found:
        raise CliError(f"workflow {args.workflow_id} holds no steploop trace")
    if len(found) > 1:
        turns = ", ".join(t.turn_id for t in found)
        raise CliError(f"workflow {args.workflow_id} ran several turns ({turns}): pick one, --turn")
    (t,) = found
    if t.problem is not None:
        print(f"steploop: error: {t.problem}", file=sys.stderr)
        return EXIT_FAILED
    if args.out:
        Path(args.out).write_text(t.text, encoding="utf-8")
        print(f"{args.out}: {t.text.count(chr(10))} records from {t.parts} part(s)", file=out)
    else:
        out.write(t.text)
    return EXIT_OK


# ----------------------------------------------------------------------------------------------


def cmd_gc(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    if args.grace < 0:
        raise CliError("--grace must be at least 0")
    run_to_exit(_gc(args, out), out)


async def _gc(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.effects.temporal.client import alive

    client = await connect_args(args)
    store = client.data_converter.external_storage.drivers[0]

    async def known(namespace: str, workflow_id: str) -> bool:
        return await alive(client, namespace, workflow_id)

    got = await store.collect(known, grace_s=args.grace)
    print(
        json.dumps(
            {
                "workflows_removed": got.workflows_removed,
                "workflows_kept": got.workflows_kept,
                "objects_removed": got.objects_removed,
                "bytes_removed": got.bytes_removed,
                "objects_kept": got.objects_kept,
                "bytes_kept": got.bytes_kept,
            }
        ),
        file=out,
    )
    return EXIT_OK
