"""What enters the history (M-HIST-1, B-MODEL-2): the machine refuses a conversation the
Messages API would refuse, with a clear error at start() and for inserted messages, with the
malformed-response path for a model's tool_use, and with a failed compaction for a summary."""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import Conversation, MalformedConversation, Request, Session, default, start
from steploop.reducer.effects import CallModel, Compact, Emit, Finish
from steploop.reducer.events import CompactionFinished, MessagesInserted, ModelCallFailed
from steploop.reducer.messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.transitions import ModelError, PromptTooLong
from tests.reducer.driver import SAFE, Driver


def _use(i: int, tid: str) -> AssistantMessage:
    return AssistantMessage(
        id=f"a{i}", response_id=f"r{i}", model="m", content=(ToolUseBlock(id=tid, name="Read"),)
    )


def _result(i: int, tid: str) -> UserMessage:
    return UserMessage(
        id=f"u{i}", content=(ToolResultBlock(tool_use_id=tid, content="ok"),), origin="tool_result"
    )


def _session(*messages: Message) -> Session:
    return Session(conversation=Conversation.of(messages))


def _round(d: Driver, tid: str) -> None:
    d.tool_use(tid, "Read", SAFE, file_path="a.py")
    d.allow(tid)
    d.finish_tool(tid)
    d.end("tool_use")


def _api_error_text(fx: Any) -> str:
    errors = [
        e.item
        for e in fx
        if isinstance(e, Emit) and isinstance(e.item, AssistantMessage) and e.item.api_error
    ]
    assert len(errors) == 1
    block = errors[0].content[0]
    assert isinstance(block, TextBlock)
    return block.text


# --- start(): the prompt and the session ---------------------------------------------------------


@pytest.mark.spec("M-HIST-1")
@pytest.mark.parametrize("prompt", ["", " ", "\n\t  \r\n"], ids=["empty", "space", "blank"])
def test_an_empty_or_blank_prompt_is_refused(prompt: str) -> None:
    """start() refuses a prompt without non-whitespace text: one clear error, no state."""
    with pytest.raises(MalformedConversation, match="the prompt is empty or only whitespace"):
        start(Request(prompt=prompt), default())


@pytest.mark.spec("M-HIST-1")
@pytest.mark.parametrize(
    "blocks",
    [
        (),
        (TextBlock(text=""),),
        (TextBlock(text="look"), TextBlock(text="  ")),
        (ToolUseBlock(id="t1", name="Read"),),
        (ToolResultBlock(tool_use_id="t9", content="x"),),
    ],
    ids=["no-blocks", "empty-text", "blank-text", "tool-use", "orphan-result"],
)
def test_a_prompt_of_blocks_the_api_refuses_is_refused(blocks: tuple[Any, ...]) -> None:
    """A prompt of blocks: none, a blank text block, a tool_use, a result of no tool_use."""
    with pytest.raises(MalformedConversation, match="prompt") as caught:
        start(Request(prompt=blocks), default())
    assert caught.value.problem == str(caught.value)


@pytest.mark.spec("M-HIST-1")
def test_a_prompt_of_an_image_and_text_is_taken() -> None:
    """Blocks the API takes go through: an image and a question."""
    prompt = (ImageBlock(media_type="image/png", data="iVBOR"), TextBlock(text="what is it?"))
    s, fx = start(Request(prompt=prompt), default())
    assert [e for e in fx if isinstance(e, CallModel)]
    assert s.conversation.problem is None


@pytest.mark.spec("M-HIST-1")
@pytest.mark.parametrize(
    ("history", "named"),
    [
        ([UserMessage(id="p", content=(TextBlock(text="hi"),)), _result(1, "t1")], "'t1'"),
        ([_use(1, "t1"), _result(1, "t1"), _use(2, "t1"), _result(2, "t1")], "'t1'"),
        ([_use(1, ""), _result(1, "")], "empty id"),
        ([_use(1, " "), _result(1, " ")], "empty id"),
        ([UserMessage(id="p", content=(TextBlock(text=""),))], "non-whitespace"),
    ],
    ids=["orphan-result", "duplicate-id", "empty-id", "blank-id", "empty-text"],
)
def test_a_session_the_api_refuses_is_refused(history: list[Message], named: str) -> None:
    """A carried-over session holding an orphan tool_result, a tool_use id twice, an empty
    id or an empty text block: start() raises naming it, before anything is emitted."""
    with pytest.raises(MalformedConversation, match="session's conversation") as caught:
        start(Request(prompt="go on"), default(), _session(*history))
    assert named in caught.value.problem


@pytest.mark.spec("M-HIST-1")
def test_a_session_the_machine_made_is_taken() -> None:
    """A session from a finished turn carries on (the machine's histories are well formed)."""
    d = Driver(default())
    _round(d, "t1")
    d.reply()
    d.hooks_pass()
    nxt = Driver(default(), "and now?", session=d.state.session())
    assert nxt.of(CallModel)


# --- step(): the model's tool_use ids [B-MODEL-2] ------------------------------------------------


@pytest.mark.spec("B-MODEL-2", "M-HIST-1")
def test_a_tool_use_id_of_an_earlier_round_ends_the_call_as_malformed() -> None:
    """A response reusing a tool_use id of an earlier round: model_error, naming the id; the
    reused call never runs and is never stored."""
    d = Driver(default())
    _round(d, "toolu_1")
    fx = d.tool_use("toolu_1", "Read", SAFE, file_path="b.py")
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, ModelError)
    text = _api_error_text(fx)
    assert text.startswith("API Error: the model sent a malformed response: tool_use id 'toolu_1'")
    assert "already used by an earlier message of the conversation" in text
    uses = [
        b
        for m in d.state.conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    assert [u.id for u in uses] == ["toolu_1"]


@pytest.mark.spec("B-MODEL-2")
def test_a_tool_use_id_of_an_earlier_turn_ends_the_call_as_malformed() -> None:
    """Across user turns too: the next turn's response may not reuse the session's ids."""
    d = Driver(default())
    _round(d, "toolu_1")
    d.reply()
    d.hooks_pass()
    nxt = Driver(default(), "again", session=d.state.session())
    fx = nxt.tool_use("toolu_1")
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, ModelError)


@pytest.mark.spec("B-MODEL-1", "B-MODEL-2")
@pytest.mark.parametrize(
    ("first", "second", "words"),
    [
        ("t1", "t1", "appears twice in one response"),
        ("t1", "", "is empty"),
        ("t1", "\t", "is empty"),
    ],
    ids=["twice-in-response", "empty", "blank"],
)
def test_a_response_with_a_repeated_or_empty_id_is_malformed(
    first: str, second: str, words: str
) -> None:
    """Within one response: the second tool_use with the same id, or an empty id, ends the
    call; the first call of the response gets its error result (T-MODEL-1)."""
    d = Driver(default())
    d.tool_use(first)
    fx = d.block(ToolUseBlock(id=second, name="Read"), tool=SAFE)
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, ModelError)
    assert words in _api_error_text(fx)
    results = [
        b
        for m in d.state.conversation.messages()
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [r.tool_use_id for r in results] == [first]


@pytest.mark.spec("B-MODEL-2")
def test_ten_thousand_reuses_are_refused_at_the_first() -> None:
    """The outside report's case, 10,000 responses reusing one id: the second use ends the
    turn; nothing after it is taken."""
    d = Driver(default())
    _round(d, "toolu_same")
    fx = d.tool_use("toolu_same")
    assert isinstance(fx[-1], Finish)
    assert d.phase == "done"


@pytest.mark.spec("B-MODEL-2")
def test_an_id_a_compaction_removed_is_free_again() -> None:
    """After a compaction the summary holds no tool_use: the id may be used again."""
    d = Driver(default(context_window=60_000))
    _round(d, "toolu_1")
    d.reply()
    d.hooks_pass()
    nxt = Driver(default(context_window=60_000), "x" * 200_000, session=d.state.session())
    (compact,) = nxt.of(Compact)
    summary = UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True)
    nxt.feed(CompactionFinished(compact_id=compact.compact_id, messages=(summary,)))
    fx = nxt.tool_use("toolu_1")
    assert not [e for e in fx if isinstance(e, Finish)]
    assert nxt.state.round.slots[0].tool_use_id == "toolu_1"


# --- step(): messages from the shell ----------------------------------------------------------


@pytest.mark.spec("M-HIST-1", "R-INSERT-1")
@pytest.mark.parametrize(
    "message",
    [
        UserMessage(id="i1", content=(ToolResultBlock(tool_use_id="nope", content="x"),)),
        UserMessage(id="i1", content=(TextBlock(text="   "),)),
    ],
    ids=["orphan-result", "blank-text"],
)
def test_inserted_messages_the_api_refuses_are_refused(message: UserMessage) -> None:
    """MessagesInserted that would make the conversation unsendable: a clear error, the state
    unchanged (the driver may not insert it)."""
    d = Driver(default())
    before = d.state
    with pytest.raises(MalformedConversation, match="inserted messages"):
        d.feed(MessagesInserted(messages=(message,)))
    assert d.state is before


@pytest.mark.spec("M-HIST-1", "R-CTX-4")
def test_a_compaction_the_api_would_refuse_fails() -> None:
    """A compaction whose messages hold an orphan tool_result is a failed compaction (its
    reason names the problem): the turn goes on with the old conversation."""
    d = Driver(default(context_window=60_000), "x" * 200_000)
    (compact,) = d.of(Compact)
    before = d.state.conversation
    bad = UserMessage(id="c1", content=(ToolResultBlock(tool_use_id="gone", content="x"),))
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=(bad,)))
    assert d.state.tracking.consecutive_failures == 1
    assert d.state.conversation is before
    assert not [e for e in fx if isinstance(e, Emit) and e.item == bad]


@pytest.mark.spec("M-HIST-1", "C-REACTIVE-1")
def test_a_reactive_compaction_the_api_would_refuse_surfaces_the_error() -> None:
    """A reactive compaction answered with an orphan tool_result fails: the withheld
    prompt-too-long error surfaces and the turn ends prompt_too_long."""
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="prompt_too_long", status=400))
    (compact,) = [e for e in fx if isinstance(e, Compact)]
    bad = UserMessage(id="c1", content=(ToolResultBlock(tool_use_id="gone", content="x"),))
    fx = d.feed(CompactionFinished(compact_id=compact.compact_id, messages=(bad,)))
    assert isinstance(fx[-1], Finish) and fx[-1].terminal == PromptTooLong()
