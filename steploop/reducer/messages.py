"""Conversation data: content blocks, messages and the items the loop emits.

Everything here is a frozen, slotted, keyword-only attrs class with a stable ``TAG`` that the
serializer writes under ``"type"``. Tags never change when a class is renamed (specs/ R-SER-1).

An assistant response is stored as one :class:`AssistantMessage` per content block, all sharing
``response_id`` (as the reference and Claude Code's transcripts do); usage and stop reason sit on
the last record of a response.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

import attrs

__all__ = [
    "AssistantMessage",
    "AttachmentMessage",
    "Block",
    "Emitted",
    "ErrorInfo",
    "ImageBlock",
    "Message",
    "OpaqueBlock",
    "RedactedThinkingBlock",
    "SystemMessage",
    "TextBlock",
    "ThinkingBlock",
    "Tombstone",
    "ToolResultBlock",
    "ToolUseBlock",
    "ToolUseSummary",
    "Usage",
    "UserMessage",
]


@attrs.frozen(kw_only=True)
class TextBlock:
    """Text. ``citations`` is the API's ``citations`` value as received (compact JSON text:
    a list, or ``null``), None when the block had no such key; it is sent back with the text."""

    TAG: ClassVar[str] = "text"
    text: str
    citations: str | None = None


@attrs.frozen(kw_only=True)
class ThinkingBlock:
    TAG: ClassVar[str] = "thinking"
    thinking: str
    signature: str = ""


@attrs.frozen(kw_only=True)
class RedactedThinkingBlock:
    TAG: ClassVar[str] = "redacted_thinking"
    data: str


@attrs.frozen(kw_only=True)
class ToolUseBlock:
    """A tool call. ``input`` is the parsed JSON object (never a partial parse)."""

    TAG: ClassVar[str] = "tool_use"
    id: str
    name: str
    input: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen(kw_only=True)
class ToolResultBlock:
    TAG: ClassVar[str] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


@attrs.frozen(kw_only=True)
class ImageBlock:
    """An image or document. Counted as a flat 2,000 tokens (reference estimate)."""

    TAG: ClassVar[str] = "image"
    media_type: str
    data: str


@attrs.frozen(kw_only=True)
class OpaqueBlock:
    """A content block steploop does not model, kept exactly as the API sent it.

    Server tool calls and their results (``server_tool_use``, ``web_search_tool_result``,
    ``web_fetch_tool_result``, code-execution results, ``tool_search_tool_result``),
    ``mcp_tool_use`` / ``mcp_tool_result``, ``compaction``, ``container_upload`` and any type
    the API adds later. ``raw`` is the complete block as compact JSON text (keys in the order
    received; a streamed block's deltas folded in); it is sent back to the API unchanged and
    estimated as that text (specs/ R-TOK-1). ``block_type`` is its ``"type"``, for display.
    """

    TAG: ClassVar[str] = "opaque"
    block_type: str
    raw: str


Block: TypeAlias = (
    TextBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ToolUseBlock
    | ToolResultBlock
    | ImageBlock
    | OpaqueBlock
)


@attrs.frozen(kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    @property
    def total(self) -> int:
        """input + cache creation + cache read + output: the reference's context size."""
        return (
            self.input_tokens
            + self.cache_creation_input_tokens
            + self.cache_read_input_tokens
            + self.output_tokens
        )


ErrorKind: TypeAlias = Literal[
    "prompt_too_long",
    "media",
    "max_output_tokens",
    "rate_limited",
    "overloaded",
    "server_error",
    "connection",
    "stream_broken",
    "auth",
    "invalid_request",
    "image_client",
    "unknown",
    "blocking_limit",
    "refusal",
    "context_overflow",
]


@attrs.frozen(kw_only=True)
class ErrorInfo:
    """A frozen description of a failure: never an exception object.

    ``kind`` is steploop's (a failure kind, ``max_output_tokens``, ``blocking_limit``,
    ``refusal``); ``category`` is Claude Code's name for it (its ``error`` field: ``rate_limit``,
    ``authentication_failed``, ...; "" where Claude Code sets none), set under the Claude Code
    texts (specs/ R-CATEGORY-1), None otherwise. ``details`` keeps what the message text leaves
    out (Claude Code's
    ``errorDetails``: the API's own words for a prompt that is too long, a refusal's
    ``stop_details``).
    """

    kind: str
    message: str
    status: int | None = None
    category: str | None = None
    details: str = ""


@attrs.frozen(kw_only=True)
class UserMessage:
    """A user-role message: the prompt, a tool result, a nudge or hook feedback.

    ``is_meta`` marks messages the model sees but a UI hides (nudges, stop-hook feedback).
    """

    TAG: ClassVar[str] = "user"
    id: str
    content: tuple[Block, ...]
    is_meta: bool = False
    origin: str = "prompt"


@attrs.frozen(kw_only=True)
class AssistantMessage:
    """One content block of one model response (``response_id`` groups the blocks).

    ``api_error`` is set on synthetic API-error messages; ``model == "<synthetic>"`` then.
    """

    TAG: ClassVar[str] = "assistant"
    id: str
    response_id: str
    model: str
    content: tuple[Block, ...]
    stop_reason: str | None = None
    usage: Usage | None = None
    api_error: ErrorInfo | None = None


@attrs.frozen(kw_only=True)
class SystemMessage:
    """A notice: compact/snip boundary, retry notice, fallback warning, hook summary, ..."""

    TAG: ClassVar[str] = "system"
    id: str
    subtype: str
    text: str
    level: str = "info"


@attrs.frozen(kw_only=True)
class AttachmentMessage:
    """Structured context the loop attaches (max_turns_reached, queued_command, ...)."""

    TAG: ClassVar[str] = "attachment"
    id: str
    attachment_type: str
    data: tuple[tuple[str, str | int | bool | None], ...] = ()


Message: TypeAlias = UserMessage | AssistantMessage | SystemMessage | AttachmentMessage


@attrs.frozen(kw_only=True)
class Tombstone:
    """Tells the consumer to remove an already emitted message (by id)."""

    TAG: ClassVar[str] = "tombstone"
    message_id: str


@attrs.frozen(kw_only=True)
class ToolUseSummary:
    """The (gated) short summary of the previous round's tool use."""

    TAG: ClassVar[str] = "tool_use_summary"
    summary: str
    preceding_tool_use_ids: tuple[str, ...]


Emitted: TypeAlias = Message | Tombstone | ToolUseSummary
