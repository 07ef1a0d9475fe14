"""The conversation's tool_use id index (R-COST-3): correct on every branch of a persistent
conversation, and flat in cost: appending and looking up do the same work at 100 ids as at
10,000 (counted, not timed)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steploop.reducer import conversation as conversation_module
from steploop.reducer.conversation import MAX_OVERLAYS, Conversation
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)


def _use(tid: str, n: int = 0) -> AssistantMessage:
    return AssistantMessage(
        id=f"a{n}", response_id=f"r{n}", model="m", content=(ToolUseBlock(id=tid, name="Read"),)
    )


def _result(tid: str, n: int = 0) -> UserMessage:
    return UserMessage(id=f"u{n}", content=(ToolResultBlock(tool_use_id=tid, content="ok"),))


def _text(n: int = 0) -> UserMessage:
    return UserMessage(id=f"p{n}", content=(TextBlock(text="hello"),))


def _naive(messages: tuple[Message, ...]) -> tuple[set[str], str | None]:
    """The ids and whether the history has a problem, computed from scratch."""
    ids: set[str] = set()
    problem = None
    for m in messages:
        if isinstance(m, AssistantMessage):
            for b in m.content:
                if isinstance(b, ToolUseBlock):
                    if problem is None and (not b.id.strip() or b.id in ids):
                        problem = "bad id"
                    ids.add(b.id)
        elif isinstance(m, UserMessage) and problem is None:
            for b in m.content:
                if isinstance(b, ToolResultBlock) and b.tool_use_id not in ids:
                    problem = "orphan"
                    break
                if isinstance(b, TextBlock) and not b.text.strip():
                    problem = "blank"
                    break
                if isinstance(b, ToolUseBlock):
                    problem = "use in user"
                    break
    return ids, problem


POOL = ["t0", "t1", "t2", "t3", "t4", ""]
message = st.one_of(
    st.sampled_from(POOL).map(_use),
    st.sampled_from(POOL).map(_result),
    st.just(_text()),
    st.just(UserMessage(id="b", content=(TextBlock(text=" "),))),
)
# each step appends a message to an earlier node (``back`` nodes ago), so the conversations
# form a tree: chains, repeated branches from one node, branches of branches
steps = st.lists(st.tuples(st.integers(0, 40), message), min_size=1, max_size=120)


@pytest.mark.spec("R-COST-3", "M-HIST-1")
@settings(max_examples=150, deadline=None)
@given(steps=steps)
def test_every_node_of_a_tree_of_appends_knows_its_ids_and_its_problem(
    steps: list[tuple[int, Message]],
) -> None:
    """has_tool_use and problem agree with a scan from scratch, on every node, every branch."""
    nodes = [Conversation.empty()]
    for back, m in steps:
        nodes.append(nodes[max(0, len(nodes) - 1 - back)].append(m))
    for node in nodes:
        ids, problem = _naive(node.messages())
        for tid in [*POOL, "never"]:
            assert node.has_tool_use(tid) == (tid in ids), (tid, node.messages())
        assert (node.problem is None) == (problem is None), (node.problem, problem)


@pytest.mark.spec("R-COST-3")
def test_branches_of_branches_never_walk_more_than_the_bound() -> None:
    """A chain of branches, each from the newest branch's parent: lookups stay right and the
    tables a lookup walks stay at or under MAX_OVERLAYS."""
    node = Conversation.empty().append(_use("base"))
    for i in range(5 * MAX_OVERLAYS):
        parent = node
        parent.append(_use(f"lost{i}", i))  # takes the table: the next append is a branch
        node = parent.append(_use(f"kept{i}", i))
        assert node.ids is not None and node.ids.depth <= MAX_OVERLAYS
    assert node.has_tool_use("base") and node.has_tool_use(f"kept{5 * MAX_OVERLAYS - 1}")
    assert not any(node.has_tool_use(f"lost{i}") for i in range(5 * MAX_OVERLAYS))
    assert sorted(node.ids.visible(node.ids_k)) == sorted(  # type: ignore[union-attr]
        ["base", *(f"kept{i}" for i in range(5 * MAX_OVERLAYS))]
    )


def _history(n: int) -> Conversation:
    """n tool rounds: n ids."""
    c = Conversation.empty().append(_text())
    for i in range(n):
        c = c.append(_use(f"old{i}", i)).append(_result(f"old{i}", i))
    return c


def _calls(fn: Callable[[], Any]) -> int:
    """How many functions (Python and C) ``fn`` calls: a count of the work, independent of load."""
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event in ("call", "c_call"):
            count += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def _work(n: int) -> list[int]:
    """The calls of each operation on a history of ``n`` ids."""
    base = _history(n)
    base.append(_text())  # another append to base: appending a tool_use below branches
    tip = _history(n)
    return [
        _calls(lambda: base.append(_use("new", n))),  # a branch from base: O(1)
        _calls(lambda: base.append(_use("new", n)).append(_result("new", n))),
        _calls(lambda: base.has_tool_use("old0")),
        _calls(lambda: base.has_tool_use("absent")),
        _calls(lambda: tip.append(_use("next", n))),  # extends the table in place
    ]


@pytest.mark.spec("R-COST-3", "R-COST-1")
def test_appending_and_looking_up_cost_the_same_at_any_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Append a tool_use, its result, and look ids up, linearly and as a branch from an old
    node (the benchmark's repeated round): the same number of calls at 100 and at 10,000 ids,
    and no copy of the ids (ToolUseIndex.visible never runs)."""
    costs = {n: _work(n) for n in (100, 1_000, 10_000)}
    assert costs[100] == costs[1_000] == costs[10_000], costs

    copies = 0
    real = conversation_module.ToolUseIndex.visible

    def counted(self: Any, k: int) -> list[str]:
        nonlocal copies
        copies += 1
        return real(self, k)

    monkeypatch.setattr(conversation_module.ToolUseIndex, "visible", counted)
    base = _history(1_000)
    for i in range(50):  # 50 rounds from the same state, as round_cost does
        base.append(_use(f"r{i}", i)).append(_result(f"r{i}", i))
    assert copies == 0
