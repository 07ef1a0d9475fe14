"""A thread's records, classified and cut into user turns (IMP-8..IMP-10).

Every record of a thread becomes an :class:`Item` of one kind (the table in specs/import.md
§4). A **prompt candidate** is a user record that is not a tool result, not meta, not a compact
summary and not an interrupt marker; each candidate opens a segment. A segment is a **user
turn** when it holds output only a running loop writes (a model response, a tool result, an
interrupt marker, a stop-hook record, an API error, an auto compaction); the turn ends at its
last such record, and what follows it (a local command's caveat, a manual ``/compact``, the
REPL's ``turn_duration``) is **history**: it joins the conversation the next turn starts from.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import attrs

from steploop.effects.importer.chain import Thread
from steploop.effects.importer.convert import Converter, at_ms
from steploop.effects.importer.source import PROGRESS, Entry, SourceFile
from steploop.reducer.messages import Message, TextBlock, UserMessage

__all__ = ["LOOP_OUTPUT", "Item", "Segment", "segments"]

#: Kinds only a running loop writes: a segment holding one is a user turn.
LOOP_OUTPUT = frozenset(
    {
        "block",
        "api_error",
        "result",
        "interrupt",
        "stop_feedback",
        "stop_summary",
        "stop_prevent",
        "hook_stop",
        "compact",
        "retry_notice",
    }
)
#: Attachment types the machine writes itself (R-CMD-1, T-MAXTURNS-1, T-HOOK-1, T-PREVENT-1).
MACHINE_ATTACHMENTS = frozenset({"queued_command", "max_turns_reached"})


@attrs.define
class Item:
    """One record of a thread, classified. ``message`` is None for queue operations."""

    line: int
    kind: str
    record: dict[str, Any]
    message: Message | None = None
    command: str | None = None  # kind "command": the queued text consumed here (IMP-18)
    restart: bool = False  # the conversation restarts here: a 1.0.x continuation (IMP-23)

    @property
    def at_ms(self) -> int:
        return at_ms(self.record)

    @property
    def text(self) -> str | None:
        m = self.message
        if (
            isinstance(m, UserMessage)
            and len(m.content) == 1
            and isinstance(m.content[0], TextBlock)
        ):
            return m.content[0].text
        return None


@attrs.define
class Segment:
    kind: str  # "turn" or "history"
    items: list[Item]

    @property
    def lines(self) -> tuple[int, int]:
        return (self.items[0].line, self.items[-1].line)


def classify(record: dict[str, Any], message: Message | None) -> str:
    kind = record.get("type")
    if kind == "assistant":
        return "api_error" if record.get("isApiErrorMessage") is True else "block"
    if kind == "user":
        assert isinstance(message, UserMessage)
        if message.origin == "tool_result":
            return "result"
        if record.get("isCompactSummary") is True:
            return "compact_summary"
        if message.origin == "interrupt":
            return "interrupt"
        if message.origin == "stop_hook_feedback" and message.is_meta:
            return "stop_feedback"
        if message.is_meta:
            return "inserted"
        return "candidate"
    if kind == "system":
        sub = record.get("subtype")
        if sub == "compact_boundary":
            meta = record.get("compactMetadata")
            trigger = meta.get("trigger") if isinstance(meta, dict) else None
            return "compact" if trigger != "manual" else "manual_compact"
        if sub == "stop_hook_summary":
            return "stop_summary"
        if sub == "api_error":
            return "retry_notice"
        return "system_other"
    if kind == "attachment":
        att = record.get("attachment")
        t = att.get("type") if isinstance(att, dict) else None
        if t == "hook_stopped_continuation":
            hook = att.get("hookName") if isinstance(att, dict) else None
            if isinstance(hook, str) and hook.split(":")[0] in ("PreToolUse", "PostToolUse"):
                return "hook_stop"  # a tool hook stopped the turn (T-HOOK-1)
            return "stop_prevent"
        if isinstance(t, str) and t in MACHINE_ATTACHMENTS:
            return "machine_attachment"
        return "inserted"
    return "other"  # pragma: no cover - threads hold message records only


def _entries(src: SourceFile, thread: Thread) -> Iterator[Entry]:
    """The thread's message records and (for the main thread) its queue operations, in file
    order, one at a time."""
    ix = src.index
    queue = iter(
        [q for q in src.queue if q.session_id in (None, thread.session_id)]
        if thread.kind == "main"
        else []
    )
    q = next(queue, None)
    for r in thread.rows:
        if ix.type[r] == PROGRESS:
            continue
        line = ix.line[r]
        while q is not None and q.line < line:
            yield q
            q = next(queue, None)
        yield src.entry(r)
    while q is not None:
        yield q
        q = next(queue, None)


def _items(src: SourceFile, thread: Thread, conv: Converter) -> Iterator[Item]:
    """The thread's records, each loaded, converted and classified."""
    for e, record in src.load_many(_entries(src, thread)):
        if e.type == "queue-operation":
            yield Item(line=e.line, kind="queue", record=record)
            continue
        message = conv.message(record, e.line)
        yield Item(
            line=e.line,
            kind=classify(record, message),
            record=record,
            message=message,
            restart=e.line in thread.restarts,
        )


def segments(src: SourceFile, thread: Thread) -> Iterator[Segment]:
    """Cut the thread into turns and history (IMP-8, IMP-9), streaming: only one segment's
    records are held at a time."""
    conv = Converter(
        lambda line, text: src.problem(line, text, "warning"),
        lambda line, text: src.problem(line, text, "note"),
    )
    current: list[Item] = []
    for item in _items(src, thread, conv):
        if item.kind == "candidate" and current:
            yield from _flush(current)
            current = []
        current.append(item)
    if current:
        yield from _flush(current)


def _is_local_command(item: Item) -> bool:
    text = item.text
    if text is None:
        return False
    t = text.lstrip()
    return t.startswith(("<command-name>", "<local-command-", "<bash-input>", "<bash-stdout>"))


def _flush(items: list[Item]) -> Iterator[Segment]:
    head = items[0]
    outputs = [i for i, it in enumerate(items) if it.kind in LOOP_OUTPUT]
    if head.kind != "candidate" or (not outputs and _is_local_command(head)):
        yield Segment("history", items)
        return
    # a turn ends at its last loop output; a manual compaction before it would end it too
    end = outputs[-1] if outputs else 0
    for i, it in enumerate(items[: end + 1]):
        if it.kind == "manual_compact":
            end = i - 1
            break
    turn = items[: end + 1]
    yield Segment("turn", turn)
    rest = items[end + 1 :]
    if rest:
        yield Segment("history", rest)


def describe_item(item: Item) -> str:
    """A short description of an item for reports."""
    m = item.message
    rec = item.record
    if item.kind == "queue":
        return f"queue-operation {rec.get('operation')}"
    if m is None:  # pragma: no cover
        return item.kind
    data = json.dumps(rec.get("message", rec.get("content")), ensure_ascii=False)
    return f"{item.kind} {data[:80]}"
