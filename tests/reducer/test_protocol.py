"""The world protocol (steploop/reducer/protocol.py): requests, answers, cancels, what a state waits for."""

from __future__ import annotations

import random
import typing
from pathlib import Path

import pytest

from steploop.effects.trace import StepRecord, TraceHeader, TraceReader
from steploop.reducer import IllegalEvent, Request, default, step
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    CancelModelCall,
    CancelTools,
    Compact,
    Effect,
    Emit,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    Event,
    Interrupted,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.explore import World, moves
from steploop.reducer.machine import advance, begin
from steploop.reducer.messages import TextBlock, ToolUseSummary, Usage
from steploop.reducer.protocol import (
    REQUESTS,
    UNASKED,
    Ledger,
    answers,
    awaiting,
    closes,
    opens,
    readdress,
    unasked,
    withdrawn,
    withdraws,
)
from tests.reducer.driver import SAFE, Driver

SCENARIOS = Path(__file__).resolve().parents[2] / "specs" / "scenarios"
EFFECTS: tuple[type, ...] = typing.get_args(Effect)
EVENTS: tuple[type, ...] = typing.get_args(Event)


# --- W-PROTO-1 --------------------------------------------------------------------------------


@pytest.mark.spec("W-PROTO-1")
def test_every_effect_and_event_class_is_in_the_table() -> None:
    """Each effect class opens a request of the table, withdraws some, or waits for nothing;
    each event class answers a kind of the table or is sent unasked; nothing is in two rows."""
    openers = [k.effect for k in REQUESTS]
    assert len(openers) == len(set(openers))
    answering = [ev for k in REQUESTS for ev in k.answered_by]
    assert len(answering) == len(set(answering))
    assert set(answering) | set(UNASKED) == set(EVENTS)
    assert set(openers) <= set(EFFECTS)
    assert {k.tag for k in REQUESTS} == {k.effect.TAG for k in REQUESTS}  # type: ignore[attr-defined]


@pytest.mark.spec("W-PROTO-1")
def test_keys_name_the_request_by_its_ids() -> None:
    call = CallModel(
        call_id=3,
        model="m",
        conversation=begin(Request(prompt="x"), default())[0].conversation,
        max_tokens=5,
    )
    cases: list[tuple[Effect, Event, tuple[object, ...]]] = [
        (
            call,
            ModelResponseEnded(call_id=3, model="m", stop_reason="end_turn", usage=Usage()),
            ("call_model", 3),
        ),
        (
            AskPermission(generation=2, tool_use_id="t", name="Read"),
            PermissionAnswered(generation=2, tool_use_id="t", decision="allow"),
            ("ask_permission", 2, "t"),
        ),
        (
            StartTool(generation=2, tool_use_id="t", name="Read"),
            ToolFinished(generation=2, tool_use_id="t", content="ok"),
            ("start_tool", 2, "t"),
        ),
        (Wait(wait_id=4, ms=10), WaitElapsed(wait_id=4), ("wait", 4)),
        (
            Compact(compact_id=5, conversation=call.conversation, trigger="auto", pre_tokens=1),
            CompactionFailed(compact_id=5, reason="x"),
            ("compact", 5),
        ),
        (
            RunStopHooks(hooks_id=6, conversation=call.conversation, stop_hook_active=False),
            StopHooksFinished(hooks_id=6),
            ("run_stop_hooks", 6),
        ),
        (
            SummarizeToolUse(summary_id=7, tool_use_ids=("t",), conversation=call.conversation),
            ToolUseSummaryReady(summary_id=7, summary=None),
            ("summarize_tool_use", 7),
        ),
    ]
    for effect, event, key in cases:
        assert opens(effect) == key
        assert answers(event) == key
        assert not unasked(event)
    assert opens(Emit(item=ToolUseSummary(summary="s", preceding_tool_use_ids=()))) is None
    assert opens(CancelModelCall(call_id=3)) is None
    for ev in (
        Interrupted(kind="hard"),
        CommandQueued(command_id="c", text="t"),
        MessagesInserted(messages=()),
    ):
        assert answers(ev) is None and unasked(ev)


# --- W-PROTO-2 --------------------------------------------------------------------------------


@pytest.mark.spec("W-PROTO-2")
def test_a_model_call_closes_on_its_end_or_failure_only() -> None:
    assert not closes(ModelBlockReceived(call_id=1, block=TextBlock(text="x")))
    assert closes(ModelResponseEnded(call_id=1, model="m", stop_reason="end_turn", usage=Usage()))
    assert closes(ModelCallFailed(call_id=1, kind="unknown"))
    assert closes(ToolFinished(generation=1, tool_use_id="t", content="ok"))
    ledger = Ledger()
    ledger.issue([StartTool(generation=1, tool_use_id="t", name="Read")])
    assert ledger.deliver(ToolFinished(generation=1, tool_use_id="t", content="ok")) is None
    again = ledger.deliver(ToolFinished(generation=1, tool_use_id="t", content="ok"))
    assert again is not None and "again" in again


# --- W-PROTO-3 --------------------------------------------------------------------------------


@pytest.mark.spec("W-PROTO-3", "R-TOOL-8")
def test_cancel_tools_withdraws_the_permission_request_and_the_tool_run() -> None:
    """The machine lists an asking slot in CancelTools and marks it done: a permission answer
    that comes after is a late, discarded one. So CancelTools withdraws both requests."""
    cancel = CancelTools(generation=1, tool_use_ids=("t1", "t2"), reason="user_interrupted")
    assert set(withdraws(cancel)) == {
        ("ask_permission", 1, "t1"),
        ("start_tool", 1, "t1"),
        ("ask_permission", 1, "t2"),
        ("start_tool", 1, "t2"),
    }
    d = Driver(default())
    bash = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)
    d.tool_use("t1", name="Bash", traits=bash, command="make")
    d.allow("t1")
    d.tool_use("t2", traits=SAFE)  # asking
    fx = d.finish_tool("t1", "exit 2", is_error=True)
    (c,) = [e for e in fx if isinstance(e, CancelTools)]
    assert c.tool_use_ids == ("t2",) and d.state.round.slots[1].status == "done"
    assert ("ask_permission", d.generation, "t2") in withdraws(c)
    assert ("ask_permission", d.generation, "t2") not in awaiting(d.state)
    late = PermissionAnswered(generation=c.generation, tool_use_id="t2", decision="allow")
    assert d.phase == "streaming"
    before = d.state
    assert step(before, late, d.cfg) == (before, ())  # discarded


@pytest.mark.spec("W-PROTO-3", "R-SUM-1")
def test_a_summary_supersedes_the_outstanding_one() -> None:
    conv = begin(Request(prompt="x"), default())[0].conversation
    first = SummarizeToolUse(summary_id=1, tool_use_ids=("t",), conversation=conv)
    second = SummarizeToolUse(summary_id=2, tool_use_ids=("u",), conversation=conv)
    assert withdrawn(second, ("summarize_tool_use", 1))
    assert not withdrawn(second, ("summarize_tool_use", 2))
    assert not withdrawn(second, ("wait", 1))
    ledger = Ledger()
    ledger.issue([first, second])
    assert list(ledger.open) == [("summarize_tool_use", 2)]
    late = ledger.deliver(ToolUseSummaryReady(summary_id=1, summary=None))
    assert late is not None and "withdrawn" in late


@pytest.mark.spec("W-PROTO-3")
def test_readdress_keeps_the_tool_use_id() -> None:
    ev = ToolFinished(generation=1, tool_use_id="toolu_1", content="ok", at_ms=5)
    new = readdress(ev, StartTool(generation=4, tool_use_id="other", name="Read"))
    assert new == ToolFinished(generation=4, tool_use_id="toolu_1", content="ok", at_ms=5)
    with pytest.raises(ValueError, match="does not answer"):
        readdress(ev, Wait(wait_id=1, ms=1))
    with pytest.raises(ValueError, match="opens no request"):
        readdress(ev, CancelModelCall(call_id=1))


# --- W-PROTO-4 --------------------------------------------------------------------------------


@pytest.mark.spec("W-PROTO-4")
def test_what_a_state_awaits_is_what_the_machine_accepts() -> None:
    """On random walks: every awaited request was opened by an effect and is neither closed
    nor withdrawn (a Ledger following the walk says so); its answers are accepted; and a
    closing answer to a request of the round that is not awaited is refused or discarded."""
    rng = random.Random(3)
    cfg = default()
    for _ in range(40):
        s, fx, _ = begin(Request(prompt="go"), cfg)
        ledger = Ledger()
        ledger.issue(fx)
        while s.phase != "done":
            waits = awaiting(s)
            assert set(waits) <= set(ledger.open), (waits, list(ledger.open))
            for mv in moves(s, cfg, World()):
                for ev in mv.events[:1]:
                    key = answers(ev)
                    if key is not None:
                        assert key in waits, (mv.label, waits)
            stale: list[Event] = [
                WaitElapsed(wait_id=s.round.pending_id or 1),
                StopHooksFinished(hooks_id=s.round.pending_id or 1),
                CompactionFailed(compact_id=s.round.pending_id or 1, reason="x"),
            ]
            for ev in stale:
                if answers(ev) in waits:
                    continue
                try:
                    nxt, more = step(s, ev, cfg)
                except IllegalEvent:
                    continue
                assert (nxt, more) == (s, ()), ev
            mv = rng.choice(moves(s, cfg, World()))
            for ev in mv.events:
                assert ledger.deliver(ev) is None
                s, fx, _ = advance(s, ev, cfg)
                ledger.issue(fx)
        assert awaiting(s) == ()


@pytest.mark.spec("W-PROTO-4")
@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.jsonl")))
def test_golden_scenarios_await_only_open_requests(name: str) -> None:
    """Along every golden trace, what the state awaits is open in a Ledger of the recorded
    effects and events (and a finished turn awaits nothing)."""
    header: TraceHeader | None = None
    ledger = Ledger()
    for rec in TraceReader(SCENARIOS / f"{name}.jsonl"):
        if isinstance(rec, TraceHeader):
            header = rec
        if not isinstance(rec, StepRecord):
            continue
        assert header is not None
        cfg = header.config
        if rec.event is None:
            s, fx, _ = begin(header.request, cfg, header.session)
        else:
            ledger.deliver(rec.event)
            s, fx, _ = advance(s, rec.event, cfg)
        ledger.issue(fx)
        assert set(awaiting(s)) <= set(ledger.open), (rec.i, awaiting(s), list(ledger.open))
    assert awaiting(s) == ()
