"""One user turn as workflow code: :class:`SteploopTurn`, the world of the driver loop that the
ready-made :class:`~steploop.effects.temporal.workflow.TurnWorkflow` runs, and that a workflow
of one's own runs the same way (:func:`run_turn`).

:class:`SteploopTurn` is a world of the one driver loop (:mod:`steploop.reducer.drive`, the
pulled form): ``drive_async`` runs ``start()`` and ``step()`` as workflow code (they are pure,
so deterministic as they stand), hands every effect to :meth:`~SteploopTurn.perform` in order
and asks :meth:`~SteploopTurn.next_event` whenever nothing is queued. ``perform`` does what
:mod:`steploop.effects.temporal.world` says: activities for what touches the world (with the
options of :mod:`steploop.effects.temporal.options`), durable timers for ``Wait``, a question
to a client for a permission. The answers, and the interrupts and queued commands that signals
bring, wait in the inbox and are stepped one at a time in the order they arrived: the order the
history records, so a replay steps them in the same order. An answer still in the inbox when an
effect withdraws its request is dropped, never stepped (W-DRIVE-2). What an activity answers, a
failed activity, the permission policy's answer and the turn's usage go through the answering
layer (:mod:`steploop.effects.answer`), as in the live world.

**No I/O** (specs/temporal.md, TEMPORAL-IO-1). The turn's trace is recorded in memory as it
steps, and each new part goes to the trace activity (``steploop.trace``): the history keeps it
as that activity's input, and the activity writes it to ``trace_path`` on its worker's host.
Workflow code reads and writes no file, and reads neither the environment nor a clock: a replay
(Temporal's ``Replayer`` too) needs no file and leaves none. Each part's activity id carries a
digest of the whole trace up to it, so a replay whose decisions differ from the recorded ones in
any byte of the trace schedules another id, and Temporal's own determinism check fails on it
(TEMPORAL-CHECK-1).

**Cancellation.** A withdrawn activity is cancelled with its kind's cancellation type; with
``wait_cancellation_completed`` (tools, stop hooks) the turn does not end before the activity
has stopped, so nothing of it runs after the turn ended (TEMPORAL-STOP-1).

Every ``rounds_per_run`` rounds (at a Continue transition, with nothing in flight) the ready-made
workflow continues as new with the loop state and the effects still to execute, so a long turn
never fills one history; a turn run inside a workflow of one's own never does (bound it, or run
:class:`~steploop.effects.temporal.workflow.TurnWorkflow` as a child workflow).

Clients: :meth:`SteploopTurn.answer_permission` (an update) answers a pending permission request,
or the question whether to run again a call that started and did not finish;
:meth:`~SteploopTurn.interrupt` and :meth:`~SteploopTurn.queue_command` (signals) interrupt the
turn and queue a command; :meth:`~SteploopTurn.pending_permissions`, :meth:`~SteploopTurn.items`
and :meth:`~SteploopTurn.progress` (queries) read it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import typing
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import IO, Any, Final

import attrs
from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from steploop.effects import answer
    from steploop.effects.answer import PermissionPolicy
    from steploop.effects.temporal.activities import ACTIVITY_NAMES, UNFINISHED
    from steploop.effects.temporal.options import ActivityOptions, Resolved, resolve
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
    from steploop.effects.trace.provenance import steploop_version
    from steploop.effects.trace.record import TraceRecorder
    from steploop.effects.trace.resume import INTERRUPTED_TOOL_RESULT
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
    from steploop.reducer.events import CommandQueued, Event, Interrupted, WaitElapsed
    from steploop.reducer.messages import AssistantMessage, Usage
    from steploop.reducer.serialize import structure, unstructure
    from steploop.reducer.transitions import CONTINUE_TYPES, Transition

__all__ = [
    "ACCEPTED_VERSIONS",
    "DECISIONS",
    "STEPLOOP_VERSION",
    "Carried",
    "SteploopTurn",
    "TurnInput",
    "TurnResult",
    "make_input",
    "run_turn",
    "turn_input_here",
]

DECISIONS: Final = ("allow", "deny_by_rule", "rejected_by_user")
ON_UNFINISHED: Final = ("report", "ask")

STEPLOOP_VERSION: Final[str] = steploop_version()
"""This worker's steploop version (read once, when the module is imported: never by workflow
code)."""

ACCEPTED_VERSIONS: set[str] = set()
"""Versions of steploop whose turns this worker process takes besides its own (the plugin's
``accept_versions``, the worker's ``--accept-version``): set only once ``steploop temporal
check`` passed on their histories (see specs/temporal.md, upgrading)."""


@dataclasses.dataclass
class Carried:
    """What a run continued as new starts from."""

    state: dict[str, Any]
    effects: list[dict[str, Any]]
    steps: int  # step records written so far (the next step's index)
    trace_bytes: int  # bytes of the trace the runs so far produced
    trace_digest: str  # the digest of those bytes (see SteploopTurn._ship)
    items: int  # items emitted so far
    usage: dict[str, Any]
    acknowledged: list[str]
    runs: int  # runs so far (this one is runs + 1)
    last_ms: int  # the time of the last event stepped


@dataclasses.dataclass
class TurnInput:
    """A turn to run. ``request``, ``config`` and ``session`` are steploop values as plain
    data (``steploop.reducer.serialize.unstructure``); make one with :func:`make_input`
    (``steploop.effects.temporal.client.turn_input`` in a client, :func:`turn_input_here` in
    workflow code)."""

    request: dict[str, Any]
    config: dict[str, Any]
    session: dict[str, Any] | None = None
    allow: list[str] = dataclasses.field(default_factory=list)
    deny: list[str] = dataclasses.field(default_factory=list)
    default_permission: str = "ask"  # allow | ask | deny
    trace_path: str | None = None  # where the trace activity writes the trace (absolute)
    record_trace: bool = True  # the trace in the history (what `temporal check` checks)
    provenance: dict[str, Any] = dataclasses.field(default_factory=dict)
    rounds_per_run: int = 50  # 0: never continue as new
    steploop_version: str = ""
    activities: dict[str, ActivityOptions] = dataclasses.field(default_factory=dict)
    on_unfinished: str = "report"  # report | ask: see steploop.effects.temporal.activities
    turn_id: str = "turn"  # names the turn's trace and tool calls in its workflow
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


def make_input(
    request: Request,
    *,
    created_at: str,
    config: LoopConfig | None = None,
    session: Session | None = None,
    permissions: PermissionPolicy | None = None,
    trace_path: str | None = None,
    provenance: dict[str, Any] | None = None,
    rounds_per_run: int = 50,
    activities: dict[str, ActivityOptions] | None = None,
    on_unfinished: str = "report",
    **options: Any,
) -> TurnInput:
    """The input of one turn, from steploop values (pure: the caller gives the times)."""
    if on_unfinished not in ON_UNFINISHED:
        raise ValueError(f"on_unfinished must be report or ask, got {on_unfinished!r}")
    for kind in activities or {}:
        resolve(kind, activities or {})  # an unknown kind or a bad value fails here
    policy = permissions or PermissionPolicy()
    return TurnInput(
        request=unstructure(request),
        config=unstructure(config or LoopConfig()),
        session=unstructure(session) if session is not None else None,
        allow=sorted(policy.allow),
        deny=sorted(policy.deny),
        default_permission=policy.default,
        trace_path=trace_path,
        provenance={"created_at": created_at, "client": "temporal", **(provenance or {})},
        rounds_per_run=rounds_per_run,
        steploop_version=STEPLOOP_VERSION,
        activities=dict(activities or {}),
        on_unfinished=on_unfinished,
        **options,
    )


def turn_input_here(request: Request | str, **kwargs: Any) -> TurnInput:
    """:func:`make_input` in workflow code: the request's time and the provenance's
    ``created_at`` are the workflow's clock."""
    now = workflow.now()
    req = (
        Request(prompt=request, at_ms=int(now.timestamp() * 1000))
        if isinstance(request, str)
        else request
    )
    return make_input(req, created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"), **kwargs)


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


class _Continue(BaseException):
    """Raised by the observer at a round boundary: the run continues as new from here."""

    def __init__(self, state: LoopState, effects: tuple[Effect, ...]) -> None:
        super().__init__("continue as new")
        self.state = state
        self.effects = effects


class _Parts:
    """The text file the recorder writes to: parts kept in memory for the trace activity."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        """Nothing to flush: the parts go out with the trace activity."""

    def close(self) -> None:
        """Nothing is held open."""


class _Recorder(TraceRecorder):
    """The trace recorder of workflow code: it reads no secrets from the environment (the
    trace is part of the history, which holds the same values; the trace activity keeps the
    worker's secrets out of the file it writes)."""

    def add_secrets(self, secrets: Any) -> None:
        return None


@dataclasses.dataclass
class _Question:
    """A call that started and did not finish: run it again? (``on_unfinished="ask"``)"""

    effect: StartTool
    answer: asyncio.Future[str]


class SteploopTurn:
    """One user turn, as workflow code (see the module docstring).

    Args:
        inp: the turn.
        continue_as_new: continue as new every ``inp.rounds_per_run`` rounds (the ready-made
            workflow does; a workflow of one's own must not, its input being its own).
    """

    def __init__(self, inp: TurnInput, *, continue_as_new: bool = False) -> None:
        self._inp = inp
        self._may_continue = continue_as_new and inp.rounds_per_run > 0
        self._config: LoopConfig = structure(inp.config, LoopConfig)
        self._policy = policy_of(inp)
        self._options: dict[str, Resolved] = {}
        self._inbox: deque[Event] = deque()
        self._tasks: dict[Key, asyncio.Task[None]] = {}
        self._stopping: set[asyncio.Task[None]] = set()  # withdrawn, not yet stopped
        self._fired: set[asyncio.Task[None]] = set()  # fire-and-forget activities
        self._asks: dict[Key, AskPermission] = {}  # permissions a client must answer
        self._questions: dict[str, _Question] = {}  # unfinished calls a client must answer
        self._items: list[dict[str, Any]] = []
        self._items_base = 0
        self._state: LoopState | None = None
        self._next = 0  # step records so far: the next step's index
        self._last_ms = 0  # the time of the last event stepped (the loop's clock)
        self._done = False
        self._usage = Usage()
        self._acknowledged: list[str] = []
        self._rounds = 0  # Continue transitions in this run
        self._runs = 1
        self._parts = _Parts()
        self._recorder: TraceRecorder | None = None
        carried = inp.carried
        self._trace_bytes = carried.trace_bytes if carried is not None else 0
        self._trace_digest = carried.trace_digest if carried is not None else ""
        self._trace_closed = False

    # -- clients (the ready-made workflow's handlers; register() for one's own) -------------

    def register(self, prefix: str = "") -> None:
        """Register this turn's update, signals and queries on the current workflow, named as
        the ready-made workflow names them (with ``prefix`` before each name), so that the
        ``steploop temporal`` commands and any client reach a turn run inside one's own
        workflow the same way."""
        workflow.set_update_handler(
            prefix + "answer_permission", self.answer_permission, validator=self.check_answer
        )
        workflow.set_signal_handler(prefix + "interrupt", self.interrupt)
        workflow.set_signal_handler(prefix + "queue_command", self.queue_command)
        workflow.set_query_handler(prefix + "pending_permissions", self.pending_permissions)
        workflow.set_query_handler(prefix + "items", self.items)
        workflow.set_query_handler(prefix + "progress", self.progress)

    async def answer_permission(
        self, tool_use_id: str, decision: str, reason: str = "", at_ms: int = 0
    ) -> None:
        """Answer a pending permission request: allow, deny_by_rule or rejected_by_user (for
        a call that started and did not finish: allow runs it again). ``at_ms``: when the user
        answered (the client's clock; 0: the loop's last time)."""
        question = self._questions.pop(tool_use_id, None)
        if question is not None:
            question.answer.set_result(decision)
            return
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

    def check_answer(
        self, tool_use_id: str, decision: str, reason: str = "", at_ms: int = 0
    ) -> None:
        """The validator of :meth:`answer_permission`: an answer to nothing pending, or an
        unknown decision, is refused (and leaves no trace in the history)."""
        if tool_use_id not in self._questions and not any(
            a.tool_use_id == tool_use_id for a in self._asks.values()
        ):
            raise ValueError(f"no permission request is pending for {tool_use_id!r}")
        if decision not in DECISIONS:
            raise ValueError(f"decision must be one of {', '.join(DECISIONS)}, got {decision!r}")

    def interrupt(self, kind: str = "hard", at_ms: int = 0) -> None:
        """Interrupt the turn: hard (Esc) or submit (a new message was sent)."""
        if kind in ("hard", "submit") and not self._done:
            self._feed(Interrupted(kind=kind, at_ms=at_ms))  # type: ignore[arg-type]

    def queue_command(self, command_id: str, text: str, at_ms: int = 0) -> None:
        if not self._done:
            self._feed(CommandQueued(command_id=command_id, text=text, at_ms=at_ms))

    def pending_permissions(self) -> list[dict[str, Any]]:
        """The questions a client must answer: permission requests, and calls that started
        and did not finish (``unfinished``: allow runs them again)."""
        asks = [
            {"tool_use_id": a.tool_use_id, "name": a.name, "input": a.input}
            for a in self._asks.values()
        ]
        unfinished = [
            {
                "tool_use_id": tid,
                "name": q.effect.name,
                "input": q.effect.input,
                "unfinished": True,
            }
            for tid, q in self._questions.items()
        ]
        return asks + unfinished

    def items(self, since: int = 0) -> list[dict[str, Any]]:
        """Items emitted from index ``since`` on; each run keeps its own (ask the run that
        continued as new for the items before ``progress()["first_item"]``)."""
        return self._items[max(0, since - self._items_base) :]

    def progress(self) -> dict[str, Any]:
        s = self._state
        return {
            "phase": s.phase if s is not None else "starting",
            "turn_count": s.turn_count if s is not None else 0,
            "steps": self._next,
            "items": self._items_base + len(self._items),
            "first_item": self._items_base,
            "pending": len(self._asks) + len(self._questions),
            "done": self._done,
            "runs": self._runs,
        }

    # -- the loop --------------------------------------------------------------------------

    async def run(self) -> TurnResult:
        """Run the turn to its end (or, in the ready-made workflow, to the next run)."""
        inp = self._inp
        mine = STEPLOOP_VERSION
        if inp.steploop_version not in ("", mine, *ACCEPTED_VERSIONS):
            # a workflow task failure, retried until a worker of the recorded version takes it
            raise RuntimeError(
                f"this turn was started by steploop {inp.steploop_version}; this worker runs "
                f"{mine} (route it to a matching worker, or accept that version once "
                "`steploop temporal check` passed on its histories: see specs/temporal.md)"
            )
        config = self._config
        carried = inp.carried
        request = answer.request(structure(inp.request, Request))
        session: Session | None = (
            structure(inp.session, Session) if inp.session is not None else None
        )
        self._recorder = self._make_recorder(inp, config, request, session)
        writer = asyncio.create_task(self._ship()) if self._recorder is not None else None
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
                if self._recorder is not None:
                    self._recorder._resume_record(carried.steps - 1, tuple(pending))
                outcome = await drive_async(
                    self, request, config, resume=(state, pending), observer=self._observe
                )
        except _Continue as cont:
            await self._close(writer)
            workflow.continue_as_new(self._carry(cont.state, cont.effects))
        self._done = True
        for task in self._tasks.values():  # nothing the turn still waits for
            self._withdraw(task)
        self._tasks.clear()
        for q in self._questions.values():
            q.answer.cancel()
        await self._close(writer)
        assert outcome.terminal is not None  # next_event never runs dry: the turn finished
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

    async def _close(self, writer: asyncio.Task[None] | None) -> None:
        """Before the run ends: every withdrawn activity has stopped (those cancelled with
        ``wait_cancellation_completed``) and every part of the trace has been sent."""
        await workflow.wait_condition(lambda: not self._stopping)
        self._trace_closed = True
        if writer is not None:
            await writer

    def perform(self, effect: Effect, state: LoopState) -> list[Event] | None:
        """The world's side of an effect (:class:`steploop.reducer.drive.AsyncWorld`): a
        permission the policy settles is answered at once (as the live world does); every
        other answer comes later, through the inbox and :meth:`next_event`."""
        return self._apply(effect)

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
        self._next += 1
        if self._recorder is not None:
            self._recorder.observe(event, state, fx, passed)
        if (
            self._may_continue
            and event is not None
            and any(isinstance(t, CONTINUE_TYPES) for t in passed)
        ):
            self._rounds += 1
            if self._rounds >= self._inp.rounds_per_run and self._quiet(fx):
                raise _Continue(state, fx)  # a round boundary with nothing in flight

    def _quiet(self, fx: tuple[Effect, ...]) -> bool:
        """Nothing in flight, nothing waiting to be stepped, and the turn goes on."""
        return not (
            self._tasks or self._asks or self._inbox or self._questions or self._stopping
        ) and not any(isinstance(e, Finish) for e in fx)

    def _carry(self, state: LoopState, fx: tuple[Effect, ...]) -> TurnInput:
        carried = Carried(
            state=encode(state),
            effects=[encode(e) for e in fx],
            steps=self._next,
            trace_bytes=self._trace_bytes,
            trace_digest=self._trace_digest,
            items=self._items_base + len(self._items),
            usage=encode(self._usage),
            acknowledged=list(self._acknowledged),
            runs=self._runs,
            last_ms=self._last_ms,
        )
        return dataclasses.replace(self._inp, carried=carried)

    # -- the trace -------------------------------------------------------------------------

    def _make_recorder(
        self, inp: TurnInput, config: LoopConfig, request: Request, session: Session | None
    ) -> TraceRecorder | None:
        if not inp.record_trace:
            return None
        file = typing.cast(IO[str], self._parts)
        carried = inp.carried
        if carried is None:
            return _Recorder(
                file,
                config=config,
                session=session,
                request=request,
                provenance=inp.provenance,
                secrets=(),
            )
        last: LoopState = structure(carried.state, LoopState)
        return _Recorder._appending(
            file,
            next_index=carried.steps,
            last=last,
            window=DEFAULT_MESSAGE_WINDOW,
            provenance=inp.provenance,
            secrets=(),
        )

    async def _ship(self) -> None:
        """Send the trace's new parts to the trace activity, one at a time: whatever was
        recorded while the last was on its way goes in the next. Each part's activity id
        carries the digest of the trace up to its end (a chain: sha256 of the last digest and
        the part), so a replay that records any other byte schedules another id."""
        inp = self._inp
        parts = self._parts.parts
        while True:
            await workflow.wait_condition(lambda: bool(parts) or self._trace_closed)
            if not parts:
                return
            chunk = "".join(parts)
            parts.clear()
            digest = hashlib.sha256((self._trace_digest + chunk).encode("utf-8")).hexdigest()
            self._trace_digest = digest
            offset = self._trace_bytes
            self._trace_bytes += len(chunk.encode("utf-8"))
            try:
                await self._call(
                    "trace",
                    [inp.turn_id, inp.trace_path, offset, chunk],
                    activity_id=f"steploop.trace/{inp.turn_id}/{digest[:24]}",
                )
            except ActivityError:
                pass  # the history holds the part either way (it is the activity's input)

    # -- effects ---------------------------------------------------------------------------

    def _feed(self, event: Event) -> None:
        """Queue an event for stepping; one without a time of its own (made here) takes the
        time of the last event stepped."""
        if event.at_ms == 0 and self._last_ms:
            event = attrs.evolve(event, at_ms=self._last_ms)
        self._inbox.append(event)

    def _options_of(self, kind: str) -> Resolved:
        got = self._options.get(kind)
        if got is None:
            got = self._options[kind] = resolve(kind, self._inp.activities)
        return got

    def _call(self, kind: str, args: Sequence[Any], *, activity_id: str | None = None) -> Any:
        """The activity of ``kind`` (``tool.NAME`` runs ``steploop.run_tool``) with its
        options."""
        name = ACTIVITY_NAMES["tools" if kind.startswith("tool.") else kind]
        return workflow.execute_activity(
            name, args=list(args), activity_id=activity_id, **self._options_of(kind).temporal()
        )

    def _withdraw(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        if not task.done():
            self._stopping.add(task)
            task.add_done_callback(self._stopping.discard)

    def _apply(self, effect: Effect) -> list[Event] | None:
        inp = self._inp
        if withdraws_any(effect):  # a cancel, or a summary superseding the last one
            for gone in [k for k in self._tasks if withdrawn(effect, k)]:
                self._withdraw(self._tasks.pop(gone))
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
                    lambda: self._call("model", [encode(effect)]),
                    decode_events,
                    effect,
                    "the model call's activity failed: ",
                )
            case StartTool():
                assert key is not None
                self._open_tool(key, effect)
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
                    lambda: self._call("compaction", [encode(effect)]),
                    lambda d: [decode_event(d)],
                    effect,
                )
            case RunStopHooks():
                assert key is not None
                subagent = self._config.is_subagent
                self._open(
                    key,
                    lambda: self._call("hooks", [encode(effect), subagent]),
                    lambda d: [decode_event(d)],
                    effect,
                )
            case SummarizeToolUse():
                assert key is not None
                self._open(
                    key,
                    lambda: self._call("summary", [encode(effect)]),
                    lambda d: [decode_event(d)],
                    effect,
                )
            case RefreshTools():  # the activities' tool list is fixed: read at once [R-REFRESH-1]
                return [answer.tools_refreshed(effect, at_ms=self._last_ms)]
            case PersistToolResult(tool_use_id=tid, content=content):
                pkey = f"{workflow.info().workflow_id}/{inp.turn_id}/{tid}"
                fired = asyncio.create_task(self._fire(self._call("persist", [pkey, content])))
                self._fired.add(fired)
                fired.add_done_callback(self._fired.discard)
            case AcknowledgeCommands(command_ids=ids):
                self._acknowledged.extend(ids)
            case Finish():
                pass  # the driver loop ends the turn after it
            case _:  # the cancels are handled above
                if not withdraws_any(effect):
                    raise AssertionError(f"unexpected effect {effect!r}")
        return None

    def _open(
        self,
        key: Key,
        call: Callable[[], Awaitable[Any]],
        decode: Callable[[Any], list[Event]],
        effect: answer.Asked,
        failed: str = "",
    ) -> None:
        """Run an activity for ``effect``; when it fails, the answer is the layer's for a
        handler that gave none (``failed`` and the cause say why)."""

        async def answered() -> list[Event]:
            try:
                return decode(await call())
            except ActivityError as exc:
                return [answer.gave_up(effect, failed + _cause(exc))]

        self._tasks[key] = asyncio.create_task(self._serve(key, answered()))

    def _open_tool(self, key: Key, effect: StartTool) -> None:
        """A tool call's activity; a call that started before and did not finish is, under
        ``on_unfinished="ask"``, a question to a client: allow runs it again, any other answer
        is the interrupted-unknown result."""
        inp = self._inp
        ikey = f"{workflow.info().workflow_id}/{inp.turn_id}/{effect.generation}/{effect.tool_use_id}"
        kind = f"tool.{effect.name}"
        failed = "Error: the tool's activity failed: "

        async def answered() -> list[Event]:
            rerun = False
            while True:
                try:
                    data = await self._call(
                        kind, [encode(effect), ikey, inp.on_unfinished, rerun]
                    )
                except ActivityError as exc:
                    return [answer.gave_up(effect, failed + _cause(exc))]
                if data != UNFINISHED:
                    return [decode_event(data)]
                question = _Question(effect, asyncio.get_running_loop().create_future())
                self._questions[effect.tool_use_id] = question
                try:
                    decision = await question.answer
                finally:
                    self._questions.pop(effect.tool_use_id, None)
                if decision != "allow":
                    return [answer.gave_up(effect, INTERRUPTED_TOOL_RESULT)]
                rerun = True

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


async def run_turn(inp: TurnInput, *, handlers: bool = True, prefix: str = "") -> TurnResult:
    """Run one steploop turn inside the current workflow (one's own: the plugin registers the
    activities it calls) and return its result. ``handlers``: register the turn's update,
    signals and queries (:meth:`SteploopTurn.register`, names prefixed with ``prefix``)."""
    turn = SteploopTurn(inp)
    if handlers:
        turn.register(prefix)
    return await turn.run()
