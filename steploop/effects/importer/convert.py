"""Claude Code records as steploop messages (IMP-6, IMP-7).

One transcript record becomes one :class:`steploop.reducer.messages.Message` whose ``id`` is the record's
uuid (so a message in an imported trace names the line it came from). Content blocks are read as
the Messages API spells them; a block steploop does not model (a server tool call, search
results, ...) is kept whole as an :class:`~steploop.reducer.messages.OpaqueBlock`, with a note. Inside a
tool result, where steploop keeps one string, such a block becomes text that names it
(:data:`OPAQUE_PREFIX`) and is reported.

Tool results whose content is a list of blocks are flattened: text blocks joined by a newline,
an image as the text ``[image: MEDIA_TYPE]``. steploop's tool results hold one string.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    ErrorInfo,
    ImageBlock,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

__all__ = [
    "INTERRUPT_TEXTS",
    "OPAQUE_PREFIX",
    "Converter",
    "at_ms",
    "usage_of",
]

#: The text an unmodelled block becomes: ``[unmodelled server_tool_use block] {...json...}``.
OPAQUE_PREFIX = "[unmodelled "
INTERRUPT_TEXTS = frozenset(
    {"[Request interrupted by user]", "[Request interrupted by user for tool use]"}
)

Report = Callable[[str], None]


def at_ms(record: dict[str, Any]) -> int:
    """The record's ``timestamp`` in milliseconds since the epoch (0 when absent or unreadable)."""
    ts = record.get("timestamp")
    if not isinstance(ts, str):
        return 0
    try:
        return int(datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return 0


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0


def usage_of(message: dict[str, Any]) -> Usage | None:
    u = message.get("usage")
    if not isinstance(u, dict):
        return None
    return Usage(
        input_tokens=_int(u.get("input_tokens")),
        output_tokens=_int(u.get("output_tokens")),
        cache_creation_input_tokens=_int(u.get("cache_creation_input_tokens")),
        cache_read_input_tokens=_int(u.get("cache_read_input_tokens")),
    )


def _text_of_result(content: Any, report: Report) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str):
                parts.append(b["text"])
            elif isinstance(b, dict) and b.get("type") in ("image", "document"):
                src = _dict(b.get("source"))
                parts.append(f"[{b.get('type')}: {src.get('media_type', '?')}]")
                report(
                    f"a tool result holds an {b.get('type')}; it is kept as the text {parts[-1]!r}"
                )
            else:
                parts.append(_opaque(b))
                report(
                    f"a tool result holds a {_kind(b)} block steploop does not model; kept as text"
                )
        return "\n".join(parts)
    report(f"a tool result's content is a {type(content).__name__}; kept as its JSON text")
    return json.dumps(content, ensure_ascii=False)


def _str_or_none(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _kind(b: Any) -> str:
    return str(b.get("type")) if isinstance(b, dict) else type(b).__name__


def _opaque(b: Any) -> str:
    return f"{OPAQUE_PREFIX}{_kind(b)} block] " + json.dumps(
        b, ensure_ascii=False, separators=(",", ":")
    )


class Converter:
    """Turns records into messages; ``report(line, text)`` receives what it could not keep."""

    def __init__(
        self,
        report: Callable[[int, str], None],
        note: Callable[[int, str], None] | None = None,
    ) -> None:
        self._report = report
        self._note = note or (lambda _line, _text: None)

    def block(self, b: Any, line: int) -> Block:
        def rep(text: str) -> None:
            self._report(line, text)

        if isinstance(b, str):
            return TextBlock(text=b)
        if not isinstance(b, dict):
            rep(f"a content block that is a {type(b).__name__}; kept as text")
            return TextBlock(text=json.dumps(b, ensure_ascii=False))
        kind = b.get("type")
        if kind == "text" and isinstance(b.get("text"), str):
            return TextBlock(text=b["text"])
        if kind == "thinking" and isinstance(b.get("thinking"), str):
            sig = b.get("signature")
            return ThinkingBlock(
                thinking=b["thinking"], signature=sig if isinstance(sig, str) else ""
            )
        if kind == "redacted_thinking" and isinstance(b.get("data"), str):
            return RedactedThinkingBlock(data=b["data"])
        if kind == "tool_use" and isinstance(b.get("id"), str) and isinstance(b.get("name"), str):
            inp = b.get("input")
            if not isinstance(inp, dict):
                rep(f"tool_use {b['id']} has a {type(inp).__name__} input; read as {{}}")
                inp = {}
            return ToolUseBlock(id=b["id"], name=b["name"], input=inp)
        if kind == "tool_result" and isinstance(b.get("tool_use_id"), str):
            return ToolResultBlock(
                tool_use_id=b["tool_use_id"],
                content=_text_of_result(b.get("content"), rep),
                is_error=b.get("is_error") is True,
            )
        if kind in ("image", "document"):
            src = _dict(b.get("source"))
            media = src.get("media_type")
            data = src.get("data")
            return ImageBlock(
                media_type=media
                if isinstance(media, str)
                else ("image/png" if kind == "image" else "application/pdf"),
                data=data if isinstance(data, str) else "",
            )
        self._note(line, f"a {_kind(b)} block: kept as an opaque block")
        return OpaqueBlock(
            block_type=_kind(b), raw=json.dumps(b, ensure_ascii=False, separators=(",", ":"))
        )

    def blocks(self, content: Any, line: int) -> tuple[Block, ...]:
        if isinstance(content, str):
            return (TextBlock(text=content),)
        if isinstance(content, list):
            return tuple(self.block(b, line) for b in content)
        self._report(line, f"message content is a {type(content).__name__}; read as empty")
        return ()

    def message(self, record: dict[str, Any], line: int, *, origin: str | None = None) -> Message:
        """The message a record holds (user, assistant, system or attachment)."""
        kind = record.get("type")
        mid = str(record.get("uuid"))
        msg = _dict(record.get("message"))
        if kind == "user":
            content = self.blocks(msg.get("content"), line)
            return UserMessage(
                id=mid,
                content=content,
                is_meta=record.get("isMeta") is True,
                origin=origin or user_origin(record, content),
            )
        if kind == "assistant":
            model = msg.get("model") if isinstance(msg.get("model"), str) else ""
            api_error = None
            if record.get("isApiErrorMessage") is True:
                err = record.get("error")
                text = "".join(
                    b.text
                    for b in self.blocks(msg.get("content"), line)
                    if isinstance(b, TextBlock)
                )
                status = record.get("apiErrorStatus")
                api_error = ErrorInfo(
                    kind=err if isinstance(err, str) else "unknown",
                    message=text,
                    status=status if isinstance(status, int) else None,
                    # what Claude Code wrote ("": no `error` field), compared by IMP-19
                    category=err if isinstance(err, str) else "",
                )
            return AssistantMessage(
                id=mid,
                response_id=str(msg.get("id") or mid),
                model=str(model),
                content=self.blocks(msg.get("content"), line),
                stop_reason=_str_or_none(msg.get("stop_reason")),
                usage=usage_of(msg),
                api_error=api_error,
            )
        if kind == "system":
            body = record.get("content")
            level = record.get("level")
            return SystemMessage(
                id=mid,
                subtype=str(record.get("subtype") or ""),
                text=body if isinstance(body, str) else "",
                level=level if isinstance(level, str) else "info",
            )
        if kind == "attachment":
            att = _dict(record.get("attachment"))
            data: list[tuple[str, str | int | bool | None]] = []
            for k, v in att.items():
                if k == "type":
                    continue
                if v is None or isinstance(v, (str, int, bool)):
                    data.append((str(k), v))
                else:
                    data.append((str(k), json.dumps(v, ensure_ascii=False, sort_keys=True)))
            return AttachmentMessage(
                id=mid, attachment_type=str(att.get("type") or ""), data=tuple(data)
            )
        raise ValueError(f"not a message record: {kind!r}")  # pragma: no cover - callers check


def user_origin(record: dict[str, Any], content: tuple[Block, ...]) -> str:
    """The ``origin`` a user record gets (IMP-7): what steploop would have called it."""
    if any(isinstance(b, ToolResultBlock) for b in content):
        return "tool_result"
    if record.get("isCompactSummary") is True:
        return "compact_summary"
    text = content[0].text if len(content) == 1 and isinstance(content[0], TextBlock) else None
    if text in INTERRUPT_TEXTS:
        return "interrupt"
    if text is not None and text.startswith("Stop hook feedback:\n"):
        return "stop_hook_feedback"
    if record.get("isMeta") is True:
        return "inserted"
    return "prompt"
