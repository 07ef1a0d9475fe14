"""What changed a model request: two ``CallModel`` effects compared, the difference named by the
context layer that made it.

The round pipeline (specs/rules.md R-ORDER-1) changes what the model is sent through five layers,
and each leaves its own mark in the conversation:

==============  ==================================================================  ==============
layer           its mark                                                            rule
==============  ==================================================================  ==============
budget          a tool result replaced by its ``<persisted-output>`` preview        R-CTX-0
snip            a ``snip_boundary`` system message where older rounds were dropped  S-SNIP-1
microcompact    a tool result cleared to ``[Old tool result content cleared]``      R-CTX-3
collapse        a ``[Context collapsed: …]`` stub (a user message, origin collapse)  S-COLLAPSE-1
compaction      a ``compact_boundary`` and the summary that replaced the history     R-CTX-4
==============  ==================================================================  ==============

:func:`compare_requests` lines the two conversations up by content (ids left out, as the request
fingerprints do, :mod:`steploop.effects.trace.fingerprints`), keeps the common start and end,
and looks for these marks among the messages only one side has. A difference with no mark is the
conversation's own (another response, another tool result, hook feedback): "messages". The
model, ``max_tokens`` and streaming are compared too.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from steploop.effects.trace.fingerprints import Fingerprints
from steploop.reducer.context import CLEARED_RESULT
from steploop.reducer.conversation import estimate_message
from steploop.reducer.effects import CallModel
from steploop.reducer.messages import Message, SystemMessage, ToolResultBlock, UserMessage

__all__ = ["LAYERS", "RequestChange", "compare_requests", "layer_marks"]

#: The context layers, in the order the round pipeline applies them.
LAYERS: tuple[str, ...] = ("budget", "snip", "microcompact", "collapse", "compaction")

PERSISTED_PREFIX = "<persisted-output>"


def layer_marks(m: Message) -> tuple[str, ...]:
    """The layers whose mark ``m`` carries (usually none)."""
    if isinstance(m, SystemMessage):
        if m.subtype == "snip_boundary":
            return ("snip",)
        if m.subtype == "compact_boundary":
            return ("compaction",)
        return ()
    if not isinstance(m, UserMessage):
        return ()
    if m.origin == "collapse":
        return ("collapse",)
    if m.origin == "compact_summary":
        return ("compaction",)
    out: list[str] = []
    for b in m.content:
        if isinstance(b, ToolResultBlock):
            if b.content == CLEARED_RESULT and "microcompact" not in out:
                out.append("microcompact")
            elif b.content.startswith(PERSISTED_PREFIX) and "budget" not in out:
                out.append("budget")
    return tuple(out)


@attrs.frozen(kw_only=True)
class RequestChange:
    """How request B differs from request A (A: the recording's, B: the new run's)."""

    length_a: int
    length_b: int
    only_a: int  # messages of A that B does not send (by content)
    only_b: int
    tokens_a: int  # their estimated tokens (specs/rules.md R-TOK-1)
    tokens_b: int
    layers: tuple[str, ...]  # the layers whose marks differ, in pipeline order
    marks_a: tuple[str, ...]  # of them, those with a mark only A has
    marks_b: tuple[str, ...]
    other: tuple[str, ...]  # "model", "max_tokens", "streaming", "messages" (no layer's mark)

    @property
    def same(self) -> bool:
        return not self.layers and not self.other and self.only_a == self.only_b == 0

    def describe(self, a: str = "the recording's", b: str = "the new run's") -> str:
        """One line: what differs, and which layer changed it."""
        if self.same:
            return "the requests send the same messages"
        parts = [f"{a} request has {self.length_a:,} messages, {b} {self.length_b:,}"]
        if self.only_a or self.only_b:
            parts.append(
                f"{self.only_a:,} (~{self.tokens_a:,} tokens) only in {a}, "
                f"{self.only_b:,} (~{self.tokens_b:,} tokens) only in {b}"
            )
        if self.layers:
            named = []
            for layer in self.layers:
                side = [b if layer in self.marks_b else "", a if layer in self.marks_a else ""]
                named.append(f"{layer} (its mark in {' and '.join(s for s in side if s)})")
            parts.append("changed by " + ", ".join(named))
        if self.other:
            parts.append("also differ: " + ", ".join(self.other))
        return "; ".join(parts)


def _marks(ms: Sequence[Message]) -> set[str]:
    out: set[str] = set()
    for m in ms:
        out.update(layer_marks(m))
    return out


def compare_requests(
    a: CallModel, b: CallModel, fingerprints: Fingerprints | None = None
) -> RequestChange:
    """Name what differs between two model requests: their messages (by content), the context
    layers whose marks only one of them carries, and the model, ``max_tokens`` and streaming.

    Costs one pass over both conversations (their messages' content digests are memoised by
    ``fingerprints``, one per run, when given)."""
    fps = fingerprints or Fingerprints()
    ma, mb = a.conversation.messages(), b.conversation.messages()
    da = [fps.message(m) for m in ma]
    db = [fps.message(m) for m in mb]
    p = 0
    while p < len(da) and p < len(db) and da[p] == db[p]:
        p += 1
    q = 0
    while q < len(da) - p and q < len(db) - p and da[-1 - q] == db[-1 - q]:
        q += 1
    mid_a, mid_b = ma[p : len(ma) - q], mb[p : len(mb) - q]
    in_a = set(da[p : len(da) - q])
    in_b = set(db[p : len(db) - q])
    only_a = [m for m, d in zip(mid_a, da[p : len(da) - q], strict=True) if d not in in_b]
    only_b = [m for m, d in zip(mid_b, db[p : len(db) - q], strict=True) if d not in in_a]
    marks_a, marks_b = _marks(only_a), _marks(only_b)
    layers = tuple(x for x in LAYERS if x in marks_a or x in marks_b)
    other: list[str] = []
    if a.model != b.model:
        other.append("model")
    if a.max_tokens != b.max_tokens:
        other.append("max_tokens")
    if a.streaming != b.streaming:
        other.append("streaming")
    if (only_a or only_b) and not layers:
        other.append("messages")
    return RequestChange(
        length_a=len(ma),
        length_b=len(mb),
        only_a=len(only_a),
        only_b=len(only_b),
        tokens_a=sum(estimate_message(m) for m in only_a),
        tokens_b=sum(estimate_message(m) for m in only_b),
        layers=layers,
        marks_a=tuple(x for x in LAYERS if x in marks_a),
        marks_b=tuple(x for x in LAYERS if x in marks_b),
        other=tuple(other),
    )
