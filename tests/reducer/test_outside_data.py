"""Outside data the reducer meets (issue #17): each case becomes an event the machine answers or
is normalised, never an exception out of step()."""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import Conversation, default
from steploop.reducer.canonical import (
    canonical_bytes,
    canonical_bytes_reference,
    data_problem,
    state_digest,
)
from steploop.reducer.config import Gates
from steploop.reducer.context import collapse
from steploop.reducer.effects import Compact
from steploop.reducer.events import CompactionFinished
from steploop.reducer.messages import (
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

# --- a compaction result carrying origin="collapse" (steploop/reducer/context.py) ----------------------

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


# --- lone surrogates and deep values in the canonical encoding (steploop/reducer/canonical.py) ---------


@pytest.mark.spec("B-TEXT-1", "R-COST-2")
def test_a_state_with_a_lone_surrogate_has_a_digest() -> None:
    """step() with a surrogate in a tool result raised UnicodeEncodeError (the conversation's
    chain digest); the digest is now defined and equals the reference encoding's."""
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    d.end("tool_use")
    d.finish_tool("t1", "bad\udcff.txt")
    digest = state_digest(d.state)
    assert digest == state_digest(d.state) and len(digest) == 32
    assert canonical_bytes(d.state) == canonical_bytes_reference(d.state)
    assert canonical_bytes("\ud800") != canonical_bytes("\ufffd")


@pytest.mark.spec("B-MODEL-1")
def test_canonical_bytes_of_a_too_deep_value_is_a_clear_error() -> None:
    """A value nested past the recursion limit raised RecursionError; now a ValueError."""
    v: Any = {}
    for _ in range(5_000):
        v = {"a": v}
    with pytest.raises(ValueError, match="nested this deep"):
        canonical_bytes(ToolUseBlock(id="t", name="x", input=v))


@pytest.mark.spec("B-MODEL-1")
@pytest.mark.parametrize(
    ("value", "problem"),
    [
        pytest.param({"a": [1, 2.5, None, True, "s", {"b": []}]}, None, id="json"),
        pytest.param([[[]]], None, id="lists"),
        pytest.param({"n": 10**100 - 1, "m": -(10**100) + 1}, None, id="100-digits"),
        pytest.param({"n": 10**100}, "more than 100 digits", id="101-digits"),
        pytest.param({"n": -(10**100)}, "more than 100 digits", id="negative-101-digits"),
        pytest.param({"f": float("-inf")}, "-inf", id="minus-inf"),
        pytest.param({1: 2}, "not a string", id="int-key"),
        pytest.param({"t": (1, 2)}, "a tuple", id="tuple"),
        pytest.param({"o": object()}, "a object", id="object"),
    ],
)
def test_data_problem(value: Any, problem: str | None) -> None:
    got = data_problem(value)
    assert (got is None) if problem is None else (got is not None and problem in got), got


@pytest.mark.spec("B-MODEL-1")
def test_data_problem_depth_is_exact_and_iterative() -> None:
    """Level 100 is fine, 101 is not; 100,000 levels are checked without recursion."""

    def deep(n: int) -> Any:
        v: Any = {}
        for _ in range(n - 1):
            v = {"a": v}
        return v

    assert data_problem(deep(100)) is None
    assert "deeper than 100" in (data_problem(deep(101)) or "")
    assert "deeper than 100" in (data_problem(deep(100_000)) or "")
