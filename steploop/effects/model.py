"""The default model client: one ``CallModel`` effect in, reducer events out.

:class:`AnthropicModelClient` turns a ``CallModel`` into one Messages API request through
``anthropic.AsyncAnthropic`` (SDK retries off: retrying is the machine's decision) and reports what
happened as events for that ``call_id``:

- one :class:`~steploop.reducer.events.ModelBlockReceived` per *completed* content block, in stream order
  (blocks that arrive whole in ``message_start`` included), every type: text with its citations,
  thinking and tool_use modelled, anything else kept whole as an
  :class:`~steploop.reducer.messages.OpaqueBlock` and sent back byte-equal (specs/ R-BLOCK-1, R-BLOCK-2);
- then :class:`~steploop.reducer.events.ModelResponseEnded` (served model, stop reason, usage,
  stop_details);
- or, on any failure, exactly one :class:`~steploop.reducer.events.ModelCallFailed` as the last event.

It reads the SDK's raw stream events (``messages.create(stream=True)``), not ``messages.stream``:
that is cheaper per event and keeps the SDK's lenient partial-JSON parse of tool input out of the
way. Tool input is parsed strictly, once, from the concatenated ``input_json_delta`` text; text
that does not parse (typically cut off by max_tokens) is reported as ``input={}`` with
``input_complete=False`` so the machine never runs it.

A non-streaming call reads the response body as JSON, not through the SDK's types (they know only
some block types). Per call the client converts only the conversation records appended since its
previous request
(the same bytes :func:`build_request` gives), and after ``message_stop`` it reads the end of the
response body (briefly) so the SDK can reuse the connection for the next call.

Failure classification (``kind`` is one of :data:`steploop.reducer.events.FAILURE_KINDS`):

=====================================================  ===================
what happened                                          kind
=====================================================  ===================
4xx whose message says "prompt is too long"            prompt_too_long
400 "input length and `max_tokens` exceed context      context_overflow
limit: A + B > C" (A and C are reported too)
413, "request too large", 400 naming image/PDF/media   media
429                                                    rate_limited
529, or error type overloaded_error                    overloaded
401 / 403                                              auth
other 5xx, or error type api_error                     server_error
other 4xx                                              invalid_request
refused / reset before any stream event                connection
dropped mid-stream, stalled past the read timeout,     stream_broken
ended without message_stop, malformed stream data
``event: error`` inside a 200 stream                   by its error.type
anything else                                          unknown
=====================================================  ===================

``retry_after_ms`` comes from a ``retry-after-ms`` header, else ``retry-after`` (seconds).
The API's ids of a response that ended (its message id and the ``request-id`` header), which no
event carries, are kept for the transcript's ``message.id`` and ``requestId``:
:meth:`AnthropicModelClient.api_ids`.
Cancellation is never caught: it propagates out of :meth:`AnthropicModelClient.stream`.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias

import anthropic
import anyio
import httpx2

from steploop.reducer.conversation import SYNTHETIC_MODEL, Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

__all__ = [
    "EPHEMERAL",
    "TASK_BUDGET_BETA",
    "AnthropicModelClient",
    "Thinking",
    "TraitsFor",
    "block_from_api",
    "build_request",
    "classify_error",
    "classify_exception",
    "make_client",
    "parse_context_overflow",
    "parse_tool_input",
    "to_api_messages",
]

EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
"""The prompt-cache breakpoint marker put on the stable prefix and on the latest message."""

TASK_BUDGET_BETA = "task-budgets-2026-03-13"
"""The beta header the API's ``output_config.task_budget`` needs."""

TraitsFor: TypeAlias = Callable[[str, dict[str, Any]], ToolTraits]
"""What the shell knows of a tool call, for this name and (parsed) input."""

Thinking: TypeAlias = int | Literal["adaptive"] | None
"""Extended thinking: a budget in tokens, ``"adaptive"``, or None (off)."""


def make_client(
    base_url: str | None = None,
    api_key: str | None = None,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> anthropic.AsyncAnthropic:
    """An ``AsyncAnthropic`` set up for steploop: SDK retries off, explicit timeouts.

    Args:
        base_url: the API root (None: the SDK default or ``ANTHROPIC_BASE_URL``).
        api_key: the key (None: ``ANTHROPIC_API_KEY``).
        connect_timeout: seconds to establish a connection.
        read_timeout: seconds without a byte before a read fails (also write and pool).

    Returns:
        The client; close it with ``await client.close()``.
    """
    return anthropic.AsyncAnthropic(
        base_url=base_url,
        api_key=api_key,
        max_retries=0,
        timeout=httpx2.Timeout(read_timeout, connect=connect_timeout),
    )


# ---------------------------------------------------------------------------------------------
# Request building (pure)


def _attachment_text(m: AttachmentMessage) -> str:
    def show(v: str | int | bool | None) -> str:
        if isinstance(v, str):
            return v
        return json.dumps(v)

    fields = " ".join(f"{k}={show(v)}" for k, v in m.data)
    return f'<attachment type="{m.attachment_type}">{fields}</attachment>'


def _block_param(b: Block, keep_thinking: bool) -> dict[str, Any] | None:
    """One content block as the API takes it, or None when it is not sent."""
    if isinstance(b, TextBlock):
        # The API rejects empty text blocks.
        if not b.text:
            return None
        if b.citations is None:
            return {"type": "text", "text": b.text}
        return {"type": "text", "text": b.text, "citations": json.loads(b.citations)}
    if isinstance(b, OpaqueBlock):
        return json.loads(b.raw)  # type: ignore[no-any-return]  # as the API sent it
    if isinstance(b, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": b.tool_use_id,
            "content": b.content,
        }
        if b.is_error:
            out["is_error"] = True
        return out
    if isinstance(b, ToolUseBlock):
        return {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
    if isinstance(b, ThinkingBlock):
        if not keep_thinking:
            return None
        return {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
    if isinstance(b, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": b.data} if keep_thinking else None
    if isinstance(b, ImageBlock):
        kind = "document" if b.media_type == "application/pdf" else "image"
        source = {"type": "base64", "media_type": b.media_type, "data": b.data}
        return {"type": kind, "source": source}
    raise TypeError(f"unsupported content block {type(b).__name__}")


class _MessageFold:
    """:func:`to_api_messages` as a left fold over the records that can be continued later.

    ``out`` holds the closed API messages; the message being built is its role, the response
    it belongs to (assistant) and, for a user message, its tool results and other blocks kept
    apart until it is closed. The fold never changes a dict once it has put it in ``out``, so a
    client may keep one fold per conversation and carry it on as the conversation grows.
    """

    __slots__ = ("keep_thinking", "others", "out", "response_id", "results", "role")

    def __init__(self, keep_thinking: bool) -> None:
        self.keep_thinking = keep_thinking
        self.out: list[dict[str, Any]] = []
        self.role: str | None = None
        self.response_id: str | None = None
        self.results: list[dict[str, Any]] = []
        self.others: list[dict[str, Any]] = []

    def close(self) -> None:
        """Close the message being built (dropped when it has no blocks)."""
        role = self.role
        if role is not None:
            content = self.results + self.others if role == "user" else self.others
            if content:
                self.out.append({"role": role, "content": content})
            self.role = self.response_id = None
            self.results = []
            self.others = []

    def add(self, m: Message) -> None:
        """Take the next conversation record."""
        keep = self.keep_thinking
        if isinstance(m, AssistantMessage):
            if m.api_error is not None or m.model == SYNTHETIC_MODEL:
                return
            if self.role != "assistant" or self.response_id != m.response_id:
                self.close()
                self.role, self.response_id = "assistant", m.response_id
            others = self.others
            for b in m.content:
                p = _block_param(b, keep)
                if p is not None:
                    others.append(p)
        elif isinstance(m, (UserMessage, AttachmentMessage)):
            if self.role != "user":
                self.close()
                self.role = "user"
            if isinstance(m, AttachmentMessage):
                self.others.append({"type": "text", "text": _attachment_text(m)})
                return
            for b in m.content:
                p = _block_param(b, keep)
                if p is not None:
                    (self.results if p["type"] == "tool_result" else self.others).append(p)
        # SystemMessage: a notice for the user, never sent to the model.

    def messages(self) -> list[dict[str, Any]]:
        """The API messages so far, as if closed now: a fresh list; the fold is unchanged.

        Every message but a last one built from the open message is shared with the fold.
        """
        out = list(self.out)
        role = self.role
        if role is not None:
            content = self.results + self.others if role == "user" else list(self.others)
            if content:
                out.append({"role": role, "content": content})
        return out


def to_api_messages(messages: Sequence[Message], *, keep_thinking: bool) -> list[dict[str, Any]]:
    """Convert conversation records to the API's alternating user/assistant messages.

    - Records of one response (same ``response_id``) become one assistant message.
    - User messages and attachments next to each other become one user message, tool_result
      blocks first (the API requires results to lead the message that answers tool calls).
    - System notices and synthetic API-error messages are not sent.
    - Thinking blocks are sent only when ``keep_thinking``.
    - A message left without blocks is dropped.

    Args:
        messages: the conversation, oldest first.
        keep_thinking: whether thinking and redacted_thinking blocks are sent.

    Returns:
        The ``messages`` parameter, fresh dicts (the caller may add cache markers).
    """
    fold = _MessageFold(keep_thinking)
    for m in messages:
        fold.add(m)
    fold.close()
    return fold.out


def _appended(conversation: Conversation, base: Conversation) -> list[Message] | None:
    """The records appended to ``base`` to make ``conversation``, oldest first; None when
    ``conversation`` does not extend ``base`` (the nodes are compared by identity)."""
    node = conversation
    new: list[Message] = []
    for _ in range(conversation.length - base.length):
        last, prev = node.last, node.prev
        if last is None or prev is None:
            return None
        new.append(last)
        node = prev
    if node is not base:
        return None
    new.reverse()
    return new


_CACHEABLE = frozenset({"text", "tool_use", "tool_result", "image", "document"})


def _with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put the moving cache breakpoint on the last cacheable block of the latest message.

    The latest message and that block are replaced by marked copies, never changed in place:
    the other dicts may be shared with earlier requests (see :class:`_MessageFold`).
    """
    if messages:
        latest = messages[-1]
        content = latest["content"]
        for i in range(len(content) - 1, -1, -1):
            block = content[i]
            # The API refuses cache_control on thinking blocks; an opaque block is sent as
            # it came, so it is never marked either.
            if block.get("type") in _CACHEABLE:
                marked = list(content)
                marked[i] = {**block, "cache_control": dict(EPHEMERAL)}
                messages[-1] = {"role": latest["role"], "content": marked}
                break
    return messages


def _prefix(
    system: str, tools: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
    """The stable part of every request: system blocks and tools, with their breakpoint."""
    tools_param = [dict(t) for t in tools] or None
    system_param: list[dict[str, Any]] | None = (
        [{"type": "text", "text": system}] if system else None
    )
    if tools_param:
        tools_param[-1]["cache_control"] = dict(EPHEMERAL)
    elif system_param:
        system_param[-1]["cache_control"] = dict(EPHEMERAL)
    return system_param, tools_param


def _thinking_param(thinking: Thinking) -> dict[str, Any] | None:
    if thinking is None:
        return None
    if thinking == "adaptive":
        return {"type": "adaptive"}
    return {"type": "enabled", "budget_tokens": thinking}


def _assemble(
    effect: CallModel,
    system_param: list[dict[str, Any]] | None,
    tools_param: list[dict[str, Any]] | None,
    thinking: Thinking,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    request: dict[str, Any] = {"model": effect.model, "max_tokens": effect.max_tokens}
    if system_param is not None:
        request["system"] = system_param
    if tools_param is not None:
        request["tools"] = tools_param
    request["messages"] = messages
    thinking_param = _thinking_param(thinking)
    if thinking_param is not None:
        request["thinking"] = thinking_param
    if effect.task_budget is not None:
        budget: dict[str, int] = {"total": effect.task_budget.total}
        if effect.task_budget.remaining is not None:
            budget["remaining"] = effect.task_budget.remaining
        request["extra_body"] = {"output_config": {"task_budget": budget}}
        request["extra_headers"] = {"anthropic-beta": TASK_BUDGET_BETA}
    return request


def build_request(
    effect: CallModel,
    *,
    system: str = "",
    tools: Sequence[Mapping[str, Any]] = (),
    thinking: Thinking = None,
) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``effect`` (without ``stream``).

    Deterministic: the same effect and settings give equal dicts that serialize to the same
    JSON bytes. Prompt-cache breakpoints sit on the last tool (or the system block when there
    are no tools) and on the last block of the latest message, so consecutive rounds share a
    byte-identical tools/system prefix and earlier messages.

    Args:
        effect: the model call.
        system: the system prompt ("" for none).
        tools: tool definitions, ``{"name", "description", "input_schema"}`` each, in order.
        thinking: extended thinking setting (thinking blocks are sent back only when set).

    Returns:
        ``model``, ``max_tokens``, ``system``, ``tools``, ``messages``, ``thinking`` and, with a
        task budget, ``extra_body`` (``output_config.task_budget``) and ``extra_headers``.
    """
    system_param, tools_param = _prefix(system, tools)
    messages = to_api_messages(effect.conversation.messages(), keep_thinking=thinking is not None)
    return _assemble(effect, system_param, tools_param, thinking, _with_breakpoint(messages))


# ---------------------------------------------------------------------------------------------
# Failure classification (pure)

_MEDIA_RE = re.compile(r"\b(image|images|pdf|document|documents|media)\b")
_OVERFLOW_RE = re.compile(
    r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)"
)


def parse_context_overflow(message: str) -> tuple[int, int, int] | None:
    """The numbers of a 400 "input length and `max_tokens` exceed context limit: A + B > C"
    message: (input tokens A, max_tokens B, context limit C); None for any other message."""
    m = _OVERFLOW_RE.search(message)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def classify_error(status: int | None, error_type: str | None, message: str) -> str:
    """The failure kind of an API error.

    Args:
        status: the HTTP status, or None for an ``event: error`` inside a 200 stream.
        error_type: ``error.type`` from the body (``overloaded_error``, ...), if any.
        message: ``error.message`` (or the SDK's text when there is no body).

    Returns:
        One of :data:`steploop.reducer.events.FAILURE_KINDS`.
    """
    low = message.lower()
    client_side = status is None or 400 <= status < 500
    if client_side and "prompt is too long" in low:
        return "prompt_too_long"
    if status == 400 and _OVERFLOW_RE.search(message):
        return "context_overflow"
    if status == 413 or error_type == "request_too_large" or "request too large" in low:
        return "media"
    if (status == 400 or error_type == "invalid_request_error") and _MEDIA_RE.search(low):
        return "media"
    if status == 429 or error_type == "rate_limit_error":
        return "rate_limited"
    if status == 529 or error_type == "overloaded_error":
        return "overloaded"
    if status in (401, 403) or error_type in ("authentication_error", "permission_error"):
        return "auth"
    if status is not None and 500 <= status < 600:
        return "server_error"
    if error_type in ("api_error", "timeout_error"):
        return "server_error"
    if status is not None and 400 <= status < 500:
        return "invalid_request"
    if error_type in ("invalid_request_error", "not_found_error"):
        return "invalid_request"
    return "unknown"


def _retry_after_ms(headers: httpx2.Headers) -> int | None:
    for name, scale in (("retry-after-ms", 1.0), ("retry-after", 1000.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            n = float(value)
        except ValueError:
            continue  # an HTTP date: the machine's own backoff applies
        if n >= 0:
            return round(n * scale)
    return None


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def classify_exception(exc: Exception, *, started: bool) -> tuple[str, str, int | None, int | None]:
    """Classify an exception raised by the SDK or the transport.

    Args:
        exc: what was raised.
        started: whether any stream event had arrived before it.

    Returns:
        ``(kind, message, status, retry_after_ms)``. ``status`` is the HTTP status of an error
        response; None for transport failures and for an error event inside a 200 stream.
    """
    if isinstance(exc, anthropic.APIStatusError):
        message = exc.api_message or exc.message
        error_type = exc.type if isinstance(exc.type, str) else None
        if exc.status_code == 200:  # an `event: error` inside the stream
            return classify_error(None, error_type, message), message, None, None
        status = exc.status_code
        kind = classify_error(status, error_type, message)
        return kind, message, status, _retry_after_ms(exc.response.headers)
    if isinstance(exc, anthropic.APITimeoutError):
        connecting = isinstance(exc.__cause__, (httpx2.ConnectTimeout, httpx2.PoolTimeout))
        return ("connection" if connecting else "stream_broken"), _describe(exc), None, None
    if isinstance(exc, anthropic.APIConnectionError):
        cause = exc.__cause__
        return "connection", _describe(cause if cause is not None else exc), None, None
    if isinstance(exc, (httpx2.ConnectError, httpx2.ConnectTimeout, httpx2.PoolTimeout)):
        return "connection", _describe(exc), None, None
    if isinstance(exc, httpx2.TimeoutException):
        return "stream_broken", _describe(exc), None, None
    if isinstance(exc, (httpx2.TransportError, httpx2.HTTPError, httpx2.StreamError)):
        return ("stream_broken" if started else "connection"), _describe(exc), None, None
    if started and isinstance(exc, ValueError):
        # Malformed event data (bad JSON, an event the SDK cannot validate).
        return "stream_broken", _describe(exc), None, None
    return "unknown", _describe(exc), None, None


# ---------------------------------------------------------------------------------------------
# Stream assembly (pure, fed one raw SDK event at a time)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


_STRICT = json.JSONDecoder(parse_constant=_reject_constant)
"""``json.loads(text, parse_constant=_reject_constant)`` without building a decoder per call."""


def parse_tool_input(text: str) -> dict[str, Any] | None:
    """Parse tool input JSON strictly; None when it is not one complete JSON object."""
    try:
        value = _STRICT.decode(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class _Partial:
    """A content block still streaming.

    ``kind`` is "text", "thinking", "redacted_thinking", "tool_use" or "opaque" (any other
    type, kept whole: ``block`` is its start payload, into which the deltas are folded).
    ``citations`` collects a text block's citations (None: the block had none).
    """

    __slots__ = (
        "block",
        "citations",
        "data",
        "delta",
        "folds",
        "id",
        "input",
        "kind",
        "name",
        "parts",
        "signature",
    )

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.folds: list[dict[str, Any]] = []  # an opaque block's other deltas, in order
        self.parts: list[str] = []
        self.signature: list[str] = []
        self.id = ""
        self.name = ""
        self.data = ""
        self.input: dict[str, Any] = {}
        self.block: dict[str, Any] | None = None
        self.citations: list[Any] | None = None
        self.delta = ""  # the payload field of its text-extending deltas (for an opaque block)


def _str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    return value if isinstance(value, str) else ""


_USAGE_KEYS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
)


_DELTA_TEXT: dict[Any, str] = {
    "text_delta": "text",
    "input_json_delta": "partial_json",
    "thinking_delta": "thinking",
}
"""The deltas that extend a block's text, and the field that carries it."""

_OPAQUE_FIELD: dict[str, str] = {"text": "text", "partial_json": "input", "thinking": "thinking"}
"""For an opaque block: the field of the block that a delta (by its payload field) extends."""

_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""Compact JSON text, as the API writes it (and as JavaScript's JSON.stringify would)."""


def _opaque(value: Any) -> OpaqueBlock:
    kind = value.get("type") if isinstance(value, dict) else None
    return OpaqueBlock(block_type=kind if isinstance(kind, str) else "", raw=_compact(value))


def block_from_api(
    value: Any,
    call_id: int,
    traits_for: TraitsFor,
    at_ms: int,
    *,
    cut: bool = False,
    model: str | None = None,
) -> ModelBlockReceived:
    """The event for one complete content block in the API's JSON form.

    Text (with its citations), thinking, redacted thinking and tool_use blocks are modelled;
    any other block, and a modelled type whose fields are not what the API documents (a text
    without a string ``text``, ...), becomes an :class:`~steploop.reducer.messages.OpaqueBlock` holding
    the JSON exactly. ``cut``: the block ends a response cut off by max_tokens, so a tool_use
    input cannot be trusted (``input_complete=False``). ``model``: the serving model, if known.
    """
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text" and isinstance(value.get("text"), str):
        citations = _compact(value["citations"]) if "citations" in value else None
        block: Block = TextBlock(text=value["text"], citations=citations)
        return ModelBlockReceived(call_id=call_id, block=block, model=model, at_ms=at_ms)
    if kind == "thinking":
        thinking, signature = value.get("thinking"), value.get("signature", "")
        if isinstance(thinking, str) and isinstance(signature, str):
            block = ThinkingBlock(thinking=thinking, signature=signature)
            return ModelBlockReceived(call_id=call_id, block=block, model=model, at_ms=at_ms)
    elif kind == "redacted_thinking":
        data = value.get("data")
        if isinstance(data, str):
            block = RedactedThinkingBlock(data=data)
            return ModelBlockReceived(call_id=call_id, block=block, model=model, at_ms=at_ms)
    elif kind == "tool_use":
        tid, name, tool_input = value.get("id"), value.get("name"), value.get("input")
        if isinstance(tid, str) and isinstance(name, str):
            ok = isinstance(tool_input, dict) and not cut
            parsed: dict[str, Any] = dict(tool_input) if ok else {}
            return ModelBlockReceived(
                call_id=call_id,
                block=ToolUseBlock(id=tid, name=name, input=parsed),
                tool=traits_for(name, parsed),
                input_complete=ok,
                model=model,
                at_ms=at_ms,
            )
    return ModelBlockReceived(call_id=call_id, block=_opaque(value), model=model, at_ms=at_ms)


_SET_BY_DELTA: Final = frozenset({"compaction_delta"})
"""Deltas whose fields replace the block's (the SDK's accumulator sets a compaction block's
``content`` and ``encrypted_content`` from its ``compaction_delta``)."""


def _fold_delta(block: dict[str, Any], delta: dict[str, Any]) -> None:
    """Fold one delta of an opaque block into the block [R-BLOCK-1]: every field but ``type``
    is set on the block (a ``compaction_delta``'s summary and encrypted content), except that a
    string extends a string the block already holds when the delta kind is not one that sets
    (a delta kind this client does not know is taken as the text deltas are: appended). No
    field the stream sent is lost, so the block goes back to the API as it was received."""
    sets = delta.get("type") in _SET_BY_DELTA
    for field, value in delta.items():
        if field == "type":
            continue
        held = block.get(field)
        if not sets and isinstance(value, str) and isinstance(held, str):
            block[field] = held + value
        else:
            block[field] = value


class _Assembler:
    """Folds the stream's decoded event payloads into reducer events for one call."""

    def __init__(
        self,
        call_id: int,
        model: str,
        traits_for: TraitsFor,
        on_text_delta: Callable[[int, str], None] | None,
        at_ms: Callable[[], int],
    ) -> None:
        self.call_id = call_id
        self.model = model
        self.traits_for = traits_for
        self.on_text_delta = on_text_delta
        self.at_ms = at_ms
        self.started = False
        self.stopped = False
        self.served: str | None = None  # the model message_start named
        self.message_id: str | None = None  # the id message_start gave (msg_...)
        self.stop_reason: str | None = None
        self.stop_details: str | None = None
        self.usage = dict.fromkeys(_USAGE_KEYS, 0)
        self.open: dict[int, _Partial] = {}
        self.ready: list[ModelBlockReceived] = []
        """Blocks that arrived complete in ``message_start`` (taken by the caller)."""

    def _take_usage(self, usage: object) -> None:
        if not isinstance(usage, dict):
            return
        for key in self.usage:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                self.usage[key] = value

    def _take_stop(self, d: dict[str, Any]) -> None:
        if "stop_reason" in d:
            reason = d["stop_reason"]
            self.stop_reason = reason if isinstance(reason, str) else None
        details = d.get("stop_details")
        if details is not None:
            self.stop_details = _compact(details)

    def feed(self, name: str, payload: dict[str, Any]) -> ModelBlockReceived | None:
        """Take one event (``error`` excepted); return the block event it completes, if any.

        A ``message_start`` that already holds content blocks puts their events in
        :attr:`ready` instead (there can be several).
        """
        self.started = True
        if name == "content_block_delta":
            partial = self.open.get(payload.get("index", -1))
            delta = payload.get("delta")
            if partial is None or not isinstance(delta, dict):
                return None
            kind = delta.get("type")
            field = _DELTA_TEXT.get(kind)
            if field is not None:
                text = delta.get(field)
                if not isinstance(text, str):
                    text = ""
                partial.parts.append(text)
                partial.delta = field
                if kind == "text_delta" and self.on_text_delta is not None:
                    self.on_text_delta(payload["index"], text)
            elif kind == "signature_delta":
                partial.signature.append(_str(delta, "signature"))
            elif kind == "citations_delta":
                if partial.citations is None:
                    partial.citations = []
                partial.citations.append(delta.get("citation"))
            elif partial.kind == "opaque":  # compaction_delta, and kinds steploop does not know
                partial.folds.append(delta)
            return None  # other deltas of a modelled block carry nothing it can hold
        if name == "content_block_start":
            self._start(payload)
            return None
        if name == "content_block_stop":
            partial = self.open.pop(payload.get("index", -1), None)
            return None if partial is None else self._finish(partial)
        if name == "message_start":
            message = payload.get("message")
            if isinstance(message, dict):
                self.served = _str(message, "model") or None
                self.message_id = _api_id(message.get("id"))
                self.model = self.served or self.model
                self._take_usage(message.get("usage"))
                self._take_stop(message)
                content = message.get("content")
                if isinstance(content, list) and content:
                    at = self.at_ms()
                    self.ready.extend(
                        block_from_api(b, self.call_id, self.traits_for, at, model=self.served)
                        for b in content
                    )
        elif name == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict):
                self._take_stop(delta)
            self._take_usage(payload.get("usage"))
        elif name == "message_stop":
            self.stopped = True
        return None  # ping and event kinds steploop does not know

    def _start(self, payload: dict[str, Any]) -> None:
        block = payload.get("content_block")
        index = payload.get("index")
        if not isinstance(block, dict) or not isinstance(index, int):
            return
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text", ""), str):
            partial = _Partial("text")
            partial.parts.append(_str(block, "text"))
            if "citations" in block:
                cited = block["citations"]
                partial.citations = list(cited) if isinstance(cited, list) else []
        elif kind == "thinking":
            partial = _Partial("thinking")
            partial.parts.append(_str(block, "thinking"))
            partial.signature.append(_str(block, "signature"))
        elif kind == "redacted_thinking":
            partial = _Partial("redacted_thinking")
            partial.data = _str(block, "data")
        elif kind == "tool_use":
            partial = _Partial("tool_use")
            partial.id, partial.name = _str(block, "id"), _str(block, "name")
            start_input = block.get("input")
            partial.input = dict(start_input) if isinstance(start_input, dict) else {}
        else:  # server tool blocks, MCP, compaction, ...: kept whole
            partial = _Partial("opaque")
            partial.block = dict(block)
        self.open[index] = partial

    def _finish(self, p: _Partial) -> ModelBlockReceived:
        at = self.at_ms()
        if p.kind == "text":
            citations = None if p.citations is None else _compact(p.citations)
            block_t = TextBlock(text="".join(p.parts), citations=citations)
            return ModelBlockReceived(
                call_id=self.call_id, block=block_t, model=self.served, at_ms=at
            )
        if p.kind == "thinking":
            block = ThinkingBlock(thinking="".join(p.parts), signature="".join(p.signature))
            return ModelBlockReceived(
                call_id=self.call_id, block=block, model=self.served, at_ms=at
            )
        if p.kind == "redacted_thinking":
            block_r = RedactedThinkingBlock(data=p.data)
            return ModelBlockReceived(
                call_id=self.call_id, block=block_r, model=self.served, at_ms=at
            )
        if p.kind == "opaque":
            return self._finish_opaque(p, at)
        text = "".join(p.parts)
        parsed: dict[str, Any] | None
        if text.strip():
            parsed = parse_tool_input(text)
        else:
            parsed = p.input  # no deltas: the start frame's input (a tool without parameters)
        complete = parsed is not None
        tool_input = parsed if parsed is not None else {}
        return ModelBlockReceived(
            call_id=self.call_id,
            block=ToolUseBlock(id=p.id, name=p.name, input=tool_input),
            tool=self.traits_for(p.name, tool_input),
            input_complete=complete,
            model=self.served,
            at_ms=at,
        )

    def _finish_opaque(self, p: _Partial, at: int) -> ModelBlockReceived:
        """The start payload with its deltas folded in, as the SDK's accumulator does: the
        input JSON parsed into ``input`` (cut-off JSON: ``input_complete=False``), text and
        thinking appended, the signature and citations set."""
        block = p.block if p.block is not None else {}
        complete = True
        if p.parts:
            field = _OPAQUE_FIELD[p.delta]
            if field == "input":
                text = "".join(p.parts)
                parsed = parse_tool_input(text) if text.strip() else block.get("input", {})
                complete = parsed is not None
                block["input"] = parsed if parsed is not None else {}
            else:
                prefix = block.get(field)
                block[field] = (prefix if isinstance(prefix, str) else "") + "".join(p.parts)
        if p.signature:
            block["signature"] = "".join(p.signature)
        if p.citations is not None:
            block["citations"] = p.citations
        for delta in p.folds:
            _fold_delta(block, delta)
        return ModelBlockReceived(
            call_id=self.call_id,
            block=_opaque(block),
            input_complete=complete,
            model=self.served,
            at_ms=at,
        )

    def ended(self) -> ModelResponseEnded:
        return ModelResponseEnded(
            call_id=self.call_id,
            model=self.model,
            stop_reason=self.stop_reason,
            usage=Usage(**self.usage),
            stop_details=self.stop_details,
            at_ms=self.at_ms(),
        )


_KEPT_IDS = 16
"""How many calls' API ids :class:`AnthropicModelClient` keeps for :meth:`~AnthropicModelClient.api_ids`."""


def _api_id(value: object) -> str | None:
    """An id the API sent (``msg_...``, ``req_...``), or None when it is not a plausible one:
    a short printable ASCII string without spaces (it goes into the transcript as it is)."""
    if isinstance(value, str) and 0 < len(value) <= 200 and value.isascii():
        if value.isprintable() and " " not in value:
            return value
    return None


def _zero_clock() -> int:
    return 0


# ---------------------------------------------------------------------------------------------
# The client


class AnthropicModelClient:
    """The default model client (``steploop.effects.run.ModelClient``), on ``anthropic.AsyncAnthropic``.

    Args:
        client: the SDK client, made with ``max_retries=0`` (see :func:`make_client`). Not
            closed by this class.
        system: the system prompt ("" for none).
        tools: tool definitions ``{"name", "description", "input_schema"}``, in a fixed order.
        traits_for: the traits of a tool call, from its name and parsed input.
        thinking: a thinking budget in tokens, ``"adaptive"``, or None (off).
        idle_timeout: seconds without a byte before a streaming call counts as stalled
            (None: the client's read timeout).
        nonstreaming_timeout: read timeout for ``streaming=False`` calls, which send nothing
            until the whole answer is ready (None: the client's).
        on_text_delta: called with ``(block index, text)`` for every raw text delta, for live
            display; it runs inline, so keep it quick. Its exceptions propagate.
        clock: milliseconds for the events' ``at_ms`` (None: 0, stamped by the interpreter).
    """

    def __init__(
        self,
        client: anthropic.AsyncAnthropic,
        *,
        system: str = "",
        tools: Sequence[Mapping[str, Any]] = (),
        traits_for: TraitsFor,
        thinking: Thinking = None,
        idle_timeout: float | None = None,
        nonstreaming_timeout: float | None = None,
        on_text_delta: Callable[[int, str], None] | None = None,
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._client = client
        self._traits_for = traits_for
        self._thinking = thinking
        self.on_text_delta = on_text_delta  # public: the interpreter sets it for text_deltas=True
        self._clock = clock if clock is not None else _zero_clock
        # The prefix never changes for this client: build it once, send the same bytes.
        self._system_param, self._tools_param = _prefix(system, tools)
        self._stream_timeout = self._timeout(idle_timeout)
        self._complete_timeout = self._timeout(nonstreaming_timeout)
        # The messages of the latest request, as a fold that the next request carries on
        # when its conversation extends this one (the usual case: a round appends records).
        self._fold = _MessageFold(thinking is not None)
        self._fold_at = Conversation.empty()
        self._api_ids: dict[int, tuple[str | None, str | None]] = {}  # the latest, by call

    def api_ids(self, call_id: int) -> tuple[str | None, str | None]:
        """The API's message id (``msg_...``) and request id (the ``request-id`` header,
        ``req_...``) of call ``call_id``'s response, taken once; None for what the API did not
        give (or a response that has not started). Known from the response's ``message_start``
        on, as Claude Code knows them when it writes a block's record before the response
        ends. The transcript writes them as ``message.id`` and ``requestId``; the ids of the
        last few calls are kept."""
        return self._api_ids.pop(call_id, (None, None))

    def _keep_ids(self, call_id: int, message_id: str | None, headers: object) -> None:
        get = getattr(headers, "get", None)
        request_id = _api_id(get("request-id")) if callable(get) else None
        ids = self._api_ids
        ids[call_id] = (message_id, request_id)
        if len(ids) > _KEPT_IDS:  # nobody takes them (no transcript): keep the newest
            del ids[next(iter(ids))]

    def _timeout(self, read: float | None) -> httpx2.Timeout | None:
        if read is None:
            return None
        base = self._client.timeout
        connect = base.connect if isinstance(base, httpx2.Timeout) else base
        return httpx2.Timeout(read, connect=connect)

    def build_request(self, effect: CallModel) -> dict[str, Any]:
        """The ``messages.create`` keyword arguments for ``effect`` (see :func:`build_request`).

        Fresh dicts; :meth:`stream` sends the same request, built incrementally.
        """
        messages = to_api_messages(
            effect.conversation.messages(), keep_thinking=self._thinking is not None
        )
        return _assemble(
            effect,
            self._system_param,
            self._tools_param,
            self._thinking,
            _with_breakpoint(messages),
        )

    def _request(self, effect: CallModel) -> dict[str, Any]:
        """:meth:`build_request`, converting only the records appended since the last request.

        The messages of earlier requests are shared with the fold (the SDK copies what it
        sends), so the result is for sending, not for changing.
        """
        conversation = effect.conversation
        new = _appended(conversation, self._fold_at)
        if new is None:
            self._fold = _MessageFold(self._thinking is not None)
            new = list(conversation.messages())
        fold = self._fold
        for m in new:
            fold.add(m)
        self._fold_at = conversation
        messages = _with_breakpoint(fold.messages())
        return _assemble(effect, self._system_param, self._tools_param, self._thinking, messages)

    def _failed(self, call_id: int, exc: Exception, *, started: bool) -> ModelCallFailed:
        kind, message, status, retry_after_ms = classify_exception(exc, started=started)
        numbers = parse_context_overflow(message) if kind == "context_overflow" else None
        return ModelCallFailed(
            call_id=call_id,
            kind=kind,
            message=message,
            status=status,
            retry_after_ms=retry_after_ms,
            input_tokens=None if numbers is None else numbers[0],
            context_limit=None if numbers is None else numbers[2],
            at_ms=self._clock(),
        )

    async def stream(self, effect: CallModel) -> AsyncGenerator[Event, None]:
        """Run the model call and yield its events.

        An async generator: it opens no task group or cancel scope around a ``yield``, so
        it is safe to iterate from any task (PEP 789). Iterate it to the end, or close it with
        ``contextlib.aclosing``; closing early releases the HTTP connection.

        Args:
            effect: the call; ``effect.streaming`` False sends a non-streaming request.

        Yields:
            ``ModelBlockReceived`` per completed block, then ``ModelResponseEnded``; or
            ``ModelCallFailed`` as the last event. SDK and transport errors never escape.

        Raises:
            Cancellation of the calling task (never turned into an event), and whatever
            ``traits_for`` or ``on_text_delta`` raise.
        """
        request = self._request(effect)
        if not effect.streaming:
            # Everything arrives at once: no nested generator to leave suspended.
            for complete_event in await self._complete(effect, request):
                yield complete_event
            return

        timeout = self._stream_timeout if self._stream_timeout is not None else anthropic.NOT_GIVEN
        call_id = effect.call_id
        assembler = _Assembler(
            call_id, effect.model, self._traits_for, self.on_text_delta, self._clock
        )
        try:
            raw = await self._client.messages.create(**request, stream=True, timeout=timeout)
        except Exception as exc:  # cancellation is a BaseException: it propagates
            yield self._failed(call_id, exc, started=False)
            return

        # The SDK's own iterator is not used: it raises on an error event from inside nested
        # generators it then leaves suspended (trio warns when they are collected). Reading the
        # decoded server-sent events keeps every generator in a chain we finish ourselves.
        response = raw.response
        sse_events = anthropic.AsyncStream.raw_events(response)
        failure: ModelCallFailed | None = None
        try:
            while not assembler.stopped:
                try:
                    sse = await anext(sse_events)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    failure = self._failed(call_id, exc, started=assembler.started)
                    break
                name, payload, problem = _decode(sse.event, sse.data)
                if problem is not None:
                    failure = self._broken(call_id, problem)
                    break
                if name == "error":
                    failure = self._error_event(call_id, payload)
                    break
                block_event = assembler.feed(name, payload)
                if name == "message_start":  # the ids are known from here (TR-2)
                    self._keep_ids(call_id, assembler.message_id, response.headers)
                if block_event is not None:
                    yield block_event
                elif assembler.ready:  # message_start held complete blocks [defect: none lost]
                    ready, assembler.ready = assembler.ready, []
                    for ready_event in ready:
                        yield ready_event
        finally:
            await _dispose(response, sse_events, complete=assembler.stopped and failure is None)

        if failure is not None:
            yield failure
        elif not assembler.stopped:
            yield self._broken(call_id, "the stream ended without message_stop")
        else:
            self._keep_ids(call_id, assembler.message_id, response.headers)
            yield assembler.ended()

    def _broken(self, call_id: int, message: str) -> ModelCallFailed:
        return ModelCallFailed(
            call_id=call_id, kind="stream_broken", message=message, at_ms=self._clock()
        )

    def _error_event(self, call_id: int, payload: dict[str, Any]) -> ModelCallFailed:
        error = payload.get("error")
        error = error if isinstance(error, dict) else {}
        error_type = error.get("type")
        message = _str(error, "message") or json.dumps(payload)
        kind = classify_error(None, error_type if isinstance(error_type, str) else None, message)
        return ModelCallFailed(call_id=call_id, kind=kind, message=message, at_ms=self._clock())

    async def _complete(self, effect: CallModel, request: dict[str, Any]) -> list[Event]:
        """The events of a non-streaming call.

        The body is read as JSON, not through the SDK's types: those know only some block
        types and turn the others into blocks with missing fields. Every block is reported
        (:func:`block_from_api`); a body that is not a message is ``stream_broken``.
        """
        timeout = (
            self._complete_timeout if self._complete_timeout is not None else anthropic.NOT_GIVEN
        )
        call_id = effect.call_id
        try:
            raw = await self._client.messages.with_raw_response.create(**request, timeout=timeout)
            data = await raw.read()
        except Exception as exc:  # cancellation is a BaseException: it propagates
            return [self._failed(call_id, exc, started=False)]
        try:
            body = json.loads(data)
        except ValueError as exc:  # not JSON (a proxy's page, a cut body)
            return [self._broken(call_id, f"malformed message body: {exc}")]
        content = body.get("content") if isinstance(body, dict) else None
        if not isinstance(content, list):
            return [self._broken(call_id, "malformed message body: no content list")]
        stop_reason = body.get("stop_reason")
        stop_reason = stop_reason if isinstance(stop_reason, str) else None
        model = body.get("model")
        served = model if isinstance(model, str) and model else None
        events: list[Event] = []
        last = len(content) - 1
        traits_for = self._traits_for
        for index, block in enumerate(content):
            # Without the raw JSON text a cut-off tool input cannot be told from a complete
            # one: a tool_use that ends a max_tokens response is treated as cut off.
            cut = stop_reason == "max_tokens" and index == last
            at = self._clock()
            events.append(block_from_api(block, call_id, traits_for, at, cut=cut, model=served))
        usage = body.get("usage")
        counts = {k: 0 for k in _USAGE_KEYS}
        if isinstance(usage, dict):
            for key in _USAGE_KEYS:
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    counts[key] = value
        details = body.get("stop_details")
        self._keep_ids(call_id, _api_id(body.get("id")), raw.headers)
        events.append(
            ModelResponseEnded(
                call_id=call_id,
                model=served or effect.model,
                stop_reason=stop_reason,
                usage=Usage(**counts),
                stop_details=None if details is None else _compact(details),
                at_ms=self._clock(),
            )
        )
        return events


_raw_decode = json.JSONDecoder().raw_decode
"""``json.loads``'s decoder, called directly: one JSON value from an index, and its end."""


def _decode(event: str | None, data: str) -> tuple[str, dict[str, Any], str | None]:
    """(event name, payload, problem): ``problem`` describes malformed event data."""
    if not data:
        return event or "", {}, None
    payload: Any
    try:
        # Event data is one compact JSON object: scan it without json.loads's whitespace
        # handling. Anything else (surrounding whitespace, trailing text, bad JSON) is left
        # to json.loads, which accepts or words the error exactly as before.
        payload, end = _raw_decode(data)
        if end != len(data):
            raise ValueError(data)
    except ValueError:
        try:
            payload = json.loads(data)
        except ValueError as exc:
            return event or "", {}, f"malformed {event or 'event'} data: {exc}"
    if not isinstance(payload, dict):
        return event or "", {}, f"malformed {event or 'event'} data: not an object"
    name = event or payload.get("type")
    return (name if isinstance(name, str) else ""), payload, None


_BODY_END_S = 0.25
"""How long a complete message's response waits for the rest of its body (seconds)."""


async def _dispose(
    response: httpx2.Response, events: AsyncIterator[object], *, complete: bool = False
) -> None:
    """Finish the response: read the rest of a complete message's body, close, drain.

    After ``message_stop`` only the end of the chunked body is left. Reading it lets the SDK
    put the connection back in its pool (keep-alive: the next call needs no new connection
    or TLS handshake); a response closed before it takes its connection with it. That read
    waits at most :data:`_BODY_END_S`. Then the response is closed and the event iterator
    run to its end: after a close it yields what was already buffered and then fails on the
    closed connection; that failure finishes every generator in the chain, so none is left
    suspended for the garbage collector (which trio would report).
    """
    with anyio.CancelScope(shield=True):
        if complete:
            with anyio.move_on_after(_BODY_END_S):
                while True:
                    try:
                        await anext(events)
                    except Exception:  # StopAsyncIteration: the body ended
                        break
        await response.aclose()
        while True:
            try:
                await anext(events)
            except Exception:  # StopAsyncIteration included
                return
