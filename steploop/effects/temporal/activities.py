"""The activities: every effect that touches the world, run by a worker.

Each activity takes the effect as plain data and returns the event(s) that answer it, as plain
data; what the handler gave becomes an event through the answering layer
(:mod:`steploop.effects.answer`), the same functions the interpreter's handlers call
(``steploop/effects/run.py``), and no decision of the loop's is made here. A model call is never
retried by Temporal nor by the SDK (``max_retries=0`` on the client, one attempt per activity by
default): a failure comes back as a ``ModelCallFailed`` event and the machine's own rules decide
on the retry, with its ``Wait`` a durable timer of the workflow.

**Heartbeats and cancellation.** Every activity that runs a handler heartbeats while it runs
(every :data:`BEAT_S`; the worker sends one to the server at most every heartbeat throttle
interval, which the plugin sets to :data:`~steploop.effects.temporal.options.HEARTBEAT_EVERY_S`).
A cancellation (an interrupt withdrew the call) reaches the activity with the answer to a
heartbeat and cancels the handler: the Bash tool's process tree is killed as the task unwinds
(:mod:`steploop.effects.procs`), and a worker killed outright takes its tool processes with it.

**Side effects at most once, or said to be maybe-twice** (specs/temporal.md, TEMPORAL-ONCE-1).
A tool call carries an idempotency key (the workflow id, the call's generation and tool_use_id),
given to the tool as ``ToolContext.idempotency_key`` and in :data:`IDEMPOTENCY_KEY`. A call whose
result is in the :class:`Ledger` (a directory every worker of the task queue shares) is answered
from it and not run again. A call of a tool that changes the world (:data:`GUARDED`: Bash, Write,
Edit, and whatever else the worker names) is recorded as *started* in the ledger, written
through to the disk, before the tool starts, and the activity's heartbeats carry the key too. A
retried attempt that finds the call started and not finished never runs it again on its own: by
the turn's ``on_unfinished`` it answers with the interrupted-unknown result
(:data:`~steploop.effects.trace.resume.INTERRUPTED_TOOL_RESULT`, the one resume gives; the
default) or returns :data:`UNFINISHED` for the workflow to ask a client through the permission
channel (``answer_permission``: allow runs it again, anything else gives that result). Other
tools (the read-only ones, Python tools) are run again by a retry: at least once, with the key.
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
from typing import Any, Final

from temporalio import activity
from temporalio.exceptions import ApplicationError

from steploop.effects import answer
from steploop.effects.protocols import Compactor, ModelClient, StopHookRunner
from steploop.effects.redaction import known_secrets, redaction_marker
from steploop.effects.scripted import ScriptedModel
from steploop.effects.temporal.sink import TraceGap, append_at
from steploop.effects.temporal.world import encode
from steploop.effects.tools.base import ToolContext, ToolRegistry
from steploop.effects.trace.resume import INTERRUPTED_TOOL_RESULT
from steploop.reducer.effects import CallModel, Compact, RunStopHooks, StartTool, SummarizeToolUse
from steploop.reducer.events import Event
from steploop.reducer.serialize import structure

__all__ = [
    "ACTIVITY_NAMES",
    "BEAT_S",
    "GUARDED",
    "IDEMPOTENCY_KEY",
    "UNFINISHED",
    "ByCallId",
    "Ledger",
    "SteploopActivities",
]

IDEMPOTENCY_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "steploop_idempotency_key", default=None
)
"""The idempotency key of the tool call running now (in a tool run by the Temporal world)."""

GUARDED: Final = frozenset({"Bash", "Write", "Edit"})
"""The built-in tools that change the world: never run twice by a retry on their own."""

UNFINISHED: Final = {"steploop": "unfinished"}
"""What ``run_tool`` returns, under ``on_unfinished="ask"``, for a call that started and did
not finish: the workflow asks a client whether to run it again."""

BEAT_S: Final = 0.2
"""How often a running activity calls ``activity.heartbeat`` (the worker sends what the
throttle lets through)."""

ACTIVITY_NAMES: Final = {
    "model": "steploop.call_model",
    "tools": "steploop.run_tool",
    "compaction": "steploop.compact",
    "hooks": "steploop.run_stop_hooks",
    "summary": "steploop.summarize",
    "persist": "steploop.persist_tool_result",
    "trace": "steploop.trace",
}
"""The activity type of each kind (``steploop temporal check`` fails on a history whose
activities another name ran)."""


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


def _write_durably(path: Path, data: dict[str, Any]) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # the rename itself, on file systems that allow it
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


class Ledger:
    """The durable record of tool calls, by idempotency key, in a directory every worker of
    the task queue sees: ``KEY.started`` once a call of a guarded tool is about to start,
    ``KEY.json`` with its result once it finished; each written atomically (a write, a flush
    to the disk, a rename)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).resolve()
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str, suffix: str = ".json") -> Path:
        return self.directory / (hashlib.sha256(key.encode()).hexdigest() + suffix)

    def get(self, key: str) -> dict[str, Any] | None:
        """The result of the finished call ``key``, or None."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("key") != key:
            return None
        result = data.get("result")
        return result if isinstance(result, dict) else None

    def put(self, key: str, result: dict[str, Any]) -> None:
        _write_durably(self._path(key), {"key": key, "result": result})

    def begin(self, key: str, attempt: int) -> None:
        """Record that call ``key`` starts now (before the tool does anything)."""
        _write_durably(
            self._path(key, ".started"), {"key": key, "attempt": attempt, "pid": os.getpid()}
        )

    def started(self, key: str) -> bool:
        """Whether call ``key`` was recorded as started (finished or not)."""
        try:
            data = json.loads(self._path(key, ".started").read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return False
        return isinstance(data, dict) and data.get("key") == key


@contextlib.asynccontextmanager
async def _heartbeating(*details: Any) -> AsyncIterator[None]:
    """Heartbeat (with ``details``) while the body runs: a lost worker is noticed within the
    heartbeat timeout, and a cancellation reaches the body with the answer to a heartbeat."""
    if not activity.info().heartbeat_timeout:
        yield
        return

    async def beat() -> None:
        while True:
            activity.heartbeat(*details)
            await asyncio.sleep(BEAT_S)

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


def _masked(text: str) -> str:
    """``text`` with this worker's known secrets replaced by their markers (the trace file
    keeps no secret of the environment, specs/ TR-SECRET-1)."""
    for secret in known_secrets():
        if secret in text:
            text = text.replace(secret, redaction_marker(len(secret)))
    return text


class SteploopActivities:
    """The activities of one worker, over its model client, tools and hooks.

    Args:
        model: the model client (``AnthropicModelClient`` made with ``max_retries=0``, or
            :class:`ByCallId` over a script).
        tools: the tool registry; ``workspace`` is where they work.
        ledger: the durable record of tool calls (see :class:`Ledger`); None keeps none, and
            the only record of a started call is then its heartbeats.
        guarded: the tools never run twice by a retry on their own (default :data:`GUARDED`).
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
        guarded: Iterable[str] = GUARDED,
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
        self.guarded = frozenset(guarded)
        self.persist_dir = Path(persist_dir).resolve() if persist_dir is not None else None
        self.tool_timeout_s = tool_timeout_s
        self.session_id = session_id
        self.tool_runs: list[str] = []  # idempotency keys of the calls this worker ran

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for ``Worker(activities=...)``."""
        return [
            self.call_model,
            self.run_tool,
            self.compact,
            self.run_stop_hooks,
            self.summarize,
            self.persist_tool_result,
            self.write_trace,
        ]

    @activity.defn(name=ACTIVITY_NAMES["model"])
    async def call_model(self, effect: dict[str, Any]) -> list[dict[str, Any]]:
        """The whole response: its blocks, then its end (or the failure), each checked and
        cleaned as it came (a fresh id index: the conversation arrives decoded, whole)."""
        call: CallModel = structure(effect, CallModel)
        async with _heartbeating():
            return [encode(e) for e in await answer.response(call, self.model, now=_now)]

    @activity.defn(name=ACTIVITY_NAMES["tools"])
    async def run_tool(
        self,
        effect: dict[str, Any],
        key: str,
        on_unfinished: str = "report",
        rerun: bool = False,
    ) -> dict[str, Any]:
        """One tool call, unless the ledger has its result already, or (for a guarded tool)
        it started before and did not finish: see the module docstring."""
        call: StartTool = structure(effect, StartTool)
        ledger = self.ledger
        if ledger is not None:
            done = ledger.get(key)
            if done is not None:
                activity.logger.info("tool call %s answered from the ledger", key)
                return done
        guarded = call.name in self.guarded
        # a run again the client allowed: its first attempt only (a retry of it asks again)
        again = rerun and activity.info().attempt == 1
        if guarded and not again and self._started(key):
            activity.logger.warning("tool call %s started before and did not finish", key)
            if on_unfinished == "ask":
                return dict(UNFINISHED)
            result = encode(answer.gave_up(call, INTERRUPTED_TOOL_RESULT, _now()))
            if ledger is not None:
                ledger.put(key, result)
            return result
        if guarded and ledger is not None:
            ledger.begin(key, activity.info().attempt)
        ctx = ToolContext(workspace=self.workspace, tool_use_id=call.tool_use_id, idempotency_key=key)
        self.tool_runs.append(key)
        token = IDEMPOTENCY_KEY.set(key)
        try:
            async with _heartbeating(key):
                out = await self.tools.run(call.name, call.input, ctx, self.tool_timeout_s)
        finally:
            IDEMPOTENCY_KEY.reset(token)
        result = encode(answer.tool(call, out, _now()))  # with the hook that stopped it
        if ledger is not None:
            self.record(key, result)
        return result

    def _started(self, key: str) -> bool:
        """Whether an earlier attempt started call ``key``: the ledger says so, or the last
        heartbeat of an earlier attempt carried the key."""
        if self.ledger is not None and self.ledger.started(key):
            return True
        return key in activity.info().heartbeat_details

    def record(self, key: str, result: dict[str, Any]) -> None:
        """Put a completed call's result in the ledger."""
        assert self.ledger is not None
        self.ledger.put(key, result)

    @activity.defn(name=ACTIVITY_NAMES["compaction"])
    async def compact(self, effect: dict[str, Any]) -> dict[str, Any]:
        call: Compact = structure(effect, Compact)
        compactor = self.compactor
        if compactor is None:
            return _stamped(answer.unhandled(call))
        async with _heartbeating():
            event = await answer.outcome(call, lambda: compactor.compact(call), answer.compaction)
        return _stamped(event)

    @activity.defn(name=ACTIVITY_NAMES["hooks"])
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

    @activity.defn(name=ACTIVITY_NAMES["summary"])
    async def summarize(self, effect: dict[str, Any]) -> dict[str, Any]:
        call: SummarizeToolUse = structure(effect, SummarizeToolUse)
        summarizer = self.summarizer
        if summarizer is None:
            return _stamped(answer.unhandled(call))
        async with _heartbeating():
            event = await answer.outcome(call, lambda: summarizer(call), answer.summary)
        return _stamped(event)

    @activity.defn(name=ACTIVITY_NAMES["persist"])
    async def persist_tool_result(self, key: str, content: str) -> None:
        if self.persist_dir is None:
            return
        self.persist_dir.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha256(key.encode()).hexdigest() + ".txt"
        (self.persist_dir / name).write_text(content, encoding="utf-8")

    @activity.defn(name=ACTIVITY_NAMES["trace"])
    async def write_trace(self, turn: str, path: str | None, offset: int, chunk: str) -> None:
        """Append this part of a turn's trace (its bytes from ``offset`` on) to ``path`` on
        this worker's host; the history holds it either way (it is this activity's input), and
        ``steploop temporal trace`` writes the whole trace from there. A file that lacks the
        part before (written on another host) or holds other bytes is left alone."""
        if path is None:
            return
        try:
            append_at(Path(path), offset, _masked(chunk))
        except (TraceGap, OSError) as exc:
            raise ApplicationError(
                f"trace of turn {turn}: {exc}", type="TraceGap", non_retryable=True
            ) from None
