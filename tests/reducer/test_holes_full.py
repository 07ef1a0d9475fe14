"""Holes the full mutation run found (issue 12; scripts/mutation.py --full): behaviours the code
had right but no test pinned. Each test names the mutant it kills in a comment (the mutant's key
as the runner writes it, shortened); each was checked against its mutant (applied by hand, the
test fails, reverted). The survivors that change no behaviour are listed, with the reason, in
specs/mutation-equivalents.txt.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import (
    Compat,
    Conversation,
    Gates,
    IllegalEvent,
    LoopConfig,
    RetryPolicy,
    Session,
    claude_code_2_1_88,
    default,
)
from steploop.reducer.context import CLEARED_RESULT, collapse, microcompact, snip
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Emit,
    Finish,
    PersistToolResult,
    SummarizeToolUse,
    TaskBudget,
    Wait,
)
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Interrupted,
    ModelCallFailed,
    ModelResponseEnded,
    ToolFinished,
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.machine import INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_TOOLS
from steploop.reducer.machine.helpers import count
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    Message,
    SystemMessage,
    TextBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    Usage,
    UserMessage,
)
from steploop.reducer.protocol import awaiting
from steploop.reducer.transitions import (
    BlockingLimit,
    Completed,
    HookStopped,
    ModelError,
    StopHookPrevented,
    TokenBudgetContinuation,
)
from tests.reducer.driver import SAFE, UNSAFE, Driver

BLOCKING_SAFE = ToolTraits(concurrency_safe=True, interrupt="block", max_result_chars=None)
SAFE_BASH = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)
BUDGETED = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=50_000)
MODEL = "claude-sonnet-4-5"


# --- helpers ---------------------------------------------------------------------------------


def of(fx: Any, kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def emitted(fx: Any) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


def api_errors(items: Any) -> list[AssistantMessage]:
    return [m for m in items if isinstance(m, AssistantMessage) and m.api_error is not None]


def small(**gates: bool) -> LoopConfig:
    """A 50,000-token window: effective 42,000, auto-compact 29,000, blocking 39,000,
    snip 22,000, collapse 37,800."""
    return default(context_window=50_000, gates=Gates(**gates))


def tool_round(d: Driver, tid: str, content: str, out_usage: Usage) -> tuple[Any, ...]:
    """One round: a safe Read allowed mid-stream, the response ends, the tool finishes."""
    d.tool_use(tid, "Read", SAFE, file_path=f"{tid}.py")
    d.allow(tid)
    d.end("tool_use", out_usage)
    return d.finish_tool(tid, content)


def rounds(d: Driver, n: int, last_input: int) -> tuple[Any, ...]:
    """``n`` tool rounds of one 8,000-char result each (2,002 tokens a segment); the round
    that begins after the last one counts ``last_input + 2,000`` tokens."""
    fx: tuple[Any, ...] = ()
    for i in range(1, n + 1):
        use = Usage(input_tokens=last_input if i == n else 1_000, output_tokens=0)
        fx = tool_round(d, f"t{i}", "x" * 8_000, use)
    return fx


def _budget_round(d: Driver, out: int) -> None:
    d.text("work")
    d.end("end_turn", Usage(input_tokens=1_000, output_tokens=out))
    d.hooks_pass()


def _use(tid: str, name: str = "Read") -> AssistantMessage:
    return AssistantMessage(
        id=f"a-{tid}",
        response_id=f"r-{tid}",
        model=MODEL,
        content=(ToolUseBlock(id=tid, name=name, input={"file_path": tid}),),
    )


def _result(tid: str, content: str) -> UserMessage:
    return UserMessage(
        id=f"u-{tid}",
        content=(ToolResultBlock(tool_use_id=tid, content=content),),
        origin="tool_result",
    )


def _results(conv: Conversation) -> dict[str, str]:
    return {
        b.tool_use_id: b.content
        for m in conv.messages()
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }


def _three_reads(*between: Message) -> Conversation:
    """A prompt and three Read rounds, with ``between`` after the first result."""
    msgs: list[Message] = [UserMessage(id="p", content=(TextBlock(text="go"),))]
    msgs += [_use("t1"), _result("t1", "one"), *between]
    msgs += [_use("t2"), _result("t2", "two"), _use("t3"), _result("t3", "three")]
    return Conversation.of(msgs)


# --- microcompact [R-CTX-3] -----------------------------------------------------------------------


@pytest.mark.spec("R-CTX-3", "S-SNIP-1")
def test_microcompact_passes_over_system_and_attachment_messages() -> None:
    """A conversation holding a snip boundary and an attachment is microcompacted; both stay."""
    # kills: microcompact | stmt | continue | delete continue (a message without content crashed)
    boundary = SystemMessage(id="b", subtype="snip_boundary", text="Snipped 2 earlier messages")
    att = AttachmentMessage(id="at", attachment_type="queued_command", data=(("prompt", "x"),))
    conv = _three_reads(boundary, att)
    out, cleared = microcompact(conv, 1)
    assert cleared == 2
    assert _results(out) == {"t1": CLEARED_RESULT, "t2": CLEARED_RESULT, "t3": "three"}
    assert boundary in out.messages() and att in out.messages()


@pytest.mark.spec("R-CTX-3")
def test_microcompact_returns_the_number_of_results_it_cleared() -> None:
    """Three Read results, the newest one kept: exactly 2 cleared; none to clear: the same
    conversation and 0."""
    # kills: microcompact | const | cleared += 1 | 1 -> 2
    # kills: microcompact | const | cleared = 0 | 0 -> 1
    # kills: microcompact | const | return conv, 0 | 0 -> 1
    # kills: microcompact | const | return conv, 0 | 0 -> -1
    conv = _three_reads()
    out, cleared = microcompact(conv, 1)
    assert cleared == 2
    assert _results(out) == {"t1": CLEARED_RESULT, "t2": CLEARED_RESULT, "t3": "three"}
    assert microcompact(conv, 3) == (conv, 0)  # all three are among the newest 3
    kept, n = microcompact(conv, 3)
    assert kept is conv and n == 0


@pytest.mark.spec("R-CTX-3")
def test_microcompact_does_not_count_results_cleared_before() -> None:
    """Run again over its own output, microcompact clears nothing more: 0, the same conversation."""
    # kills: microcompact | boolop | if seen > keep and b.content != CLEARED_RESULT: | and: drop b.content != CLEARED_RESULT
    once, cleared = microcompact(_three_reads(), 1)
    assert cleared == 2
    twice, again = microcompact(once, 1)
    assert again == 0 and twice is once


# --- collapse [S-COLLAPSE-1] -----------------------------------------------------------------------


def _stub_like(count: str, origin: str) -> UserMessage:
    return UserMessage(
        id="x",
        content=(
            TextBlock(text=f"[Context collapsed: {count} earlier messages folded; tools used: Read]"),
        ),
        is_meta=True,
        origin=origin,
    )


_PROMPT = UserMessage(id="p", content=(TextBlock(text="go"),))


def _collapse_after(head: UserMessage) -> tuple[tuple[Message, ...], str]:
    """Collapse (the drain, keeping one round) a prompt, ``head`` and three Read rounds: what
    is kept, and the new stub's text."""
    msgs: list[Message] = [_PROMPT, head]
    for t in ("t1", "t2", "t3"):
        msgs += [_use(t), _result(t, "r " + t)]
    out, _, committed = collapse(Conversation.of(msgs), 0, None, 1, "s1")
    assert committed == 2
    kept = out.messages()
    stub = next(m for m in kept if isinstance(m, UserMessage) and m.id == "s1")
    text = stub.content[0]
    assert isinstance(text, TextBlock)
    return kept, text.text


@pytest.mark.spec("S-COLLAPSE-1")
@pytest.mark.parametrize("digits", ["\uff13", "\u0663"], ids=["fullwidth-3", "arabic-indic-3"])
def test_a_stub_lookalike_with_non_ascii_digits_is_not_an_earlier_stub(digits: str) -> None:
    """A collapse-origin message whose count is written in non-ASCII digits is not a stub of
    ours: it stays in the head untouched and its number is not added to the new stub's."""
    # kills: _prior_stub_count | boolop | ... | and: drop digits.isascii()
    lookalike = _stub_like(digits, "collapse")
    kept, text = _collapse_after(lookalike)
    assert kept[:2] == (_PROMPT, lookalike)
    stub = kept[2]
    assert isinstance(stub, UserMessage) and stub.id == "s1"
    assert text == "[Context collapsed: 4 earlier messages folded; tools used: Read]"


# --- the round pipeline's thresholds [S-SNIP-1], [S-COLLAPSE-1], [R-ID-1] ------------------------------


@pytest.mark.spec("S-SNIP-1", "R-ORDER-1")
def test_snip_runs_when_the_count_is_exactly_at_its_threshold() -> None:
    """A round that begins with the count exactly at the snip threshold snips (at or over)."""
    # kills: begin_round | cmp | if gates.history_snip and count(s) >= cfg.snip_threshold: | '>=' -> '>'
    off = Driver(small(history_snip=False, context_collapse=False, auto_compact=False))
    rounds(off, 6, 20_000)
    assert count(off.state) == off.cfg.snip_threshold == 22_000  # the premise
    d = Driver(small(context_collapse=False, auto_compact=False))
    fx = rounds(d, 6, 20_000)
    boundaries = [m for m in emitted(fx) if isinstance(m, SystemMessage)]
    assert [b.subtype for b in boundaries] == ["snip_boundary"]
    assert d.state.tokens_freed > 0


@pytest.mark.spec("S-COLLAPSE-1", "R-ORDER-1")
def test_collapse_runs_when_the_count_is_exactly_at_its_threshold() -> None:
    """A round that begins with the count exactly at the collapse threshold collapses."""
    # kills: begin_round | cmp | if gates.context_collapse and count(s) >= cfg.collapse_threshold: | '>=' -> '>'
    off = Driver(small(history_snip=False, context_collapse=False, auto_compact=False))
    rounds(off, 5, 35_800)
    assert count(off.state) == off.cfg.collapse_threshold == 37_800  # the premise
    d = Driver(small(history_snip=False, auto_compact=False))
    fx = rounds(d, 5, 35_800)
    sent = of(fx, CallModel)[0].conversation.messages()
    assert any(isinstance(m, UserMessage) and m.origin == "collapse" for m in sent)
    assert d.state.tokens_freed > 0


@pytest.mark.spec("R-ID-1", "S-COLLAPSE-1")
def test_the_message_after_a_collapse_stub_takes_the_next_id() -> None:
    """Message ids stay consecutive across a collapse: the stub is m{n}, the next message m{n+1}."""
    # kills: begin_round | const | ids=evolve(s.ids, msg=s.ids.msg + 1), | 1 -> 2 #2 (the collapse commit)
    d = Driver(small(history_snip=False, auto_compact=False))
    fx = rounds(d, 5, 36_500)
    (stub,) = [
        m
        for m in of(fx, CallModel)[0].conversation.messages()
        if isinstance(m, UserMessage) and m.origin == "collapse"
    ]
    fx = d.text("after the collapse")
    (record,) = emitted(fx)
    assert int(record.id[1:]) == int(stub.id[1:]) + 1


# --- R-OVERFLOW-1 ----------------------------------------------------------------------------------


def _overflow(d: Driver, inp: int, limit: int) -> tuple[Any, ...]:
    return d.feed(
        ModelCallFailed(
            call_id=d.call_id,
            kind="context_overflow",
            message="input length and `max_tokens` exceed context limit",
            status=400,
            input_tokens=inp,
            context_limit=limit,
        )
    )


@pytest.mark.spec("R-OVERFLOW-1")
@pytest.mark.parametrize(("room", "cap"), [(0, None), (1, 1)], ids=["nothing-fits", "one-fits"])
def test_overflow_with_a_floor_of_one_token(room: int, cap: int | None) -> None:
    """With floor_output_tokens=1, no room left (available 0) is not retried; one token of room
    is (max_tokens 1)."""
    # kills: _overflow_cap | const | available = max(0, ...) | 0 -> 1
    d = Driver(default(floor_output_tokens=1))
    fx = _overflow(d, 199_000 - room, 200_000)  # available = 200,000 - input - 1,000
    assert [c.max_tokens for c in of(fx, CallModel)] == ([] if cap is None else [cap])
    if cap is None:
        (err,) = api_errors(emitted(fx))
        assert err.api_error is not None and err.api_error.kind == "invalid_request"
        assert isinstance(d.state.transition, Completed)


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


# --- failures: the texts [R-RETRY-1], [R-AUTH-1], [R-REFUSAL-1] ------------------------------------


@pytest.mark.spec("R-RETRY-1")
@pytest.mark.parametrize(("status", "shown"), [(None, "connection"), (503, "503")])
def test_the_retry_notice_names_the_kind_when_there_is_no_status(
    status: int | None, shown: str
) -> None:
    """A connection failure (no HTTP status) is retried with a notice naming its kind."""
    # kills: _retry | boolop | f"API error ({e.status or e.kind}); ..." | or: drop e.kind
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="connection", status=status))
    assert of(fx, Wait)
    (notice,) = [m for m in emitted(fx) if isinstance(m, SystemMessage)]
    assert notice.subtype == "api_error"
    assert notice.text == f"API error ({shown}); retrying in 500 ms (attempt 1 of 10)"


@pytest.mark.spec("R-AUTH-1", "R-OVERFLOW-1")
@pytest.mark.parametrize(
    ("kind", "text"),
    [("auth", "API Error: auth"), ("invalid_request", "API Error: invalid_request")],
)
def test_an_auth_or_invalid_request_failure_without_a_message_names_its_kind(
    kind: str, text: str
) -> None:
    """An auth or invalid-request failure with an empty message: the API-error text names the kind."""
    # kills: on_call_failed | boolop | f"API Error: {e.message or kind}" | or: drop kind
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, status=400))
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == kind
    assert err.content == (TextBlock(text=text),) and err.api_error.message == text


@pytest.mark.spec("R-OVERFLOW-1", "R-AUTH-1")
def test_an_overflow_that_stands_without_a_message_names_invalid_request() -> None:
    """A context overflow that cannot be retried and has no message: `API Error: invalid_request`."""
    # kills: on_call_failed | boolop | f"API Error: {e.message or kind}" | or: drop kind
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="context_overflow", status=400))
    (err,) = api_errors(emitted(fx))
    assert err.content == (TextBlock(text="API Error: invalid_request"),)


@pytest.mark.spec("R-REFUSAL-1")
def test_a_refusal_without_stop_details_keeps_empty_details() -> None:
    """A refusal whose response carried no stop_details stores details "" (a str), never None."""
    # kills: _refusal | boolop | details=e.stop_details or "" | or: drop ''
    d = Driver(default())
    d.text("I can't")
    fx = d.feed(
        ModelResponseEnded(
            call_id=d.call_id,
            model=MODEL,
            stop_reason="refusal",
            usage=Usage(input_tokens=10, output_tokens=2),
        )
    )
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.details == ""
    (stored,) = api_errors(d.state.conversation.messages())
    assert stored.api_error is not None and stored.api_error.details == ""


# --- the tool-result budget [R-CTX-0] --------------------------------------------------------------


@pytest.mark.spec("R-CTX-0")
def test_results_adding_up_to_exactly_200k_characters_are_kept() -> None:
    """Four 50,000-character results make exactly 200,000: none is replaced; one more character is."""
    # kills: _budget_result | cmp | ... or so_far + len(content) > cfg.per_message_result_chars: | '>' -> '>=' #2
    d = Driver(default())
    ids = [f"t{i}" for i in range(1, 6)]
    for tid in ids:
        d.tool_use(tid, traits=BUDGETED)
    for tid in ids:
        d.allow(tid)
    persisted: list[str] = []
    for tid, size in zip(ids, [50_000] * 4 + [1], strict=True):
        persisted += [
            e.tool_use_id for e in of(d.finish_tool(tid, tid[-1] * size), PersistToolResult)
        ]
    assert persisted == ["t5"]


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


# --- the second list of the full run (issue 12) ---------------------------------------------------


@pytest.mark.spec("R-SESSION-1", "R-RETRY-2")
def test_a_fallback_model_stays_sticky_for_every_later_turn() -> None:
    """A turn started on the session's fallback model hands it on: the turn after it starts on
    the fallback model too, not on the configured one."""
    # kills: open_turn | kwarg | s = LoopState( | drop on_fallback=
    cfg = default(fallback_model="claude-fallback-1")
    d = Driver(cfg, session=Session(model="claude-fallback-1"))
    assert d.of(CallModel)[-1].model == "claude-fallback-1"
    d.reply("done")
    d.hooks_pass()
    assert isinstance(d.finished(), Finish)
    assert d.state.session().model == "claude-fallback-1"
    nxt = Driver(cfg, "again", session=d.state.session())
    assert nxt.of(CallModel)[-1].model == "claude-fallback-1"


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


@pytest.mark.spec("S-COLLAPSE-1", "S-COLLAPSE-2")
@pytest.mark.parametrize("threshold", [None, 0], ids=["drain", "commit"])
def test_collapse_with_nothing_to_fold_returns_the_conversation_untouched(
    threshold: int | None,
) -> None:
    """No segment beyond the newest ``keep_rounds``: nothing is folded, no stub is written (not
    even one saying 0 messages were folded), the same conversation comes back."""
    # kills: collapse | stmt | if folded == 0: | delete if folded == 0:
    conv = _three_reads()
    out, freed, committed = collapse(conv, 10_000, threshold, 3, "s1")
    assert (freed, committed) == (0, 0)
    assert out is conv
    assert not any(isinstance(m, UserMessage) and m.origin == "collapse" for m in out.messages())


@pytest.mark.spec("R-MODEL-1")
def test_records_all_on_another_model_take_the_served_one() -> None:
    """Every block of the response names the called model and the response ends naming another:
    the stored records name the one that served."""
    # kills: _served | cmp | if not served or all(b.model == served for b in r.blocks): | '==' -> '!='
    cfg = default()
    d = Driver(cfg)
    d.text("a")
    d.text("b")
    assert {m.model for m in emitted(d.effects) if isinstance(m, AssistantMessage)} == {cfg.model}
    d.feed(
        ModelResponseEnded(
            call_id=d.call_id, model="claude-x-20990101", stop_reason="end_turn", usage=Usage()
        )
    )
    d.hooks_pass()
    stored = [m for m in d.state.conversation.messages() if isinstance(m, AssistantMessage)]
    assert [m.model for m in stored] == ["claude-x-20990101"] * 2


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


@pytest.mark.spec("G7", "T-BLOCKING-1")
def test_reactive_compaction_alone_exempts_a_round_from_the_blocking_limit() -> None:
    """Auto-compact on (its breaker tripped, so it does not run), reactive compaction on, context
    collapse off: a round over the blocking limit is sent (an overflow would be compacted
    reactively), not ended in blocking_limit. Control: reactive compaction off blocks."""
    # kills: _blocking_applies | boolop | if auto and (cfg.gates.reactive_compact or cfg.gates.context_collapse): | or: drop cfg.gates.reactive_compact
    for reactive, blocked in ((True, False), (False, True)):
        cfg = default(gates=Gates(context_collapse=False, reactive_compact=reactive))
        assert cfg.auto_compact_enabled
        d = Driver(cfg, session=Session(autocompact_failures=cfg.max_autocompact_failures))
        fx = tool_round(d, "t1", "ok", Usage(input_tokens=cfg.blocking_limit + 1_000))
        if blocked:
            assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, BlockingLimit)
        else:
            assert isinstance(fx[-1], CallModel) and not of(fx, Finish)


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


# --- stub lookalikes [S-COLLAPSE-1] -------------------------------------------------------------------


@pytest.mark.spec("S-COLLAPSE-1")
@pytest.mark.parametrize(
    "digits",
    ["1" * 19, "many", "-3", "3_0", ""],
    ids=["19-digits", "a-word", "signed", "underscored", "empty"],
)
def test_a_stub_lookalike_whose_count_is_not_18_ascii_digits_is_not_an_earlier_stub(
    digits: str,
) -> None:
    """A collapse-origin message shaped like a stub but whose count is not a run of at most 18
    ASCII decimal digits (too long for a count of ours, a word, a sign, an underscore, nothing)
    is not an earlier stub: it stays in the head untouched, the new stub counts only what it
    folded, and nothing crashes parsing it."""
    # kills: _prior_stub_count | boolop | ... | and: drop len(digits) <= _MAX_COUNT_DIGITS
    # kills: _prior_stub_count | boolop | ... | and: drop digits.isdecimal()
    lookalike = _stub_like(digits, "collapse")
    kept, _ = _collapse_after(lookalike)
    assert kept[:2] == (_PROMPT, lookalike)
    stub = kept[2]
    assert isinstance(stub, UserMessage) and stub.id == "s1"
    assert stub.content == (
        TextBlock(text="[Context collapsed: 4 earlier messages folded; tools used: Read]"),
    )


# --- R-OVERFLOW-1, the numbers missing --------------------------------------------------------------


@pytest.mark.spec("R-OVERFLOW-1")
def test_an_overflow_naming_the_limit_but_not_the_input_stands() -> None:
    """A context overflow whose message gave the context limit but not the input tokens: no cap
    can be computed, so it is not retried; the error stands as invalid_request (no crash)."""
    # kills: _overflow_cap | boolop | if e.input_tokens is None or e.context_limit is None: | or: drop e.input_tokens is None
    d = Driver(default())
    fx = d.feed(
        ModelCallFailed(
            call_id=d.call_id,
            kind="context_overflow",
            message="input length and `max_tokens` exceed context limit",
            status=400,
            context_limit=200_000,
        )
    )
    assert of(fx, CallModel) == []
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == "invalid_request"
    assert isinstance(d.state.transition, Completed)


# --- microcompact over a message of several results [R-CTX-3] ----------------------------------------


@pytest.mark.spec("R-CTX-3")
def test_microcompact_clears_every_old_result_of_a_message_holding_several() -> None:
    """A transcript's user message may hold several tool results (parallel calls answered
    together): every one but the newest kept is cleared, each block looked at."""
    # kills: microcompact | const | for j in range(len(blocks) - 1, -1, -1): | 1 -> 2 #3
    uses = AssistantMessage(
        id="a",
        response_id="r",
        model=MODEL,
        content=tuple(
            ToolUseBlock(id=t, name="Read", input={"file_path": t}) for t in ("t1", "t2", "t3")
        ),
    )
    together = UserMessage(
        id="u",
        content=tuple(ToolResultBlock(tool_use_id=t, content="r " + t) for t in ("t1", "t2", "t3")),
        origin="tool_result",
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    out, cleared = microcompact(Conversation.of([prompt, uses, together]), 1)
    assert cleared == 2
    assert _results(out) == {"t1": CLEARED_RESULT, "t2": CLEARED_RESULT, "t3": "r t3"}


@pytest.mark.spec("R-OVERFLOW-1", "R-RETRY-1")
def test_an_overflow_retry_tombstones_the_blocks_the_failed_attempt_streamed() -> None:
    """A context overflow after the attempt streamed a block is retried (a retry of R-RETRY-1's
    count): the attempt is discarded, its emitted block tombstoned, and the request sent again
    without it."""
    # kills: _overflow_retry | bool | s = discard_attempt(s, fx, tombstone=True) | True -> False
    d = Driver(default())
    d.text("half an answer")
    (streamed,) = [m for m in d.emitted() if isinstance(m, AssistantMessage)]
    fx = _overflow(d, 150_000, 200_000)  # available 49,000: retried with that cap
    assert [c.max_tokens for c in of(fx, CallModel)] == [49_000]
    assert emitted(fx) == [Tombstone(message_id=streamed.id)]
    assert streamed not in of(fx, CallModel)[0].conversation.messages()


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


# --- the fallback's results [R-RETRY-2] ------------------------------------------------------------


@pytest.mark.spec("R-RETRY-2")
def test_the_fallback_results_are_tool_results() -> None:
    """The `Model fallback triggered` results emitted for the attempt's tool calls are tool
    results (origin "tool_result"), like every other result, not prompts."""
    # kills: _synthesize_results | kwarg | fx.append(Emit(item=UserMessage(id=mid, content=(sl.result,), origin="tool_result"))) | drop origin=
    d = Driver(default(fallback_model="claude-haiku-4-5"))
    for _ in range(2):
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.tool_use("t1")  # the third attempt asks for a tool, then fails: the fallback
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert [c.model for c in of(fx, CallModel)] == ["claude-haiku-4-5"]
    (result,) = [m for m in emitted(fx) if isinstance(m, UserMessage)]
    assert result.content == (
        ToolResultBlock(tool_use_id="t1", content="Model fallback triggered", is_error=True),
    )
    assert result.origin == "tool_result"


# --- wait ids [R-ID-1] ---------------------------------------------------------------------------


@pytest.mark.spec("R-ID-1", "R-RETRY-1", "I-1")
def test_every_retry_wait_takes_a_new_id_across_turns() -> None:
    """Wait ids come from their counter: two retries wait 1 then 2; a retry wait withdrawn by an
    interrupt is not reused by the next turn, whose late elapse is refused, not taken as the new
    wait's (which would resend before its backoff)."""
    # kills: _retry | kwarg | return evolve( | drop ids=
    d = Driver(default())
    d.feed(ModelCallFailed(call_id=d.call_id, kind="rate_limited", status=429))
    d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="rate_limited", status=429))
    assert [w.wait_id for w in d.of(Wait)] == [1, 2]
    d.feed(Interrupted(kind="hard"))
    assert d.finished() is not None
    nxt = Driver(default(), session=d.state.session())
    nxt.feed(ModelCallFailed(call_id=nxt.call_id, kind="rate_limited", status=429))
    assert [w.wait_id for w in nxt.of(Wait)] == [3]
    with pytest.raises(IllegalEvent):
        nxt.feed(WaitElapsed(wait_id=2))
    assert of(nxt.feed(WaitElapsed(wait_id=3)), CallModel)


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


# --- the backoff formula to its last doubling [R-RETRY-1] ---------------------------------------------


@pytest.mark.spec("R-RETRY-1")
def test_the_backoff_doubles_through_attempt_31_under_a_high_cap() -> None:
    """With a cap high enough, the delay is base * 2^(attempt-1) for every attempt up to 31
    (2^30 ms); from there the doubling stops (the shift is bounded), it never shrinks."""
    # kills: RetryPolicy.delay_ms | const | return min(self.base_delay_ms * (1 << min(attempt - 1, 30)), self.max_delay_ms) | 30 -> 29
    p = RetryPolicy(max_retries=40, base_delay_ms=1, max_delay_ms=2**34)  # under the limit of a year (P-CONFIG-3)
    assert [p.delay_ms(n, None) for n in range(1, 32)] == [2 ** (n - 1) for n in range(1, 32)]
    assert p.delay_ms(32, None) == p.delay_ms(40, None) == 2**30


# --- microcompact keeps the message's flags [R-CTX-3] ------------------------------------------------


@pytest.mark.spec("R-CTX-3")
def test_microcompact_keeps_a_cleared_messages_meta_flag() -> None:
    """A meta user message holding an old Read result is rewritten with the result cleared and
    everything else of it kept: its id, its origin and is_meta."""
    # kills: microcompact | kwarg | out[i] = UserMessage(id=m.id, content=tuple(blocks), is_meta=m.is_meta, origin=m.origin) | drop is_meta=
    meta = UserMessage(
        id="u-t1",
        content=(ToolResultBlock(tool_use_id="t1", content="one"),),
        is_meta=True,
        origin="tool_result",
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    conv = Conversation.of([prompt, _use("t1"), meta, _use("t2"), _result("t2", "two")])
    out, cleared = microcompact(conv, 1)
    assert cleared == 1
    (rewritten,) = [m for m in out.messages() if m.id == "u-t1"]
    assert rewritten == UserMessage(
        id="u-t1",
        content=(ToolResultBlock(tool_use_id="t1", content=CLEARED_RESULT),),
        is_meta=True,
        origin="tool_result",
    )


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


# --- G7: only the call right after a compaction skips the blocking check [G7], [Q-4] ----------------


@pytest.mark.spec("G7", "Q-4", "T-BLOCKING-1")
def test_the_compaction_exemption_ends_with_the_call_after_it() -> None:
    """Under Q-4 (the blocking limit also with auto-compact), a compaction exempts the call right
    after it from the blocking check, and that call only: a later round over the limit whose
    compaction fails ends in blocking_limit."""
    # kills: call_model | kwarg | s = evolve( | drop compacted_this_round=
    cfg = default(
        context_window=50_000,
        gates=Gates(history_snip=False, context_collapse=False, reactive_compact=False),
        compat=Compat(blocking_limit_with_auto_compact=True),
    )
    d = Driver(cfg)
    fx = tool_round(d, "t1", "ok", Usage(input_tokens=30_000))  # over auto-compact (29,000)
    (first,) = of(fx, Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    assert of(d.feed(CompactionFinished(compact_id=first.compact_id, messages=summary)), CallModel)
    fx = tool_round(d, "t2", "ok", Usage(input_tokens=40_000))  # over blocking (39,000)
    (second,) = of(fx, Compact)
    fx = d.feed(CompactionFailed(compact_id=second.compact_id, reason="failed"))
    assert of(fx, CallModel) == []
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, BlockingLimit)


# --- the give-up's category reads the API's words [R-CATEGORY-1], [R-RETRY-4] ---------------------------


@pytest.mark.spec("R-CATEGORY-1", "R-RETRY-4")
@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("Your credit balance is too low to access the Anthropic API", "billing_error"),
        ("invalid x-api-key", "authentication_failed"),
        ("internal error", "unknown"),
    ],
    ids=["billing", "api-key", "other"],
)
def test_the_give_up_categorises_by_the_apis_own_words(message: str, category: str) -> None:
    """Retries exhausted on a server error: under Claude Code's texts the API-error message's
    category comes from the API's own message too (a credit balance too low is billing_error,
    an invalid x-api-key authentication_failed), not from the kind and status alone."""
    # kills: _give_up | kwarg | s, err = api_error( | drop raw=
    d = Driver(claude_code_2_1_88(retry=RetryPolicy(max_retries=0)))
    fx = d.feed(
        ModelCallFailed(call_id=d.call_id, kind="server_error", status=500, message=message)
    )
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.category == category
    assert err.content == (TextBlock(text=f"API Error: {message}"),)


@pytest.mark.spec("R-CTX-3")
def test_microcompact_keeps_the_newest_result_even_when_asked_to_keep_none() -> None:
    """R-CTX-3 keeps the newest max(1, keep_recent): called with 0 (the function is public; the
    config's keep_recent is positive), microcompact still keeps the newest result."""
    # kills: microcompact | const | keep = max(1, keep_recent) | 1 -> 0
    out, cleared = microcompact(_three_reads(), 0)
    assert cleared == 2
    assert _results(out) == {"t1": CLEARED_RESULT, "t2": CLEARED_RESULT, "t3": "three"}


@pytest.mark.spec("R-CATEGORY-1", "R-AUTH-1")
def test_an_invalid_request_categorises_by_the_apis_own_words() -> None:
    """A 400 invalid request saying the credit balance is too low is, under Claude Code's texts,
    a billing_error (the API's words decide), not the unknown its kind and status give."""
    # kills: on_call_failed | kwarg | s, err = api_error( | drop raw= #3
    d = Driver(claude_code_2_1_88())
    msg = "Your credit balance is too low to access the Anthropic API."
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="invalid_request", status=400, message=msg))
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.category == "billing_error"


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


# --- microcompact keeps is_error [R-CTX-3] -----------------------------------------------------------


@pytest.mark.spec("R-CTX-3")
def test_microcompact_keeps_a_cleared_results_error_flag() -> None:
    """An old Read result that was an error is cleared and stays an error result: only its
    content is replaced."""
    # kills: microcompact | kwarg | blocks[j] = ToolResultBlock( | drop is_error=
    failed = UserMessage(
        id="u-t1",
        content=(ToolResultBlock(tool_use_id="t1", content="no such file", is_error=True),),
        origin="tool_result",
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    conv = Conversation.of([prompt, _use("t1"), failed, _use("t2"), _result("t2", "two")])
    out, cleared = microcompact(conv, 1)
    assert cleared == 1
    (rewritten,) = [m for m in out.messages() if m.id == "u-t1"]
    assert isinstance(rewritten, UserMessage)
    assert rewritten.content == (
        ToolResultBlock(tool_use_id="t1", content=CLEARED_RESULT, is_error=True),
    )


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


@pytest.mark.spec("S-SNIP-1")
def test_snip_with_nothing_beyond_the_kept_rounds_returns_the_conversation_untouched() -> None:
    """Over the threshold but no segment beyond the newest ``keep_rounds``: nothing is dropped,
    no boundary, 0 tokens freed (not -1), the same conversation."""
    # kills: snip | const | return conv, 0, None | 0 -> -1 #2
    conv = _three_reads()
    assert snip(conv, 10_000, 0, 3, "b1") == (conv, 0, None)
    out, _, _ = snip(conv, 10_000, 0, 3, "b1")
    assert out is conv


@pytest.mark.spec("R-CATEGORY-1", "R-MEDIA-1")
def test_a_media_error_categorises_by_the_apis_own_words() -> None:
    """An image over the size limit (400, "image exceeds ... maximum") gets no category under
    Claude Code's texts (Claude Code sets none), read from the API's words, not `unknown`."""
    # kills: on_call_failed | kwarg | s, err = api_error( | drop raw= #2
    d = Driver(claude_code_2_1_88(gates=Gates(reactive_compact=False)))
    msg = "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum"
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="media", status=400, message=msg))
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == "media"
    assert err.api_error.category == ""


@pytest.mark.spec("S-COLLAPSE-1")
def test_a_stub_of_responses_without_tools_says_none() -> None:
    """Folded segments that used no tool: the stub says `tools used: none`."""
    # kills: collapse | boolop | tools = ", ".join(sorted(set(names.values()))) or "none" | or: drop 'none'
    msgs: list[Message] = [UserMessage(id="p", content=(TextBlock(text="go"),))]
    for i in (1, 2, 3):
        msgs += [
            AssistantMessage(
                id=f"a{i}", response_id=f"r{i}", model=MODEL, content=(TextBlock(text="hi"),)
            ),
            UserMessage(id=f"u{i}", content=(TextBlock(text="more"),)),
        ]
    out, _, committed = collapse(Conversation.of(msgs), 0, None, 1, "s1")
    assert committed == 2
    stub = out.messages()[1]
    assert isinstance(stub, UserMessage) and stub.content == (
        TextBlock(text="[Context collapsed: 4 earlier messages folded; tools used: none]"),
    )


@pytest.mark.spec("R-RETRY-2")
def test_with_the_fallback_gate_off_overloads_are_retried_not_switched() -> None:
    """fallback_on_overload off, a fallback model configured: three overloaded failures are
    three retries on the same model, no switch."""
    # kills: _retry | boolop | e.kind == "overloaded" | and: drop cfg.gates.fallback_on_overload
    d = Driver(default(fallback_model="claude-haiku-4-5", gates=Gates(fallback_on_overload=False)))
    for _ in range(3):
        fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        assert of(fx, Wait) and of(fx, CallModel) == []
        fx = d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
        assert [c.model for c in of(fx, CallModel)] == [d.cfg.model]
    assert d.state.model == d.cfg.model


@pytest.mark.spec("R-OVERFLOW-1")
def test_an_overflow_naming_the_input_but_not_the_limit_stands() -> None:
    """A context overflow that gave the input tokens but not the context limit: no cap can be
    computed, the error stands as invalid_request (no crash)."""
    # kills: _overflow_cap | boolop | if e.input_tokens is None or e.context_limit is None: | or: drop e.context_limit is None
    d = Driver(default())
    fx = d.feed(
        ModelCallFailed(
            call_id=d.call_id, kind="context_overflow", status=400, input_tokens=150_000
        )
    )
    assert of(fx, CallModel) == []
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == "invalid_request"


@pytest.mark.spec("S-COLLAPSE-1")
def test_a_collapse_message_with_another_opening_is_not_an_earlier_stub() -> None:
    """A collapse-origin message whose text does not open with `[Context collapsed: ` (though
    what follows has a stub's shape) is not an earlier stub: it stays, its number is not added."""
    # kills: _prior_stub_count | boolop | if not isinstance(block, TextBlock) or not block.text.startswith(_STUB_PREFIX): | or: drop not block.text.startswith(_STUB_PREFIX)
    other = UserMessage(
        id="x",
        content=(
            TextBlock(text="[Context summarized:3 earlier messages folded; tools used: Read]"),
        ),
        is_meta=True,
        origin="collapse",
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    msgs: list[Message] = [prompt, other]
    for t in ("t1", "t2", "t3"):
        msgs += [_use(t), _result(t, "r " + t)]
    out, _, committed = collapse(Conversation.of(msgs), 0, None, 1, "s1")
    assert committed == 2
    kept = out.messages()
    assert kept[:2] == (prompt, other)
    stub = kept[2]
    assert isinstance(stub, UserMessage) and stub.content == (
        TextBlock(text="[Context collapsed: 4 earlier messages folded; tools used: Read]"),
    )


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


@pytest.mark.spec("R-RETRY-2")
def test_the_model_fallback_drops_the_attempt_without_tombstones() -> None:
    """The fallback drops the failed attempt from state without tombstoning what it streamed
    (the reference's behaviour): it emits the notice, no Tombstone."""
    # kills: _model_fallback | bool | s = discard_attempt(s, fx, tombstone=False) | False -> True
    d = Driver(default(fallback_model="claude-haiku-4-5"))
    for _ in range(2):
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.text("half an answer")
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert [c.model for c in of(fx, CallModel)] == ["claude-haiku-4-5"]
    assert [type(m) for m in emitted(fx)] == [SystemMessage]


@pytest.mark.spec("Q-3", "R-ID-1", "R-RETRY-5")
def test_under_q3_the_first_block_after_a_stream_fallback_keeps_the_calls_generation() -> None:
    """Under Q-3 only a later block drops the blocks before it: the first block after the
    streaming fallback drops nothing, so its tool is asked in the call's own generation, the one
    drawn from the counter."""
    # kills: on_block | boolop | if r.sticky_fallback and cfg.compat.sticky_streaming_fallback and r.blocks: | and: drop r.blocks
    d = Driver(default(compat=Compat(sticky_streaming_fallback=True)))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="stream_broken"))
    fx = d.tool_use("t1")
    assert [a.generation for a in of(fx, AskPermission)] == [d.state.ids.generation]


@pytest.mark.spec("S-COLLAPSE-1")
def test_a_collapse_message_with_a_count_but_other_words_is_not_an_earlier_stub() -> None:
    """A collapse-origin message that opens like a stub and has a count, but other words after
    it, is not an earlier stub: it stays, its number is not added to the new stub's."""
    # kills: _prior_stub_count | stmt | if not rest.startswith("earlier messages folded; tools used: "): | delete
    other = UserMessage(
        id="x",
        content=(TextBlock(text="[Context collapsed: 3 files were too large to read]"),),
        is_meta=True,
        origin="collapse",
    )
    prompt = UserMessage(id="p", content=(TextBlock(text="go"),))
    msgs: list[Message] = [prompt, other]
    for t in ("t1", "t2", "t3"):
        msgs += [_use(t), _result(t, "r " + t)]
    out, _, committed = collapse(Conversation.of(msgs), 0, None, 1, "s1")
    assert committed == 2
    kept = out.messages()
    assert kept[:2] == (prompt, other)
    stub = kept[2]
    assert isinstance(stub, UserMessage) and stub.content == (
        TextBlock(text="[Context collapsed: 4 earlier messages folded; tools used: Read]"),
    )


# --- the last survivors of the full run --------------------------------------------------------


@pytest.mark.spec("S-COLLAPSE-1")
def test_a_stub_lookalike_the_user_wrote_is_not_an_earlier_stub() -> None:
    """A message in the stub's exact words but not of collapse's origin (the user typed it) is
    not an earlier stub: it stays, and its count is not added to the new stub's."""
    # kills: _prior_stub_count | boolop | ... | or: drop m.origin != 'collapse'
    typed = _stub_like("2", "user")
    kept, text = _collapse_after(typed)
    assert typed in kept
    assert text == "[Context collapsed: 4 earlier messages folded; tools used: Read]"


@pytest.mark.spec("S-COLLAPSE-1")
def test_an_earlier_stub_with_an_18_digit_count_is_folded_into_the_new_one() -> None:
    """A stub of ours whose count has 18 digits (the most an int64 holds) is still ours: the
    new stub replaces it and carries its count on."""
    # kills: _prior_stub_count | cmp | ... len(digits) <= _MAX_COUNT_DIGITS | '<=' -> '<'
    n = 10**17  # 18 digits
    earlier = _stub_like(str(n), "collapse")
    kept, text = _collapse_after(earlier)
    assert earlier not in kept
    assert text.startswith(f"[Context collapsed: {n + 4} earlier messages folded")


@pytest.mark.spec("R-CTX-3")
def test_microcompact_clears_results_in_the_first_message_too() -> None:
    """Old results in the conversation's first message are cleared like any other (the scan
    runs down to index 0)."""
    # kills: microcompact | const | for i in range(len(out) - 1, -1, -1): | 1 -> 0 #2
    first = UserMessage(
        id="u0",
        content=(
            ToolResultBlock(tool_use_id="t1", content="one"),
            ToolResultBlock(tool_use_id="t2", content="two"),
        ),
        origin="tool_result",
    )
    conv = Conversation.of([first, _use("t1"), _use("t2"), _use("t3"), _result("t3", "three")])
    out, cleared = microcompact(conv, 1)
    assert cleared == 2
    assert _results(out) == {"t1": CLEARED_RESULT, "t2": CLEARED_RESULT, "t3": "three"}
