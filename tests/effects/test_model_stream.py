"""Reading the event stream: event data is parsed once, as json.loads would, on a fast path.

``steploop.effects.model.stream.decode_event`` scans compact event data with the decoder ``json.loads`` uses and leaves
anything else to ``json.loads`` itself; these tests hold it to ``json.loads`` on valid, spaced,
padded and broken data, and check through the local server that malformed data ends the call
as ``stream_broken`` after the blocks that completed before it.
"""

from __future__ import annotations

import json
import math
from contextlib import aclosing
from typing import Any

import anthropic
import pytest

from steploop.effects.model import AnthropicModelClient, parse_tool_input
from steploop.effects.model.stream import decode_event
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import Event, ModelBlockReceived, ModelCallFailed, ToolTraits
from steploop.reducer.messages import TextBlock, UserMessage
from tests.support.messages_server import (
    Frame,
    MessagesServer,
    StreamScript,
    response_script,
    text_block,
    tool_use_block,
)

DATA = [
    '{"type":"ping"}',
    '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"h\\u00e9"}}',
    ' {"type":"ping"}',  # leading space
    '{"type":"ping"} ',  # trailing space
    '{"type":"ping"}\n',
    '{"type":"ping"}{"type":"ping"}',  # trailing data
    '{"type":"ping"} x',
    '{"type":"message_delta","usage":{"output_tokens":NaN}}',  # json.loads accepts NaN
    '{"type":',  # cut off
    "[1, 2]",  # not an object
    '"text"',
    "null",
    "nope",
    "{}",
    '{"a":{"b":[{"c":[1,2.5,true,false,null]}]}}',
    '{"type":"bad \x01 control"}',  # a raw control character: strict JSON refuses it
]


def _expected(event: str | None, data: str) -> tuple[str, Any, str | None]:
    """decode_event's documented result, computed with json.loads."""
    if not data:
        return event or "", {}, None
    try:
        payload = json.loads(data)
    except ValueError as exc:
        return event or "", {}, f"malformed {event or 'event'} data: {exc}"
    if not isinstance(payload, dict):
        return event or "", {}, f"malformed {event or 'event'} data: not an object"
    name = event or payload.get("type")
    return (name if isinstance(name, str) else ""), payload, None


def _same(a: object, b: object) -> bool:
    """Equality that counts NaN equal to NaN."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


@pytest.mark.parametrize("event", [None, "ping"])
@pytest.mark.parametrize("data", DATA)
def test_decode_agrees_with_json_loads(event: str | None, data: str) -> None:
    name, payload, problem = decode_event(event, data)
    want_name, want_payload, want_problem = _expected(event, data)
    assert (name, problem) == (want_name, want_problem)
    assert _same(payload, want_payload)


def test_decode_keeps_nan_as_json_loads_does() -> None:
    _, payload, problem = decode_event(None, '{"type":"x","v":NaN}')
    assert problem is None and math.isnan(payload["v"])


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"path": "a"}', {"path": "a"}),
        (' {"n": 1} ', {"n": 1}),
        ('{"n": NaN}', None),
        ('{"n": Infinity}', None),
        ('{"n": 1', None),
        ("\ufeff{}", None),
        ("[]", None),
    ],
)
def test_parse_tool_input_matches_json_loads_strictly(
    text: str, expected: dict[str, Any] | None
) -> None:
    assert parse_tool_input(text) == expected


# ---------------------------------------------------------------------------------------------
# Through the server


class RawFrame(Frame):
    """A frame whose data line is sent as given, valid JSON or not."""

    def __init__(self, event: str, text: str) -> None:
        super().__init__(event, {})
        object.__setattr__(self, "text", text)

    def encode(self) -> bytes:
        text: str = object.__getattribute__(self, "text")
        return f"event: {self.event}\ndata: {text}\n\n".encode()


def _traits(name: str, input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=True)


async def _events(sdk: anthropic.AsyncAnthropic) -> list[Event]:
    client = AnthropicModelClient(sdk, traits_for=_traits)
    prompt = Conversation.of([UserMessage(id="u0", content=(TextBlock(text="hi"),))])
    effect = CallModel(call_id=1, model="claude-test-1", conversation=prompt, max_tokens=64)
    async with aclosing(client.stream(effect)) as events:
        return [e async for e in events]


def _script_with(before_frame: int, frame: Frame) -> StreamScript:
    script = response_script(
        text_block("Reading.", chunks=2),
        tool_use_block("toolu_1", "Read", {"path": "a.txt"}, chunks=2),
        stop_reason="tool_use",
    )
    return script.insert(before_frame, frame)


@pytest.mark.anyio
@pytest.mark.parametrize(
    "text",
    [
        '{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta"',
        '{"type":"ping"} trailing',
        "[1]",
    ],
)
async def test_malformed_event_data_is_stream_broken(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic, text: str
) -> None:
    """The text block completed before the bad frame arrives; the call then ends broken."""
    # Frames: message_start, text start, 2 deltas, text stop (5), then the tool block.
    server.enqueue(_script_with(5, RawFrame("content_block_delta", text)))
    events = await _events(sdk)
    assert [type(e) for e in events] == [ModelBlockReceived, ModelCallFailed]
    first, failure = events
    assert isinstance(first, ModelBlockReceived) and first.block == TextBlock(text="Reading.")
    assert isinstance(failure, ModelCallFailed)
    assert failure.kind == "stream_broken"
    assert failure.message.startswith("malformed content_block_delta data: ")


@pytest.mark.anyio
async def test_padded_event_data_is_accepted(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """Data with spaces around the object parses as json.loads would: the call succeeds."""
    padded = RawFrame("ping", '  {"type": "ping"}  ')
    server.enqueue(_script_with(5, padded))
    events = await _events(sdk)
    assert [e.TAG for e in events] == [
        "model_block_received",
        "model_block_received",
        "model_response_ended",
    ]
