"""Holes an independent mutation run found (issue 12): behaviours the code had right but no test
pinned. Each test names the mutant it kills in a comment; all go through start()/step() only.

This file: interrupts, context, smaller ones and what this repository's own mutation run found.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import Conversation, Gates, RetryPolicy, Session, default
from steploop.reducer.config import Compat
from steploop.reducer.effects import CallModel, CancelTools, Compact, Emit, Wait
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import (
    CompactionFinished,
    Interrupted,
    ModelResponseEnded,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    Usage,
    UserMessage,
)
from steploop.reducer.texts import INTERRUPTED_TOOL_RESULT  # the executor is on: I-2
from steploop.reducer.transitions import Completed, TokenBudgetContinuation
from tests.reducer.driver import SAFE, UNSAFE, Driver
from tests.reducer.holes_kit import (
    FALLBACK,
    _budget_round,
    emitted,
    fail,
    of,
    results_in,
    rounds,
    small,
    tool_round,
)

BLOCKING_SAFE = ToolTraits(concurrency_safe=True, interrupt="block", max_result_chars=None)


def api_error_texts(items: Any) -> list[str]:
    return [
        b.text
        for m in items
        if isinstance(m, AssistantMessage) and m.api_error is not None
        for b in m.content
        if isinstance(b, TextBlock)
    ]


# --- interrupts [I-*] ----------------------------------------------------------------------------


@pytest.mark.spec("I-2", "R-PERM-1")
@pytest.mark.parametrize("kind", ["hard", "submit"])
def test_an_interrupt_cancels_the_tool_waiting_for_permission(kind: str) -> None:
    """A call whose permission prompt is open counts as executing: the interrupt cancels it (I-2)."""
    # kills: "asking" dropped from the statuses an interrupt cancels
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")  # AskPermission, never answered
    fx = d.feed(Interrupted(kind=kind))  # type: ignore[arg-type]
    assert of(fx, CancelTools) == [
        CancelTools(generation=d.generation, tool_use_ids=("t1",), reason="user_interrupted")
    ]


@pytest.mark.spec("I-2", "I-3")
@pytest.mark.parametrize("ended", [False, True], ids=["streaming", "running_tools"])
def test_an_interrupt_cancels_only_calls_that_started(ended: bool) -> None:
    """CancelTools names the running call, never a queued one that never started (I-2, I-3)."""
    # kills: the started-status test in the interrupt's cancel list negated or forced
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.tool_use("u1", "Edit", UNSAFE, file_path="b")  # queued behind t1
    d.tool_use("u2", "Edit", UNSAFE, file_path="c")  # queued too
    if ended:
        d.end("tool_use")
        assert d.phase == "running_tools"
    fx = d.feed(Interrupted(kind="hard"))
    assert of(fx, CancelTools) == [
        CancelTools(generation=d.generation, tool_use_ids=("t1",), reason="user_interrupted")
    ]
    assert results_in(emitted(fx)) == [
        ("t1", INTERRUPTED_TOOL_RESULT),
        ("u1", INTERRUPTED_TOOL_RESULT),
        ("u2", INTERRUPTED_TOOL_RESULT),
    ]


@pytest.mark.spec("I-2", "I-3", "I-4")
@pytest.mark.parametrize("ended", [False, True], ids=["streaming", "running_tools"])
def test_a_submit_interrupt_emits_synthetic_results_before_the_drain(ended: bool) -> None:
    """A submit interrupt emits the cancelled calls' results at once, while a block tool drains (I-4)."""
    # kills: the release after the abort deleted (results would wait for the drain to end)
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")  # interrupt="cancel"
    d.allow("t1")
    d.tool_use("t2", "Fetch", BLOCKING_SAFE, url="x")  # interrupt="block": keeps running
    d.allow("t2")
    if ended:
        d.end("tool_use")
    fx = d.feed(Interrupted(kind="submit"))
    assert d.phase == "draining"
    assert results_in(emitted(fx)) == [("t1", INTERRUPTED_TOOL_RESULT)]
    fx = d.finish_tool("t2", "fetched")
    assert results_in(emitted(fx)) == [("t2", "fetched")]


@pytest.mark.spec("Q-6", "T-ABORT-TOOLS-1")
@pytest.mark.parametrize("flagged", [False, True], ids=["default", "Q-6"])
def test_q6_an_interrupted_round_keeps_the_withheld_mot_error(flagged: bool) -> None:
    """Under Q-6 an interrupted max-tokens tool round stores its withheld error; by default it is dropped (Q-6)."""
    # kills: the withheld error dropped from the aborted round's commit under Q-6
    cfg = default(compat=Compat(unyielded_nudges=flagged))
    d = Driver(cfg)
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.end("max_tokens")
    assert d.phase == "running_tools"
    d.feed(Interrupted(kind="hard"))
    stored = [
        m.api_error.kind
        for m in d.state.conversation.messages()
        if isinstance(m, AssistantMessage) and m.api_error is not None
    ]
    assert stored == (["max_output_tokens"] if flagged else [])


# --- context -------------------------------------------------------------------------------------


@pytest.mark.spec("S-COLLAPSE-1")
def test_a_second_collapse_replaces_the_earlier_stub() -> None:
    """A collapse over a conversation with an earlier stub leaves one stub counting both (S-COLLAPSE-1)."""
    # kills: the earlier stub kept in the head (stale stubs pile up)
    cfg = small(history_snip=False, auto_compact=False)
    d = Driver(cfg)
    rounds(d, 5, 36_500)  # first collapse: 2 messages folded
    fx = rounds(d, 3, 36_500, first=6)  # over the threshold again: second collapse
    sent = of(fx, CallModel)[0].conversation.messages()
    stubs = [m for m in sent if isinstance(m, UserMessage) and m.origin == "collapse"]
    assert len(stubs) == 1
    text = stubs[0].content[0]
    assert isinstance(text, TextBlock) and text.text.startswith("[Context collapsed: ")
    assert int(text.text.split(" ")[2]) > 2  # the first collapse's 2 messages are counted in
    assert sent.index(stubs[0]) == 1  # right after the prompt


@pytest.mark.spec("R-TOK-1", "R-CTX-4", "S-SNIP-1")
def test_compaction_forgets_tokens_freed_by_snip() -> None:
    """Tokens freed by snip are not subtracted from the conversation a compaction put in place (R-TOK-1)."""
    # kills: `tokens_freed=0` removed from the compaction's replacement of the conversation
    d = Driver(small(context_collapse=False))
    fx = rounds(d, 6, 40_000)  # snip frees 2 segments, still over auto-compact: Compact
    assert of(fx, Compact) and d.state.tokens_freed > 0
    kept = (
        UserMessage(id="c1", content=(TextBlock(text="summary " + "y" * 40_000),), is_meta=True),
    )
    d.feed(CompactionFinished(compact_id=of(fx, Compact)[0].compact_id, messages=kept))
    assert d.state.tokens_freed == 0
    fx = fail(d, "prompt_too_long", status=400)
    (reactive,) = of(fx, Compact)
    assert reactive.pre_tokens == Conversation.of(kept).token_count()


# --- smaller ones --------------------------------------------------------------------------------


@pytest.mark.spec("R-RETRY-4")
def test_giving_up_tombstones_the_failed_attempt() -> None:
    """Retries exhausted: the failed attempt's streamed blocks are tombstoned (R-RETRY-4)."""
    # kills: `tombstone=True` negated in the give-up path
    d = Driver(default(retry=RetryPolicy(max_retries=0)))
    d.text("half an answer")
    (streamed,) = [m for m in d.emitted() if isinstance(m, AssistantMessage)]
    fx = fail(d, "rate_limited", status=429)
    assert Emit(item=Tombstone(message_id=streamed.id)) in fx
    assert d.finished().terminal == Completed()  # type: ignore[union-attr]


def _overloaded_to_fallback(d: Driver) -> tuple[Any, ...]:
    fx: tuple[Any, ...] = ()
    for _ in range(3):
        fx = fail(d, "overloaded", status=529)
        if of(fx, Wait):
            d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    return fx


@pytest.mark.spec("R-RETRY-2")
def test_fallback_strips_thinking_but_keeps_the_rest_of_a_message() -> None:
    """The fallback's strip keeps a multi-block message's other blocks and drops a thinking-only one (R-RETRY-2)."""
    # kills: the kept-blocks test in the thinking strip negated or its append deleted
    mixed = AssistantMessage(
        id="a1",
        response_id="r-old",
        model="claude-sonnet-4-5",
        content=(ThinkingBlock(thinking="hmm", signature="sig"), TextBlock(text="kept text")),
    )
    only = AssistantMessage(
        id="a2",
        response_id="r-old2",
        model="claude-sonnet-4-5",
        content=(RedactedThinkingBlock(data="xx"),),
    )
    prior: list[Message] = [UserMessage(id="p0", content=(TextBlock(text="hi"),)), mixed, only]
    d = Driver(default(fallback_model=FALLBACK), session=Session(conversation=Conversation.of(prior)))
    fx = _overloaded_to_fallback(d)
    (call,) = of(fx, CallModel)
    assert call.model == FALLBACK
    sent = call.conversation.messages()
    assert attrs.evolve(mixed, content=(TextBlock(text="kept text"),)) in sent
    assert all(m.id != "a2" for m in sent)


@pytest.mark.spec("T-IMAGE-1", "T-MODEL-1", "R-MEDIA-1")
@pytest.mark.parametrize(
    ("kind", "message", "result", "error"),
    [
        ("image_client", "", "Image error", "Image could not be processed"),
        ("image_client", "bad png", "bad png", "bad png"),
        ("unknown", "", "Unknown model error", "API Error: Unknown model error"),
        ("unknown", "bad", "bad", "API Error: bad"),
        ("media", "", None, "API Error: media rejected"),
        ("media", "too big", None, "API Error: too big"),
    ],
)
def test_an_empty_api_message_gets_the_documented_defaults(
    kind: str, message: str, result: str | None, error: str
) -> None:
    """A failure with an empty message gets the documented default texts; a given message wins (T-IMAGE-1)."""
    # kills: the `or "<default>"` operand dropped (empty texts), or the message operand dropped
    d = Driver(default(gates=Gates(reactive_compact=False)))  # media surfaces at once
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    fx = fail(d, kind, message=message)
    assert results_in(emitted(fx)) == ([("t1", result)] if result is not None else [])
    assert api_error_texts(emitted(fx)) == [error]


@pytest.mark.spec("R-CALL-1")
@pytest.mark.parametrize("source", ["sdk", "agent:explore", "compact"])
def test_call_model_carries_the_query_source(source: str) -> None:
    """Every CallModel names the config's query_source, so the shell can tell sources apart (R-CALL-1)."""
    # kills: the `query_source=` keyword removed from CallModel
    d = Driver(default(query_source=source))
    assert [c.query_source for c in of(d.effects, CallModel)] == [source]


@pytest.mark.spec("R-RETRY-1")
@pytest.mark.parametrize(("after", "ms"), [(0, 0), (-5, 0), (1, 1), (2_500, 2_500)])
def test_retry_after_zero_waits_zero_ms(after: int, ms: int) -> None:
    """A Retry-After of 0 (or a negative one) waits 0 ms; a positive one waits exactly that (R-RETRY-1)."""
    # kills: the floor of the retry-after delay moved from 0 to 1 (or -1)
    d = Driver(default())
    fx = fail(d, "rate_limited", status=429, retry_after_ms=after)
    assert [w.ms for w in of(fx, Wait)] == [ms]


# --- found by this repository's own mutation run (scripts/mutation.py) ---------------------------


@pytest.mark.spec("C-BUDGET-1")
def test_diminishing_returns_count_from_exactly_three_continuations() -> None:
    """With exactly 3 continuations and two deltas under 500 the turn stops (C-BUDGET-1: continuations >= 3)."""
    # kills: `continuation_count >= cfg.budget_min_continuations` turned into `>`
    d = Driver(default(), token_budget=100_000)
    for out in (10_000, 100, 100):  # three continuations; the last two deltas small
        _budget_round(d, out)
        assert d.transition == TokenBudgetContinuation()
    assert d.state.budget.continuation_count == 3
    _budget_round(d, 100)
    assert d.transition == Completed()


@pytest.mark.spec("R-CTX-4")
def test_tool_rounds_after_a_compaction_count_in_the_tracking() -> None:
    """After an auto-compaction each tool round adds one to tracking.turn_counter (R-CTX-4)."""
    # kills: the turn_counter increment deleted from the tool path
    d = Driver(small(history_snip=False, context_collapse=False))
    fx = tool_round(d, "t1", "ok", Usage(input_tokens=30_000, output_tokens=0))  # over 29,000
    (c,) = of(fx, Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    d.feed(CompactionFinished(compact_id=c.compact_id, messages=summary))
    assert d.state.tracking.compacted and d.state.tracking.turn_counter == 0
    tool_round(d, "t2", "ok", Usage(input_tokens=1_000, output_tokens=0))
    tool_round(d, "t3", "ok", Usage(input_tokens=1_000, output_tokens=0))
    assert d.state.tracking.turn_counter == 2
    # without a compaction nothing counts
    d = Driver(default())
    tool_round(d, "t1", "ok", Usage(input_tokens=1_000, output_tokens=0))
    assert d.state.tracking.turn_counter == 0


@pytest.mark.spec("R-TOOL-7")
@pytest.mark.parametrize(("length", "shown"), [(40, "x" * 40), (41, "x" * 40 + "…")])
def test_a_sibling_error_names_a_40_char_command_whole(length: int, shown: str) -> None:
    """The sibling-cancel text shows a command of up to 40 characters whole, longer ones cut with … (R-TOOL-7)."""
    # kills: `len(v) <= 40` turned into `<` in the call description
    bash = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)
    d = Driver(default())
    d.tool_use("b1", "Bash", bash, command="x" * length)
    d.allow("b1")
    d.tool_use("r1", "Read", SAFE, file_path="a")
    d.allow("r1")
    fx = d.finish_tool("b1", "boom", is_error=True)
    want = f"<tool_use_error>Cancelled: parallel tool call Bash({shown}) errored</tool_use_error>"
    assert ("r1", want) in results_in(emitted(fx))


@pytest.mark.spec("R-TOOL-8", "M-5")
def test_a_second_result_for_a_finished_call_is_a_driver_error() -> None:
    """A ToolFinished for a call that already finished (not a discarded one) raises IllegalEvent (R-TOOL-8)."""
    # kills: the `sl.synthetic` operand dropped from the late-result test of the slot lookup
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.tool_use("t2", "Read", SAFE, file_path="b")
    d.allow("t2")
    d.finish_tool("t1", "a")
    with pytest.raises(IllegalEvent, match="t1"):
        d.finish_tool("t1", "a again")


@pytest.mark.spec("R-RETRY-4")
def test_giving_up_with_an_empty_message_names_the_failure_kind() -> None:
    """Retries exhausted on a failure with no message: the error text names its kind (R-RETRY-4)."""
    # kills: the `or e.kind` operand dropped from the give-up error text
    d = Driver(default(retry=RetryPolicy(max_retries=0)))
    fx = fail(d, "rate_limited", status=429)
    assert api_error_texts(emitted(fx)) == ["API Error: rate_limited"]


@pytest.mark.spec("R-MODEL-1")
def test_a_response_ended_without_a_model_name_keeps_the_calls_model() -> None:
    """A response end that names no model leaves the records on the model that was called (R-MODEL-1)."""
    # kills: the no-model fast path of the served-model stamping deleted (records stamped "")
    d = Driver(default())
    d.text("hi")
    d.feed(ModelResponseEnded(call_id=d.call_id, model="", stop_reason="end_turn", usage=Usage(input_tokens=1, output_tokens=1)))
    d.hooks_pass()
    models = [m.model for m in d.state.conversation.messages() if isinstance(m, AssistantMessage)]
    assert models == ["claude-sonnet-4-5"]


@pytest.mark.spec("R-RETRY-4")
def test_giving_up_leaves_the_attempt_ended() -> None:
    """Retries exhausted: the final state's round is ended, its error message stored (R-RETRY-4)."""
    # kills: `ended=True` dropped from the give-up's round update
    d = Driver(default(retry=RetryPolicy(max_retries=0)))
    fail(d, "rate_limited", status=429)
    assert d.phase == "done" and d.state.round.ended
    assert d.state.round.error_message is not None


@pytest.mark.spec("M-2", "M-5")
def test_an_event_of_the_current_call_after_its_stream_is_a_driver_error() -> None:
    """Once the response ended, another event of the same call raises IllegalEvent (M-2)."""
    # kills: `e.call_id < s.round.call_id` turned into `<=` for model events outside streaming
    d = Driver(default())
    d.tool_use("u1", "Edit", UNSAFE, file_path="a")
    d.end("tool_use")
    assert d.phase == "running_tools"
    late = ModelResponseEnded(call_id=d.call_id, model="m", stop_reason="end_turn", usage=Usage(input_tokens=1, output_tokens=1))
    with pytest.raises(IllegalEvent, match="is not streaming"):
        d.feed(late)


@pytest.mark.spec("T-MAXTURNS-1", "C-NEXT-1")
@pytest.mark.parametrize("limit", [1, 2, 3])
def test_max_turns_allows_exactly_that_many_rounds(limit: int) -> None:
    """max_turns=N: N tool rounds run, the N-th round's end is MaxTurns(turn_count=N+1)."""
    # kills: `next_count <= cfg.max_turns` turned into `<` (the turn would end a round early)
    from steploop.reducer.transitions import MaxTurns, NextTurn

    d = Driver(default(max_turns=limit))
    passed: list[Any] = []
    for i in range(1, limit + 1):
        assert d.phase == "streaming", f"round {i} never started"
        tool_round(d, f"t{i}", "ok", Usage(input_tokens=10, output_tokens=1))
        passed.append(d.transition)
    assert passed == [*[NextTurn()] * (limit - 1), MaxTurns(turn_count=limit + 1)]
    assert d.phase == "done"


@pytest.mark.spec("R-SESSION-1", "R-RETRY-2")
def test_a_sessions_fallback_model_stays_sticky_into_the_next_turn() -> None:
    """A turn started on a session's fallback model hands the model on (R-RETRY-2's stickiness
    lasts the session, not one turn)."""
    # kills: `on_fallback=` dropped when a turn opens (the next session() would forget the model)
    d = Driver(default(), session=Session(model=FALLBACK))
    d.reply("hi")
    d.hooks_pass()
    assert d.phase == "done"
    assert d.state.session().model == FALLBACK
    plain = Driver(default())
    plain.reply("hi")
    plain.hooks_pass()
    assert plain.state.session().model is None


@pytest.mark.spec("R-CATEGORY-1", "T-MODEL-1")
@pytest.mark.parametrize(
    ("message", "category"),
    [("invalid x-api-key", "authentication_failed"), ("socket hang up", "unknown"), ("", "unknown")],
)
def test_an_unknown_failure_is_categorised_by_the_apis_words(message: str, category: str) -> None:
    """An unrecognised failure's API-error message takes its category from the API's message."""
    # kills: `raw=e.message` dropped in _model_error (the category would be the kind's alone)
    d = Driver(default(texts="claude_code"))
    fail(d, "unknown", message=message)
    (err,) = [m for m in d.emitted() if isinstance(m, AssistantMessage) and m.api_error]
    assert err.api_error is not None and err.api_error.category == category


@pytest.mark.spec("S-SNIP-1", "S-COLLAPSE-1")
def test_snip_and_collapse_leave_a_conversation_under_their_threshold_alone() -> None:
    """Called with a count under the threshold, snip and collapse change nothing and free 0."""
    # kills: the early returns' 0 moved by one (the machine checks the threshold before calling)
    from steploop.reducer.context import collapse, snip

    d = Driver(default())
    for i in range(3):
        tool_round(d, f"t{i}", "x" * 8_000, Usage(input_tokens=1_000, output_tokens=0))
    conv = d.state.conversation
    assert snip(conv, 9_999, 10_000, 0, "b") == (conv, 0, None)
    assert collapse(conv, 9_999, 10_000, 0, "b") == (conv, 0, 0)
    assert snip(conv, 10_000, 10_000, 0, "b")[1] > 0  # at the threshold it does cut
