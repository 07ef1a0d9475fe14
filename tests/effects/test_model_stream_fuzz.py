"""R-BLOCK-1, E-JSON-1: whatever a stream's events hold, the assembler makes blocks or ignores
what names no block, and the next request can be built from what it made; nothing raises.

The events start from a real stream (text, tool_use, thinking, a server tool, a block type
steploop does not know, a compaction) and Hypothesis replaces values at any depth by other JSON
values (lists and objects where strings or integers stood, unknown kinds, booleans for
indexes): the shapes a proxy, a newer API or an attacker can send. An unhashable ``index`` or
delta ``type`` and a content item that is not an object each raised TypeError or
AttributeError before.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from steploop.effects.model.request import to_api_messages, with_breakpoint
from steploop.effects.model.stream import Assembler
from steploop.reducer.events import ToolTraits
from steploop.reducer.messages import AssistantMessage
from tests.support.json_mutations import mutated

STREAM: list[tuple[str, dict[str, Any]]] = [
    ("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [],
        "stop_reason": None, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ("content_block_start", {"index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
    ("content_block_delta", {"index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
    ("content_block_delta", {"index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
    ("content_block_stop", {"index": 0}),
    ("content_block_start", {"index": 1, "content_block": {"type": "text", "text": "", "citations": []}}),
    ("content_block_delta", {"index": 1, "delta": {"type": "text_delta", "text": "hi"}}),
    ("content_block_delta", {"index": 1, "delta": {"type": "citations_delta", "citation": {"type": "char_location"}}}),
    ("content_block_stop", {"index": 1}),
    ("content_block_start", {"index": 2, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}}),
    ("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"file_path": "a'}}),
    ("content_block_delta", {"index": 2, "delta": {"type": "input_json_delta", "partial_json": '"}'}}),
    ("content_block_stop", {"index": 2}),
    ("content_block_start", {"index": 3, "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}}),
    ("content_block_delta", {"index": 3, "delta": {"type": "input_json_delta", "partial_json": '{"query": "x"}'}}),
    ("content_block_stop", {"index": 3}),
    ("content_block_start", {"index": 4, "content_block": {"type": "brand_new", "payload": "p"}}),
    ("content_block_delta", {"index": 4, "delta": {"type": "brand_new_delta", "payload": "q"}}),
    ("content_block_stop", {"index": 4}),
    ("content_block_start", {"index": 5, "content_block": {"type": "compaction", "content": ""}}),
    ("content_block_delta", {"index": 5, "delta": {"type": "compaction_delta", "content": "summary"}}),
    ("content_block_stop", {"index": 5}),
    ("message_delta", {"delta": {"stop_reason": "tool_use", "stop_details": None}, "usage": {"output_tokens": 9}}),
    ("message_stop", {}),
]  # fmt: skip


@pytest.mark.spec("R-BLOCK-1", "E-JSON-1")
@settings(
    max_examples=int(os.environ.get("STEPLOOP_FUZZ_EXAMPLES", "600")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(events=mutated([list(e) for e in STREAM]))
def test_any_stream_becomes_blocks_and_a_request(events: list[list[Any]]) -> None:
    a = Assembler(1, "m", lambda name, input: ToolTraits(), lambda index, text: None, lambda: 0)
    blocks = []
    for name, payload in events:
        if not isinstance(name, str) or not isinstance(payload, dict):
            continue  # decode_event gives a name and an object, whatever the data
        got = a.feed(name, payload)
        if got is not None:
            blocks.append(got.block)
        blocks += [r.block for r in a.ready]
        a.ready = []
    if a.stopped:
        a.ended()
    if blocks:
        message = AssistantMessage(id="a1", response_id="r1", model="m", content=tuple(blocks))
        with_breakpoint(to_api_messages([message], keep_thinking=True))


def test_the_unmutated_stream_makes_six_blocks() -> None:
    """The base the mutations start from is a working stream (else they test nothing)."""
    a = Assembler(1, "m", lambda name, input: ToolTraits(), lambda index, text: None, lambda: 0)
    made = [b for name, p in copy.deepcopy(STREAM) if (b := a.feed(name, p)) is not None]
    assert len(made) == 6 and a.stopped
