"""The words of the import report (IMP-19): what a user reads for each kind of message and each
kind of difference, asserted as text, so a changed word, a dropped field or a swapped side shows."""

from __future__ import annotations

import pytest

from steploop.effects.importer.compare import (
    Divergence,
    first_difference,
    kind_of,
    summarize,
    summarize_pair,
)
from steploop.effects.importer.segment import Item
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    ErrorInfo,
    Message,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)


def _asst(*blocks: Block, model: str = "m", stop: str | None = None) -> AssistantMessage:
    return AssistantMessage(id="a", response_id="r", model=model, content=blocks, stop_reason=stop)


def _error(
    message: str, category: str | None = None, kind: str = "server_error"
) -> AssistantMessage:
    return AssistantMessage(
        id="e",
        response_id="r",
        model="<synthetic>",
        content=(TextBlock(text=message),),
        api_error=ErrorInfo(kind=kind, message=message, status=500, category=category),
    )


def _result(content: str, *, is_error: bool = False) -> UserMessage:
    block = ToolResultBlock(tool_use_id="t1", content=content, is_error=is_error)
    return UserMessage(id="u", content=(block,), origin="tool_result")


@pytest.mark.spec("IMP-19")
@pytest.mark.parametrize(
    ("message", "summary", "kind"),
    [
        (None, "nothing", "nothing"),
        (UserMessage(id="u", content=(TextBlock(text="go\nnow"),)), "user [go⏎now]", "user"),
        (
            UserMessage(id="u", content=(TextBlock(text="note"),), is_meta=True),
            "user (meta) [note]",
            "user (meta)",
        ),
        (_result("ok"), "user [tool_result t1: ok]", "result"),
        (_result("bad", is_error=True), "user [tool_result t1 (error): bad]", "result"),
        (_asst(TextBlock(text="hi")), "assistant text [hi]", "assistant"),
        (
            _asst(ToolUseBlock(id="t1", name="Read", input={})),
            "assistant tool_use Read t1",
            "assistant",
        ),
        (_asst(ThinkingBlock(thinking="hm", signature="s")), "assistant thinking", "assistant"),
        (
            _error("API Error: 500", "server_error"),
            "API error server_error [API Error: 500]",
            "API error",
        ),
        (_error("API Error: x", ""), "API error (no error field) [API Error: x]", "API error"),
        (
            _error("API Error: y", None, kind="overloaded"),
            "API error overloaded [API Error: y]",
            "API error",
        ),
        (
            SystemMessage(id="s", subtype="stop_hook_summary", text="t"),
            "system stop_hook_summary",
            "system stop_hook_summary",
        ),
        (
            AttachmentMessage(id="x", attachment_type="max_turns_reached"),
            "attachment max_turns_reached",
            "attachment max_turns_reached",
        ),
    ],
)
def test_each_kind_of_message_is_summarized_in_the_reports_words(
    message: Message | None, summary: str, kind: str
) -> None:
    """summarize() and kind_of() name each kind of message as the report prints it."""
    assert summarize(message) == summary
    assert kind_of(message) == kind


@pytest.mark.spec("IMP-19")
def test_a_long_text_is_cut_at_the_limit_with_an_ellipsis() -> None:
    """A text longer than the limit keeps limit-1 characters and an ellipsis; one of exactly
    the limit is kept whole."""
    assert summarize(UserMessage(id="u", content=(TextBlock(text="x" * 10),)), limit=10) == (
        f"user [{'x' * 10}]"
    )
    assert summarize(UserMessage(id="u", content=(TextBlock(text="x" * 11),)), limit=10) == (
        f"user [{'x' * 9}…]"
    )


@pytest.mark.spec("IMP-19")
@pytest.mark.parametrize(
    ("want", "got", "expected", "wrote"),
    [
        (
            _asst(TextBlock(text="hi"), model="claude-haiku"),
            _asst(TextBlock(text="hi"), model="claude-opus"),
            "assistant text [hi] (model claude-haiku)",
            "assistant text [hi] (model claude-opus)",
        ),
        (
            _asst(TextBlock(text="hi"), stop="end_turn"),
            _asst(TextBlock(text="hi"), stop="tool_use"),
            "assistant text [hi] (stop reason end_turn)",
            "assistant text [hi] (stop reason tool_use)",
        ),
        (
            _error("API Error: 500 boom", "server_error"),
            _error("API Error: 500 bang", ""),
            "API error server_error [API Error: 500 boom] (error field server_error; text at 16 '…00 boom')",
            "API error (no error field) [API Error: 500 bang] (error field (none); text at 16 '…00 bang')",
        ),
        (
            _result("same text"),
            _result("same text", is_error=True),
            "user [tool_result t1: same text] (block 1 is_error False)",
            "user [tool_result t1 (error): same text] (block 1 is_error True)",
        ),
        (
            UserMessage(id="u", content=(TextBlock(text="n"),)),
            UserMessage(id="u", content=(TextBlock(text="n"),), is_meta=True),
            "user [n] (meta False)",
            "user (meta) [n] (meta True)",
        ),
        (
            SystemMessage(id="s", subtype="informational", text="t", level="info"),
            SystemMessage(id="s", subtype="informational", text="t", level="warning"),
            "system informational (level info)",
            "system informational (level warning)",
        ),
        (
            SystemMessage(id="s", subtype="compact_boundary", text="before"),
            SystemMessage(id="s", subtype="compact_boundary", text="after"),
            "system compact_boundary (text 'before')",
            "system compact_boundary (text 'after')",
        ),
        (
            AttachmentMessage(id="x", attachment_type="max_turns_reached", data=(("turns", 3),)),
            AttachmentMessage(id="x", attachment_type="max_turns_reached", data=(("turns", 4),)),
            "attachment max_turns_reached (turns 3)",
            "attachment max_turns_reached (turns 4)",
        ),
        (
            _asst(TextBlock(text="a"), TextBlock(text="b")),
            _asst(TextBlock(text="a")),
            "assistant text [a] (blocks 2)",
            "assistant text [a] (blocks 1)",
        ),
        (
            _asst(TextBlock(text="a")),
            _asst(ToolUseBlock(id="t1", name="Read", input={})),
            "assistant text [a] (block 1 type text)",
            "assistant tool_use Read t1 (block 1 type tool_use)",
        ),
        (
            _asst(ToolUseBlock(id="t1", name="Read", input={"p": 1})),
            _asst(ToolUseBlock(id="t1", name="Read", input={"p": 2})),
            "assistant tool_use Read t1 (block 1 input {'p': 1})",
            "assistant tool_use Read t1 (block 1 input {'p': 2})",
        ),
    ],
)
def test_two_messages_that_differ_name_the_field_and_both_values(
    want: Message, got: Message, expected: str, wrote: str
) -> None:
    """summarize_pair() follows each side's summary with the fields that differ and that
    side's value, in one order, never two identical lines."""
    assert summarize_pair(want, got) == (expected, wrote)


def _item(line: int, message: Message) -> Item:
    return Item(line=line, kind="message", record={}, message=message)


@pytest.mark.spec("IMP-19")
def test_first_difference_says_where_and_what_on_each_side() -> None:
    """The three shapes of a divergence: the machine wrote something else, nothing more, or a
    message past the transcript's last; describe() puts line, step and both sides in one line."""
    hi, bye = _asst(TextBlock(text="hi")), _asst(TextBlock(text="bye"))
    n, div = first_difference([_item(7, hi)], [(3, bye)], compare_attachments=True)
    assert n == 0 and div is not None
    assert div.describe() == (
        "line 7, step 3: expected assistant text [hi] (block 1 text at 0 'hi'); "
        "the machine wrote assistant text [bye] (block 1 text at 0 'bye')"
    )
    assert (div.want_kind, div.got_kind, div.fields) == (
        "assistant",
        "assistant",
        ("block 1 text at 0",),
    )

    n, div = first_difference([_item(7, hi), _item(9, bye)], [(3, hi)], compare_attachments=True)
    assert n == 1 and div == Divergence(
        line=9,
        step=None,
        expected="assistant text [bye]",
        got="wrote nothing more",
        want_kind="assistant",
        got_kind="nothing",
    )
    assert div.describe() == "line 9: expected assistant text [bye]; the machine wrote nothing more"

    n, div = first_difference([_item(7, hi)], [(3, hi), (4, bye)], compare_attachments=True)
    assert n == 1 and div is not None
    assert div.describe() == (
        "after the turn's last record, step 4: expected nothing more; "
        "the machine wrote assistant text [bye]"
    )
    assert (div.want_kind, div.got_kind) == ("nothing", "assistant")


@pytest.mark.spec("IMP-19", "IMP-8")
def test_attachments_and_retry_notices_are_left_out_as_asked() -> None:
    """Attachments are compared only when asked; retry notices (system api_error) never."""
    hi = _asst(TextBlock(text="hi"))
    att = AttachmentMessage(id="x", attachment_type="max_turns_reached")
    notice = SystemMessage(id="s", subtype="api_error", text="retrying", level="warning")
    assert first_difference([_item(1, hi)], [(1, notice), (2, hi)], compare_attachments=True) == (
        1,
        None,
    )
    assert first_difference([_item(1, hi)], [(1, att), (2, hi)], compare_attachments=False) == (
        1,
        None,
    )
    n, div = first_difference([_item(1, hi)], [(1, att), (2, hi)], compare_attachments=True)
    assert n == 0 and div is not None and div.got == "wrote attachment max_turns_reached"
