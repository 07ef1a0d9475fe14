"""Holes the full mutation run found (issue 12; scripts/mutation.py --full): behaviours the code
had right but no test pinned. Each test names the mutant it kills in a comment (the mutant's key
as the runner writes it, shortened); each was checked against its mutant (applied by hand, the
test fails, reverted). The survivors that change no behaviour are listed, with the reason, in
specs/mutation-equivalents.txt.

This file: the turn (the token and task budgets, interrupts, summaries, tool rounds and late
answers).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import Compat, Conversation, Gates, IllegalEvent, Session, default
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Finish,
    SummarizeToolUse,
    TaskBudget,
)
from steploop.reducer.events import (
    CompactionFinished,
    Interrupted,
    ModelCallFailed,
    ToolFinished,
    ToolTraits,
    ToolUseSummaryReady,
)
from steploop.reducer.machine import INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_TOOLS
from steploop.reducer.messages import (
    AssistantMessage,
    ErrorInfo,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    Usage,
    UserMessage,
)
from steploop.reducer.protocol import awaiting
from steploop.reducer.transitions import (
    Completed,
    HookStopped,
    ModelError,
    StopHookPrevented,
    TokenBudgetContinuation,
)
from tests.reducer.driver import UNSAFE, Driver
from tests.reducer.holes_full_kit import MODEL, emitted, of, small, tool_round

BLOCKING_SAFE = ToolTraits(concurrency_safe=True, interrupt="block", max_result_chars=None)
SAFE_BASH = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)


def _budget_round(d: Driver, out: int) -> None:
    d.text("work")
    d.end("end_turn", Usage(input_tokens=1_000, output_tokens=out))
    d.hooks_pass()


# --- token budget [C-BUDGET-1] -------------------------------------------------------------------


@pytest.mark.spec("C-BUDGET-1")
def test_a_budget_of_one_token_continues_a_turn_that_produced_none() -> None:
    """A budget of 1 is a budget (> 0): a round with 0 output tokens is under 90% of it."""
    # kills: token_budget | const | ... budget > 0 ... | 0 -> 1
    d = Driver(default(), token_budget=1)
    _budget_round(d, 0)
    assert d.transition == TokenBudgetContinuation()
    nudges = [m for m in emitted(d.last) if isinstance(m, UserMessage) and m.origin == "nudge"]
    assert [n.content for n in nudges] == [
        (TextBlock(text="Stopped at 0% of token target (0 / 1). Keep working — do not summarize."),)
    ]


@pytest.mark.spec("C-BUDGET-1", "M-5")
def test_a_zero_budget_is_no_budget_even_with_a_negative_usage() -> None:
    """token_budget=0 gives no continuation; a (malformed) negative output count from the API
    cannot make it one (the percentage would divide by the zero budget)."""
    # kills: token_budget | cmp | ... budget > 0 ... | '>' -> '>='
    d = Driver(default(), token_budget=0)
    _budget_round(d, -5)
    assert d.transition == Completed()
    assert of(d.effects, Finish)


@pytest.mark.spec("C-BUDGET-1")
@pytest.mark.parametrize(
    ("out", "pct"),
    [(5_050, 51), (5_049, 50), (150, 2), (149, 1)],
    ids=["50.5", "50.49", "1.5", "1.49"],
)
def test_the_budget_nudge_rounds_its_percentage_half_up(out: int, pct: int) -> None:
    """P in the nudge is turn / budget * 100 rounded half up: 5,050 of 10,000 is 51%."""
    # kills: token_budget | const | pct = (turn * 200 + budget) // (2 * budget) | 200 -> 199
    d = Driver(default(), token_budget=10_000)
    _budget_round(d, out)
    assert d.transition == TokenBudgetContinuation()
    (nudge,) = [m for m in emitted(d.last) if isinstance(m, UserMessage) and m.origin == "nudge"]
    text = nudge.content[0]
    assert isinstance(text, TextBlock)
    assert text.text == (
        f"Stopped at {pct}% of token target ({out:,} / 10,000). Keep working — do not summarize."
    )


# --- interrupts [I-2], [I-3], [I-6] ---------------------------------------------------------------


@pytest.mark.spec("I-2", "I-3", "I-4")
@pytest.mark.parametrize("ended", [False, True], ids=["streaming", "running_tools"])
def test_a_draining_round_remembers_it_was_a_submit_interrupt(ended: bool) -> None:
    """While a block tool drains after a submit interrupt, the round's abort_kind is "submit"
    (the state, and so its digest in a trace, says how the round was interrupted)."""
    # kills: interrupt | kwarg | round=evolve(s.round, pending_terminal=AbortedStreaming(), abort_kind=kind) | drop abort_kind=
    d = Driver(default())
    d.tool_use("t1", "Fetch", BLOCKING_SAFE, url="x")
    d.allow("t1")
    if ended:
        d.end("tool_use")
    d.feed(Interrupted(kind="submit"))
    assert d.phase == "draining"
    assert d.state.round.abort_kind == "submit"


@pytest.mark.spec("I-6")
def test_a_hard_interrupt_during_stop_hooks_stores_the_interruption_message() -> None:
    """Interrupted during stop hooks: `[Request interrupted by user]` is emitted and stored, so
    the next turn's conversation ends with it (I-6)."""
    # kills: interrupt | stmt | extra.append(m) | delete extra.append(m)
    d = Driver(default())
    d.reply("answer")
    assert d.phase == "stop_hooks"
    fx = d.feed(Interrupted(kind="hard"))
    (msg,) = [m for m in emitted(fx) if isinstance(m, UserMessage)]
    assert msg.content == (TextBlock(text="[Request interrupted by user]"),)
    assert d.transition == StopHookPrevented()
    assert d.state.session().conversation.messages()[-1] == msg


@pytest.mark.spec("I-4", "I-2", "I-3")
@pytest.mark.parametrize(
    ("ended", "text"),
    [(False, INTERRUPT_MESSAGE), (True, INTERRUPT_MESSAGE_TOOLS)],
    ids=["streaming", "running_tools"],
)
def test_a_hard_interrupt_of_a_submit_drain_adds_the_interruption_message(
    ended: bool, text: str
) -> None:
    """A submit interrupt drains a block tool (no interruption message on submit); a second,
    hard interrupt ends the turn as a hard one: the interruption message is emitted and stored."""
    # kills: interrupt | stmt | s = evolve(s, round=evolve(s.round, abort_kind="hard")) | delete
    d = Driver(default())
    d.tool_use("t1", "Fetch", BLOCKING_SAFE, url="x")
    d.allow("t1")
    if ended:
        d.end("tool_use")
    d.feed(Interrupted(kind="submit"))
    assert d.phase == "draining"
    fx = d.feed(Interrupted(kind="hard"))
    (msg,) = [m for m in emitted(fx) if isinstance(m, UserMessage) and m.origin == "interrupt"]
    assert msg.content == (TextBlock(text=text),)
    assert d.state.round.abort_kind == "hard"
    assert d.state.session().conversation.messages()[-1] == msg


def _summary_round(d: Driver) -> None:
    tool_round(d, "t1", "out t1", Usage(input_tokens=100, output_tokens=10))
    assert [e.summary_id for e in of(d.effects, SummarizeToolUse)] == [1]


def _summaries(fx: Any) -> list[ToolUseSummary]:
    return [m for m in emitted(fx) if isinstance(m, ToolUseSummary)]


@pytest.mark.spec("R-SUM-1", "W-PROTO-4")
def test_a_failed_summary_is_no_longer_awaited_and_a_second_answer_is_late() -> None:
    """Once the summary failed (None) the machine waits for it no more (W-PROTO-4), and a
    second answer for the same request is late: ignored, nothing emitted."""
    # kills: on_summary_ready | kwarg | return evolve(s, summary_id=0, summary_tool_ids=()) | drop summary_id=
    # kills: on_summary_ready | const | return evolve(s, summary_id=0, summary_tool_ids=()) | 0 -> 1
    d = Driver(default(gates=Gates(tool_use_summaries=True)))
    _summary_round(d)
    assert ("summarize_tool_use", 1) in awaiting(d.state)
    assert d.feed(ToolUseSummaryReady(summary_id=1, summary=None)) == ()
    assert ("summarize_tool_use", 1) not in awaiting(d.state)
    before = d.state
    assert d.feed(ToolUseSummaryReady(summary_id=1, summary="late")) == ()
    assert d.state == before and d.late
    d.reply("done")
    d.hooks_pass()
    assert _summaries(d.effects) == []
    assert isinstance(d.finished(), Finish)


@pytest.mark.spec("R-SUM-1", "W-PROTO-4")
def test_a_failed_summary_leaves_the_state_an_emitted_one_leaves() -> None:
    """A summary that failed leaves nothing of itself in the state: once the next response
    ended, the state equals that of the same turn whose summary was emitted (no outstanding
    summary, no tool ids kept), and neither waits for a summary."""
    # kills: on_summary_ready | kwarg | return evolve(s, summary_id=0, summary_tool_ids=()) | drop summary_tool_ids=
    # kills: emit_ready_summary | const | return evolve(s, summary_text=None, summary_id=0, summary_tool_ids=()) | 0 -> -1
    states = []
    for summary in (None, "Read a file"):
        d = Driver(default(gates=Gates(tool_use_summaries=True)))
        _summary_round(d)
        d.feed(ToolUseSummaryReady(summary_id=1, summary=summary))
        fx = d.reply("done")
        assert len(_summaries(fx)) == (summary is not None)
        assert not any(key[0] == "summarize_tool_use" for key in awaiting(d.state))
        states.append(d.state)
    failed, shown = states
    assert (failed.summary_id, failed.summary_tool_ids) == (0, ())
    assert failed == shown


@pytest.mark.spec("Q-5", "Q-12", "R-TOOL-6")
def test_out_of_order_results_never_overtake_an_executing_non_safe_tool() -> None:
    """Under Q-5 a finished result may overtake an executing safe tool, never a non-safe one: a
    Bash call asked mid-stream (Q-12), then an unknown tool's error result; that result waits
    until the Bash result is out, then follows it."""
    # kills: release | boolop | elif not out_of_order or ( | or: drop sl.status in ('asking', 'running') and (not sl.tr…
    cfg = default(
        compat=Compat(out_of_order_safe_results=True, nonsafe_tools_start_mid_stream=True)
    )
    d = Driver(cfg)
    fx = d.tool_use("b1", "Bash", UNSAFE, command="ls")
    assert [a.tool_use_id for a in of(fx, AskPermission)] == ["b1"]
    fx = d.block(ToolUseBlock(id="u2", name="Nope", input={}), tool=None)
    assert [m for m in emitted(fx) if isinstance(m, UserMessage)] == []
    d.allow("b1")
    d.end("tool_use")
    fx = d.finish_tool("b1", "listing")
    results = [
        b.tool_use_id
        for m in emitted(fx)
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert results == ["b1", "u2"]


# --- the task budget's carry-over [R-TASK-1] --------------------------------------------------------


@pytest.mark.spec("R-TASK-1")
def test_the_task_budget_carry_skips_a_synthetic_record_without_an_api_error() -> None:
    """A resumed conversation ends with a "<synthetic>" assistant record that is no API error
    (a transcript's "No response requested.", usage all zeros): it is no real usage, so the
    first compaction subtracts the last real response's input + output (30,500), not its 0."""
    # kills: _task_budget_carry | boolop | if m.api_error is None and m.model != SYNTHETIC_MODEL: | and: drop m.model != SYNTHETIC_MODEL
    real = AssistantMessage(
        id="a1",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text="done"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=30_000, output_tokens=500),
    )
    synthetic = AssistantMessage(
        id="a2",
        response_id="r2",
        model="<synthetic>",
        content=(TextBlock(text="No response requested."),),
        stop_reason="stop_sequence",
        usage=Usage(input_tokens=0, output_tokens=0),
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    conv = Conversation.of([prompt, real, synthetic])
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg, session=Session(conversation=conv), task_budget=100_000)
    (compact,) = d.of(Compact)  # 30,500 and the new prompt: over the 29,000 threshold
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=summary))
    assert of(fx, CallModel)[0].task_budget == TaskBudget(total=100_000, remaining=69_500)


# --- late answers for sibling-cancelled calls [R-TOOL-7], [R-TOOL-8] ---------------------------------


@pytest.mark.spec("R-TOOL-8", "R-TOOL-7")
def test_a_late_answer_for_a_later_call_cancelled_by_a_sibling_error_is_a_no_op() -> None:
    """A call that arrives after a sibling's error gets the sibling result at once: it has a
    synthetic result, so a permission answer or a tool result for it is a legal no-op (R-TOOL-8),
    not an IllegalEvent."""
    # kills: on_block | kwarg | slot = evolve( | drop synthetic=
    d = Driver(default())
    d.tool_use("t1", name="Bash", traits=SAFE_BASH, command="ls -la")
    d.allow("t1")
    d.finish_tool("t1", "boom", is_error=True)
    fx = d.tool_use("t2")  # a later call of the same response
    results = [
        b
        for m in emitted(fx)
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [
        (b.tool_use_id, b.content.startswith("<tool_use_error>Cancelled")) for b in results
    ] == [("t2", True)]
    before = d.state
    assert d.allow("t2") == ()
    assert d.finish_tool("t2", "late") == ()
    assert d.state == before
    assert len(d.late) == 2


# --- a queued non-safe call does not hold back results, [R-TOOL-5] --------------------------


@pytest.mark.spec("Q-5", "R-TOOL-5")
def test_under_q5_a_queued_non_safe_call_does_not_hold_back_a_later_result() -> None:
    """Under Q-5 only an executing non-safe call holds results back: a Bash call still queued
    mid-stream (not asked: Q-12 off) lets an unknown tool's error result after it out at once;
    in tool_use order (Q-5 off) it waits."""
    # kills: release | boolop | sl.status in ("asking", "running") and not sl.traits.concurrency_safe | and: drop sl.status in ('asking', 'running')
    for out_of_order in (True, False):
        d = Driver(default(compat=Compat(out_of_order_safe_results=out_of_order)))
        assert of(d.tool_use("b1", "Bash", UNSAFE, command="ls"), AskPermission) == []
        fx = d.block(ToolUseBlock(id="u2", name="Nope", input={}), tool=None)
        released = [
            b.tool_use_id
            for m in emitted(fx)
            if isinstance(m, UserMessage)
            for b in m.content
            if isinstance(b, ToolResultBlock)
        ]
        assert released == (["u2"] if out_of_order else [])


# --- R-TASK-1, a record without usage ------------------------------------------------------------


@pytest.mark.spec("R-TASK-1")
def test_the_task_budget_carry_passes_over_a_record_without_usage() -> None:
    """A resumed conversation ending with an assistant record that carries no usage (an
    interrupted response's records, a transcript's): the carry passes over it to the last
    response with usage (30,500 subtracted) instead of reading its missing numbers."""
    # kills: _task_budget_carry | boolop | if isinstance(m, AssistantMessage) and m.usage is not None: | and: drop m.usage is not None
    real = AssistantMessage(
        id="a1",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text="done"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=30_000, output_tokens=500),
    )
    partial = AssistantMessage(
        id="a2", response_id="r2", model=MODEL, content=(TextBlock(text="half an ans"),)
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    conv = Conversation.of([prompt, real, partial])
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg, session=Session(conversation=conv), task_budget=100_000)
    (compact,) = d.of(Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=summary))
    assert of(fx, CallModel)[0].task_budget == TaskBudget(total=100_000, remaining=69_500)


# --- Q-10 drops a summary on an abort only, [R-SUM-1] ----------------------------------------


@pytest.mark.spec("Q-10", "R-SUM-1")
@pytest.mark.parametrize("flagged", [False, True], ids=["default", "q10"])
def test_a_turn_ending_in_a_model_error_emits_the_ready_summary_even_under_q10(
    flagged: bool,
) -> None:
    """A summary that became ready while the next response streamed is emitted before Finish when
    that call fails for good (a model error): that is no abort, so Q-10 does not drop it."""
    # kills: finish | boolop | aborted and cfg.compat.summary_dropped_on_abort | and: drop aborted
    cfg = default(
        gates=Gates(tool_use_summaries=True), compat=Compat(summary_dropped_on_abort=flagged)
    )
    d = Driver(cfg)
    _summary_round(d)
    d.text("working")
    assert d.feed(ToolUseSummaryReady(summary_id=1, summary="Read a file")) == ()  # held
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="unknown", message="weird"))
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, ModelError)
    assert _summaries(fx) == [ToolUseSummary(summary="Read a file", preceding_tool_use_ids=("t1",))]


# --- R-TASK-1: the last response, not the first -------------------------------------------------------


@pytest.mark.spec("R-TASK-1")
def test_the_task_budget_carry_takes_the_last_response_with_usage() -> None:
    """Two earlier responses with usage: the compaction subtracts the last one's input + output
    (30,500), not the first's (10,100)."""
    # kills: _task_budget_carry | stmt | break | delete break
    first = AssistantMessage(
        id="a1",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text="one"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=10_000, output_tokens=100),
    )
    last = attrs.evolve(
        first, id="a2", response_id="r2", usage=Usage(input_tokens=30_000, output_tokens=500)
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    again = UserMessage(id="q", content=(TextBlock(text="more"),))
    conv = Conversation.of([prompt, first, again, last])
    d = Driver(
        small(history_snip=False, context_collapse=False),
        session=Session(conversation=conv),
        task_budget=100_000,
    )
    (compact,) = d.of(Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=summary))
    assert of(fx, CallModel)[0].task_budget == TaskBudget(total=100_000, remaining=69_500)


# --- the compacting round's generation [R-TOOL-8] ----------------------------------------------------


@pytest.mark.spec("R-TOOL-8", "R-CTX-4")
def test_while_compacting_a_tool_event_of_a_generation_never_made_is_refused() -> None:
    """While an auto-compaction runs, a late result of the last round's generation is a no-op,
    and one naming the next generation (no call has made it yet) raises IllegalEvent."""
    # kills: begin_round | const | round=Round(call_id=s.ids.call, generation=s.ids.generation + 1, pending_id=cid), | 1 -> 2
    d = Driver(small(history_snip=False, context_collapse=False))
    old = d.generation
    tool_round(d, "t1", "ok", Usage(input_tokens=30_000))
    assert d.phase == "compacting"
    before = d.state
    assert d.feed(ToolFinished(generation=old, tool_use_id="t1", content="late")) == ()
    assert d.state == before
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=old + 1, tool_use_id="t1", content="x"))


# --- Q-3's discard forgets a hook stop of the dropped blocks [Q-3], [T-HOOK-1] ------------------------


@pytest.mark.spec("Q-3", "T-HOOK-1", "R-RETRY-5")
def test_a_hook_stop_of_a_call_q3_dropped_does_not_stop_the_turn() -> None:
    """Under Q-3, after a streaming fallback, a later block drops the blocks before it, with their
    calls: a hook stop of a dropped call goes with it, so the round's remaining call finishing
    normally continues the turn instead of ending it hook_stopped."""
    # kills: discard_attempt | kwarg | round=evolve( | drop hook_stop=
    d = Driver(default(compat=Compat(sticky_streaming_fallback=True)))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="stream_broken"))
    assert d.state.round.sticky_fallback
    d.tool_use("t1")
    d.allow("t1")
    d.finish_tool("t1", "ok", hook_stopped=True, hook_stop_reason="stop here")
    assert d.state.round.hook_stop
    d.tool_use("t2")  # t1 is dropped, with its hook stop
    assert [sl.tool_use_id for sl in d.state.round.slots] == ["t2"]
    d.allow("t2")
    d.end("tool_use")
    fx = d.finish_tool("t2", "fine")
    assert of(fx, CallModel) and not of(fx, Finish)
    assert not isinstance(d.state.transition, HookStopped)


@pytest.mark.spec("R-TASK-1")
def test_the_task_budget_carry_skips_an_api_error_record_naming_a_model() -> None:
    """An API-error record from outside that names a real model (and carries usage) is no real
    usage either: the carry passes over it to the last real response (30,500)."""
    # kills: _task_budget_carry | boolop | if m.api_error is None and m.model != SYNTHETIC_MODEL: | and: drop m.api_error is None
    real = AssistantMessage(
        id="a1",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text="done"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=30_000, output_tokens=500),
    )
    failed = attrs.evolve(
        real,
        id="a2",
        response_id="r2",
        content=(TextBlock(text="API Error: overloaded"),),
        usage=Usage(input_tokens=0, output_tokens=0),
        api_error=ErrorInfo(kind="overloaded", message="API Error: overloaded"),
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    conv = Conversation.of([prompt, real, failed])
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg, session=Session(conversation=conv), task_budget=100_000)
    (compact,) = d.of(Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=summary))
    assert of(fx, CallModel)[0].task_budget == TaskBudget(total=100_000, remaining=69_500)


@pytest.mark.spec("R-TASK-1")
def test_a_compaction_before_any_response_subtracts_nothing() -> None:
    """The first round of a fresh session compacts (a long prompt): no response with usage is in
    the conversation, so nothing is subtracted: remaining is the whole budget."""
    # kills: _task_budget_carry | const | final = 0 | 0 -> 1
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg, prompt="word " * 30_000, task_budget=100_000)
    (compact,) = d.of(Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=summary))
    assert of(fx, CallModel)[0].task_budget == TaskBudget(total=100_000, remaining=100_000)
