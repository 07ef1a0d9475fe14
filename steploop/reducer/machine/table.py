"""The machine: start(), step() and the transition table (specs/ rules cited as [X-n]).

Theory of operation
===================

A *user turn* starts with :func:`start` and ends with a ``Finish`` effect carrying one of the
10 Terminal transitions. Between them the turn is a sequence of *rounds*; each round makes one
model call (plus retries) and ends either in a Terminal or in one of the 7 Continue
transitions, which starts the next round.

A round runs the reference order [R-ORDER-1]:

    tool-result budget  (applied when a result is written, so it is frozen per tool_use_id)
    snip -> microcompact -> context collapse -> auto-compact -> blocking limit -> CallModel
    stream: blocks arrive; safe tools start mid-stream; non-safe ones after the end
    no tool use:  PTL ladder -> media ladder -> MOT ladder -> API-error exit (a refusal is
                  one) -> pause_turn resume -> stop hooks -> token budget -> completed
    tool use:     (interrupts abort) -> hook_stopped -> queued commands -> tool list
                  refreshed (gated) -> max_turns -> next_turn

The machine waits for the world in *phases*. ``TABLE`` below maps (phase, event type) to the
handler that applies; a pair missing from the table is a driver error and raises
:class:`IllegalEvent` naming the events the phase accepts. ``done`` accepts nothing. Everything
a table cannot say (which call or tool an event belongs to, late results for discarded slots)
is checked by the handlers, under the comment "not in the table".

Handlers never touch the outside world: they return a new state and append effects to ``fx``.
Ids come from per-kind counters in the state [R-ID-1]; time comes from ``event.at_ms``.

The package
===========

This module holds the machine's tables and the few loops that read them: ``TABLE`` (read by
:func:`step` and :func:`advance`), the round-end ladders ``ROUND_END`` and ``TOOL_ROUND_END``
(read by :func:`end_round` and :func:`after_tools`), the reset table ``RESETS`` (read by
:func:`apply_reset`) and ``START``/``OUTCOMES``, where each pair may lead (read by
``steploop graph --static`` and its tests). The handlers and rungs live in one module per part
of a round, in the order a round meets them:

- :mod:`~steploop.reducer.machine.helpers`: the effect list ``FX``, message ids, the context
  count, the synthetic messages, committing a round;
- :mod:`~steploop.reducer.machine.opening`: opening a user turn;
- :mod:`~steploop.reducer.machine.pipeline`: beginning a round (snip, microcompact, collapse,
  auto-compact, the blocking limit) and calling the model;
- :mod:`~steploop.reducer.machine.streaming`: blocks, tool slots, permissions, results, the end
  of the response;
- :mod:`~steploop.reducer.machine.failures`: failed model calls, retries, fallbacks;
- :mod:`~steploop.reducer.machine.round_end`: the no-tool-use ladder's rungs and the stop hooks;
- :mod:`~steploop.reducer.machine.tool_round_end`: the tool-use ladder's rungs;
- :mod:`~steploop.reducer.machine.ending`: taking a Continue or a Terminal;
- :mod:`~steploop.reducer.machine.interrupts`: the user's interrupts;
- :mod:`~steploop.reducer.machine.compaction`: compaction and the other events (inserted
  messages, queued commands, summaries).

The machine is recursive (a Continue begins the next round, whose pipeline may end the turn),
so these modules import each other as modules and call ``pipeline.begin_round(...)``, never
``from ... import`` a name of a module that may not have finished loading; ``helpers``, which
imports none of them, is imported by name.
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from typing import Any, Final, TypeAlias

import attrs

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Effect
from steploop.reducer.errors import IllegalEvent, WrongType
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.machine import (
    compaction,
    failures,
    interrupts,
    opening,
    round_end,
    streaming,
    tool_round_end,
)
from steploop.reducer.machine.helpers import FX, Rungs
from steploop.reducer.state import AutoCompactTracking, LoopState, Phase, Request, Session
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    Continue,
    HookStopped,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    StopHookPrevented,
    TokenBudgetContinuation,
    Transition,
)

Stepped: TypeAlias = tuple[LoopState, tuple[Effect, ...], tuple[Transition, ...]]
"""What :func:`advance` and :func:`begin` return: the state, the effects, the transitions."""


Handler = Callable[[LoopState, Any, LoopConfig, FX], LoopState]


def start(
    request: Request, config: LoopConfig, session: Session | None = None
) -> tuple[LoopState, tuple[Effect, ...]]:
    """Open a user turn.

    Args:
        request: the user's prompt and the turn's optional budgets.
        config: the frozen configuration snapshot for the whole turn.
        session: what the previous turn left (``state.session()``), or None for a new session.

    Returns:
        The first state and its effects: the prompt is emitted, then the first round's
        pipeline runs (usually ending in ``CallModel``).

    Raises:
        WrongType: an argument is not a Request, a LoopConfig, a Session or None [M-TYPE-1].
        MalformedConversation: the prompt or the session is one the API refuses [M-HIST-1].
    """
    check_start(request, config, session)
    s, fx = opening.open_turn(request, config, session)
    return s, tuple(fx)


def begin(request: Request, config: LoopConfig, session: Session | None = None) -> Stepped:
    """:func:`start`, with every transition it passed through (the first round can end at once
    in ``blocking_limit``): ``(state, effects, transitions)``."""
    check_start(request, config, session)
    s, fx = opening.open_turn(request, config, session)
    return s, tuple(fx), fx.passed


# The round-end ladder [R-ORDER-1], as ordered data: the no-tool-use path tries each rung in
# turn until one ends the round. A rung is a function (state, config, effects, now) -> (state,
# ended): ``ended`` False passes the state on to the next rung. Each names its rule and what it
# may lead to (a transition, or a phase it waits in), which ``steploop graph --static`` draws.
# The stop-hooks rung waits for the hooks; their answer (round_end.on_stop_hooks) goes on from
# the rung after it. The tool-use path has a ladder of its own (TOOL_ROUND_END).


@attrs.frozen
class Rung:
    """One rung of a round-end ladder: its rule, its name, the function that runs it, where
    it may lead, and whether it waits for the world."""

    rule: str
    name: str
    run: Callable[[LoopState, LoopConfig, FX, int], Rungs]
    exits: tuple[object, ...]  # transition classes, and phases it leaves the machine in
    waits: bool = False  # it waits for the world; the rungs after it run on the answer
    gated: bool = False  # it waits only under its gate; without it the ladder goes on


START: Final[tuple[object, ...]] = ("compacting", "streaming", BlockingLimit)
"""Where a round's pipeline may lead [R-ORDER-1]: it waits for an auto-compaction or the model,
or ends the turn at once at the blocking limit. start(), a Continue, the pause resume and
inserted messages each begin a round."""

PTL_LADDER: Final = Rung(
    "R-PTL-1",
    "prompt-too-long ladder",
    round_end.prompt_too_long,
    (CollapseDrainRetry, "reactive_compacting", PromptTooLong),
)
MEDIA_LADDER: Final = Rung(
    "R-MEDIA-1", "media ladder", round_end.media, ("reactive_compacting", ImageError)
)
MOT_LADDER: Final = Rung(
    "R-MOT-1",
    "max-output-tokens ladder",
    round_end.mot_ladder,
    (MaxOutputTokensEscalate, MaxOutputTokensRecovery, Completed),
)
API_ERROR_EXIT: Final = Rung("G1", "API-error exit", round_end.api_error_exit, (Completed,))
PAUSE_RESUME: Final = Rung("S-PAUSE-1", "pause_turn resume", round_end.pause_turn, START)
STOP_HOOKS: Final = Rung(
    "R-HOOK-1", "stop hooks", round_end.stop_hooks, ("stop_hooks",), waits=True
)
TOKEN_BUDGET: Final = Rung(
    "C-BUDGET-1", "token budget", round_end.token_budget, (TokenBudgetContinuation,)
)
COMPLETED: Final = Rung("T-COMPLETED-1", "completed", round_end.completed, (Completed,))

ROUND_END: Final[tuple[Rung, ...]] = (
    PTL_LADDER,
    MEDIA_LADDER,
    MOT_LADDER,
    API_ERROR_EXIT,
    PAUSE_RESUME,
    STOP_HOOKS,
    TOKEN_BUDGET,
    COMPLETED,
)
"""The no-tool-use path in the reference's order: PTL -> media -> MOT -> API-error exit (a
refusal is one) -> pause_turn resume -> stop hooks -> token budget -> completed."""


AFTER_HOOKS_AT: Final = next(i for i, r in enumerate(ROUND_END) if r.waits) + 1
"""Where the stop hooks' answer goes on in ``ROUND_END``: the rung after the one that waits."""
_ROUND_END_RUNS: Final = tuple(r.run for r in ROUND_END)


def end_round(s: LoopState, cfg: LoopConfig, fx: FX, now: int, start: int = 0) -> LoopState:
    """The no-tool-use ladder: ROUND_END from rung ``start`` until a rung ends the round."""
    for run in _ROUND_END_RUNS[start:] if start else _ROUND_END_RUNS:
        s, ended = run(s, cfg, fx, now)
        if ended:
            return s
    raise AssertionError("the last rung always ends the round")  # pragma: no cover


def no_tool_use(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    """The no-tool-use path [R-ORDER-1]: ROUND_END from its first rung (the recovery ladders,
    the API-error exit [G1], the pause resume, stop hooks, the token budget [C-BUDGET-1],
    completed [T-COMPLETED-1])."""
    return end_round(s, cfg, fx, now)


TOOL_ROUND_END: Final[tuple[Rung, ...]] = (
    Rung("R-SUM-1", "results committed, summary requested", tool_round_end.tools_done, ()),
    Rung("T-HOOK-1", "hook_stopped", tool_round_end.hook_stopped, (HookStopped,)),
    Rung("R-CMD-1", "queued commands", tool_round_end.queued_commands, ()),
    Rung(
        "R-REFRESH-1",
        "tool list refreshed",
        tool_round_end.refresh_tools,
        ("refreshing_tools",),
        waits=True,
        gated=True,
    ),
    Rung("T-MAXTURNS-1", "max_turns", tool_round_end.max_turns, (MaxTurns,)),
    Rung("C-NEXT-1", "next_turn", tool_round_end.next_turn, (NextTurn,)),
)
"""The tool-use path once every tool of the round is done (interrupts abort before it):
hook_stopped -> queued commands -> the tool list refreshed (gated) -> max_turns -> next_turn."""


_TOOL_ROUND_END_RUNS: Final = tuple(r.run for r in TOOL_ROUND_END)
AFTER_REFRESH_AT: Final = next(i for i, r in enumerate(TOOL_ROUND_END) if r.waits) + 1
"""Where the refreshed list's answer goes on in ``TOOL_ROUND_END``: the rung after the refresh."""


def after_tools(s: LoopState, cfg: LoopConfig, fx: FX, now: int, start: int = 0) -> LoopState:
    """The tool-use ladder: TOOL_ROUND_END from rung ``start`` until a rung ends the round."""
    for run in _TOOL_ROUND_END_RUNS[start:] if start else _TOOL_ROUND_END_RUNS:
        s, ended = run(s, cfg, fx, now)
        if ended:
            return s
    raise AssertionError("the last rung always ends the round")  # pragma: no cover


# [C-RESET-1] What each Continue writes besides ``transition``, as data: a field and its new
# value, a constant or one of the writes below. A field not listed is kept. The rows are in
# specs/rules.md's order; ``steploop graph --static`` and the tests read them.


@attrs.frozen
class Write:
    """A written value that is not a constant: ``how`` names it (the table's wording, which
    specs/rules.md's C-RESET-1 table uses), ``compute`` computes it from the state ``s``, the
    config ``cfg``, the transition ``t`` and the name of the row's field."""

    how: str
    compute: Callable[[LoopState, LoopConfig, Any, str], object] = attrs.field(repr=False)

    def __repr__(self) -> str:
        return self.how


# the field's value plus one
PLUS_ONE: Final = Write("+1", lambda s, cfg, t, field: getattr(s, field) + 1)
# the transition's attempt
ATTEMPT: Final = Write("attempt", lambda s, cfg, t, field: t.attempt)
# the config's escalated output cap
ESCALATED: Final = Write("escalated cap", lambda s, cfg, t, field: cfg.escalated_max_output_tokens)
# a fresh tracking
RESET: Final = Write("reset", lambda s, cfg, t, field: AutoCompactTracking())
# kept; cleared under
KEPT_OR_CLEARED: Final = Write(
    "kept*",
    lambda s, cfg, t, field: (
        False if cfg.compat.stop_hook_active_cleared_by_recovery else getattr(s, field)
    ),
)


@attrs.frozen
class Reset:
    """One row of the reset table: the Continue, the rule that defines it, what it writes."""

    transition: type[Continue]
    rule: str
    writes: tuple[tuple[str, object], ...]


RESETS: Final[tuple[Reset, ...]] = (
    Reset(
        NextTurn,
        "C-NEXT-1",
        (
            ("mot_recovery_count", 0),
            ("has_attempted_reactive_compact", False),
            ("max_output_tokens_override", None),
            ("turn_count", PLUS_ONE),
        ),
    ),
    Reset(
        ReactiveCompactRetry,
        "C-REACTIVE-1",
        (
            ("has_attempted_reactive_compact", True),
            ("max_output_tokens_override", None),
            ("tracking", RESET),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
    Reset(
        MaxOutputTokensRecovery,
        "C-MOT-1",
        (
            ("mot_recovery_count", ATTEMPT),
            ("max_output_tokens_override", None),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
    Reset(
        MaxOutputTokensEscalate,
        "C-ESCALATE-1",
        (
            ("max_output_tokens_override", ESCALATED),
            ("escalated", True),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
    Reset(
        CollapseDrainRetry,
        "C-COLLAPSE-1",
        (("max_output_tokens_override", None), ("stop_hook_active", KEPT_OR_CLEARED)),
    ),
    Reset(
        StopHookBlocking,
        "C-BLOCKING-1",
        (
            ("mot_recovery_count", 0),
            # [G3] has_attempted_reactive_compact is kept across stop-hook retries
            ("max_output_tokens_override", None),
            ("stop_hook_active", True),
        ),
    ),
    Reset(
        TokenBudgetContinuation,
        "C-BUDGET-1",
        (
            ("mot_recovery_count", 0),
            ("has_attempted_reactive_compact", False),
            ("max_output_tokens_override", None),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
)


_WRITES: Final[dict[type[Continue], tuple[tuple[str, object], ...]]] = {
    row.transition: row.writes for row in RESETS
}


def apply_reset(s: LoopState, cfg: LoopConfig, t: Continue) -> LoopState:
    """Write ``transition`` and what ``RESETS`` says the Continue ``t`` writes [C-RESET-1]: one
    ``evolve`` of the state, each of the row's fields to its constant or to its Write's value
    (every value computed from the state before the Continue)."""
    changes: dict[str, object] = {"transition": t}
    for field, value in _WRITES[type(t)]:
        changes[field] = value.compute(s, cfg, t, field) if isinstance(value, Write) else value
    return evolve(s, **changes)


# Events every non-terminal phase accepts: the user's interrupts and queued commands, the
# summary, and late results of discarded calls and tool slots (handlers turn those into no-ops
# and reject anything that belongs to the current round but not to this phase).
_ALWAYS: dict[type, Handler] = {
    Interrupted: interrupts.on_interrupted,
    CommandQueued: compaction.on_command_queued,
    ToolUseSummaryReady: compaction.on_summary_ready,
}


def _late_model(s: LoopState, e: Any, cfg: LoopConfig, fx: FX) -> LoopState:
    """Not in the table: outside ``streaming`` only events of earlier calls can arrive."""
    if e.call_id < s.round.call_id:
        return s
    raise IllegalEvent(
        s.phase, e, allowed_events(s.phase), f"model call {e.call_id} is not streaming"
    )


def _late_tool(s: LoopState, e: Any, cfg: LoopConfig, fx: FX) -> LoopState:
    """Not in the table: in a phase with no tool in flight, a tool event can only be the late
    answer of a discarded or cancelled slot [R-TOOL-8]; anything else is a driver error."""
    if streaming.find_slot(s, e) is None:
        return s
    # defensive: the phases routed here start a round with no slots (compacting), discard the
    # attempt's slots with its generation (waiting_retry, reactive_compacting), or follow a
    # response with no tool_use (stop_hooks), so no live slot of the current generation exists
    raise IllegalEvent(  # pragma: no cover
        s.phase, e, allowed_events(s.phase), f"tool {e.tool_use_id!r} is not running"
    )


_LATE_MODEL: dict[type, Handler] = {
    ModelBlockReceived: _late_model,
    ModelResponseEnded: _late_model,
    ModelCallFailed: _late_model,
}
_LATE: dict[type, Handler] = {
    **_LATE_MODEL,
    ToolFinished: _late_tool,
    PermissionAnswered: _late_tool,
}


TABLE: dict[Phase, dict[type, Handler]] = {
    "compacting": {
        **_LATE,
        **_ALWAYS,
        CompactionFinished: compaction.on_compaction_finished,
        CompactionFailed: compaction.on_compaction_failed,
    },
    "streaming": {
        **_ALWAYS,
        ModelBlockReceived: streaming.on_block,
        ModelResponseEnded: streaming.on_response_ended,
        ModelCallFailed: failures.on_call_failed,
        ToolFinished: streaming.on_tool_finished,
        PermissionAnswered: streaming.on_permission,
        MessagesInserted: compaction.on_messages_inserted,
    },
    "waiting_retry": {**_LATE, **_ALWAYS, WaitElapsed: failures.on_wait_elapsed},
    "running_tools": {
        **_LATE_MODEL,
        **_ALWAYS,
        ToolFinished: streaming.on_tool_finished,
        PermissionAnswered: streaming.on_permission,
    },
    "draining": {
        **_LATE_MODEL,
        **_ALWAYS,
        ToolFinished: streaming.on_tool_finished,
        PermissionAnswered: streaming.on_permission,
    },
    "reactive_compacting": {
        **_LATE,
        **_ALWAYS,
        CompactionFinished: compaction.on_compaction_finished,
        CompactionFailed: compaction.on_compaction_failed,
    },
    "stop_hooks": {**_LATE, **_ALWAYS, StopHooksFinished: round_end.on_stop_hooks},
    "refreshing_tools": {
        **_LATE,
        **_ALWAYS,
        ToolsRefreshed: tool_round_end.on_tools_refreshed,
    },
    "done": {},  # a finished turn accepts nothing
}


# Where each (phase, event type) of TABLE may lead, as data: a phase the machine is left in
# without a transition, a Terminal (the turn ends), a Continue (the next round begins: it waits
# in ``compacting`` or ``streaming``, or ends at once in ``blocking_limit``), or a ladder (every
# exit of its rungs). A pair not listed stays in its phase (commands, summaries, late answers).
# ``steploop graph --static`` draws the machine from this, TABLE and the ladders;
# tests/reducer/test_graph.py holds that drawing consistent with the one the explorer observes.

AFTER_HOOKS: Final[tuple[Rung, ...]] = ROUND_END[AFTER_HOOKS_AT:]
AFTER_REFRESH: Final[tuple[Rung, ...]] = TOOL_ROUND_END[AFTER_REFRESH_AT:]

NEXT_ROUND: Final[dict[type[Continue], tuple[object, ...]]] = {
    **{kind: START for kind in CONTINUE_TYPES},
    # [G7] with the collapse gate no call meets the blocking limit while auto-compact is on;
    # with auto-compact off, the call that failed met it, and a drain only shrinks the context
    CollapseDrainRetry: ("compacting", "streaming"),
}
"""Where the round a Continue begins may lead (the pipeline's outcomes, START, or fewer)."""

OUTCOMES: Final[dict[Phase, dict[type, tuple[object, ...]]]] = {
    "compacting": {
        # [G7] the call right after a compaction skips the blocking check
        CompactionFinished: ("streaming",),
        CompactionFailed: ("streaming", BlockingLimit),
        Interrupted: (AbortedStreaming,),
    },
    "streaming": {
        ModelBlockReceived: ("streaming",),
        # a response's end withholds no prompt-too-long or media error: those are failures
        ModelResponseEnded: (
            "running_tools",
            TOOL_ROUND_END,
            MOT_LADDER,
            API_ERROR_EXIT,
            PAUSE_RESUME,
            STOP_HOOKS,
        ),
        # a failure is retried (streaming, waiting_retry), ends the turn, or is an API error:
        # withheld (the recovery ladders) or not (the API-error exit)
        ModelCallFailed: (
            "streaming",
            "waiting_retry",
            ModelError,
            ImageError,
            PTL_LADDER,
            MEDIA_LADDER,
            API_ERROR_EXIT,
        ),
        ToolFinished: ("streaming",),
        PermissionAnswered: ("streaming", AbortedStreaming),
        Interrupted: ("draining", AbortedStreaming),
        MessagesInserted: START,
    },
    "waiting_retry": {WaitElapsed: ("streaming",), Interrupted: (AbortedStreaming,)},
    "running_tools": {
        ToolFinished: ("running_tools", TOOL_ROUND_END),
        PermissionAnswered: ("running_tools", TOOL_ROUND_END, AbortedTools),
        Interrupted: ("draining", AbortedTools),
    },
    # a permission answer while draining is a late one: the interrupt gave every call still
    # asking its result [I-2] [I-3]
    "draining": {
        ToolFinished: ("draining", AbortedStreaming, AbortedTools),
        Interrupted: ("draining", AbortedStreaming, AbortedTools),
    },
    "reactive_compacting": {
        CompactionFinished: (ReactiveCompactRetry,),
        CompactionFailed: (ImageError, PromptTooLong),
        Interrupted: (AbortedStreaming,),
    },
    "stop_hooks": {
        StopHooksFinished: (StopHookPrevented, StopHookBlocking, AFTER_HOOKS),
        Interrupted: (StopHookPrevented,),
    },
    "refreshing_tools": {
        ToolsRefreshed: (AFTER_REFRESH,),
        Interrupted: (AbortedTools,),  # [I-7]
    },
    "done": {},
}


_ALLOWED: dict[Phase, tuple[str, ...]] = {
    p: tuple(sorted(t.__name__ for t in row)) for p, row in TABLE.items()
}


def allowed_events(phase: Phase) -> tuple[str, ...]:
    """Names of the event types ``phase`` accepts."""
    return _ALLOWED[phase]


EVENT_TYPES: Final[frozenset[type]] = frozenset(typing.get_args(Event))
_EVENT_NAMES: Final = "an event (" + ", ".join(sorted(t.__name__ for t in EVENT_TYPES)) + ")"


def check_start(request: object, config: object, session: object) -> None:
    """[M-TYPE-1] start()'s arguments are of their types (the request and the session checked
    their fields when they were built)."""
    if not isinstance(request, Request):
        raise WrongType("start(): request", "a Request", request)
    if not isinstance(config, LoopConfig):
        raise WrongType("start(): config", "a LoopConfig", config)
    if session is not None and not isinstance(session, Session):
        raise WrongType("start(): session", "a Session or None", session)


def check_step(state: object, config: object) -> None:
    """[M-TYPE-1] step()'s state and config are of their types; run when the fast check
    (exact classes) fails, so a subclass still passes. The event is checked by the table
    lookup (:func:`_refused`)."""
    if not isinstance(state, LoopState):
        raise WrongType("step(): state", "a LoopState", state)
    if not isinstance(config, LoopConfig):
        raise WrongType("step(): config", "a LoopConfig", config)


def _refused(state: LoopState, event: object) -> Exception:
    """What step() raises for an event no handler of the phase takes: a value that is not an
    event is the wrong type [M-TYPE-1]; an event the phase does not accept is illegal [M-2]."""
    if type(event) not in EVENT_TYPES:
        return WrongType("step(): event", _EVENT_NAMES, event)
    return IllegalEvent(state.phase, event, _ALLOWED[state.phase])


def step(
    state: LoopState, event: Event, config: LoopConfig
) -> tuple[LoopState, tuple[Effect, ...]]:
    """Advance the machine by one event.

    Args:
        state: the current state (from :func:`start` or a previous step).
        event: what the world reported.
        config: the same config the turn was started with.

    Returns:
        The next state and the effects to execute, in order.

    Raises:
        IllegalEvent: the event cannot happen in ``state.phase`` (after a Terminal, none can).
        WrongType: an argument is not of its type (an event, a state, a config) [M-TYPE-1].
    """
    if state.__class__ is not LoopState or config.__class__ is not LoopConfig:
        check_step(state, config)
    handler = TABLE[state.phase].get(type(event))
    if handler is None:
        raise _refused(state, event)
    fx = FX()
    new = handler(state, event, config, fx)
    return new, tuple(fx)


def advance(state: LoopState, event: Event, config: LoopConfig) -> Stepped:
    """:func:`step`, with every transition it passed through, in order:
    ``(state, effects, transitions)``.

    ``transitions`` is empty for most events; it holds the Continue a round ended in (and, when
    the next round ends at once in ``blocking_limit``, that Terminal after it), or the Terminal
    that ended the turn. It is what happened, as data: no consumer needs to compare
    ``state.transition`` objects to find out, and none is lost.
    """
    if state.__class__ is not LoopState or config.__class__ is not LoopConfig:
        check_step(state, config)
    handler = TABLE[state.phase].get(type(event))
    if handler is None:
        raise _refused(state, event)
    fx = FX()
    new = handler(state, event, config, fx)
    return new, tuple(fx), fx.passed
