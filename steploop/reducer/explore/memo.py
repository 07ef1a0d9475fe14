"""A fold over a conversation's messages, memoised per node by identity (specs/ R-COST-2).

The explorer reads a few running figures of every conversation it meets (the open tool_use
ids of INV-8, the response count of ABS-1). Conversations are persistent chains that share
their prefixes, so each figure is a fold along the chain, memoised per node. The memo is keyed
by the node's identity and holds the node, so a key can never be reused while it is in the
table; keying by the chained digest (equal histories share an entry) would give the same
values but makes every node compute its canonical digest, which nothing else in an exploration
needs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from steploop.reducer.conversation import Conversation

T = TypeVar("T")

MEMO_LIMIT = 400_000
"""Entries kept before the table starts afresh (a bound on memory; values are recomputed)."""


class ChainMemo(Generic[T]):
    """``fold(value_before, node) -> value`` over the nodes of a chain, memoised per node."""

    def __init__(self, initial: T, fold: Callable[[T, Conversation], T]) -> None:
        self.initial = initial
        self.fold = fold
        self.table: dict[int, tuple[Conversation, T]] = {}
        self._seed()

    def _seed(self) -> None:
        empty = Conversation.empty()
        self.table[id(empty)] = (empty, self.initial)

    def get(self, conv: Conversation) -> T:
        """The fold's value at ``conv`` (every node from the root, the root's own message none)."""
        table = self.table
        hit = table.get(id(conv))
        if hit is not None:
            return hit[1]
        stack: list[Conversation] = []
        node: Conversation | None = conv
        cur = self.initial
        while node is not None:
            hit = table.get(id(node))
            if hit is not None:
                cur = hit[1]
                break
            stack.append(node)
            node = node.prev
        if len(table) + len(stack) > MEMO_LIMIT:
            table.clear()
            self._seed()
        fold = self.fold
        for c in reversed(stack):
            cur = fold(cur, c)
            table[id(c)] = (c, cur)
        return cur
