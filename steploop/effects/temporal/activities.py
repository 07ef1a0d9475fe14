"""The activities: every effect that touches the world, run by a worker.

Each activity takes the effect as plain data and returns the event(s) that answer it, as plain
data; what the handler gave becomes an event through the answering layer
(:mod:`steploop.effects.answer`), the same functions the interpreter's handlers call
(``steploop/effects/run.py``), and no decision of the loop's is made here. A model call is never retried by Temporal nor by the SDK
(``max_retries=0`` on the client, one attempt per activity): a failure comes back as a
``ModelCallFailed`` event and the machine's own rules decide on the retry, with its ``Wait``
a durable timer of the workflow.

Tools are retried by Temporal when their worker dies (the workflow's retry policy); each call
carries an idempotency key (the workflow id, the tool call's generation and id), and a call
whose result is in the worker's ledger (a directory shared by the workers) is answered from it
and not run again. What is left is the window between a tool's side effect and the ledger
write: a tool that must never run twice should use the key itself (the context variable
:data:`IDEMPOTENCY_KEY` holds it while the tool runs), as any at-least-once executor requires.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import hashlib
import json
import os
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from temporalio import activity

from steploop.effects import answer
from steploop.effects.protocols import Compactor, ModelClient, StopHookRunner
from steploop.effects.scripted import ScriptedModel
from steploop.effects.temporal.world import encode
from steploop.effects.tools.base import ToolContext, ToolRegistry
from steploop.reducer.effects import CallModel, Compact, RunStopHooks, StartTool, SummarizeToolUse
from steploop.reducer.events import Event
from steploop.reducer.serialize import structure

__all__ = ["IDEMPOTENCY_KEY", "ByCallId", "Ledger", "SteploopActivities"]

IDEMPOTENCY_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "steploop_idempotency_key", default=None
)
"""The idempotency key of the tool call running now (in a tool run by the Temporal world)."""


class ByCallId:
    """A scripted model that answers call ``k`` with entry ``k`` of the script (1-based),
    whichever worker process asks: call ids come from the loop state, so every worker, and
    every retry of an activity, gives the same call the same answer."""

    def __init__(self, model: ScriptedModel) -> None:
        self._model = model
        self._traits_for = model._traits_for

    def stream(self, effect: CallModel) -> AsyncIterator[Event]:
        script = self._model.script
        k = effect.call_id - 1
        entries = script[k : k + 1] if 0 <= k < len(script) else ()
        return ScriptedModel(entries, self._traits_for).stream(effect)


class Ledger:
    """Results of completed tool calls by idempotency key: one JSON file per key, written
    atomically (a write and a rename), in a directory every worker of the task queue sees."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / (hashlib.sha256(key.encode()).hexdigest() + ".json")

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        result = data.get("result")
        return result if isinstance(result, dict) else None

    def put(self, key: str, result: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "result": result}, f)
        os.replace(tmp, self._path(key))


@contextlib.asynccontextmanager
async def _heartbeating() -> AsyncIterator[None]:
    """Heartbeat while the body runs, so a dead worker is noticed within the heartbeat
    timeout instead of the whole start-to-close timeout."""
    timeout = activity.info().heartbeat_timeout
    if not timeout:
        yield
        return
    every = max(0.05, timeout.total_seconds() / 3)

    async def beat() -> None:
        while True:
            activity.heartbeat()
            await asyncio.sleep(every)

    task = asyncio.create_task(beat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _now() -> int:
    """The worker's clock, stamped on an event as it happens (the history keeps it)."""
    return int(time.time() * 1000)


def _stamped(event: Event) -> dict[str, Any]:
    return encode(answer.stamped(event, _now()))


class SteploopActivities:
    """The activities of one worker, over its model client, tools and hooks.

    Args:
        model: the model client (``AnthropicModelClient`` made with ``max_retries=0``, or
            :class:`ByCallId` over a script).
        tools: the tool registry; ``workspace`` is where they work.
        ledger: results of completed tool calls (see :class:`Ledger`); None keeps none.
        persist_dir: where ``PersistToolResult`` texts go (default: none kept).
        tool_timeout_s: a tool's own deadline (a timeout result, as in the interpreter).
    """

    def __init__(
        self,
        *,
        model: ModelClient,
        tools: ToolRegistry,
        workspace: str | os.PathLike[str],
        compactor: Compactor | None = None,
        stop_hooks: StopHookRunner | None = None,
        summarizer: Callable[[SummarizeToolUse], Awaitable[str | None]] | None = None,
        ledger: Ledger | None = None,
        persist_dir: str | os.PathLike[str] | None = None,
        tool_timeout_s: float = 120.0,
        session_id: str = "steploop-temporal",
    ) -> None:
        self.model = model
        self.tools = tools
        self.workspace = Path(workspace).resolve()
        self.compactor = compactor
        self.stop_hooks = stop_hooks
        self.summarizer = summarizer
        self.ledger = ledger
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.tool_timeout_s = tool_timeout_s
        self.session_id = session_id
        self.tool_runs: list[str] = []  # idempotency keys of the calls this worker ran

    def all(self) -> Iterable[Callable[..., Any]]:
        """Every activity, for ``Worker(activities=...)``."""
        return (
            self.call_model,
            self.run_tool,
            self.compact,
            self.run_stop_hooks,
            self.summarize,
            self.persist_tool_result,
        )

    @activity.defn(name="steploop.call_model")
    async def call_model(self, effect: dict[str, Any]) -> list[dict[str, Any]]:
        """The whole response: its blocks, then its end (or the failure), each checked and
        cleaned as it came (a fresh id index: the conversation arrives decoded, whole)."""
        call: CallModel = structure(effect, CallModel)
        async with _heartbeating():
            return [encode(e) for e in await answer.response(call, self.model, now=_now)]

    @activity.defn(name="steploop.run_tool")
    async def run_tool(self, effect: dict[str, Any], key: str) -> dict[str, Any]:
        """One tool call, unless the ledger has its result already."""
        call: StartTool = structure(effect, StartTool)
        if self.ledger is not None:
            done = self.ledger.get(key)
            if done is not None:
                activity.logger.info("tool call %s answered from the ledger", key)
                return done
        ctx = ToolContext(workspace=self.workspace, tool_use_id=call.tool_use_id)
        self.tool_runs.append(key)
        token = IDEMPOTENCY_KEY.set(key)
        try:
            async with _heartbeating():
                out = await self.tools.run(call.name, call.input, ctx, self.tool_timeout_s)
        finally:
            IDEMPOTENCY_KEY.reset(token)
        result = encode(answer.tool(call, out, _now()))  # with the hook that stopped it
        if self.ledger is not None:
            self.record(key, result)
        return result

    def record(self, key: str, result: dict[str, Any]) -> None:
        """Put a completed call's result in the ledger."""
        assert self.ledger is not None
        self.ledger.put(key, result)

    @activity.defn(name="steploop.compact")
    async def compact(self, effect: dict[str, Any]) -> dict[str, Any]:
        call: Compact = structure(effect, Compact)
        compactor = self.compactor
        if compactor is None:
            return _stamped(answer.unhandled(call))
        async with _heartbeating():
            event = await answer.outcome(call, lambda: compactor.compact(call), answer.compaction)
        return _stamped(event)

    @activity.defn(name="steploop.run_stop_hooks")
    async def run_stop_hooks(self, effect: dict[str, Any], subagent: bool) -> dict[str, Any]:
        call: RunStopHooks = structure(effect, RunStopHooks)
        hooks = self.stop_hooks
        if hooks is None:
            return _stamped(answer.unhandled(call))

        def run() -> Awaitable[object]:
            return hooks.run(
                call,
                session_id=self.session_id,
                transcript_path="",
                cwd=str(self.workspace),
                event_name=answer.stop_event(subagent),
            )

        async with _heartbeating():
            event = await answer.outcome(call, run, answer.stop_hooks)
        return _stamped(event)

    @activity.defn(name="steploop.summarize")
    async def summarize(self, effect: dict[str, Any]) -> dict[str, Any]:
        call: SummarizeToolUse = structure(effect, SummarizeToolUse)
        summarizer = self.summarizer
        if summarizer is None:
            return _stamped(answer.unhandled(call))
        return _stamped(await answer.outcome(call, lambda: summarizer(call), answer.summary))

    @activity.defn(name="steploop.persist_tool_result")
    async def persist_tool_result(self, key: str, content: str) -> None:
        if self.persist_dir is None:
            return
        self.persist_dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest() + ".txt"
        (self.persist_dir / name).write_text(content, encoding="utf-8")
