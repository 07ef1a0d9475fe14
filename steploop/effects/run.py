"""The interpreter: run the pure machine against the world (specs/architecture.md, "Worlds").

``run(...)`` returns a :class:`Run`, an async context manager and async iterator. It applies
``step()``, executes the effects it returns and feeds the world's answers back as events; it
makes no control decision of its own. Every effect that waits on the world (a model call, a
tool, a wait, a compaction, stop hooks, a summary) runs in a runner task of one task group,
under its own cancel scope, and reports back by feeding an event.

Events are stepped one at a time, in the order they arrive, never two at once: whoever brings
an event (a runner, or the consumer answering a permission or interrupting) steps it at once
when nothing else is being stepped, and executes the effects right there: starting or
cancelling a handler, a permission the :class:`PermissionPolicy` settles (answered at once,
without a task or the consumer), an item for a consumer already waiting. An item for a
consumer that is not waiting stops the work until the consumer takes it; the consumer then
carries the work on itself, before its ``__anext__`` returns. No task is woken just to step an
event: a tool turn takes two passes of the event loop (the model's, the tool's), and no task is
started per effect (runner tasks wait idle for the next handler). The driver task only runs
``start()`` and reports a failure of ``step()`` or of the observer, which ends the run.

Items for the consumer go through a zero-buffer hand-over (:class:`Handoff`), so nothing
advances until the consumer pulls (backpressure): nothing is stepped while an item waits for
the consumer. Nothing yields to the consumer from inside the task group: the consumer's
``__anext__`` only takes from that hand-over (the anyio pitfall, PEP 789).

Leaving the ``async with`` block (normally, by ``break``, by an exception or by cancellation)
cancels the task group: model streams, tools and hook subprocesses are cancelled and awaited
before ``__aexit__`` returns.
"""

from __future__ import annotations

import contextvars
import math
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, assert_never

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from steploop.effects import answer
from steploop.effects.answer import PermissionPolicy, stamped
from steploop.effects.boundary import ToolUseIds
from steploop.effects.concurrency import Handoff, Rest, Signal, primitives
from steploop.effects.extensions import RunExtensions
from steploop.effects.protocols import (
    Compactor,
    ModelClient,
    StepObserver,
    StopHookRunner,
    observer_of,
)
from steploop.effects.run_types import Caller, PermissionRequest, RunResult, TextDelta, Timeouts
from steploop.effects.tools.base import ToolContext, ToolOutput, ToolRegistry, timed_out
from steploop.reducer import LoopConfig, LoopState, Request, Session, fastpaths
from steploop.reducer.drive import Loop
from steploop.reducer.effects import (
    AcknowledgeCommands,
    AskPermission,
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelRefreshTools,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Effect,
    Emit,
    Finish,
    PersistToolResult,
    RefreshTools,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    CommandQueued,
    Event,
    Interrupted,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionDecision,
    WaitElapsed,
)
from steploop.reducer.messages import Emitted, Usage
from steploop.reducer.protocol import Key, opens, withdraws
from steploop.reducer.transitions import Transition

__all__ = [
    "Compactor",
    "ModelClient",
    "PermissionPolicy",
    "PermissionRequest",
    "Run",
    "RunResult",
    "StepObserver",
    "StopHookRunner",
    "TextDelta",
    "Timeouts",
    "run",
    "run_sync",
]


Item = Emitted | PermissionRequest | TextDelta
Handler = Callable[[Any, anyio.CancelScope], Coroutine[Any, Any, None]]
# Runner tasks kept waiting for work (more finish when their handler does): a handler starts
# with a wake-up instead of a new task. Measured on and off (_IDLE_RUNNERS = 0), 400 tool turns,
# min of 7, 2026-12-01 on the shared 2-core machine: 166.6 against 211.7 µs per turn, 1.27x on
# item 1 of benchmarks/ (fast path "idle_runners" in steploop/reducer/fastpaths.py).
_IDLE_RUNNERS = 8


class _Runner:
    """A task of the run's group that runs effect handlers one after the other."""

    __slots__ = ("go", "job")

    def __init__(self, job: tuple[Key, anyio.CancelScope, Handler, Any]) -> None:
        self.job: tuple[Key, anyio.CancelScope, Handler, Any] | None = job
        self.go: Signal | None = None


class Run:
    """An agent turn in progress. Use as ``async with run(...) as r: async for item in r``."""

    def __init__(
        self,
        request: Request,
        *,
        config: LoopConfig,
        model: ModelClient,
        tools: ToolRegistry,
        workspace: Path,
        permissions: PermissionPolicy,
        compactor: Compactor | None,
        stop_hooks: StopHookRunner | None,
        session: Session | None,
        session_id: str,
        transcript_path: Path | None,
        tool_timeout_s: float,
        timeouts: Timeouts,
        clock_ms: Callable[[], int],
        observer: StepObserver | None,
        summarizer: Callable[[SummarizeToolUse], Awaitable[str | None]] | None,
        on_acknowledge: Callable[[tuple[str, ...]], None] | None,
        resume: tuple[LoopState, tuple[Effect, ...]] | None = None,
        text_deltas: bool = False,
        mcp_servers: Any = None,
        telemetry: Any = None,
    ) -> None:
        self.request = request
        self.config = config
        self._model = model
        self._tools = tools
        self._workspace = workspace
        self._permissions = permissions
        self._compactor = compactor
        self._stop_hooks = stop_hooks
        self._session = session
        self.session_id = session_id
        self.transcript_path = transcript_path
        self._tool_timeout_s = tool_timeout_s
        self._timeouts = timeouts
        self._now = clock_ms
        self._summarizer = summarizer
        self._on_acknowledge = on_acknowledge
        self._resume = resume
        self._text_deltas = text_deltas
        self.persisted: dict[str, str] = {}
        self.result: RunResult | None = None
        self.state: LoopState | None = None  # the latest state, for display
        self._usage = Usage()
        self._scopes: dict[Key, anyio.CancelScope] = {}  # the running handlers, by effect
        self._idle: list[_Runner] = []  # runner tasks waiting for their next handler
        self._tg: TaskGroup | None = None
        self._asking: dict[Key, PermissionRequest] = {}  # offered to the consumer, unanswered
        # the driver loop (steploop/reducer/drive.py): this run is its world, and pushes events into it
        self._loop = Loop(config, self._apply, observe=self._observe, on_error=self._failed)
        self._on_step = observer_of(observer)
        self._handlers: dict[type, Handler] = {
            CallModel: self._call_model,
            StartTool: self._run_tool,
            Wait: self._wait,
            Compact: self._compact,
            RunStopHooks: self._run_hooks,
            SummarizeToolUse: self._summarize,
            RefreshTools: self._refresh,
        }
        self._wake: Signal | None = None  # wakes the driver when the turn ends or fails
        self._failure: Exception | None = None  # step() or the observer failed
        self._state: LoopState | None = None
        self._closed = False
        self._out: Handoff[Item] = Handoff()
        self._signal: Callable[[], Signal] = anyio.Event
        self._scope: Callable[..., anyio.CancelScope] = anyio.CancelScope
        self._context: contextvars.Context | None = None
        self._transcript: Any = None
        self._delta_send: MemoryObjectSendStream[TextDelta] | None = None
        self._entered = False
        self._tool_use_ids = ToolUseIds()  # the ids a response may not reuse (B-MODEL-2)
        # MCP servers, the tool list's refresh, spans (steploop/effects/extensions.py)
        self.extensions = RunExtensions(
            tools=tools,
            model=model,
            workspace=workspace,
            mcp_servers=mcp_servers,
            telemetry=telemetry,
        )
        self._spans: Any = None
        self._observer = observer
        self._caller: Caller | None = None

    # -- public API ------------------------------------------------------------------------

    def interrupt(self, kind: Literal["hard", "submit"] = "hard") -> None:
        """Interrupt the turn: ``hard`` (Esc) or ``submit`` (the user sent a new message).

        Call it from a task of the run's event loop. The interrupt is stepped at once unless
        something else is being stepped or an item waits for the consumer (then it is stepped
        next, in order)."""
        if self.result is None:
            self._feed(Interrupted(kind=kind, at_ms=self._now()))

    def queue_command(self, command_id: str, text: str) -> None:
        """Queue a user command while the turn runs; the machine attaches it to the next tool
        round and acknowledges it when the turn ends normally (specs/ R-CMD-1, R-CMD-2)."""
        if self.result is None:
            self._feed(CommandQueued(command_id=command_id, text=text, at_ms=self._now()))

    async def __aenter__(self) -> Run:
        if self._entered:
            raise RuntimeError("a Run can be entered once")
        self._entered = True
        await self.extensions.enter()  # MCP servers: entered first, closed last
        try:
            return await self._enter()
        except BaseException:
            if self._tg is not None:  # entered after the servers: left before them
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)
            await self.extensions.exit()
            raise

    async def _enter(self) -> Run:
        self._spans = self.extensions.spans(
            session_id=self.session_id, config=self.config, start_ms=self.request.at_ms
        )
        self._caller = Caller(
            session_id=self.session_id,
            config=self.config,
            workspace=self._workspace,
            transcript_path=self.transcript_path,
            trace_path=getattr(self._observer, "path", None),
            permissions=self._permissions,
            spans=self._spans,
            tool_timeout_s=self._tool_timeout_s,
            state=lambda: self._state,
        )
        if self.transcript_path is not None:
            from steploop.effects.transcript import TranscriptWriter

            self._transcript = TranscriptWriter(
                self.transcript_path,
                session_id=self.session_id,
                cwd=str(self._workspace),
                stop_hooks=self._stop_hooks,  # the stop_hook_summary record reads its report
                api_ids=getattr(self._model, "api_ids", None),  # message.id, requestId
                agent_id=self.config.agent_id,  # a sub-agent's sidechain
            )
        self._signal, self._scope = primitives()
        self._context = contextvars.copy_context()  # what every handler starts from
        self._out.new_signal = self._signal
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        if self._text_deltas:
            if not hasattr(self._model, "on_text_delta"):
                raise TypeError(
                    f"{type(self._model).__name__} does not report text deltas (no on_text_delta)"
                )
            delta_send, delta_recv = anyio.create_memory_object_stream[TextDelta](math.inf)
            self._delta_send = delta_send
            self._model.on_text_delta = lambda i, t: _send_nowait(
                delta_send, TextDelta(index=i, text=t)
            )
            self._tg.start_soon(self._forward_deltas, delta_recv)
        self._tg.start_soon(self._drive)
        return self

    async def _forward_deltas(self, deltas: MemoryObjectReceiveStream[TextDelta]) -> None:
        async with deltas:
            async for d in deltas:
                try:
                    await self._out.send(d)
                except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                    return

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._tg is not None
        self._tg.cancel_scope.cancel()  # stop the driver and every effect task first
        try:
            return await self._tg.__aexit__(et, e, tb)
        finally:
            self._out.close_receiving()
            if self._delta_send is not None:
                self._delta_send.close()
            self._closed = True
            self._loop.close()
            if self._transcript is not None:
                self._transcript.close()
            await self.extensions.exit()

    def __aiter__(self) -> Run:
        return self

    async def __anext__(self) -> Item:
        try:
            return await self._out.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    # -- stepping: the live world of a driver loop (W-DRIVE-4), as the module docstring says

    @property
    def transitions(self) -> list[Transition]:
        """Every Continue and Terminal the turn passed through so far, in order."""
        return self._loop.transitions

    def _feed(self, event: Event) -> None:
        if self._closed:
            return  # the run has ended; late answers go nowhere
        self._loop.feed(event)

    def _failed(self, exc: Exception) -> None:
        """A failure of step(), an effect or the observer ends the run."""
        self._failure = exc
        self._wake_driver()

    def _wake_driver(self) -> None:
        wake = self._wake
        if wake is not None:
            self._wake = None
            wake.set()

    def _observe(
        self,
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        # the usage, by the state the event was stepped in (steploop/effects/answer.py); only
        # a response's end can count
        if isinstance(event, ModelResponseEnded):
            self._usage = answer.counted(self._usage, event, self._state)
        self._state = self.state = state
        if self._transcript is not None:  # usage, compaction and hook data for its records
            self._transcript.observe(event, state, fx)
        if self._on_step is not None:
            self._on_step(event, state, fx, passed)
        if self._spans is not None:
            self._spans.step(event, fx, passed)

    async def _drive(self) -> None:
        try:
            self._wake = wake = self._signal()
            if self._resume is not None:
                state, fx = (
                    self._resume
                )  # continue a recorded run (steploop/effects/trace/resume.py)
                self._state = self.state = state
                self._loop.resume(state, fx)
            else:
                self._loop.begin(self.request, self._session)
            if self._failure is None and self.result is None:
                await wake.wait()  # until the turn ends or stepping fails
            if self._failure is not None:
                raise self._failure
        finally:
            self._out.close_sending()

    def _apply(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        """Perform an effect (the world's side of the loop); an item the consumer has yet to
        take holds the loop until it is taken."""
        match effect:
            case Emit(item=item):
                if self._transcript is not None:
                    self._transcript.record(item)
                if not self._out.offer(item):
                    self._out.hold(item, self._loop.release)
                    self._loop.hold()
            case (
                CallModel() | StartTool() | Wait() | Compact() | RunStopHooks() | SummarizeToolUse()
            ):
                key = opens(effect)
                assert key is not None
                self._start(key, self._handlers[effect.__class__], effect)
            case AskPermission():
                settled = self._permissions.answer(effect, self._now())
                if settled is not None:  # settled by the policy: answered at once, no task
                    return (settled,)
                request = PermissionRequest(effect, self._permission_answered)
                key = opens(effect)
                assert key is not None
                self._asking[key] = request
                if not self._out.offer(request):
                    self._out.hold(request, self._loop.release)
                    self._loop.hold()
            case RefreshTools() if self.extensions.servers is None:  # no I/O: read at once
                names, digest = self._tools.names, self._tools.digest()
                return (answer.tools_refreshed(effect, names, digest, self._now()),)
            case RefreshTools():
                self._start(("refresh_tools", effect.call_id), self._refresh, effect)
            case (
                CancelModelCall()
                | CancelTools()
                | CancelWait()
                | CancelCompaction()
                | CancelStopHooks()
                | CancelRefreshTools()
            ):
                for key in withdraws(effect):
                    self._cancel(key)
            case PersistToolResult(tool_use_id=tid, content=content):
                self.persisted[tid] = content
            case AcknowledgeCommands(command_ids=ids):
                if self._on_acknowledge is not None:
                    self._on_acknowledge(ids)
            case Finish(terminal=terminal):
                self.result = RunResult(terminal=terminal, state=state, usage=self._usage)
                self._out.close_sending()
                self._wake_driver()
            case _:
                assert_never(effect)
        return None

    def _start(self, key: Key, handler: Handler, effect: Any) -> None:
        """Run ``handler(effect)`` concurrently, under a cancel scope ``_cancel(key)`` cancels.

        An idle runner task takes it if there is one (a wake-up, cheaper than a new task);
        otherwise a new runner is started. The scope exists from now on, so a cancel that
        comes before the runner enters it still applies."""
        scope = self._scope()
        self._scopes[key] = scope
        job = (key, scope, handler, effect)
        if self._idle:
            runner = self._idle.pop()
            runner.job = job
            assert runner.go is not None
            runner.go.set()
        else:
            assert self._tg is not None and self._context is not None
            self._tg.create_task(
                self._serve(_Runner(job)),
                name=f"steploop runner ({key[0]})",
                context=self._context.copy(),
            )

    async def _serve(self, runner: _Runner) -> None:
        """A runner: run the handler it was given, then wait idle for the next one.

        A runner starts in a copy of the context the run was entered in, as a task of its own
        per handler would. A handler that leaves a context variable changed retires its
        runner, so the next handler never sees what an earlier one set."""
        while True:
            job = runner.job
            assert job is not None
            runner.job = None
            key, scope, handler, effect = job
            with scope:
                await handler(effect, scope)
            if self._scopes.get(key) is scope:
                del self._scopes[key]
            keep = len(self._idle) < _IDLE_RUNNERS and fastpaths.on("idle_runners")  # fast path
            if not keep or contextvars.copy_context() != self._context:
                return
            runner.go = go = self._signal()
            self._idle.append(runner)
            await go.wait()

    def _permission_answered(
        self, request: PermissionRequest, decision: PermissionDecision, reason: str
    ) -> None:
        """The consumer's answer, stepped unless the machine withdrew the request."""
        key = opens(request.effect)
        if key is None or self._asking.pop(key, None) is None:
            return  # withdrawn: the machine no longer waits for it (W-PROTO-3)
        self._feed(answer.permission(request.effect, decision, reason, self._now()))

    def _cancel(self, key: Key) -> None:
        """Withdraw a request (W-PROTO-3): cancel its handler, or withdraw the permission
        request offered to the consumer (answering it then does nothing)."""
        scope = self._scopes.pop(key, None)
        if scope is not None:
            scope.cancel()
        request = self._asking.pop(key, None)
        if request is not None:
            request.withdrawn = True

    # -- effect handlers: each only classifies what happened into an event -------------------

    async def _call_model(self, effect: CallModel, scope: anyio.CancelScope) -> None:
        if self._timeouts.model_s is None:
            result = await self._stream_model(effect, scope)
        else:
            result = None
            with anyio.move_on_after(self._timeouts.model_s) as deadline:
                result = await self._stream_model(effect, None)
            if deadline.cancelled_caught:
                result = answer.gave_up(
                    effect, f"the model call stalled past {self._timeouts.model_s} s"
                )
        if result is not None:
            self._feed(stamped(result, self._now()))

    async def _stream_model(
        self, effect: CallModel, scope: anyio.CancelScope | None
    ) -> Event | None:
        """Feed the client's events, checked (steploop/effects/answer.py); return a failure to
        report instead, if any.

        The stream is closed shielded from cancellation. When the response ended and
        ``scope`` (the runner's, the innermost) was not cancelled, that scope becomes the
        shield: the call is dropped from the cancellable ones first (it is over)."""
        stream = self._model.stream(effect)
        checked = answer.ModelStream(effect, self._tool_use_ids)
        ended = False
        try:
            async for raw in stream:
                event = checked.check(raw)
                if checked.refused:  # malformed: the call ends with this failure
                    return event
                self._feed(stamped(event, self._now()))  # one clock for every event
                if not isinstance(event, ModelBlockReceived):  # the response's last event
                    ended = True
                    return None
        except Exception as exc:  # a broken client is a model error, not a crash of the run
            return answer.raised(effect, exc)
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                if ended and scope is not None and not scope.cancel_called:
                    key = opens(effect)
                    if key is not None and self._scopes.get(key) is scope:
                        del self._scopes[key]
                    scope.shield = True
                    await aclose()
                else:
                    with self._scope(shield=True):
                        await aclose()
        return checked.ran_dry()

    async def _run_tool(self, effect: StartTool, scope: anyio.CancelScope) -> None:
        """The call's deadline is on the runner's scope: past it, a timeout result; cancelled
        by the machine (``_cancel`` dropped the scope), nothing.

        The call's first step runs at once; only a call that then waits gets the deadline (a
        timer), so a call that finishes without waiting costs no timer."""
        own = getattr(self._tools.get(effect.name), "timeout_s", None)  # the tool's deadline
        timeout = self._tool_timeout_s if own is None else own
        ctx = ToolContext(
            workspace=self._workspace,
            tool_use_id=effect.tool_use_id,
            timeout_s=timeout,  # lets the registry end a step that holds the loop
            caller=self._caller,
        )
        out: ToolOutput | None = None
        try:
            call = self._tools.call(effect.name, effect.input, ctx)
            try:
                first = call.send(None)
            except StopIteration as done:  # finished without waiting
                out = done.value
            else:
                scope.deadline = anyio.current_time() + timeout
                out = await Rest(call, first)
        finally:
            if out is None and scope.cancel_called:
                key = opens(effect)
                if key and self._scopes.get(key) is scope:
                    out = timed_out(effect.name, timeout)  # the deadline passed
            if out is not None:  # checked, with the hook that stopped it [E-HOOK-1]
                self._feed(answer.tool(effect, out, self._now()))

    async def _wait(self, effect: Wait, scope: anyio.CancelScope) -> None:
        await anyio.sleep(effect.ms / 1000)
        self._feed(WaitElapsed(wait_id=effect.wait_id, at_ms=self._now()))

    async def _compact(self, effect: Compact, scope: anyio.CancelScope) -> None:
        compactor = self._compactor
        if compactor is None:
            self._feed(answer.unhandled(effect, self._now()))
            return
        seconds = self._timeouts.compaction_s
        await self._bounded(
            effect,
            lambda: compactor.compact(effect),
            answer.compaction,
            seconds,
            f"timed out after {seconds} s",
        )

    async def _run_hooks(self, effect: RunStopHooks, scope: anyio.CancelScope) -> None:
        hooks = self._stop_hooks
        if hooks is None:
            self._feed(answer.unhandled(effect, self._now()))
            return
        seconds = self._timeouts.stop_hooks_s
        await self._bounded(
            effect,
            lambda: hooks.run(
                effect,
                session_id=self.session_id,
                transcript_path=str(self.transcript_path or ""),
                cwd=str(self._workspace),
                event_name=answer.stop_event(self.config.is_subagent),
            ),
            answer.stop_hooks,
            seconds,
            f"stop hooks timed out after {seconds} s",
        )

    async def _summarize(self, effect: SummarizeToolUse, scope: anyio.CancelScope) -> None:
        summarizer = self._summarizer
        if summarizer is None:
            self._feed(answer.unhandled(effect, self._now()))
            return
        await self._bounded(
            effect, lambda: summarizer(effect), answer.summary, self._timeouts.summary_s, ""
        )

    async def _refresh(self, effect: RefreshTools, scope: anyio.CancelScope) -> None:
        """[R-REFRESH-1] the MCP servers that said their tools changed are listed again."""
        try:
            names, digest = await self.extensions.refresh()
        except Exception:  # the list could not be read again: the registry's as it is
            names, digest = self._tools.names, self._tools.digest()
        self._feed(answer.tools_refreshed(effect, names, digest, self._now()))

    async def _bounded(
        self,
        effect: answer.Handled,
        call: Callable[[], Awaitable[object]],
        check: Callable[[answer.Handled, Any], Event],
        seconds: float | None,
        late: str,
    ) -> None:
        """Answer ``effect`` with what its handler gives (steploop/effects/answer.py); past
        ``seconds``, the handler is cancelled and the answer is the one for no answer."""
        event: Event | None = None
        with anyio.move_on_after(_deadline(seconds)) as deadline:
            event = await answer.outcome(effect, call, check)
        if deadline.cancelled_caught:
            event = answer.gave_up(effect, late)
        assert event is not None
        self._feed(stamped(event, self._now()))


def _deadline(seconds: float | None) -> float:
    return math.inf if seconds is None else seconds


def _send_nowait(stream: MemoryObjectSendStream[TextDelta], item: TextDelta) -> None:
    try:
        stream.send_nowait(item)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass


def _wall_ms() -> int:
    return int(time.time() * 1000)


def run(
    request: Request | str,
    *,
    model: ModelClient,
    tools: ToolRegistry | Sequence[Any] = (),
    config: LoopConfig | None = None,
    workspace: str | Path = ".",
    permissions: PermissionPolicy | None = None,
    compactor: Compactor | None = None,
    stop_hooks: StopHookRunner | None = None,
    session: Session | None = None,
    session_id: str | None = None,
    transcript_path: str | Path | None = None,
    tool_timeout_s: float = 120.0,
    timeouts: Timeouts | None = None,
    clock_ms: Callable[[], int] = _wall_ms,
    observer: StepObserver | None = None,
    summarizer: Callable[[SummarizeToolUse], Awaitable[str | None]] | None = None,
    on_acknowledge: Callable[[tuple[str, ...]], None] | None = None,
    resume: tuple[LoopState, tuple[Effect, ...]] | None = None,
    text_deltas: bool = False,
    mcp_servers: Any = None,
    telemetry: Any = None,
) -> Run:
    """Start one user turn of the agent loop.

    Args:
        request: the prompt (or a full Request with budgets).
        model: the model client (``AnthropicModelClient`` or ``ScriptedModel``).
        tools: a ToolRegistry, or tools to put in one.
        config: the loop config (default profile when omitted).
        workspace: the directory tools are confined to.
        permissions: which calls run without asking (default: ask for every call).
        compactor: summarises the conversation for (auto and reactive) compaction.
        stop_hooks: runs stop hooks when the model finishes without tool use.
        session: the previous turn's ``result.state.session()`` for multi-turn use.
        session_id: the session's id in the transcript and the hooks' input (None: a fresh
            UUID, as Claude Code's; give the same id to every turn of one session).
        transcript_path: where to keep a Claude Code JSONL transcript (stop hooks read it).
        observer: called with (event, state, effects) after every step (trace recording);
            one with an ``observe`` method gets the step's transitions too (StepObserver).
        resume: instead of ``start()``, continue from this state by executing these effects
            (the outstanding effects of a recorded run; see steploop/effects/trace/resume.py).
        text_deltas: also yield :class:`TextDelta` items as text streams in (the model client
            must have an ``on_text_delta`` attribute, as AnthropicModelClient does).
        mcp_servers: MCP servers whose tools join ``tools`` (group ``mcp``): a connected
            ``McpServers``, or configurations the run connects for the turn (steploop/effects/mcp/).
        telemetry: a ``Telemetry``: OpenTelemetry spans of the turn (steploop/effects/telemetry.py).

    Returns:
        A :class:`Run`; use it as ``async with run(...) as r: async for item in r: ...`` and read
        ``r.result`` afterwards.
    """
    req = Request(prompt=request, at_ms=clock_ms()) if isinstance(request, str) else request
    req = answer.request(req)  # a prompt from argv or a file can hold lone surrogates
    registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
    return Run(
        req,
        config=config or LoopConfig(),
        model=model,
        tools=registry,
        workspace=Path(workspace).resolve(),
        permissions=permissions or PermissionPolicy(),
        compactor=compactor,
        stop_hooks=stop_hooks,
        session=session,
        session_id=str(uuid.uuid4()) if session_id is None else session_id,
        transcript_path=Path(transcript_path) if transcript_path is not None else None,
        tool_timeout_s=tool_timeout_s,
        timeouts=timeouts or Timeouts(),
        clock_ms=clock_ms,
        observer=observer,
        summarizer=summarizer,
        on_acknowledge=on_acknowledge,
        resume=resume,
        text_deltas=text_deltas,
        mcp_servers=mcp_servers,
        telemetry=telemetry,
    )


def run_sync(
    request: Request | str,
    *,
    on_item: Callable[[Emitted | TextDelta], None] | None = None,
    on_permission: Callable[[PermissionRequest], bool] | None = None,
    backend: str = "asyncio",
    **kwargs: Any,
) -> RunResult:
    """Run one user turn to its end from synchronous code (scripts, notebooks).

    Args:
        request: the prompt or a Request.
        on_item: called with every emitted item, in order.
        on_permission: answers permission requests (True = allow); without it every request
            that the policy does not settle is rejected.
        backend: "asyncio" or "trio".
        **kwargs: everything :func:`run` takes (``model=`` is required).

    Returns:
        The :class:`RunResult`.
    """

    async def main() -> RunResult:
        async with run(request, **kwargs) as r:
            async for item in r:
                if isinstance(item, PermissionRequest):
                    if on_permission is not None and on_permission(item):
                        item.allow()
                    else:
                        item.reject()
                elif on_item is not None:
                    on_item(item)
        assert r.result is not None
        return r.result

    return anyio.run(main, backend=backend)
