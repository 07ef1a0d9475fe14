"""Folding the stream into events (pure, fed one decoded server-sent event at a time):
strict tool input, content blocks from the API's JSON, the per-call assembler."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeAlias

from steploop.reducer.events import (
    ModelBlockReceived,
    ModelResponseEnded,
    ToolTraits,
)
from steploop.reducer.messages import (
    Block,
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

TraitsFor: TypeAlias = Callable[[str, dict[str, Any]], ToolTraits]
"""What the shell knows of a tool call, for this name and (parsed) input."""

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


def str_field(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    return value if isinstance(value, str) else ""


USAGE_KEYS = (
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

compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
"""Compact JSON text, as the API writes it (and as JavaScript's JSON.stringify would)."""


def opaque_block(value: Any) -> OpaqueBlock:
    kind = value.get("type") if isinstance(value, dict) else None
    return OpaqueBlock(block_type=kind if isinstance(kind, str) else "", raw=compact_json(value))


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
        citations = compact_json(value["citations"]) if "citations" in value else None
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
    return ModelBlockReceived(call_id=call_id, block=opaque_block(value), model=model, at_ms=at_ms)


_SET_BY_DELTA: Final = frozenset({"compaction_delta"})
"""Deltas whose fields replace the block's (the SDK's accumulator sets a compaction block's
``content`` and ``encrypted_content`` from its ``compaction_delta``)."""


def _fold_delta(block: dict[str, Any], delta: dict[str, Any]) -> None:
    """Fold one delta of an opaque block into the block [R-BLOCK-1]: every field but ``type``
    is set on the block (a ``compaction_delta``'s summary and encrypted content), except that a
    string extends a string the block already holds when the delta kind is not one that sets
    (a delta kind this client does not know is taken as the text deltas are: appended). No
    field the stream sent is lost, so the block goes back to the API as it was received."""
    kind = delta.get("type")
    sets = isinstance(kind, str) and kind in _SET_BY_DELTA
    for field, value in delta.items():
        if field == "type":
            continue
        held = block.get(field)
        if not sets and isinstance(value, str) and isinstance(held, str):
            block[field] = held + value
        else:
            block[field] = value


def _index(payload: dict[str, Any]) -> int | None:
    """A content block event's ``index``: an integer (not a boolean), else None, which names no
    block (the event is then ignored, as one for a block never started)."""
    index = payload.get("index")
    return index if type(index) is int else None


class Assembler:
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
        self.usage = dict.fromkeys(USAGE_KEYS, 0)
        self.open: dict[int | None, _Partial] = {}  # None (no index) is never a key
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
            self.stop_details = compact_json(details)

    def feed(self, name: str, payload: dict[str, Any]) -> ModelBlockReceived | None:
        """Take one event (``error`` excepted); return the block event it completes, if any.

        A ``message_start`` that already holds content blocks puts their events in
        :attr:`ready` instead (there can be several).
        """
        self.started = True
        if name == "content_block_delta":
            partial = self.open.get(_index(payload))
            delta = payload.get("delta")
            if partial is None or not isinstance(delta, dict):
                return None
            kind = delta.get("type")
            field = _DELTA_TEXT.get(kind) if isinstance(kind, str) else None
            if field is not None:
                text = delta.get(field)
                if not isinstance(text, str):
                    text = ""
                partial.parts.append(text)
                partial.delta = field
                if kind == "text_delta" and self.on_text_delta is not None:
                    self.on_text_delta(payload["index"], text)
            elif kind == "signature_delta":
                partial.signature.append(str_field(delta, "signature"))
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
            partial = self.open.pop(_index(payload), None)
            return None if partial is None else self._finish(partial)
        if name == "message_start":
            message = payload.get("message")
            if isinstance(message, dict):
                self.served = str_field(message, "model") or None
                self.message_id = api_id(message.get("id"))
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
        index = _index(payload)
        if not isinstance(block, dict) or index is None:
            return
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text", ""), str):
            partial = _Partial("text")
            partial.parts.append(str_field(block, "text"))
            if "citations" in block:
                cited = block["citations"]
                partial.citations = list(cited) if isinstance(cited, list) else []
        elif kind == "thinking":
            partial = _Partial("thinking")
            partial.parts.append(str_field(block, "thinking"))
            partial.signature.append(str_field(block, "signature"))
        elif kind == "redacted_thinking":
            partial = _Partial("redacted_thinking")
            partial.data = str_field(block, "data")
        elif kind == "tool_use":
            partial = _Partial("tool_use")
            partial.id, partial.name = str_field(block, "id"), str_field(block, "name")
            start_input = block.get("input")
            partial.input = dict(start_input) if isinstance(start_input, dict) else {}
        else:  # server tool blocks, MCP, compaction, ...: kept whole
            partial = _Partial("opaque")
            partial.block = dict(block)
        self.open[index] = partial

    def _finish(self, p: _Partial) -> ModelBlockReceived:
        at = self.at_ms()
        if p.kind == "text":
            citations = None if p.citations is None else compact_json(p.citations)
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
            block=opaque_block(block),
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


def api_id(value: object) -> str | None:
    """An id the API sent (``msg_...``, ``req_...``), or None when it is not a plausible one:
    a short printable ASCII string without spaces (it goes into the transcript as it is)."""
    if isinstance(value, str) and 0 < len(value) <= 200 and value.isascii():
        if value.isprintable() and " " not in value:
            return value
    return None


_raw_decode = json.JSONDecoder().raw_decode
"""``json.loads``'s decoder, called directly: one JSON value from an index, and its end."""


def decode_event(event: str | None, data: str) -> tuple[str, dict[str, Any], str | None]:
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
    except (ValueError, RecursionError):
        try:
            payload = json.loads(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
            return event or "", {}, f"malformed {event or 'event'} data: {exc}"
    if not isinstance(payload, dict):
        return event or "", {}, f"malformed {event or 'event'} data: not an object"
    name = event or payload.get("type")
    return (name if isinstance(name, str) else ""), payload, None
