"""Holes the full mutation run found (issue 12; scripts/mutation.py --full): behaviours the code
had right but no test pinned. Each test names the mutant it kills in a comment (the mutant's key
as the runner writes it, shortened); each was checked against its mutant (applied by hand, the
test fails, reverted). The survivors that change no behaviour are listed, with the reason, in
specs/mutation-equivalents.txt.

This file: the context rules (microcompact, snip, collapse and its stubs, the pipeline's
thresholds, the tool-result budget, the compaction exemption). The failures are in
test_holes_full_failures.py, the turn (budgets, interrupts, summaries, tool rounds) in
test_holes_full_turns.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import Compat, Conversation, Gates, Session, default
from steploop.reducer.context import CLEARED_RESULT, collapse, microcompact, snip
from steploop.reducer.effects import CallModel, Compact, Finish, PersistToolResult
from steploop.reducer.events import CompactionFailed, CompactionFinished, ToolTraits
from steploop.reducer.machine.helpers import count
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import BlockingLimit
from tests.reducer.driver import Driver
from tests.reducer.holes_full_kit import MODEL, emitted, of, small, tool_round

BUDGETED = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=50_000)


def rounds(d: Driver, n: int, last_input: int) -> tuple[Any, ...]:
    """``n`` tool rounds of one 8,000-char result each (2,002 tokens a segment); the round
    that begins after the last one counts ``last_input + 2,000`` tokens."""
    fx: tuple[Any, ...] = ()
    for i in range(1, n + 1):
        use = Usage(input_tokens=last_input if i == n else 1_000, output_tokens=0)
        fx = tool_round(d, f"t{i}", "x" * 8_000, use)
    return fx


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


@pytest.mark.spec("R-CTX-3")
def test_microcompact_keeps_the_newest_result_even_when_asked_to_keep_none() -> None:
    """R-CTX-3 keeps the newest max(1, keep_recent): called with 0 (the function is public; the
    config's keep_recent is positive), microcompact still keeps the newest result."""
    # kills: microcompact | const | keep = max(1, keep_recent) | 1 -> 0
    out, cleared = microcompact(_three_reads(), 0)
    assert cleared == 2
    assert _results(out) == {"t1": CLEARED_RESULT, "t2": CLEARED_RESULT, "t3": "three"}


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


@pytest.mark.spec("S-SNIP-1")
def test_snip_with_nothing_beyond_the_kept_rounds_returns_the_conversation_untouched() -> None:
    """Over the threshold but no segment beyond the newest ``keep_rounds``: nothing is dropped,
    no boundary, 0 tokens freed (not -1), the same conversation."""
    # kills: snip | const | return conv, 0, None | 0 -> -1 #2
    conv = _three_reads()
    assert snip(conv, 10_000, 0, 3, "b1") == (conv, 0, None)
    out, _, _ = snip(conv, 10_000, 0, 3, "b1")
    assert out is conv


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
