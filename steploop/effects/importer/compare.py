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
    "kind_of",
    "summarize",
    "summarize_pair",
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
    #: what each side is (``assistant``, ``result``, ``user``, ``system stop_hook_summary``,
    #: ``attachment queued_command``, ``API error``; ``nothing``), and the compared fields that
    #: differ between them (``model``, ``error field``, ``block 1 text``, ...)
    want_kind: str = ""
    got_kind: str = ""
    fields: tuple[str, ...] = ()

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


def _first_diff_at(a: str, b: str) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _excerpt(text: str, at: int, width: int = 24) -> str:
    start = max(0, at - 4)
    piece = text[start : start + width].replace("\n", "⏎")
    return ("…" if start else "") + piece + ("…" if start + width < len(text) else "")


def _block_fields(m: Message) -> list[dict[str, Any]]:
    content = getattr(m, "content", ())
    return [to_data(b) for b in content]


def kind_of(m: Message | None) -> str:
    """What a message is, in the report's words (a Divergence's ``want_kind``/``got_kind``)."""
    if m is None:
        return "nothing"
    if isinstance(m, AssistantMessage):
        return "API error" if m.api_error is not None else "assistant"
    if isinstance(m, UserMessage):
        if any(to_data(b).get("type") == "tool_result" for b in m.content):
            return "result"
        return "user (meta)" if m.is_meta else "user"
    if isinstance(m, SystemMessage):
        return f"system {m.subtype}"
    if isinstance(m, AttachmentMessage):
        return f"attachment {m.attachment_type}"
    return type(m).__name__  # pragma: no cover


def _details(exp: Message, got: Message) -> list[tuple[str, str, str]]:
    """The fields of two messages of one kind that differ, with each side's value, in the
    words of the report (IMP-19's compared fields, and the stop reason beside them)."""
    out: list[tuple[str, str, str]] = []

    def both(name: str, a: object, b: object) -> None:
        out.append((name, str(a), str(b)))

    if isinstance(exp, AssistantMessage) and isinstance(got, AssistantMessage):
        if exp.model != got.model:
            both("model", exp.model or "(none)", got.model or "(none)")
        if exp.stop_reason != got.stop_reason and exp.stop_reason and got.stop_reason:
            both("stop reason", exp.stop_reason, got.stop_reason)
        ea, ga = exp.api_error, got.api_error
        if ea is not None and ga is not None:
            if error_field(ea) != error_field(ga):
                both("error field", error_field(ea) or "(none)", error_field(ga) or "(none)")
            if ea.message != ga.message:
                at = _first_diff_at(ea.message, ga.message)
                both(
                    f"text at {at}", repr(_excerpt(ea.message, at)), repr(_excerpt(ga.message, at))
                )
    if isinstance(exp, UserMessage) and isinstance(got, UserMessage) and exp.is_meta != got.is_meta:
        both("meta", exp.is_meta, got.is_meta)
    if isinstance(exp, SystemMessage) and isinstance(got, SystemMessage):
        if exp.level != got.level:
            both("level", exp.level, got.level)
        if exp.subtype == got.subtype == "compact_boundary" and exp.text != got.text:
            both("text", repr(exp.text[:40]), repr(got.text[:40]))
    if isinstance(exp, AttachmentMessage) and isinstance(got, AttachmentMessage):
        ed, gd = dict(exp.data), dict(got.data)
        for key in sorted(set(ed) | set(gd)):
            if ed.get(key) != gd.get(key):
                both(key, repr(ed.get(key)), repr(gd.get(key)))
    api_errors = isinstance(exp, AssistantMessage) and exp.api_error is not None
    if (
        isinstance(exp, (UserMessage, AssistantMessage))
        and isinstance(got, (UserMessage, AssistantMessage))
        and not (api_errors and out)
    ):  # an API error's text is its one block: said once
        eb, gb = _block_fields(exp), _block_fields(got)
        if len(eb) != len(gb):
            both("blocks", len(eb), len(gb))
        for i, (x, y) in enumerate(zip(eb, gb, strict=False)):
            if x == y:
                continue
            if x.get("type") != y.get("type"):
                both(f"block {i + 1} type", x.get("type"), y.get("type"))
                break
            for key in sorted(set(x) | set(y)):
                a, b = x.get(key), y.get(key)
                if a == b:
                    continue
                if isinstance(a, str) and isinstance(b, str):
                    at = _first_diff_at(a, b)
                    both(
                        f"block {i + 1} {key} at {at}", repr(_excerpt(a, at)), repr(_excerpt(b, at))
                    )
                else:
                    both(f"block {i + 1} {key}", repr(a)[:40], repr(b)[:40])
                break
            break
    return out


def summarize_pair(exp: Message, got: Message) -> tuple[str, str]:
    """One line for each of two messages that differ, never two identical strings: each
    side's summary, followed (when the summaries alone would look alike, or always for the
    model, the error field and the level) by the fields that differ and their values."""
    a, b = summarize(exp), summarize(got)
    details = _details(exp, got)
    if details:
        a = f"{a} ({'; '.join(f'{name} {x}' for name, x, _ in details)})"
        b = f"{b} ({'; '.join(f'{name} {y}' for name, _, y in details)})"
    if a == b:  # defensive: a compared field the details do not name
        a = f"{a} {comparable(exp)!r:.120}"
        b = f"{b} {comparable(got)!r:.120}"
    return a, b


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
                line=it.line,
                step=None,
                expected=summarize(it.message),
                got="wrote nothing more",
                want_kind=kind_of(it.message),
                got_kind="nothing",
            )
        k, m = got[n]
        assert it.message is not None
        if comparable(m) != comparable(it.message):
            want_text, got_text = summarize_pair(it.message, m)
            return n, Divergence(
                line=it.line,
                step=k,
                expected=want_text,
                got=f"wrote {got_text}",
                want_kind=kind_of(it.message),
                got_kind=kind_of(m),
                fields=tuple(name for name, _, _ in _details(it.message, m)),
            )
    n = len(want)
    if len(got) > n:
        k, m = got[n]
        return n, Divergence(
            line=None,
            step=k,
            expected="nothing more",
            got=f"wrote {summarize(m)}",
            want_kind="nothing",
            got_kind=kind_of(m),
        )
    return n, None
