"""Outside data the reducer meets (issue #17): each case becomes an event the machine answers or
is normalised, never an exception out of step()."""

from __future__ import annotations

from typing import Any

import pytest

from reducer import Conversation, default
from reducer.config import Gates
from reducer.context import collapse
from reducer.effects import Compact
from reducer.events import CompactionFinished
from reducer.messages import (
    AssistantMessage,
    ImageBlock,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from tests.reducer.driver import Driver

# --- a compaction result carrying origin="collapse" (reducer/context.py) ----------------------

FOREIGN_STUBS = [
    pytest.param((), id="no-content"),
    pytest.param((ImageBlock(media_type="image/png", data="AAAA"),), id="image"),
    pytest.param((TextBlock(text="summary of the work so far"),), id="plain-text"),
    pytest.param((TextBlock(text="[Context collapsed: many earlier messages]"),), id="no-number"),
    pytest.param((TextBlock(text="[Context collapsed: " + "9" * 5_000 + " x]"),), id="huge-number"),
    pytest.param(
        (TextBlock(text="[Context collapsed: ²³ earlier messages folded; "),), id="digits"
    ),
    pytest.param((TextBlock(text="a"), TextBlock(text="b")), id="two-blocks"),
]


def _stub(m: Message) -> tuple[Any, ...]:
    assert isinstance(m, UserMessage) and m.origin == "collapse" and m.is_meta
    return m.content


def _segment(i: int) -> list[Message]:
    tid = f"t{i}"
    use = ToolUseBlock(id=tid, name="Read", input={})
    return [
        AssistantMessage(id=f"a{i}", response_id=f"r{i}", content=(use,), model="m"),
        UserMessage(id=f"u{i}", content=(ToolResultBlock(tool_use_id=tid, content="x" * 4_000),)),
    ]


@pytest.mark.spec("S-COLLAPSE-1")
@pytest.mark.parametrize("content", FOREIGN_STUBS)
def test_collapse_keeps_a_foreign_collapse_origin_message(content: tuple[Any, ...]) -> None:
    """A message marked origin="collapse" that is not a stub of ours (from a compaction result)
    stays in the head untouched; the new stub counts only what it folded. It raised IndexError,
    AssertionError or ValueError."""
    foreign = UserMessage(id="c2", content=content, is_meta=True, origin="collapse")
    msgs: list[Message] = [SystemMessage(id="c1", subtype="compact_boundary", text="x"), foreign]
    for i in range(4):
        msgs += _segment(i)
    out, freed, folded = collapse(Conversation.of(msgs), 10**6, None, 2, "stub")
    kept = out.messages()
    assert folded == 2 and freed > 0
    assert kept[:2] == (msgs[0], foreign)
    assert _stub(kept[2]) == (
        TextBlock(text="[Context collapsed: 4 earlier messages folded; tools used: Read]"),
    )


@pytest.mark.spec("S-COLLAPSE-1")
def test_collapse_still_folds_its_own_prior_stub() -> None:
    """Control: a stub of ours is folded into the next one and its count carried."""
    prior = UserMessage(
        id="s0",
        content=(
            TextBlock(text="[Context collapsed: 7 earlier messages folded; tools used: Bash]"),
        ),
        is_meta=True,
        origin="collapse",
    )
    msgs: list[Message] = [UserMessage(id="p", content=(TextBlock(text="go"),)), prior]
    for i in range(3):
        msgs += _segment(i)
    out, _, folded = collapse(Conversation.of(msgs), 10**6, None, 1, "stub")
    assert folded == 2
    assert [m.id for m in out.messages()[:2]] == ["p", "stub"]
    assert _stub(out.messages()[1]) == (
        TextBlock(text="[Context collapsed: 11 earlier messages folded; tools used: Read]"),
    )


@pytest.mark.spec("S-COLLAPSE-1")
@pytest.mark.parametrize("content", FOREIGN_STUBS[:3])
def test_step_survives_a_compaction_result_with_collapse_origin(content: tuple[Any, ...]) -> None:
    """End to end: auto-compact returns a collapse-origin message, later rounds collapse."""
    cfg = default(context_window=50_000, gates=Gates(history_snip=False))
    d = Driver(cfg)

    def round_(i: int, tokens: int) -> tuple[Any, ...]:
        d.tool_use(f"t{i}")
        d.allow(f"t{i}")
        d.end("tool_use", Usage(input_tokens=tokens))
        return d.finish_tool(f"t{i}", "x" * 8_000)

    round_(1, 1_000)
    fx = round_(2, 30_000)  # over auto-compact (29,000), under collapse (37,800)
    compact = next(e for e in fx if isinstance(e, Compact))
    foreign = UserMessage(id="c2", content=content, is_meta=True, origin="collapse")
    boundary = SystemMessage(id="c1", subtype="compact_boundary", text="Conversation compacted")
    d.feed(CompactionFinished(compact_id=compact.compact_id, messages=(boundary, foreign)))
    round_(3, 1_000)
    round_(4, 1_000)
    fx = round_(5, 38_500)  # collapse folds, then auto-compact gets the collapsed conversation
    sent = next(e for e in fx if isinstance(e, Compact)).conversation.messages()
    assert sent[:2] == (boundary, foreign)
    assert _stub(sent[2]) == (
        TextBlock(text="[Context collapsed: 2 earlier messages folded; tools used: Read]"),
    )
