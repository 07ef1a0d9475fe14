"""``steploop temporal worker`` and ``steploop temporal start PROMPT``.

The subcommand exists without the ``temporal`` extra; running it then says how to install it.
Both commands end the process with ``os._exit`` once their output is flushed, on every path
once the SDK is loaded (an error line and Ctrl-C included): the Temporal SDK's native runtime
can crash a process while the interpreter shuts down (temporalio sdk-python issue 300), which
would turn a finished command into a wrong exit status. ``start`` exits with the status
``steploop run`` gives the turn's terminal (the table in :mod:`steploop.effects.cli_common`).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

from steploop.effects.cli_common import (
    EXIT_API_ERROR,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    SAMPLE_PROJECT,
    CliError,
    config_from,
    demo_script,
    exit_code,
    live_model,
    load_json,
)
from steploop.reducer import SteploopError

if TYPE_CHECKING:
    from steploop.effects.temporal.workflow import TurnResult

__all__ = ["register", "turn_exit_code"]

T = TypeVar("T")

DEFAULT_ADDRESS = "127.0.0.1:7233"
DEFAULT_STORE = ".steploop-temporal"


def _need_temporal() -> None:
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise CliError(
            "steploop temporal needs the temporal extra: pip install 'steploop[temporal]'"
        ) from None


def _exit(code: int, out: TextIO) -> NoReturn:
    out.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _run_to_exit(main: Coroutine[Any, Any, int], out: TextIO) -> NoReturn:
    """Run a command's coroutine and end the process with its status. A user error is one
    line and status 2, Ctrl-C status 130, a Temporal failure (the server gone, the workflow
    failed) one line and status 1, as ``steploop.effects.cli.main`` reports them; but never by
    returning to the interpreter's shutdown once the SDK's runtime is up."""
    from temporalio.exceptions import TemporalError

    try:
        code = asyncio.run(main)
    except (CliError, SteploopError) as e:
        print(f"steploop: error: {_one_line(e)}", file=sys.stderr)
        code = EXIT_USAGE
    except TemporalError as e:
        print(f"steploop: error: Temporal: {_one_line(e)}", file=sys.stderr)
        code = EXIT_FAILED
    except KeyboardInterrupt:
        print("steploop: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    _exit(code, out)


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    cause = e.__cause__
    if not text and cause is not None:
        text = " ".join(str(cause).split())
    return text or type(e).__name__


def turn_exit_code(result: TurnResult) -> int:
    """The exit status of a turn's result: the terminal's, as for ``steploop run``
    (``completed`` on an API-error message is 3)."""
    code = exit_code(str(result.terminal.get("type", "")))
    return EXIT_API_ERROR if code == EXIT_OK and result.api_error else code


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", default=DEFAULT_ADDRESS, help=f"default {DEFAULT_ADDRESS}")
    p.add_argument("--namespace", default="default")
    p.add_argument("--task-queue", default="steploop")
    p.add_argument(
        "--store",
        default=DEFAULT_STORE,
        help="directory shared by the clients and workers: large payloads (blobs/) and the "
        f"tool-call ledger (ledger/); default {DEFAULT_STORE}",
    )


def register(subparsers: Any) -> None:
    t = subparsers.add_parser("temporal", help="run turns durably on Temporal (steploop[temporal])")
    sub = t.add_subparsers(dest="temporal_command", required=True)
    w = sub.add_parser("worker", help="run a worker: the turn workflow and its activities")
    _common(w)
    w.add_argument(
        "--workspace",
        help="directory the tools are confined to (default: ., or with --demo a scratch copy "
        "of the sample project)",
    )
    w.add_argument("--scripted", metavar="FILE", help="answer model calls from a JSON script")
    w.add_argument(
        "--demo",
        action="store_true",
        help="the demo's scripted model on a scratch copy of the sample project",
    )
    w.add_argument("--enable-bash", action="store_true", help="offer the Bash tool")
    w.set_defaults(handler=cmd_worker)
    s = sub.add_parser("start", help="start a turn and follow it to its end")
    _common(s)
    s.add_argument("prompt")
    s.add_argument("--workflow-id", help="default: steploop-<random>")
    s.add_argument("--trace", metavar="FILE", help="where the workflow writes the turn's trace")
    s.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    s.add_argument("--profile", default="default", help="default, claude_code_2_1_88 or full")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key")
    s.add_argument("--rounds-per-run", type=int, default=50, help="continue as new every N rounds")
    s.add_argument("--no-wait", action="store_true", help="print the workflow id and return")
    s.set_defaults(handler=cmd_start)


# ----------------------------------------------------------------------------------------------
# worker


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    _need_temporal()
    from steploop.effects.tools import ToolRegistry, builtin_tools

    if args.demo and args.workspace is None:
        workspace = Path(tempfile.mkdtemp(prefix="steploop-temporal-demo-")) / "project"
        shutil.copytree(SAMPLE_PROJECT, workspace)
    else:
        workspace = Path(args.workspace or ".").resolve()
        if not workspace.is_dir():
            raise CliError(f"workspace {workspace} is not a directory")
    tools = ToolRegistry(builtin_tools(workspace, enable_bash=args.enable_bash))
    model: Any
    if args.demo or args.scripted:
        from steploop.effects.scripted import ScriptedModel
        from steploop.effects.temporal.activities import ByCallId

        script = demo_script() if args.demo else load_json(args.scripted, "script")
        model = ByCallId(ScriptedModel.from_json(script, traits_for=tools.traits))
    else:
        _, model = live_model(tools.traits, tools.definitions())
    _run_to_exit(_work(args, model, tools, workspace, out), out)


async def _work(
    args: argparse.Namespace, model: Any, tools: Any, workspace: Path, out: TextIO
) -> int:
    from steploop.effects.temporal.activities import Ledger, SteploopActivities
    from steploop.effects.temporal.client import worker

    store = Path(args.store)
    client = await _connect(args)
    acts = SteploopActivities(
        model=model, tools=tools, workspace=workspace, ledger=Ledger(store / "ledger")
    )
    async with worker(client, acts, task_queue=args.task_queue):
        print(
            f"worker on {args.address} (task queue {args.task_queue}), workspace {workspace}; "
            "Ctrl-C stops it",
            file=out,
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:  # pragma: no cover - Ctrl-C
            pass
    return 0


async def _connect(args: argparse.Namespace) -> Any:
    from steploop.effects.temporal.client import connect

    try:
        return await connect(
            args.address, namespace=args.namespace, blob_dir=Path(args.store) / "blobs"
        )
    except Exception as e:  # RuntimeError from the bridge: connection refused, bad address
        raise CliError(f"cannot reach Temporal at {args.address}: {e}") from None


# ----------------------------------------------------------------------------------------------
# start


def cmd_start(args: argparse.Namespace, out: TextIO) -> int:
    _need_temporal()
    if args.rounds_per_run < 1:
        raise CliError("--rounds-per-run must be at least 1")
    config = config_from(args.profile, args.set)
    if args.trace and Path(args.trace).exists():
        raise CliError(f"{args.trace} exists: the workflow writes a new trace there")
    _run_to_exit(_start(args, config, out), out)


async def _start(args: argparse.Namespace, config: Any, out: TextIO) -> int:
    from steploop.effects.cli_drive import describe
    from steploop.effects.run import PermissionPolicy
    from steploop.effects.temporal.client import start_turn, turn_input
    from steploop.effects.temporal.workflow import TurnWorkflow
    from steploop.reducer.messages import Emitted
    from steploop.reducer.serialize import structure

    client = await _connect(args)
    inp = turn_input(
        args.prompt,
        config=config,
        permissions=PermissionPolicy(
            allow=frozenset({"Read", "Glob", "Grep"}), default="allow" if args.yes else "ask"
        ),
        trace_path=Path(args.trace).resolve() if args.trace else None,
        rounds_per_run=args.rounds_per_run,
    )
    wid = args.workflow_id or f"steploop-{uuid.uuid4().hex[:12]}"
    handle = await start_turn(client, inp, workflow_id=wid, task_queue=args.task_queue)
    print(f"▶ {args.prompt}  (workflow {wid})", file=out, flush=True)
    if args.no_wait:
        return EXIT_OK
    from temporalio.client import WorkflowExecutionStatus

    told = False

    def waiting(why: str) -> None:
        nonlocal told
        if not told:
            told = True
            print(
                f"steploop: waiting for a worker on task queue {args.task_queue} ({why}); "
                "start one with: steploop temporal worker",
                file=sys.stderr,
                flush=True,
            )

    run_id = handle.first_execution_run_id  # followed run by run, so no item is missed
    seen = 0
    asked: set[str] = set()
    while True:
        run = client.get_workflow_handle_for(TurnWorkflow.run, wid, run_id=run_id)
        status = (await run.describe()).status
        items = await _patiently(functools.partial(run.query, TurnWorkflow.items, seen), waiting)
        for data in items:  # a closed run answers too
            item: Emitted = structure(data, Emitted)
            print(f"  {describe(item)}", file=out, flush=True)
            seen += 1
        if status == WorkflowExecutionStatus.CONTINUED_AS_NEW:
            last = (await run.fetch_history()).events[-1]
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            continue
        if status != WorkflowExecutionStatus.RUNNING:
            break
        pending = functools.partial(run.query, TurnWorkflow.pending_permissions)
        for ask in await _patiently(pending, waiting):
            tid = ask["tool_use_id"]
            if tid in asked:
                continue
            asked.add(tid)
            decision = await asyncio.to_thread(_ask, ask, out)
            update = functools.partial(  # asked again under the same update id: answered once
                run.execute_update,
                TurnWorkflow.answer_permission,
                args=[tid, decision, "", int(time.time() * 1000)],
                id=f"answer-{tid}",
            )
            await _patiently(update, waiting)
        await asyncio.sleep(0.2)
    result = asyncio.ensure_future(handle.result())  # follows the runs continued as new
    await result
    res = result.result()
    print(f"══ terminal: {res.terminal['type']}  ({res.steps} steps, {res.runs} run(s))", file=out)
    if args.trace:
        print(f"trace: {args.trace} (steploop replay {args.trace})", file=out)
    return turn_exit_code(res)


async def _patiently(
    call: Callable[[], Awaitable[T]], waiting: Callable[[str], None], pause_s: float = 1.0
) -> T:
    """``call()``, asked again for as long as no worker answers (a query or an update needs
    one: none may be running yet, and the turn waits for one durably, so start does too; or
    the workers are busy or gone). Without a worker the service answers after about 30 s,
    with one of several statuses (seen: deadline exceeded, cancelled on an HTTP/2 error, "no
    poller seen for task queue recently"); those are asked again, any other error is raised.
    ``waiting`` is told why each time."""
    from temporalio.service import RPCError, RPCStatusCode

    again = {
        RPCStatusCode.DEADLINE_EXCEEDED,
        RPCStatusCode.CANCELLED,
        RPCStatusCode.UNAVAILABLE,
        RPCStatusCode.FAILED_PRECONDITION,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.ABORTED,
    }
    while True:
        try:
            return await call()
        except RPCError as e:
            if e.status not in again:
                raise
            waiting(_one_line(e))
        await asyncio.sleep(pause_s)


def _ask(ask: dict[str, Any], out: TextIO) -> str:
    shown = ", ".join(f"{k}={str(v)[:40]}" for k, v in ask["input"].items())
    print(f"  permission? {ask['name']}({shown}) [y/N] ", end="", file=out, flush=True)
    try:
        answer = input()
    except EOFError:
        answer = ""
    return "allow" if answer.strip().lower() in ("y", "yes") else "rejected_by_user"
