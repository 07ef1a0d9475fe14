"""``steploop temporal``: ``worker``, ``start PROMPT``, and (:mod:`steploop.effects.temporal.cli_ops`)
``interrupt``, ``status``, ``check``, ``trace`` and ``gc``.

The subcommand exists without the ``temporal`` extra; running it then says how to install it.
Every command ends the process with ``os._exit`` once its output is flushed, on every path once
the SDK is loaded (an error line and Ctrl-C included): the Temporal SDK's native runtime can
crash a process while the interpreter shuts down (temporalio sdk-python issue 300), which would
turn a finished command into a wrong exit status. ``start`` exits with the status ``steploop run``
gives the turn's terminal (the table in :mod:`steploop.effects.cli_common`); ``worker`` with 130
on Ctrl-C (SIGINT), 143 on SIGTERM, after a graceful shutdown, 2 when the server cannot be
reached, 1 when the worker fails. Clients and workers share one payload store, ``--store``
(default: :func:`~steploop.effects.temporal.paths.default_root`, absolute whatever the working
directory).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import os
import shutil
import signal
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
from steploop.effects.temporal.paths import default_root
from steploop.reducer import SteploopError

if TYPE_CHECKING:
    from steploop.effects.temporal.workflow import TurnResult

__all__ = ["EXIT_TERMINATED", "register", "turn_exit_code"]

T = TypeVar("T")

DEFAULT_ADDRESS = "127.0.0.1:7233"
EXIT_TERMINATED = 143
"""The worker's status after SIGTERM (128 + 15), once it shut down gracefully."""


def need_temporal() -> None:
    try:
        import temporalio  # noqa: F401
    except ImportError:
        raise CliError(
            "steploop temporal needs the temporal extra: pip install 'steploop[temporal]'"
        ) from None


def exit_now(code: int, out: TextIO) -> NoReturn:
    out.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_to_exit(main: Coroutine[Any, Any, int], out: TextIO) -> NoReturn:
    """Run a command's coroutine and end the process with its status. A user error is one
    line and status 2, Ctrl-C status 130, a Temporal failure (the server gone, the workflow
    failed) or a missing payload one line and status 1, as ``steploop.effects.cli.main``
    reports them; but never by returning to the interpreter's shutdown once the SDK's runtime
    is up."""
    from temporalio.exceptions import TemporalError
    from temporalio.service import RPCError

    from steploop.effects.temporal.storage import StoreMissing

    try:
        code = asyncio.run(main)
    except (CliError, SteploopError) as e:
        print(f"steploop: error: {one_line(e)}", file=sys.stderr)
        code = EXIT_USAGE
    except (TemporalError, RPCError) as e:
        print(f"steploop: error: Temporal: {one_line(e)}", file=sys.stderr)
        code = EXIT_FAILED
    except StoreMissing as e:
        print(f"steploop: error: {one_line(e)}", file=sys.stderr)
        code = EXIT_FAILED
    except KeyboardInterrupt:
        print("steploop: interrupted", file=sys.stderr)
        code = EXIT_INTERRUPTED
    exit_now(code, out)


def one_line(e: BaseException) -> str:
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


def common(p: argparse.ArgumentParser, *, queue: bool = True) -> None:
    p.add_argument("--address", default=DEFAULT_ADDRESS, help=f"default {DEFAULT_ADDRESS}")
    p.add_argument("--namespace", default="default")
    if queue:
        p.add_argument("--task-queue", default="steploop")
    p.add_argument(
        "--store",
        default=None,
        help="directory every client and worker shares: large payloads and the tool-call "
        "ledger (default $STEPLOOP_TEMPORAL_STORE, else ~/.local/share/steploop/temporal)",
    )
    p.add_argument(
        "--threshold",
        type=int,
        default=None,
        metavar="BYTES",
        help="payloads of at least this size go to the store (default 131072; the same for "
        "every client and worker)",
    )


def store_of(args: argparse.Namespace) -> Path:
    return Path(args.store).expanduser().resolve() if args.store else default_root()


def threshold_of(args: argparse.Namespace) -> int:
    from steploop.effects.temporal.storage import DEFAULT_THRESHOLD

    if args.threshold is None:
        return DEFAULT_THRESHOLD
    if args.threshold < 0:
        raise CliError("--threshold must be at least 0")
    return int(args.threshold)


def register(subparsers: Any) -> None:
    from steploop.effects.temporal import cli_ops

    t = subparsers.add_parser("temporal", help="run turns durably on Temporal (steploop[temporal])")
    sub = t.add_subparsers(dest="temporal_command", required=True)
    w = sub.add_parser("worker", help="run a worker: the turn workflow and its activities")
    common(w)
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
    w.add_argument(
        "--accept-version",
        action="append",
        default=[],
        metavar="VERSION",
        help="also take the turns this steploop version started (once `steploop temporal "
        "check` passed on their histories)",
    )
    w.add_argument(
        "--heartbeat-every",
        type=float,
        default=None,
        metavar="S",
        help="how often a running activity's heartbeat reaches the server (default 0.5 s): "
        "how soon an interrupt reaches a running tool",
    )
    w.set_defaults(handler=cmd_worker)
    s = sub.add_parser("start", help="start a turn and follow it to its end")
    common(s)
    s.add_argument("prompt")
    s.add_argument("--workflow-id", help="default: steploop-<random>")
    s.add_argument("--trace", metavar="FILE", help="write the turn's trace there")
    s.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    s.add_argument("--profile", default="default", help="default, claude_code_2_1_88 or full")
    s.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key")
    s.add_argument("--rounds-per-run", type=int, default=50, help="continue as new every N rounds")
    s.add_argument(
        "--activity",
        action="append",
        default=[],
        metavar="KIND.FIELD=VALUE",
        help="an activity option: KIND model, tools, tool.NAME, compaction, hooks, summary; "
        "FIELD start_to_close_s, heartbeat_s, attempts, initial_interval_s, backoff, "
        "max_interval_s, cancellation, task_queue (see specs/temporal.md)",
    )
    s.add_argument(
        "--on-unfinished",
        choices=("report", "ask"),
        default="report",
        help="a Bash/Write/Edit call found started and not finished after a lost worker: "
        "report its result as unknown (default) or ask whether to run it again",
    )
    s.add_argument("--no-wait", action="store_true", help="print the workflow id and return")
    s.set_defaults(handler=cmd_start)
    cli_ops.register(sub)


# ----------------------------------------------------------------------------------------------
# worker


def cmd_worker(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    from steploop.effects.tools import ToolRegistry, builtin_tools

    if args.heartbeat_every is not None and args.heartbeat_every <= 0:
        raise CliError("--heartbeat-every must be positive")
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
    run_to_exit(_work(args, model, tools, workspace, out), out)


async def _work(
    args: argparse.Namespace, model: Any, tools: Any, workspace: Path, out: TextIO
) -> int:
    from temporalio.client import Client
    from temporalio.worker import Worker

    from steploop.effects.temporal.activities import Ledger, SteploopActivities
    from steploop.effects.temporal.options import HEARTBEAT_EVERY_S
    from steploop.effects.temporal.plugin import SteploopPlugin
    from steploop.effects.temporal.storage import PayloadStore

    store = store_of(args)
    acts = SteploopActivities(
        model=model, tools=tools, workspace=workspace, ledger=Ledger(store / "ledger")
    )
    plugin = SteploopPlugin(
        store=PayloadStore(store / "payloads"),
        threshold=threshold_of(args),
        activities=acts,
        heartbeat_every_s=args.heartbeat_every or HEARTBEAT_EVERY_S,
        accept_versions=args.accept_version,
    )
    try:
        client = await Client.connect(args.address, namespace=args.namespace, plugins=[plugin])
    except Exception as e:  # RuntimeError from the bridge: connection refused, bad address
        raise CliError(f"cannot reach Temporal at {args.address}: {e}") from None
    loop = asyncio.get_running_loop()
    stopped: asyncio.Future[int] = loop.create_future()

    def stop(code: int) -> None:
        if not stopped.done():
            stopped.set_result(code)

    loop.add_signal_handler(signal.SIGINT, stop, EXIT_INTERRUPTED)
    loop.add_signal_handler(signal.SIGTERM, stop, EXIT_TERMINATED)
    w = Worker(client, task_queue=args.task_queue)
    running: asyncio.Future[None] = asyncio.ensure_future(w.run())
    print(
        f"worker on {args.address} (task queue {args.task_queue}), workspace {workspace}, "
        f"store {store}; Ctrl-C stops it",
        file=out,
        flush=True,
    )
    either: list[asyncio.Future[Any]] = [running, stopped]
    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
    if running.done():  # the worker failed on its own (the server went away, a fatal error)
        exc = running.exception()
        why = one_line(exc) if exc is not None else "no reason given"
        print(f"steploop: error: the worker stopped: {why}", file=sys.stderr)
        return EXIT_FAILED
    print("steploop: stopping the worker", file=sys.stderr, flush=True)
    await w.shutdown()
    with contextlib.suppress(Exception):  # its run ends with the shutdown
        await running
    return stopped.result()


async def connect_args(args: argparse.Namespace) -> Any:
    """A client for the command's ``--address``, ``--namespace`` and ``--store``."""
    from steploop.effects.temporal.client import connect
    from steploop.effects.temporal.storage import PayloadStore

    store = PayloadStore(store_of(args) / "payloads")
    try:
        return await connect(
            args.address, namespace=args.namespace, store=store, threshold=threshold_of(args)
        )
    except Exception as e:  # RuntimeError from the bridge: connection refused, bad address
        raise CliError(f"cannot reach Temporal at {args.address}: {e}") from None


# ----------------------------------------------------------------------------------------------
# start


def cmd_start(args: argparse.Namespace, out: TextIO) -> int:
    need_temporal()
    from steploop.effects.temporal.options import ActivityOptions, parse_setting

    if args.rounds_per_run < 1:
        raise CliError("--rounds-per-run must be at least 1")
    config = config_from(args.profile, args.set)
    if args.trace and Path(args.trace).exists():
        raise CliError(f"{args.trace} exists: the turn's trace is written there")
    activities: dict[str, ActivityOptions] = {}
    for setting in args.activity:
        try:
            parse_setting(setting, activities)
        except ValueError as e:
            raise CliError(str(e)) from None
    run_to_exit(_start(args, config, activities, out), out)


async def _start(args: argparse.Namespace, config: Any, activities: Any, out: TextIO) -> int:
    from steploop.effects.cli_drive import describe
    from steploop.effects.run import PermissionPolicy
    from steploop.effects.temporal.client import start_turn, traces, turn_input
    from steploop.effects.temporal.workflow import TurnWorkflow
    from steploop.reducer.messages import Emitted
    from steploop.reducer.serialize import structure

    client = await connect_args(args)
    trace = Path(args.trace).resolve() if args.trace else None
    inp = turn_input(
        args.prompt,
        config=config,
        permissions=PermissionPolicy(
            allow=frozenset({"Read", "Glob", "Grep"}), default="allow" if args.yes else "ask"
        ),
        trace_path=trace,
        rounds_per_run=args.rounds_per_run,
        activities=activities,
        on_unfinished=args.on_unfinished,
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
        items = await patiently(functools.partial(run.query, TurnWorkflow.items, seen), waiting)
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
        for ask in await patiently(pending, waiting):
            tid = ask["tool_use_id"]
            if tid in asked:
                continue
            asked.add(tid)
            decision = await asyncio.to_thread(_ask, ask, out)
            update = functools.partial(  # asked again under the same update id: answered once
                run.execute_update,
                TurnWorkflow.answer_permission,
                args=[tid, decision, "", int(time.time() * 1000)],
                id=f"answer-{tid}-{'unfinished' if ask.get('unfinished') else 'ask'}",
            )
            await patiently(update, waiting)
        await asyncio.sleep(0.2)
    result = asyncio.ensure_future(handle.result())  # follows the runs continued as new
    await result
    res = result.result()
    print(f"══ terminal: {res.terminal['type']}  ({res.steps} steps, {res.runs} run(s))", file=out)
    if trace is not None:
        (recorded,) = await traces(client, wid)
        if not trace.exists() or trace.read_text(encoding="utf-8") != recorded.text:
            trace.write_text(recorded.text, encoding="utf-8")  # the worker wrote it elsewhere
        print(f"trace: {args.trace} (steploop replay {args.trace})", file=out)
    return turn_exit_code(res)


async def patiently(
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
            waiting(one_line(e))
        await asyncio.sleep(pause_s)


def _ask(ask: dict[str, Any], out: TextIO) -> str:
    shown = ", ".join(f"{k}={str(v)[:40]}" for k, v in ask["input"].items())
    if ask.get("unfinished"):
        question = f"  {ask['name']}({shown}) started and did not finish: run it again? [y/N] "
    else:
        question = f"  permission? {ask['name']}({shown}) [y/N] "
    print(question, end="", file=out, flush=True)
    try:
        answer = input()
    except EOFError:
        answer = ""
    return "allow" if answer.strip().lower() in ("y", "yes") else "rejected_by_user"
