"""Did the machine write what Claude Code wrote? (specs/import.md §7, IMP-19)

The messages the machine emitted during a turn are compared, in order, with the records of the
turn that the loop writes (the prompt, response blocks, tool results, interrupt markers,
stop-hook feedback and summaries, compaction records, inserted messages, API errors). Ids are
left out (steploop numbers its messages, Claude Code uses uuids), and so is what the transcript
does not hold or what the machine was given rather than decided: ``origin``, usage and stop
reasons (inputs), the stop-hook summary's text (Claude Code writes none). An API error is
compared by what Claude Code writes for it: its ``error`` category (R-CATEGORY-1) and its text.
"""

from __future__ import annotations

from typing import Any

import attrs

from steploop.effects.importer.segment import Item
from steploop.reducer.canonical import to_data
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    Message,
    SystemMessage,
    UserMessage,
)

__all__ = [
    "COMPARED_KINDS",
    "Divergence",
    "comparable",
    "error_field",
    "first_difference",
    "summarize",
]

#: Item kinds the machine writes itself, so they are compared (IMP-19).
COMPARED_KINDS = frozenset(
    {
        "candidate",
        "inserted",
        "block",
        "api_error",
        "result",
        "interrupt",
        "stop_feedback",
        "stop_summary",
        "stop_prevent",
        "hook_stop",
        "compact",
        "compact_summary",
        "machine_attachment",
    }
)


@attrs.frozen
class Divergence:
    """The first place the machine and the transcript part."""

    line: int | None  # the transcript line (None: past the end of the turn)
    step: int | None  # the trace step (None: the machine wrote nothing there)
    expected: str
    got: str
    cause: str = "unexplained"
    why: str = ""

    def describe(self) -> str:
        where = f"line {self.line}" if self.line is not None else "after the turn's last record"
        at = f", step {self.step}" if self.step is not None else ""
        return f"{where}{at}: expected {self.expected}; the machine {self.got}"


def error_field(err: ErrorInfo) -> str | None:
    """The ``error`` field a transcript record holds for this API error (None: none written).

    As the transcript writer writes it (R-CATEGORY-1): Claude Code's category where the message
    has one ("" means Claude Code writes none), else steploop's kind. An imported record's
    ``category`` is the field as read, so both sides compare what Claude Code writes.
    """
    if err.category is None:
        return err.kind
    return err.category or None


def comparable(m: Message) -> tuple[Any, ...]:
    """What is compared of a message (IMP-19)."""
    if isinstance(m, UserMessage):
        return ("user", to_data(m.content), m.is_meta)
    if isinstance(m, AssistantMessage):
        err = None if m.api_error is None else (error_field(m.api_error), m.api_error.message)
        return ("assistant", m.model, to_data(m.content), err)
    if isinstance(m, SystemMessage):
        if m.subtype == "compact_boundary":
            return ("system", m.subtype, m.level, m.text)
        return ("system", m.subtype, m.level)
    if isinstance(m, AttachmentMessage):
        return ("attachment", m.attachment_type, m.data)
    raise TypeError(type(m).__name__)  # pragma: no cover


def summarize(m: Message | None, limit: int = 90) -> str:
    """A one-line description of a message for the report."""
    if m is None:
        return "nothing"

    def short(text: str) -> str:
        t = text.replace("\n", "⏎")
        return t if len(t) <= limit else t[: limit - 1] + "…"

    if isinstance(m, UserMessage):
        parts = []
        for b in m.content:
            d = to_data(b)
            if d.get("type") == "tool_result":
                parts.append(
                    f"tool_result {d['tool_use_id']}{' (error)' if d['is_error'] else ''}: {short(d['content'])}"
                )
            elif d.get("type") == "text":
                parts.append(short(d["text"]))
            else:
                parts.append(str(d.get("type")))
        return f"user{' (meta)' if m.is_meta else ''} [{' | '.join(parts)}]"
    if isinstance(m, AssistantMessage):
        if m.api_error is not None:
            field = error_field(m.api_error)
            name = "(no error field)" if field is None else field
            return f"API error {name} [{short(m.api_error.message)}]"
        d = to_data(m.content[0]) if m.content else {"type": "empty"}
        if d.get("type") == "tool_use":
            return f"assistant tool_use {d['name']} {d['id']}"
        if d.get("type") == "text":
            return f"assistant text [{short(d['text'])}]"
        return f"assistant {d.get('type')}"
    if isinstance(m, SystemMessage):
        return f"system {m.subtype}"
    if isinstance(m, AttachmentMessage):
        return f"attachment {m.attachment_type}"
    return repr(m)  # pragma: no cover


#: System messages the machine writes that the comparison leaves out, as it leaves out their
#: records (IMP-8: retry notices are neither replayed nor compared, IMP-17).
NOT_COMPARED_SUBTYPES = frozenset({"api_error"})


def _notice(m: Message) -> bool:
    return isinstance(m, SystemMessage) and m.subtype in NOT_COMPARED_SUBTYPES


def first_difference(
    expected: list[Item],
    emitted: list[tuple[int, Message]],
    *,
    compare_attachments: bool,
) -> tuple[int, Divergence | None]:
    """Compare in order; returns (messages that matched, the first divergence or None)."""
    got = [
        (k, m)
        for k, m in emitted
        if (compare_attachments or not isinstance(m, AttachmentMessage)) and not _notice(m)
    ]
    want = [
        it
        for it in expected
        if it.message is not None
        and (compare_attachments or not isinstance(it.message, AttachmentMessage))
    ]
    n = 0
    for n, it in enumerate(want):
        if n >= len(got):
            return n, Divergence(
                line=it.line, step=None, expected=summarize(it.message), got="wrote nothing more"
            )
        k, m = got[n]
        assert it.message is not None
        if comparable(m) != comparable(it.message):
            return n, Divergence(
                line=it.line,
                step=k,
                expected=summarize(it.message),
                got=f"wrote {summarize(m)}",
            )
    n = len(want)
    if len(got) > n:
        k, m = got[n]
        return n, Divergence(
            line=None, step=k, expected="nothing more", got=f"wrote {summarize(m)}"
        )
    return n, None
