"""The conversation: a persistent, append-only value with a chained digest (specs/ R-COST-1..3).

Appending is O(1): a new node points at the previous one and carries the running length, the
chained digest and the running token estimate. Equality is O(1) on (length, digest). Effects such
as ``CallModel`` carry a ``Conversation`` without copying it; the shell materialises it once with
:meth:`Conversation.messages`.

The conversation also knows its tool_use ids (:class:`ToolUseIndex`, specs/ R-COST-3): an
append adds the ids of its message in O(1), and :meth:`Conversation.has_tool_use` answers in
O(1) for a conversation built by appending, whatever its length. Each node keeps the first
problem that makes its history one the API refuses (``problem``, specs/ M-HIST-1): a tool_use
id that is empty or used twice, a tool_result naming no earlier tool_use, a blank text block or
a tool_use block in a user message. Neither is part of equality or of the digest.

Token accounting follows the reference (specs/ R-TOK-1): the context size is the usage total of
the last response with real usage, anchored at the *first* record of that response, plus a rough
estimate (UTF-16 length / 4, rounded half up; images 2,000; an opaque block its JSON text) of
every message after the anchor. Earlier Claude Code versions counted otherwise (specs/ VER-3):
anchored at the record that carries the usage, or the usage alone; :meth:`Conversation.token_count`
takes the rule as its ``mode``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs

from steploop.reducer.canonical import chain_digest
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

__all__ = [
    "EMPTY_DIGEST",
    "Conversation",
    "ToolUseIndex",
    "estimate_message",
    "estimate_text",
]

EMPTY_DIGEST = b"\x00" * 16
SYNTHETIC_MODEL = "<synthetic>"
IMAGE_TOKENS = 2_000


# A prebuilt encoder: json.dumps with non-default arguments builds a new encoder per call.
_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _utf16_len(s: str) -> int:
    if s.isascii():
        return len(s)
    # two bytes a UTF-16 unit (a lone surrogate is one unit, as in the reference's string length)
    return len(s.encode("utf-16-le", "surrogatepass")) >> 1


def estimate_text(s: str) -> int:
    """round(UTF-16 length / 4), half up (reference rough estimate)."""
    return (_utf16_len(s) + 2) // 4


def _text_of(b: Any) -> str:
    return b.text  # type: ignore[no-any-return]


def _content_of(b: Any) -> str:
    return b.content  # type: ignore[no-any-return]


def _tool_use_text(b: Any) -> str:
    return b.name + _compact_json(b.input)  # type: ignore[no-any-return]


def _thinking_of(b: Any) -> str:
    return b.thinking  # type: ignore[no-any-return]


def _data_of(b: Any) -> str:
    return b.data  # type: ignore[no-any-return]


def _raw_of(b: Any) -> str:
    return b.raw  # type: ignore[no-any-return]


# The text each block kind is estimated on (one dict lookup per block on the append path).
_BLOCK_TEXT: dict[type, Any] = {
    TextBlock: _text_of,
    ToolResultBlock: _content_of,
    ToolUseBlock: _tool_use_text,
    ThinkingBlock: _thinking_of,
    RedactedThinkingBlock: _data_of,
    # the reference estimates a block it has no rule for on its JSON text; a text block's
    # citations are not counted (only its text), as in the reference
    OpaqueBlock: _raw_of,
}


def _estimate_block(b: Block) -> int:
    text_of = _BLOCK_TEXT.get(type(b))
    if text_of is not None:
        return estimate_text(text_of(b))
    if isinstance(b, ImageBlock):
        return IMAGE_TOKENS
    raise TypeError(type(b).__name__)


def estimate_message(m: Message) -> int:
    """Rough token estimate of one message; system notices are never sent, so count 0."""
    cls = type(m)
    if cls is UserMessage or cls is AssistantMessage:
        content = m.content  # type: ignore[union-attr]
        if len(content) == 1:
            return _estimate_block(content[0])
        return sum(_estimate_block(b) for b in content)
    if cls is AttachmentMessage:
        data = m.data  # type: ignore[union-attr]
        return estimate_text(" ".join(f"{k}={v}" for k, v in data)) if data else 0
    return 0


def _has_real_usage(m: Message) -> bool:
    return (
        isinstance(m, AssistantMessage)
        and m.usage is not None
        and m.model != SYNTHETIC_MODEL
        and m.api_error is None
    )


_set = object.__setattr__
_new = object.__new__


# --- the tool_use ids of a conversation (R-COST-3) ---------------------------------------------


class ToolUseIndex:
    """The tool_use ids of a chain of conversation nodes: an append-only table the nodes share.

    ``own`` maps an id to its order (how many ids the table held before it); ``log`` lists them
    in that order. A node sees the table through a *view* ``(index, k)``: the ids of order
    below ``k`` (and, through ``base``, the first ``base_k`` of the table this one branched
    from). Appending a message with ids to a node whose view is the whole table extends the
    table in place, O(1): the node's own view is unchanged, since it never sees an order at or
    past its ``k``. A node whose table has moved on (another append was made to the same
    node: a branch) gets a new table over its view, O(1) too; a lookup walks at most
    :data:`MAX_OVERLAYS` such tables, and a branch that would make one more copies the ids it
    sees into a fresh table once. A message without ids shares its parent's view.
    """

    __slots__ = ("base", "base_k", "depth", "log", "own")

    def __init__(self, base: ToolUseIndex | None = None, base_k: int = 0) -> None:
        self.base = base
        self.base_k = base_k
        self.depth: int = 0 if base is None else base.depth + 1
        self.own: dict[str, int] = {}
        self.log: list[str] = []

    def visible(self, k: int) -> list[str]:
        """The ids the view ``(self, k)`` sees, oldest first (O(n): for copies and tests)."""
        out: list[list[str]] = []
        ix: ToolUseIndex | None = self
        while ix is not None:
            out.append([t for t, o in ix.own.items() if o < k])
            k, ix = ix.base_k, ix.base
        return [t for part in reversed(out) for t in part]


MAX_OVERLAYS = 16
"""How many branch tables a lookup may walk before a branch copies its view (R-COST-3)."""


def _has(ix: ToolUseIndex | None, k: int, tid: str) -> bool:
    while ix is not None:
        o = ix.own.get(tid)
        if o is not None and o < k:
            return True
        k = ix.base_k
        ix = ix.base
    return False


def _add(ix: ToolUseIndex | None, k: int, tid: str) -> tuple[ToolUseIndex, int]:
    """The view ``(ix, k)`` with ``tid`` added."""
    if ix is not None:
        log = ix.log
        if len(log) == k:  # this view is the whole table: extend it in place
            log.append(tid)
            if len(log) == k + 1:  # and no other append came in between (threads)
                ix.own.setdefault(tid, k)
                return ix, k + 1
        if ix.depth >= MAX_OVERLAYS:  # too many tables to walk: one fresh table of the view
            ids = ix.visible(k)
            ix = ToolUseIndex()
            ix.own.update((t, o) for o, t in enumerate(ids))
            ix.log.extend(ids)
            return _add(ix, len(ids), tid)
        ix = ToolUseIndex(ix, k)  # a branch
    else:
        ix = ToolUseIndex()
    ix.log.append(tid)
    ix.own[tid] = 0
    return ix, 1


def _blank(text: str) -> bool:
    return not text or text.isspace()


class Conversation:
    """An immutable message sequence. Build with :meth:`empty` / :meth:`of` / :meth:`append`.

    Each node is one message on top of its predecessor. The chained digest is computed lazily
    (on first use of :attr:`digest`, for every node back to the last one that has it), so a
    live run that never asks for digests never pays for the canonical encoding; a replay that
    asks at every step pays once per message, as before.
    """

    # Nodes keep their fields in the instance dict (no __slots__): a node is built with one
    # dict display instead of one __setattr__ per field, and the class refuses assignment.
    prev: Conversation | None
    last: Message | None
    length: int
    _digest: bytes | None
    est_total: int
    anchor_usage: int | None
    est_at_anchor: int
    # Bookkeeping for the anchor rule: the response the last assistant record belongs to and
    # the running estimate right after its first record.
    run_response_id: str | None
    est_after_run_first: int
    # the running estimate right after the last record with real usage (VER-3)
    est_at_usage: int
    # R-COST-3 / M-HIST-1: the view of the tool_use index, and the history's first problem
    ids: ToolUseIndex | None
    ids_k: int
    problem: str | None

    def __init__(
        self,
        *,
        prev: Conversation | None,
        last: Message | None,
        length: int,
        digest: bytes | None,
        est_total: int,
        anchor_usage: int | None,
        est_at_anchor: int,
        run_response_id: str | None,
        est_after_run_first: int,
        est_at_usage: int = 0,
        ids: ToolUseIndex | None = None,
        ids_k: int = 0,
        problem: str | None = None,
    ) -> None:
        """A node; ``digest=None`` means "computed from ``prev`` and ``last`` when asked"."""
        if digest is None and (last is None or prev is None):
            raise ValueError("a conversation node without a digest needs prev and last")
        _set(
            self,
            "__dict__",
            {
                "prev": prev,
                "last": last,
                "length": length,
                "_digest": digest,
                "est_total": est_total,
                "anchor_usage": anchor_usage,
                "est_at_anchor": est_at_anchor,
                "run_response_id": run_response_id,
                "est_after_run_first": est_after_run_first,
                "est_at_usage": est_at_usage,
                "ids": ids,
                "ids_k": ids_k,
                "problem": problem,
            },
        )

    def __setattr__(self, name: str, value: object) -> None:
        raise attrs.exceptions.FrozenInstanceError()

    def __delattr__(self, name: str) -> None:
        raise attrs.exceptions.FrozenInstanceError()

    @property
    def digest(self) -> bytes:
        """The chained digest H(prev.digest || canonical(last)) (R-COST-2)."""
        d = self._digest
        return d if d is not None else self._fill_digests()

    def _fill_digests(self) -> bytes:
        pending: list[Conversation] = []
        node: Conversation = self
        while node._digest is None:
            pending.append(node)
            assert node.prev is not None
            node = node.prev
        d = node._digest
        for n in reversed(pending):
            d = chain_digest(d, n.last)
            n.__dict__["_digest"] = d
        return d

    @staticmethod
    def empty() -> Conversation:
        return _EMPTY

    @staticmethod
    def of(messages: Any) -> Conversation:
        c = _EMPTY
        for m in messages:
            c = c.append(m)
        return c

    def append(self, m: Message) -> Conversation:
        est = self.est_total + estimate_message(m)
        run_id = self.run_response_id
        after_first = self.est_after_run_first
        if isinstance(m, AssistantMessage):
            if m.response_id != run_id:
                run_id = m.response_id
                after_first = est
        anchor_usage = self.anchor_usage
        est_at_anchor = self.est_at_anchor
        est_at_usage = self.est_at_usage
        if _has_real_usage(m):
            assert isinstance(m, AssistantMessage) and m.usage is not None
            anchor_usage = m.usage.total
            est_at_anchor = after_first
            est_at_usage = est
        ix, k, problem = self.ids, self.ids_k, self.problem
        cls = m.__class__
        if cls is AssistantMessage:
            for b in m.content:  # type: ignore[union-attr]
                if b.__class__ is ToolUseBlock:
                    tid = b.id
                    if problem is None:
                        if _blank(tid):
                            problem = f"message {m.id!r} has a tool_use with an empty id"
                        elif _has(ix, k, tid):
                            problem = f"tool_use id {tid!r} is used twice (message {m.id!r})"
                    ix, k = _add(ix, k, tid)
        elif cls is UserMessage and problem is None:
            problem = _user_problem(m, ix, k)  # type: ignore[arg-type]
        c = _new(Conversation)
        _set(
            c,
            "__dict__",
            {
                "prev": self,
                "last": m,
                "length": self.length + 1,
                "_digest": None,
                "est_total": est,
                "anchor_usage": anchor_usage,
                "est_at_anchor": est_at_anchor,
                "run_response_id": run_id,
                "est_after_run_first": after_first,
                "est_at_usage": est_at_usage,
                "ids": ix,
                "ids_k": k,
                "problem": problem,
            },
        )
        return c

    def has_tool_use(self, tool_use_id: str) -> bool:
        """Whether a tool_use of this conversation has the id (R-COST-3: O(1) for a
        conversation built by appending, whatever its length)."""
        return _has(self.ids, self.ids_k, tool_use_id)

    def extend(self, ms: Any) -> Conversation:
        c = self
        for m in ms:
            c = c.append(m)
        return c

    def token_count(self, mode: str = "estimate_from_first") -> int:
        """Context size: last real usage + estimate of what came after (R-TOK-1).

        ``mode`` (specs/ VER-3, ``LoopConfig.legacy.context_count``): ``estimate_from_first``
        anchors at the first record of the last response with real usage (2.1.88);
        ``estimate_from_last`` at the record that carries the usage (its last); ``last_usage``
        is that usage alone, nothing after it estimated. With no usage, everything is
        estimated."""
        if self.anchor_usage is None:
            return self.est_total
        if mode == "estimate_from_first":
            return self.anchor_usage + (self.est_total - self.est_at_anchor)
        if mode == "estimate_from_last":
            return self.anchor_usage + (self.est_total - self.est_at_usage)
        return self.anchor_usage

    def reversed(self) -> Iterator[Message]:
        node: Conversation | None = self
        while node is not None and node.last is not None:
            yield node.last
            node = node.prev

    def messages(self) -> tuple[Message, ...]:
        """All messages in order (O(n)); for the shell, not for the reducer's hot path."""
        out = list(self.reversed())
        out.reverse()
        return tuple(out)

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages())

    def __len__(self) -> int:
        return self.length

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Conversation):
            return NotImplemented
        return self.length == other.length and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"Conversation.of({list(self.messages())!r})"

    def __canonical__(self) -> dict[str, Any]:
        return {"length": self.length, "digest": self.digest.hex()}


def _user_problem(m: UserMessage, ix: ToolUseIndex | None, k: int) -> str | None:
    """[M-HIST-1] What in user message ``m`` the API would refuse, given the ids before it."""
    for b in m.content:
        cls = b.__class__
        if cls is ToolResultBlock:
            tid = b.tool_use_id  # type: ignore[union-attr]
            if not _has(ix, k, tid):
                return f"the tool_result for {tid!r} in message {m.id!r} names no earlier tool_use"
        elif cls is TextBlock:
            if _blank(b.text):  # type: ignore[union-attr]
                return f"message {m.id!r} has a text block without non-whitespace text"
        elif cls is ToolUseBlock:
            return f"message {m.id!r} is a user message with a tool_use block"
    return None


_EMPTY = Conversation(
    prev=None,
    last=None,
    length=0,
    digest=EMPTY_DIGEST,
    est_total=0,
    anchor_usage=None,
    est_at_anchor=0,
    run_response_id=None,
    est_after_run_first=0,
    est_at_usage=0,
)

_ = SystemMessage  # system notices are part of the conversation but estimate to 0
