"""An MCP tool's result as the tool result the machine takes (specs/ E-MCP-3).

The machine's tool result is text (``ToolFinished.content``), so each content block of a
``CallToolResult`` becomes text, in order, joined by a blank line:

- ``text``: its text;
- ``image`` / ``audio``: ``[Image: image/png, 1,234 bytes]`` (the data is not sent on: the
  result is text);
- ``resource_link``: ``[Resource link: NAME] URI (DESCRIPTION)``, as Claude Code writes it;
- ``resource`` (embedded): a text resource's text, else ``[Resource: URI, MIME, N bytes]``;
- anything else: its JSON.

``structuredContent`` is used, as compact JSON, when the result has no content blocks (the
blocks, by the specification, already carry it as text otherwise). ``isError`` makes an error
result. An empty result is ``(no content)``. A result longer than ``max_chars`` (Claude Code's
``MAX_MCP_OUTPUT_TOKENS``, 25,000 tokens, at 4 characters a token) is cut there with a note
saying so.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from collections.abc import Mapping
from typing import Any

from steploop.effects.tools.base import ToolOutput

__all__ = ["DEFAULT_MAX_OUTPUT_CHARS", "max_output_chars", "tool_output"]

#: Claude Code's default ``MAX_MCP_OUTPUT_TOKENS`` (25,000), at 4 characters a token.
DEFAULT_MAX_OUTPUT_CHARS = 100_000


def max_output_chars(environ: Mapping[str, str] | None = None) -> int:
    """The cap on a result's characters: ``MAX_MCP_OUTPUT_TOKENS`` × 4, else the default."""
    raw = (os.environ if environ is None else environ).get("MAX_MCP_OUTPUT_TOKENS", "")
    return int(raw) * 4 if raw.isdigit() and int(raw) > 0 else DEFAULT_MAX_OUTPUT_CHARS


def _size(data: object) -> str:
    if not isinstance(data, str):
        return "no data"
    try:
        return f"{len(base64.b64decode(data, validate=True)):,} bytes"
    except (binascii.Error, ValueError):
        return f"{len(data):,} characters of data that is not base64"


def _block(block: Any) -> str:
    kind = getattr(block, "type", None)
    if kind == "text":
        return str(getattr(block, "text", ""))
    if kind in ("image", "audio"):
        return f"[{kind.capitalize()}: {getattr(block, 'mime_type', '?')}, {_size(getattr(block, 'data', None))}]"
    if kind == "resource_link":
        desc = getattr(block, "description", None)
        link = f"[Resource link: {getattr(block, 'name', '')}] {getattr(block, 'uri', '')}"
        return f"{link} ({desc})" if desc else link
    if kind == "resource":
        res = getattr(block, "resource", None)
        text = getattr(res, "text", None)
        if isinstance(text, str):
            return text
        return (
            f"[Resource: {getattr(res, 'uri', '')}, {getattr(res, 'mime_type', None) or '?'}, "
            f"{_size(getattr(res, 'blob', None))}]"
        )
    dump = getattr(block, "model_dump", None)
    return json.dumps(dump(mode="json") if callable(dump) else str(block), sort_keys=True)


def tool_output(name: str, result: Any, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> ToolOutput:
    """``result`` (an SDK ``CallToolResult``) as the call's :class:`ToolOutput`."""
    blocks = list(getattr(result, "content", None) or ())
    parts = [_block(b) for b in blocks]
    structured = getattr(result, "structured_content", None)
    if not parts and structured is not None:
        parts.append(json.dumps(structured, sort_keys=True, separators=(",", ":")))
    text = "\n\n".join(parts) if parts else "(no content)"
    if len(text) > max_chars:
        text = (
            text[:max_chars]
            + f"\n\n[The output of {name} was cut: {len(text):,} characters is over the "
            f"{max_chars:,}-character limit (MAX_MCP_OUTPUT_TOKENS).]"
        )
    return ToolOutput(content=text, is_error=bool(getattr(result, "is_error", False)))
