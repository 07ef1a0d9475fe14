"""Every phase × every event class: step() answers or raises exactly IllegalEvent.

One reachable state per phase is built through start()/step(); each of the 14 event classes
is fed in several plausible variants (ids of the current round, of an earlier one, and ids
never issued). The invariants pinned:

* M-5: the result is a ``(LoopState, tuple)`` of Effect instances, or ``IllegalEvent``;
* M-2: pairs outside ``TABLE`` raise ``IllegalEvent`` naming the phase, the event and the
  events the phase accepts; ``done`` accepts nothing;
* M-3: every non-terminal phase accepts ``Interrupted`` (and a hard one ends the turn);
* M-4: a step that returns ``Finish`` returns it last, once, and leaves the phase ``done``.
"""

from __future__ import annotations

import functools
import typing
from typing import Any

import pytest
from attrs import evolve

from steploop.reducer import (
    PHASES,
    TABLE,
    IllegalEvent,
    LoopConfig,
    Request,
    allowed_events,
    default,
    start,
    step,
)
from steploop.reducer.effects import Effect, Finish
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
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.messages import SystemMessage, TextBlock, ToolUseBlock, Usage, UserMessage
from steploop.reducer.state import LoopState, Phase
from steploop.reducer.transitions import (
    AbortedStreaming,
    AbortedTools,
    StopHookPrevented,
)

EVENT_CLASSES: tuple[type, ...] = typing.get_args(Event)
EFFECT_CLASSES: tuple[type, ...] = typing.get_args(Effect)
NON_TERMINAL = tuple(p for p in PHASES if p != "done")
MODEL = "claude-sonnet-4-5"
SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
UNSAFE = ToolTraits(concurrency_safe=False, interrupt="block")
U = Usage(input_tokens=100, output_tokens=10)
BIG = Usage(input_tokens=185_000, output_tokens=10)

# tool-use summaries on, so ToolUseSummaryReady has real ids to match or miss; the tool-list
# refresh on, so every tool round passes through refreshing_tools [R-REFRESH-1]
CFG: LoopConfig = default().with_overrides(
    {"gates.tool_use_summaries": True, "gates.tool_refresh": True}
)


class _Run:
    def __init__(self) -> None:
        self.s, _ = start(Request(prompt="fix the bug"), CFG)

    def __call__(self, e: Any) -> None:
        self.s, _ = step(self.s, e, CFG)

    def block(self, block: Any, tool: ToolTraits | None = None) -> None:
        self(ModelBlockReceived(call_id=self.s.round.call_id, block=block, tool=tool))

    def end(self, stop: str = "end_turn", u: Usage = U) -> None:
        c = self.s.round.call_id
        self(ModelResponseEnded(call_id=c, model=MODEL, stop_reason=stop, usage=u))

    def allow(self, tid: str) -> None:
        g = self.s.round.generation
        self(PermissionAnswered(generation=g, tool_use_id=tid, decision="allow"))

    def tool_round(self, tid: str, u: Usage = U, refresh: bool = True) -> None:
        self.block(ToolUseBlock(id=tid, name="Read", input={"file_path": f"{tid}.ts"}), SAFE)
        self.allow(tid)
        self.end("tool_use", u)
        g = self.s.round.generation
        self(ToolFinished(generation=g, tool_use_id=tid, content="contents"))
        assert self.s.phase == "refreshing_tools"
        if refresh:
            self(ToolsRefreshed(call_id=self.s.round.call_id, tools=("Read",), digest="d"))
            assert self.s.phase in ("streaming", "compacting")


@functools.cache
def reach(phase: str) -> LoopState:
    """A state in ``phase``, reached from start() after at least one full tool round, so
    that earlier call ids and tool generations exist."""
    r = _Run()
    r.tool_round("toolu_a")
    if phase == "compacting":
        r.tool_round("toolu_b", BIG)  # the next round is over the auto-compact threshold
    elif phase == "streaming":
        r.block(TextBlock(text="Reading the test too."))
        r.block(ToolUseBlock(id="toolu_s", name="Read", input={"file_path": "t.ts"}), SAFE)
    elif phase == "waiting_retry":
        r(ModelCallFailed(call_id=r.s.round.call_id, kind="rate_limited", status=429))
    elif phase in ("running_tools", "draining"):
        r.block(ToolUseBlock(id="toolu_e", name="Edit", input={"file_path": "a.ts"}), UNSAFE)
        r.end("tool_use")
        if phase == "draining":
            r.allow("toolu_e")
            r(Interrupted(kind="submit"))
    elif phase == "reactive_compacting":
        r(ModelCallFailed(call_id=r.s.round.call_id, kind="prompt_too_long"))
    elif phase == "refreshing_tools":
        r.tool_round("toolu_r", refresh=False)
    elif phase in ("stop_hooks", "done"):
        r.block(TextBlock(text="Fixed."))
        r.end()
        if phase == "done":
            r(StopHooksFinished(hooks_id=r.s.round.pending_id))
    assert r.s.phase == phase
    return r.s


def _current_tool(s: LoopState) -> str:
    slots = s.round.slots
    pending = [sl.tool_use_id for sl in slots if sl.status != "done"]
    if pending:
        return pending[0]
    return slots[-1].tool_use_id if slots else "toolu_a"


def variants(s: LoopState, cls: type) -> list[tuple[str, Event]]:
    """Plausible instances of ``cls`` for state ``s``: current ids, earlier ids, never-issued
    ids. Labels start with ``cur``, ``old`` or ``new`` accordingly."""
    call = s.round.call_id
    gen = s.round.generation
    tid = _current_tool(s)
    ids = s.ids
    text = TextBlock(text="more")
    if cls is ModelBlockReceived:
        use = ToolUseBlock(id="toolu_n", name="Read", input={"file_path": "n.ts"})
        return [
            ("cur-text", ModelBlockReceived(call_id=call, block=text)),
            ("cur-tool", ModelBlockReceived(call_id=call, block=use, tool=SAFE)),
            ("cur-truncated", ModelBlockReceived(call_id=call, block=use, input_complete=False)),
            ("old", ModelBlockReceived(call_id=call - 1, block=text)),
            ("new", ModelBlockReceived(call_id=call + 1, block=text)),
        ]
    if cls is ModelResponseEnded:
        return [
            (
                f"{label}-{stop}",
                ModelResponseEnded(call_id=c, model=MODEL, stop_reason=stop, usage=U),
            )
            for label, c in (("cur", call), ("old", call - 1), ("new", call + 1))
            for stop in ("end_turn", "max_tokens")
        ]
    if cls is ModelCallFailed:
        out: list[tuple[str, Event]] = [
            (f"cur-{k}", ModelCallFailed(call_id=call, kind=k))
            for k in ("rate_limited", "prompt_too_long", "media", "unknown", "stream_broken")
        ]
        out.append(("old", ModelCallFailed(call_id=call - 1, kind="overloaded")))
        out.append(("new", ModelCallFailed(call_id=call + 1, kind="server_error")))
        return out
    if cls is ToolFinished:
        return [
            ("cur", ToolFinished(generation=gen, tool_use_id=tid, content="ok")),
            (
                "cur-error",
                ToolFinished(generation=gen, tool_use_id=tid, content="x", is_error=True),
            ),
            (
                "cur-hook",
                ToolFinished(generation=gen, tool_use_id=tid, content="h", hook_stopped=True),
            ),
            ("cur-unknown-id", ToolFinished(generation=gen, tool_use_id="toolu_zz", content="?")),
            ("old", ToolFinished(generation=gen - 1, tool_use_id="toolu_a", content="late")),
            ("new", ToolFinished(generation=gen + 1, tool_use_id=tid, content="future")),
        ]
    if cls is PermissionAnswered:
        out = [
            (f"cur-{d}", PermissionAnswered(generation=gen, tool_use_id=tid, decision=d))
            for d in ("allow", "deny_by_rule", "rejected_by_user")
        ]
        out.append(
            ("old", PermissionAnswered(generation=gen - 1, tool_use_id="toolu_a", decision="allow"))
        )
        out.append(
            ("new", PermissionAnswered(generation=gen + 1, tool_use_id=tid, decision="allow"))
        )
        return out
    if cls is CompactionFinished:
        msgs = (
            SystemMessage(id="cb", subtype="compact_boundary", text="compacted"),
            UserMessage(id="cs", content=(TextBlock(text="summary"),), origin="summary"),
        )
        return [
            ("cur", CompactionFinished(compact_id=ids.compact, messages=msgs)),
            ("old", CompactionFinished(compact_id=ids.compact - 1, messages=msgs)),
            ("new", CompactionFinished(compact_id=ids.compact + 1, messages=msgs)),
        ]
    if cls is CompactionFailed:
        return [
            ("cur", CompactionFailed(compact_id=ids.compact)),
            ("old", CompactionFailed(compact_id=ids.compact - 1)),
            ("new", CompactionFailed(compact_id=ids.compact + 1)),
        ]
    if cls is StopHooksFinished:
        h = ids.hooks
        return [
            ("cur-pass", StopHooksFinished(hooks_id=h)),
            ("cur-block", StopHooksFinished(hooks_id=h, blocking_errors=("lint",))),
            ("cur-prevent", StopHooksFinished(hooks_id=h, prevent=True, stop_reason="no")),
            ("cur-error", StopHooksFinished(hooks_id=h, error="hook crashed")),
            ("old", StopHooksFinished(hooks_id=h - 1)),
            ("new", StopHooksFinished(hooks_id=h + 1)),
        ]
    if cls is Interrupted:
        return [("cur-hard", Interrupted(kind="hard")), ("cur-submit", Interrupted(kind="submit"))]
    if cls is WaitElapsed:
        return [
            ("cur", WaitElapsed(wait_id=ids.wait)),
            ("old", WaitElapsed(wait_id=ids.wait - 1)),
            ("new", WaitElapsed(wait_id=ids.wait + 1)),
        ]
    if cls is ToolUseSummaryReady:
        return [
            ("cur", ToolUseSummaryReady(summary_id=s.summary_id, summary="Read a file")),
            ("cur-failed", ToolUseSummaryReady(summary_id=s.summary_id, summary=None)),
            ("old", ToolUseSummaryReady(summary_id=ids.summary - 1, summary="stale")),
            ("new", ToolUseSummaryReady(summary_id=ids.summary + 1, summary="future")),
        ]
    if cls is CommandQueued:
        return [("cur", CommandQueued(command_id="cmd_1", text="also update the docs"))]
    if cls is ToolsRefreshed:
        return [
            ("cur", ToolsRefreshed(call_id=call, tools=("Read",), digest="d")),
            ("old", ToolsRefreshed(call_id=call - 1)),
            ("new", ToolsRefreshed(call_id=call + 1)),
        ]
    if cls is MessagesInserted:
        att = UserMessage(id="ins1", content=(TextBlock(text="expanded"),), is_meta=True)
        return [("cur", MessagesInserted(messages=(att,)))]
    raise AssertionError(cls)  # pragma: no cover


def _check_illegal(exc: IllegalEvent, phase: str, e: Any) -> None:
    """[M-2] the error names the phase, the event and the events the phase accepts."""
    allowed = allowed_events(phase)  # type: ignore[arg-type]
    assert exc.phase == phase
    assert exc.event is e
    assert exc.allowed == allowed
    msg = str(exc)
    assert f"{phase!r}" in msg
    assert type(e).__name__ in msg
    for name in allowed:
        assert name in msg
    if not allowed:
        assert "nothing" in msg


def _check_result(prev: LoopState, out: Any) -> None:
    """[M-5] a (LoopState, tuple of effects); [M-4] Finish is last, once, and phase done."""
    assert isinstance(out, tuple) and len(out) == 2
    state, fx = out
    assert isinstance(state, LoopState)
    assert isinstance(fx, tuple)
    for f in fx:
        assert isinstance(f, EFFECT_CLASSES), f
    finishes = [i for i, f in enumerate(fx) if isinstance(f, Finish)]
    if finishes:
        assert finishes == [len(fx) - 1]
        assert state.phase == "done"
        assert state.transition == fx[-1].terminal
    else:
        assert state.phase != "done" or prev.phase == "done"


def _run(phase: str, cls: type) -> list[tuple[str, Any, Any]]:
    """Feed every variant; returns (label, event, result-or-IllegalEvent)."""
    s = reach(phase)
    out: list[tuple[str, Any, Any]] = []
    for label, e in variants(s, cls):
        try:
            res: Any = step(s, e, CFG)
        except IllegalEvent as exc:
            _check_illegal(exc, phase, e)
            res = exc
        else:
            _check_result(s, res)
        out.append((label, e, res))
    return out


@pytest.mark.spec("M-2", "M-5", "M-4")
@pytest.mark.parametrize("cls", EVENT_CLASSES, ids=lambda c: c.__name__)
@pytest.mark.parametrize("phase", PHASES)
def test_step_answers_or_raises_illegal_event(phase: str, cls: type) -> None:
    """Every variant of every event either gives a well-formed result or IllegalEvent."""
    results = _run(phase, cls)
    assert results
    in_table = cls in TABLE[phase]  # type: ignore[index]
    for label, e, res in results:
        if not in_table:  # [M-2] a pair outside the table is illegal, whatever the ids
            assert isinstance(res, IllegalEvent), (label, e)
        if phase == "done":  # [M-2] after a Terminal every event is illegal
            assert isinstance(res, IllegalEvent), (label, e)


@pytest.mark.spec("M-3")
@pytest.mark.parametrize("phase", PHASES)
def test_interrupted_is_accepted_exactly_in_non_terminal_phases(phase: str) -> None:
    """Interrupted is in the table of every phase but done, and stepping it never raises."""
    assert (Interrupted in TABLE[phase]) == (phase != "done")  # type: ignore[index]
    for label, _e, res in _run(phase, Interrupted):
        assert isinstance(res, IllegalEvent) == (phase == "done"), label


HARD_INTERRUPT_ENDS: dict[str, type] = {
    "compacting": AbortedStreaming,  # I-1
    "waiting_retry": AbortedStreaming,  # I-1
    "streaming": AbortedStreaming,  # I-2
    "running_tools": AbortedTools,  # I-3
    "draining": AbortedTools,  # I-4: the pending Terminal of the interrupted tools
    "reactive_compacting": AbortedStreaming,  # I-5
    "stop_hooks": StopHookPrevented,  # I-6
    "refreshing_tools": AbortedTools,  # I-7
}


@pytest.mark.spec("M-3", "M-4")
@pytest.mark.parametrize("phase", NON_TERMINAL)
def test_hard_interrupt_ends_the_turn_in_every_non_terminal_phase(phase: str) -> None:
    """A hard interrupt ends the turn with the phase's Terminal, Finish last."""
    s = reach(phase)
    state, fx = step(s, Interrupted(kind="hard"), CFG)
    assert state.phase == "done"
    assert isinstance(fx[-1], Finish)
    assert isinstance(fx[-1].terminal, HARD_INTERRUPT_ENDS[phase])
    assert state.transition == fx[-1].terminal
    assert sum(isinstance(f, Finish) for f in fx) == 1


@pytest.mark.spec("M-2")
def test_done_accepts_nothing() -> None:
    """The done row of the table is empty and every event class is illegal there."""
    assert TABLE["done"] == {}
    assert allowed_events("done") == ()
    s = reach("done")
    for cls in EVENT_CLASSES:
        for _label, e in variants(s, cls):
            with pytest.raises(IllegalEvent) as info:
                step(s, e, CFG)
            _check_illegal(info.value, "done", e)


@pytest.mark.spec("M-2")
def test_table_covers_every_phase_and_only_known_events() -> None:
    """TABLE has a row per phase; its keys are event classes; the waits of each phase are
    answered by the event that phase waits for."""
    assert len(EVENT_CLASSES) == 14
    assert set(TABLE) == set(PHASES)
    for phase, row in TABLE.items():
        assert set(row) <= set(EVENT_CLASSES), phase
        assert allowed_events(phase) == tuple(sorted(c.__name__ for c in row))
    waits: dict[Phase, set[type]] = {
        "compacting": {CompactionFinished, CompactionFailed},
        "streaming": {ModelBlockReceived, ModelResponseEnded, ModelCallFailed},
        "waiting_retry": {WaitElapsed},
        "running_tools": {ToolFinished, PermissionAnswered},
        "draining": {ToolFinished, PermissionAnswered},
        "reactive_compacting": {CompactionFinished, CompactionFailed},
        "stop_hooks": {StopHooksFinished},
        "refreshing_tools": {ToolsRefreshed},
    }
    for phase, needed in waits.items():
        assert needed <= set(TABLE[phase]), phase
    for phase in NON_TERMINAL:  # [R-CMD-1], [R-SUM-1], [M-3]
        assert {Interrupted, CommandQueued, ToolUseSummaryReady} <= set(TABLE[phase])


@pytest.mark.spec("M-5")
@pytest.mark.parametrize("phase", NON_TERMINAL)
def test_command_queued_is_recorded_in_every_non_terminal_phase(phase: str) -> None:
    """CommandQueued only records the command: no effect, nothing else changes."""
    s = reach(phase)
    e = CommandQueued(command_id="cmd_1", text="also update the docs")
    assert step(s, e, CFG) == (
        evolve(s, queued_commands=(*s.queued_commands, ("cmd_1", "also update the docs"))),
        (),
    )


@pytest.mark.spec("M-5", "R-TOOL-8")
@pytest.mark.parametrize("phase", NON_TERMINAL)
def test_ids_of_earlier_and_never_issued_calls(phase: str) -> None:
    """Late events of an earlier call or tool generation are no-ops; events for a model call
    or tool generation never issued raise IllegalEvent."""
    s = reach(phase)
    call, gen = s.round.call_id, s.round.generation
    assert call >= 2 and gen >= 2
    late: list[Event] = [
        ModelBlockReceived(call_id=call - 1, block=TextBlock(text="late")),
        ModelResponseEnded(call_id=call - 1, model=MODEL, stop_reason="end_turn", usage=U),
        ModelCallFailed(call_id=call - 1, kind="overloaded"),
        ToolFinished(generation=gen - 1, tool_use_id="toolu_a", content="late"),
        PermissionAnswered(generation=gen - 1, tool_use_id="toolu_a", decision="allow"),
    ]
    for e in late:
        assert step(s, e, CFG) == (s, ()), e
    never: list[Event] = [
        ModelBlockReceived(call_id=call + 1, block=TextBlock(text="?")),
        ModelResponseEnded(call_id=call + 1, model=MODEL, stop_reason="end_turn", usage=U),
        ModelCallFailed(call_id=call + 1, kind="unknown"),
        ToolFinished(generation=gen + 1, tool_use_id="toolu_a", content="?"),
        PermissionAnswered(generation=gen + 1, tool_use_id="toolu_a", decision="allow"),
    ]
    for e in never:
        with pytest.raises(IllegalEvent) as info:
            step(s, e, CFG)
        _check_illegal(info.value, phase, e)


@pytest.mark.spec("M-2")
@pytest.mark.parametrize(
    ("phase", "event"),
    [
        ("compacting", lambda s: CompactionFinished(compact_id=s.ids.compact + 1, messages=())),
        ("compacting", lambda s: CompactionFailed(compact_id=s.ids.compact - 1)),
        ("reactive_compacting", lambda s: CompactionFailed(compact_id=s.ids.compact + 1)),
        ("waiting_retry", lambda s: WaitElapsed(wait_id=s.ids.wait + 1)),
        ("stop_hooks", lambda s: StopHooksFinished(hooks_id=s.ids.hooks + 1)),
        ("refreshing_tools", lambda s: ToolsRefreshed(call_id=s.round.call_id - 1)),
    ],
)
def test_mismatched_pending_ids_are_illegal(phase: str, event: Any) -> None:
    """A completion for a compaction, wait or hook run that is not outstanding is illegal."""
    s = reach(phase)
    e = event(s)
    with pytest.raises(IllegalEvent) as info:
        step(s, e, CFG)
    _check_illegal(info.value, phase, e)


@pytest.mark.spec("M-5")
def test_reached_states_are_the_ones_described() -> None:
    """Each reached state is in its phase, with ids from several rounds and a pending wait."""
    assert reach("compacting").round.pending_id == reach("compacting").ids.compact == 1
    assert reach("waiting_retry").round.pending_id == reach("waiting_retry").ids.wait == 1
    assert reach("reactive_compacting").round.pending_id == 1
    assert reach("stop_hooks").round.pending_id == 1
    assert [sl.status for sl in reach("streaming").round.slots] == ["asking"]
    assert [sl.status for sl in reach("running_tools").round.slots] == ["asking"]
    assert [sl.status for sl in reach("draining").round.slots] == ["running"]
    assert reach("draining").round.pending_terminal == AbortedTools()
    for phase in PHASES:
        assert reach(phase).summary_id >= 1  # a tool-use summary is outstanding


@pytest.mark.spec("R-SUM-1", "M-2")
@pytest.mark.parametrize("summary", ["Read a file", None])
def test_summary_never_requested_is_not_accepted(summary: str | None) -> None:
    """With the summary gate off no summary was requested: a ToolUseSummaryReady (id 0, the
    'none outstanding' value) is illegal or ignored, and no summary is ever shown."""
    cfg = default()
    assert not cfg.gates.tool_use_summaries
    s, _ = start(Request(prompt="fix the bug"), cfg)
    s, _ = step(s, ModelBlockReceived(call_id=1, block=TextBlock(text="Looking.")), cfg)
    assert (s.summary_id, s.ids.summary) == (0, 0)
    e = ToolUseSummaryReady(summary_id=0, summary=summary)
    try:
        out = step(s, e, cfg)
    except IllegalEvent as exc:
        _check_illegal(exc, "streaming", e)
    else:
        assert out == (s, ())


@pytest.mark.spec("R-SUM-1", "M-2")
@pytest.mark.parametrize("phase", NON_TERMINAL)
def test_summary_ids_superseded_are_ignored_and_unissued_are_illegal(phase: str) -> None:
    """A superseded summary id is a no-op; one never issued raises IllegalEvent."""
    s = reach(phase)
    old = ToolUseSummaryReady(summary_id=s.ids.summary - 1, summary="stale")
    assert s.ids.summary - 1 != s.summary_id
    assert step(s, old, CFG) == (s, ())
    new = ToolUseSummaryReady(summary_id=s.ids.summary + 1, summary="future")
    with pytest.raises(IllegalEvent) as info:
        step(s, new, CFG)
    _check_illegal(info.value, phase, new)
