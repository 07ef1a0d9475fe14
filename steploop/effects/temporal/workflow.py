"""The workflow: one user turn of the loop, durable.

:class:`TurnWorkflow` is a world of the one driver loop (:mod:`steploop.reducer.drive`, the pulled
form): ``drive_async`` runs ``start()`` and ``step()`` as workflow code (they are pure, so they
are deterministic workflow code as they stand), hands every effect to the workflow's
``perform`` in order and asks its ``next_event`` whenever nothing is queued. ``perform`` deals
with each effect as :mod:`steploop.effects.temporal.world` says: activities for what touches the world,
durable timers for ``Wait``, an update for a permission a client must answer; the answers, and
the interrupts and queued commands that signals bring, wait in the workflow's inbox, and
``next_event`` awaits the first. Events are stepped one at a time, in the order they arrive:
the order the history records, so a replay steps them in the same order. An answer still in
the inbox when an effect withdraws its request is dropped, never stepped (W-DRIVE-2). What an
activity answers, a failed activity, the permission policy's answer and the turn's usage go
through the answering layer (:mod:`steploop.effects.answer`), as in the live world: a
permission the policy settles is answered at once, stepped right after the step that asked.
Concurrency-safe tools run as concurrent activities and their results are stepped in
completion order. A model call's events arrive together when the response has ended (an
activity returns once), so tools called in a response start after it, not while it streams.

Every ``rounds_per_run`` rounds (at a Continue transition, with nothing in flight) the
workflow continues as new with the loop state and the effects still to execute, so a long
turn never fills one history. The trace is written as the workflow steps
(:mod:`steploop.effects.temporal.sink`); a continued run appends a ``resume`` record and carries on.

Clients: :meth:`TurnWorkflow.answer_permission` (update) answers a pending permission
request; :meth:`~TurnWorkflow.interrupt` and :meth:`~TurnWorkflow.queue_command` (signals)
interrupt the turn and queue a command; :meth:`~TurnWorkflow.pending_permissions`,
:meth:`~TurnWorkflow.items` and :meth:`~TurnWorkflow.progress` (queries) read it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import typing
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import IO, Any

import attrs
from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from steploop.effects import answer
    from steploop.effects.answer import PermissionPolicy
    from steploop.effects.temporal.sink import TraceSink
    from steploop.effects.temporal.world import (
        Key,
        decode_event,
        decode_events,
        encode,
        opens,
        withdrawn,
        withdraws_any,
    )
    from steploop.effects.trace.format import DEFAULT_MESSAGE_WINDOW
    from steploop.effects.trace.provenance import _steploop_version
    from steploop.effects.trace.record import TraceRecorder
    from steploop.reducer import LoopConfig, LoopState, Request, Session
    from steploop.reducer.drive import drive_async
    from steploop.reducer.effects import (
        AcknowledgeCommands,
        AskPermission,
        CallModel,
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
        WaitElapsed,
    )
    from steploop.reducer.messages import AssistantMessage, Usage
    from steploop.reducer.serialize import structure
    from steploop.reducer.transitions import CONTINUE_TYPES, Transition

__all__ = ["WORKFLOW_NAME", "Carried", "TurnInput", "TurnResult", "TurnWorkflow"]

WORKFLOW_NAME = "steploop.turn"
DECISIONS = ("allow", "deny_by_rule", "rejected_by_user")


@dataclasses.dataclass
class Carried:
    """What a run continued as new starts from."""

    state: dict[str, Any]
    effects: list[dict[str, Any]]
    steps: int  # step records written so far (the next step's index)
    trace_bytes: int  # bytes of the trace the runs so far produced
    items: int  # items emitted so far
    usage: dict[str, Any]
    acknowledged: list[str]
    runs: int  # runs so far (this one is runs + 1)
    last_ms: int  # the time of the last event stepped


@dataclasses.dataclass
class TurnInput:
    """A turn to run. ``request``, ``config`` and ``session`` are steploop values as plain
    data (``steploop.reducer.serialize.unstructure``)."""

    request: dict[str, Any]
    config: dict[str, Any]
    session: dict[str, Any] | None = None
    allow: list[str] = dataclasses.field(default_factory=list)
    deny: list[str] = dataclasses.field(default_factory=list)
    default_permission: str = "ask"  # allow | ask | deny
    trace_path: str | None = None
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)
    rounds_per_run: int = 50
    steploop_version: str = ""
    model_timeout_s: float = 600.0
    tool_timeout_s: float = 600.0
    other_timeout_s: float = 600.0  # compaction, stop hooks, summary
    heartbeat_s: float = 30.0
    tool_attempts: int = 3
    carried: Carried | None = None


@dataclasses.dataclass
class TurnResult:
    terminal: dict[str, Any]
    session: dict[str, Any]
    usage: dict[str, Any]
    acknowledged: list[str]
    steps: int
    runs: int
    api_error: bool = False
    """The turn's last message is an API-error message: it ended ``completed`` with nothing
    answered (R-RETRY-4), exit status 3 as for ``steploop run``."""


def policy_of(inp: TurnInput) -> PermissionPolicy:
    """The permission policy a turn's input names."""
    default = inp.default_permission
    if default not in ("allow", "ask", "deny"):
        raise ValueError(f"default_permission must be allow, ask or deny, got {default!r}")
    return PermissionPolicy(
        allow=frozenset(inp.allow),
        deny=frozenset(inp.deny),
        default=default,  # type: ignore[arg-type]  # checked above
    )


def _cause(exc: BaseException) -> str:
    inner = exc.__cause__ or exc
    return f"{type(inner).__name__}: {inner}"


@workflow.defn(name=WORKFLOW_NAME)
class TurnWorkflow:
    _inp: TurnInput
    _config: LoopConfig
    _policy: PermissionPolicy
    _sink: TraceSink

    def __init__(self) -> None:
        self._inbox: deque[Event] = deque()
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._fired: set[asyncio.Task[None]] = set()  # fire-and-forget activities
        self._asks: dict[Key, AskPermission] = {}  # permissions a client must answer
        self._items: list[dict[str, Any]] = []
        self._items_base = 0
        self._state: LoopState | None = None
        self._next = 0  # step records so far: the next step's index
        self._last_ms = 0  # the time of the last event stepped (the loop's clock)
        self._done = False
        self._recorder: TraceRecorder | None = None
        self._usage = Usage()
        self._acknowledged: list[str] = []
        self._rounds = 0  # Continue transitions in this run
        self._runs = 1

    # -- clients ---------------------------------------------------------------------------

    @workflow.update
    async def answer_permission(
        self, tool_use_id: str, decision: str, reason: str = "", at_ms: int = 0
    ) -> None:
        """Answer a pending permission request: allow, deny_by_rule or rejected_by_user.
        ``at_ms``: when the user answered (the client's clock; 0: the loop's last time)."""
        key = next(k for k, a in self._asks.items() if a.tool_use_id == tool_use_id)
        ask = self._asks.pop(key)
        self._feed(
            answer.permission(
                ask,
                decision,  # type: ignore[arg-type]  # checked by the validator
                reason,
                at_ms,
            )
        )

    @answer_permission.validator
    def _check_answer(
        self, tool_use_id: str, decision: str, reason: str = "", at_ms: int = 0
    ) -> None:
        if not any(a.tool_use_id == tool_use_id for a in self._asks.values()):
            raise ValueError(f"no permission request is pending for {tool_use_id!r}")
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")

    @workflow.signal
    def interrupt(self, kind: str = "hard", at_ms: int = 0) -> None:
        """Interrupt the turn: hard (Esc) or submit (a new message was sent)."""
        if kind in ("hard", "submit") and not self._done:
            self._feed(Interrupted(kind=kind, at_ms=at_ms))  # type: ignore[arg-type]

    @workflow.signal
    def queue_command(self, command_id: str, text: str, at_ms: int = 0) -> None:
        if not self._done:
            self._feed(CommandQueued(command_id=command_id, text=text, at_ms=at_ms))

    @workflow.query
    def pending_permissions(self) -> list[dict[str, Any]]:
        return [
            {"tool_use_id": a.tool_use_id, "name": a.name, "input": a.input}
            for a in self._asks.values()
        ]

    @workflow.query
    def items(self, since: int = 0) -> list[dict[str, Any]]:
        """Items emitted from index ``since`` on; each run keeps its own (ask the run that
        continued as new for the items before ``progress()["first_item"]``)."""
        return self._items[max(0, since - self._items_base) :]

    @workflow.query
    def progress(self) -> dict[str, Any]:
        s = self._state
        return {
            "phase": s.phase if s is not None else "starting",
            "turn_count": s.turn_count if s is not None else 0,
            "steps": self._next,
            "items": self._items_base + len(self._items),
            "first_item": self._items_base,
            "done": self._done,
        }

    # -- the loop --------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        with workflow.unsafe.sandbox_unrestricted():
            mine = _steploop_version()
        if inp.steploop_version and inp.steploop_version != mine:
            # a workflow task failure, retried until a worker of the recorded version takes it
            raise RuntimeError(
                f"this turn was started by steploop {inp.steploop_version}; this worker runs "
                f"{mine} (route it to a matching worker: see the versioning notes)"
            )
        self._inp = inp
        config: LoopConfig = structure(inp.config, LoopConfig)
        self._config = config
        self._policy = policy_of(inp)
        carried = inp.carried
        request = answer.request(structure(inp.request, Request))
        session: Session | None = (
            structure(inp.session, Session) if inp.session is not None else None
        )
        recorder = self._recorder = self._make_recorder(inp, config)
        try:
            if carried is None:
                self._last_ms = request.at_ms
                outcome = await drive_async(self, request, config, session, observer=self._observe)
            else:
                self._runs = carried.runs + 1
                self._usage = structure(carried.usage, Usage)
                self._acknowledged = list(carried.acknowledged)
                state = self._state = structure(carried.state, LoopState)
                pending = [structure(e, Effect) for e in carried.effects]
                self._next, self._items_base = carried.steps, carried.items
                self._last_ms = carried.last_ms
                if recorder is not None:
                    with workflow.unsafe.sandbox_unrestricted():
                        recorder._resume_record(carried.steps - 1, tuple(pending))
                outcome = await drive_async(
                    self, request, config, resume=(state, pending), observer=self._observe
                )
        finally:
            if recorder is not None:
                with workflow.unsafe.sandbox_unrestricted():
                    recorder.close()
        assert outcome.terminal is not None  # next_event never runs dry: the turn finished
        self._done = True
        for task in self._tasks.values():  # nothing the turn still waits for
            task.cancel()
        self._tasks.clear()
        last = next(outcome.state.conversation.reversed(), None)
        return TurnResult(
            terminal=encode(outcome.terminal),
            session=encode(outcome.state.session()),
            usage=encode(self._usage),
            acknowledged=self._acknowledged,
            steps=self._next,
            runs=self._runs,
            api_error=isinstance(last, AssistantMessage) and last.api_error is not None,
        )

    # -- the world of the driver loop ------------------------------------------------------

    def perform(self, effect: Effect, state: LoopState) -> list[Event] | None:
        """The world's side of an effect (:class:`steploop.reducer.drive.AsyncWorld`): a
        permission the policy settles is answered at once (as the live world does); every
        other answer comes later, through the inbox and :meth:`next_event`."""
        return self._apply(effect, self._config, self._acknowledged)

    async def next_event(self, state: LoopState) -> Event | None:
        """The next event that arrived (an activity's or a timer's answer, a client's update
        or signal), in arrival order; waits, durably, for as long as it takes."""
        await workflow.wait_condition(lambda: bool(self._inbox))
        return self._inbox.popleft()

    def _observe(
        self,
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        """After start() and every step, before its effects are performed: the usage, the
        loop's clock, the trace, and continue-as-new at a round boundary with nothing in
        flight (it carries the state and these effects, none performed yet)."""
        if event is not None:
            self._last_ms = max(self._last_ms, event.at_ms)
            # the usage, by the state the event was stepped in (steploop/effects/answer.py)
            self._usage = answer.counted(self._usage, event, self._state)
        self._state = state
        self._record(event, state, fx, passed)
        if event is not None and any(isinstance(t, CONTINUE_TYPES) for t in passed):
            self._rounds += 1
            if self._rounds >= self._inp.rounds_per_run and self._quiet(fx):
                # a round boundary with nothing in flight: the next run takes over
                self._continue(state, fx)

    def _quiet(self, fx: tuple[Effect, ...]) -> bool:
        """Nothing in flight, nothing waiting to be stepped, and the turn goes on."""
        return not (self._tasks or self._asks or self._inbox) and not any(
            isinstance(e, Finish) for e in fx
        )

    def _continue(self, state: LoopState, fx: tuple[Effect, ...]) -> None:
        """Continue as new (raises ContinueAsNewError, a BaseException the driver loop lets
        through to the workflow's run)."""
        inp, recorder = self._inp, self._recorder
        produced = 0
        if recorder is not None:
            with workflow.unsafe.sandbox_unrestricted():
                recorder.close()
            produced = self._sink.produced
        carried = Carried(
            state=encode(state),
            effects=[encode(e) for e in fx],
            steps=self._next,
            trace_bytes=produced,
            items=self._items_base + len(self._items),
            usage=encode(self._usage),
            acknowledged=list(self._acknowledged),
            runs=self._runs,
            last_ms=self._last_ms,
        )
        workflow.continue_as_new(dataclasses.replace(inp, carried=carried))

    def _make_recorder(self, inp: TurnInput, config: LoopConfig) -> TraceRecorder | None:
        if inp.trace_path is None:
            return None
        carried = inp.carried
        with workflow.unsafe.sandbox_unrestricted():
            self._sink = TraceSink(inp.trace_path, 0 if carried is None else carried.trace_bytes)
            if carried is None:
                request = answer.request(structure(inp.request, Request))
                session: Session | None = (
                    structure(inp.session, Session) if inp.session is not None else None
                )
                return TraceRecorder(
                    typing.cast(IO[str], self._sink),
                    config=config,
                    session=session,
                    request=request,
                    provenance=inp.provenance,
                    secrets=(),
                )
            last: LoopState = structure(carried.state, LoopState)
            return TraceRecorder._appending(
                typing.cast(IO[str], self._sink),
                next_index=carried.steps,
                last=last,
                window=DEFAULT_MESSAGE_WINDOW,
                provenance=inp.provenance,
                secrets=(),
            )

    def _record(
        self,
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        self._next += 1
        recorder = self._recorder
        if recorder is not None:
            with workflow.unsafe.sandbox_unrestricted():
                recorder.observe(event, state, fx, passed)

    def _feed(self, event: Event) -> None:
        """Queue an event for stepping; one without a time of its own (made here) takes the
        time of the last event stepped."""
        if event.at_ms == 0 and self._last_ms:
            event = attrs.evolve(event, at_ms=self._last_ms)
        self._inbox.append(event)

    # -- effects ---------------------------------------------------------------------------

    def _apply(
        self, effect: Effect, config: LoopConfig, acknowledged: list[str]
    ) -> list[Event] | None:
        inp = self._inp
        if withdraws_any(effect):  # a cancel, or a summary superseding the last one
            for gone in [k for k in self._tasks if withdrawn(effect, k)]:
                self._tasks.pop(gone).cancel()
            for gone in [k for k in self._asks if withdrawn(effect, k)]:
                del self._asks[gone]
            if self._inbox:  # answers that came and were not stepped yet (W-DRIVE-2)
                self._inbox = deque(answer.not_withdrawn(self._inbox, effect))
        key = opens(effect)
        match effect:
            case Emit(item=item):
                self._items.append(encode(item))
            case AskPermission():
                settled = self._policy.answer(effect, self._last_ms)
                if settled is not None:  # answered at once, as in the live world
                    return [settled]
                assert key is not None
                self._asks[key] = effect
            case CallModel():
                assert key is not None
                self._open(
                    key,
                    self._activity("steploop.call_model", [encode(effect)], inp.model_timeout_s, 1),
                    decode_events,
                    effect,
                    "the model call's activity failed: ",
                )
            case StartTool():
                assert key is not None
                ikey = f"{workflow.info().workflow_id}/{effect.generation}/{effect.tool_use_id}"
                self._open(
                    key,
                    self._activity(
                        "steploop.run_tool",
                        [encode(effect), ikey],
                        inp.tool_timeout_s,
                        inp.tool_attempts,
                    ),
                    lambda d: [decode_event(d)],
                    effect,
                    "Error: the tool's activity failed: ",
                )
            case Wait(wait_id=wid, ms=ms):
                assert key is not None

                due = self._last_ms + ms  # the timer fires at that time or later

                async def elapsed() -> list[Event]:
                    await workflow.sleep(timedelta(milliseconds=ms))
                    return [WaitElapsed(wait_id=wid, at_ms=due)]

                self._tasks[key] = asyncio.create_task(self._serve(key, elapsed()))
            case Compact():
                assert key is not None
                self._open(
                    key,
                    self._activity("steploop.compact", [encode(effect)], inp.other_timeout_s, 1),
                    lambda d: [decode_event(d)],
                    effect,
                )
            case RunStopHooks():
                assert key is not None
                self._open(
                    key,
                    self._activity(
                        "steploop.run_stop_hooks",
                        [encode(effect), config.is_subagent],
                        inp.other_timeout_s,
                        1,
                    ),
                    lambda d: [decode_event(d)],
                    effect,
                )
            case SummarizeToolUse():
                assert key is not None
                self._open(
                    key,
                    self._activity("steploop.summarize", [encode(effect)], inp.other_timeout_s, 1),
                    lambda d: [decode_event(d)],
                    effect,
                )
            case RefreshTools():  # the activities' tool list is fixed: read at once [R-REFRESH-1]
                return [answer.tools_refreshed(effect, at_ms=self._last_ms)]
            case PersistToolResult(tool_use_id=tid, content=content):
                pkey = f"{workflow.info().workflow_id}/{tid}"
                fired = asyncio.create_task(
                    self._fire(
                        self._activity(
                            "steploop.persist_tool_result", [pkey, content], inp.other_timeout_s, 3
                        )
                    )
                )
                self._fired.add(fired)
                fired.add_done_callback(self._fired.discard)
            case AcknowledgeCommands(command_ids=ids):
                acknowledged.extend(ids)
            case Finish():
                pass  # the driver loop ends the turn after it
            case _:  # the cancels are handled above
                if not withdraws_any(effect):
                    raise AssertionError(f"unexpected effect {effect!r}")
        return None

    def _activity(
        self, name: str, args: list[Any], timeout_s: float, attempts: int
    ) -> Awaitable[Any]:
        inp = self._inp
        return workflow.execute_activity(
            name,
            args=args,
            start_to_close_timeout=timedelta(seconds=timeout_s),
            heartbeat_timeout=timedelta(seconds=inp.heartbeat_s),
            retry_policy=RetryPolicy(
                maximum_attempts=attempts,
                initial_interval=timedelta(seconds=1),
                non_retryable_error_types=["TypeError", "SerializationError"],
            ),
        )

    def _open(
        self,
        key: Key,
        call: Awaitable[Any],
        decode: Callable[[Any], list[Event]],
        effect: answer.Asked,
        failed: str = "",
    ) -> None:
        """Run an activity for ``effect``; when it fails, the answer is the layer's for a
        handler that gave none (``failed`` and the cause say why)."""

        async def answered() -> list[Event]:
            try:
                return decode(await call)
            except ActivityError as exc:
                return [answer.gave_up(effect, failed + _cause(exc))]

        self._tasks[key] = asyncio.create_task(self._serve(key, answered()))

    async def _serve(self, key: Key, answer: Awaitable[list[Event]]) -> None:
        try:
            events = await answer
        except asyncio.CancelledError:
            return  # withdrawn: whatever it would have answered is dropped
        if self._tasks.get(key) is not None:
            del self._tasks[key]
            for e in events:
                self._feed(e)

    @staticmethod
    async def _fire(call: Awaitable[Any]) -> None:
        try:
            await call
        except (ActivityError, asyncio.CancelledError):
            pass  # fire and forget: the result was kept, or it was not
