"""Context-management arithmetic: the pure parts of the round pipeline (specs/ R-CTX-*).

Everything here takes a :class:`Conversation` and returns a new one (or the same one when the
rule does not fire). The common case (nothing to do) is O(1): each rule first compares the
running token count with its threshold. Only a rule that fires walks the conversation.

Snip and context collapse were not in the reference's public source; the rules here are
steploop's own (specs/ S-SNIP-1, S-COLLAPSE-1..2), chosen to be simple and replayable:
both work on whole *segments* (one model response, its tool results and attachments), so a
tool_use is never separated from its tool_result.
"""

from __future__ import annotations

from collections.abc import Sequence

from steploop.reducer.conversation import Conversation, estimate_message
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

__all__ = [
    "CLEARED_RESULT",
    "COMPACTABLE_TOOLS",
    "collapse",
    "microcompact",
    "persisted_preview",
    "segments",
    "snip",
]

COMPACTABLE_TOOLS = frozenset(
    {"Read", "Bash", "PowerShell", "Grep", "Glob", "WebSearch", "WebFetch", "Edit", "Write"}
)
CLEARED_RESULT = "[Old tool result content cleared]"


def segments(messages: Sequence[Message]) -> tuple[tuple[Message, ...], list[tuple[Message, ...]]]:
    """Split into a head (everything before the first response) and segments, each starting
    at the first record of a model response and running to the next one."""
    head: list[Message] = []
    segs: list[list[Message]] = []
    current_response: str | None = None
    for m in messages:
        if isinstance(m, AssistantMessage) and m.response_id != current_response:
            current_response = m.response_id
            segs.append([m])
        elif segs:
            segs[-1].append(m)
        else:
            head.append(m)
    return tuple(head), [tuple(s) for s in segs]


def _est(ms: Sequence[Message]) -> int:
    return sum(estimate_message(m) for m in ms)


def snip(
    conv: Conversation, count: int, threshold: int, keep_rounds: int, boundary_id: str
) -> tuple[Conversation, int, SystemMessage | None]:
    """S-SNIP-1: while the count is at or over ``threshold`` and more than ``keep_rounds``
    segments remain, drop the oldest segment. Returns (conversation, tokens freed, boundary)."""
    if count < threshold:
        return conv, 0, None
    head, segs = segments(conv.messages())
    freed = 0
    dropped = 0
    while len(segs) - dropped > keep_rounds and count - freed >= threshold:
        freed += _est(segs[dropped])
        dropped += 1
    if dropped == 0:
        return conv, 0, None
    n = sum(len(s) for s in segs[:dropped])
    boundary = SystemMessage(
        id=boundary_id,
        subtype="snip_boundary",
        text=f"Snipped {n} earlier messages (about {freed} tokens) to stay within the context window",
    )
    kept: list[Message] = [*head, boundary]
    for s in segs[dropped:]:
        kept.extend(s)
    return Conversation.of(kept), freed, boundary


def _tool_names(messages: Sequence[Message]) -> dict[str, str]:
    names: dict[str, str] = {}
    for m in messages:
        if isinstance(m, AssistantMessage):
            for b in m.content:
                if isinstance(b, ToolUseBlock):
                    names[b.id] = b.name
    return names


_STUB_PREFIX = "[Context collapsed: "
_MAX_COUNT_DIGITS = 18  # a count an int64 holds; a longer digit run is not a stub of ours


def _prior_stub_count(m: Message) -> int | None:
    """The N of an earlier stub of ours (``[Context collapsed: N earlier messages ...``), or
    None when ``m`` is not one. Only the stub's exact shape counts: a message from outside that
    merely says ``origin="collapse"`` (a compaction result can carry anything) stays in the head
    untouched, so nothing is lost and nothing is parsed that was not written here."""
    if not isinstance(m, UserMessage) or m.origin != "collapse" or len(m.content) != 1:
        return None
    block = m.content[0]
    if not isinstance(block, TextBlock) or not block.text.startswith(_STUB_PREFIX):
        return None
    digits, _, rest = block.text[len(_STUB_PREFIX) :].partition(" ")
    if not (digits.isascii() and digits.isdecimal() and len(digits) <= _MAX_COUNT_DIGITS):
        return None
    if not rest.startswith("earlier messages folded; tools used: "):
        return None
    return int(digits)


def collapse(
    conv: Conversation,
    count: int,
    threshold: int | None,
    keep_rounds: int,
    stub_id: str,
) -> tuple[Conversation, int, int]:
    """S-COLLAPSE-1/2: fold the oldest segments into one meta summary stub.

    With a ``threshold`` (the pipeline's commit rule) segments are folded while the count is at
    or over it; with ``threshold=None`` (the overflow drain) every segment but the newest
    ``keep_rounds`` is folded. Returns (conversation, tokens freed, segments committed).
    """
    if threshold is not None and count < threshold:
        return conv, 0, 0
    msgs = conv.messages()
    head, segs = segments(msgs)
    # An earlier stub sits at the end of the head; fold it into the new one.
    prior = _prior_stub_count(head[-1]) if head else None
    if prior is not None:
        head = head[:-1]
    folded = 0
    freed = 0
    while len(segs) - folded > keep_rounds and (threshold is None or count - freed >= threshold):
        freed += _est(segs[folded])
        folded += 1
    if folded == 0:
        return conv, 0, 0
    names = _tool_names([m for s in segs[:folded] for m in s])
    tools = ", ".join(sorted(set(names.values()))) or "none"
    n = (prior or 0) + sum(len(s) for s in segs[:folded])
    stub = UserMessage(
        id=stub_id,
        content=(
            TextBlock(text=f"{_STUB_PREFIX}{n} earlier messages folded; tools used: {tools}]"),
        ),
        is_meta=True,
        origin="collapse",
    )
    freed -= estimate_message(stub)
    kept: list[Message] = [*head, stub]
    for s in segs[folded:]:
        kept.extend(s)
    return Conversation.of(kept), max(0, freed), folded


def microcompact(conv: Conversation, keep_recent: int) -> tuple[Conversation, int]:
    """R-CTX-3: replace every compactable tool result but the newest ``max(1, keep_recent)``
    with CLEARED_RESULT. Returns (conversation, results cleared)."""
    msgs = conv.messages()
    names = _tool_names(msgs)
    keep = max(1, keep_recent)
    seen = 0
    out: list[Message] = list(msgs)
    cleared = 0
    for i in range(len(out) - 1, -1, -1):
        m = out[i]
        if not isinstance(m, UserMessage):
            continue
        changed = False
        blocks = list(m.content)
        for j in range(len(blocks) - 1, -1, -1):
            b = blocks[j]
            if (
                not isinstance(b, ToolResultBlock)
                or names.get(b.tool_use_id) not in COMPACTABLE_TOOLS
            ):
                continue
            seen += 1
            if seen > keep and b.content != CLEARED_RESULT:
                blocks[j] = ToolResultBlock(
                    tool_use_id=b.tool_use_id, content=CLEARED_RESULT, is_error=b.is_error
                )
                changed = True
                cleared += 1
        if changed:
            out[i] = UserMessage(id=m.id, content=tuple(blocks), is_meta=m.is_meta, origin=m.origin)
    if cleared == 0:
        return conv, 0
    return Conversation.of(out), cleared


def persisted_preview(tool_use_id: str, content: str, preview_chars: int) -> str:
    """R-CTX-0: the text that replaces an oversized tool result."""
    return (
        f"<persisted-output>\nThis result was {len(content)} characters, over the size limit. "
        f"The full text is stored as tool result {tool_use_id}.\n"
        f"Preview (first {preview_chars} characters):\n{content[:preview_chars]}\n</persisted-output>"
    )
