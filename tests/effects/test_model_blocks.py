"""Every content block the API sends reaches the machine: modelled blocks, and the rest (server
tool calls and results, MCP, compaction, ...) kept opaque, byte for byte, and sent back unchanged.

The real SDK against the local Messages API server (tests/support/messages_server.py), streaming
and not.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anthropic
import pytest

from steploop.effects.model import AnthropicModelClient, build_request
from steploop.effects.run import PermissionPolicy, run
from steploop.reducer.config import default
from steploop.reducer.conversation import Conversation, estimate_message, estimate_text
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
    OpaqueBlock,
    TextBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import Completed
from tests.support.messages_server import (
    BlockSpec,
    Body,
    Drop,
    Frame,
    MessagesServer,
    StreamScript,
    response_script,
    text_block,
)

MODEL = "claude-test-1"
SERVED = "claude-test-1-20990101"

SEARCH_USE = {
    "type": "server_tool_use",
    "id": "srvtoolu_01",
    "name": "web_search",
    "input": {"query": "claude shannon birth date"},
}
SEARCH_RESULT = {
    "type": "web_search_tool_result",
    "tool_use_id": "srvtoolu_01",
    "content": [
        {
            "type": "web_search_result",
            "url": "https://en.wikipedia.org/wiki/Claude_Shannon",
            "title": "Claude Shannon - Wikipedia",
            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1k",
            "page_age": "April 30, 2025",
        }
    ],
}
CITATION = {
    "type": "web_search_result_location",
    "url": "https://en.wikipedia.org/wiki/Claude_Shannon",
    "title": "Claude Shannon - Wikipedia",
    "encrypted_index": "Eo8BCioIAhgBIiQyYjQ0OWJmZi1lNm",
    "cited_text": "Claude Elwood Shannon (April 30, 1916 – February 24, 2001) was an American…",
}
CITED_TEXT = "Claude Shannon was born on April 30, 1916, in Petoskey, Michigan."
MCP_USE = {
    "type": "mcp_tool_use",
    "id": "mcptoolu_01",
    "name": "echo",
    "server_name": "example-mcp",
    "input": {"param1": "value1"},
}
MCP_RESULT = {
    "type": "mcp_tool_result",
    "tool_use_id": "mcptoolu_01",
    "is_error": False,
    "content": [{"type": "text", "text": "value1"}],
}
COMPACTION = {"type": "compaction", "content": "Summary of the conversation so far."}
EXEC_RESULT = {
    "type": "code_execution_tool_result",
    "tool_use_id": "srvtoolu_02",
    "content": {
        "type": "code_execution_result",
        "stdout": "4\n",
        "stderr": "",
        "return_code": 0,
        "content": [],
    },
}


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def traits(name: str, input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=name == "Read")


def client(sdk: anthropic.AsyncAnthropic) -> AnthropicModelClient:
    return AnthropicModelClient(sdk, traits_for=traits, idle_timeout=2.0)


def call(*messages: Any, streaming: bool = True, call_id: int = 1) -> CallModel:
    return CallModel(
        call_id=call_id,
        model=MODEL,
        conversation=Conversation.of(messages),
        max_tokens=1024,
        streaming=streaming,
    )


PROMPT = UserMessage(id="u1", content=(TextBlock(text="When was Claude Shannon born?"),))


async def collect(c: AnthropicModelClient, effect: CallModel) -> list[Event]:
    async with aclosing(c.stream(effect)) as events:
        return [e async for e in events]


def blocks(events: list[Event]) -> list[Any]:
    return [e.block for e in events if isinstance(e, ModelBlockReceived)]


def search_script(model: str = MODEL) -> StreamScript:
    """A web search answer as the API streams it: the server tool call (its input over
    input_json_delta), the result (whole in the start frame), the cited text."""
    use_start = {**SEARCH_USE, "input": {}}
    query = json.dumps(SEARCH_USE["input"])
    cited = BlockSpec(
        {"type": "text", "text": ""},
        (
            {"type": "citations_delta", "citation": CITATION},
            {"type": "text_delta", "text": CITED_TEXT[:20]},
            {"type": "text_delta", "text": CITED_TEXT[20:]},
        ),
    )
    return response_script(
        text_block("Let me search."),
        BlockSpec(
            use_start,
            tuple({"type": "input_json_delta", "partial_json": p} for p in (query[:9], query[9:])),
        ),
        BlockSpec(SEARCH_RESULT),
        cited,
        stop_reason="end_turn",
        model=model,
    )


# ---------------------------------------------------------------------------------------------
# Defect 4: the non-streaming path and blocks the SDK's types do not know


@pytest.mark.spec("R-BLOCK-1")
@pytest.mark.anyio
async def test_non_streaming_unknown_blocks_are_kept_opaque(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """mcp_tool_use, mcp_tool_result and compaction blocks of a non-streaming answer become
    opaque blocks holding their JSON (the SDK's own types turn them into text blocks without
    text, which crashed the run); the known blocks around them are modelled as usual."""
    server.enqueue(
        response_script(
            BlockSpec(COMPACTION),
            BlockSpec(MCP_USE),
            BlockSpec(MCP_RESULT),
            text_block("The server echoed value1."),
        )
    )
    events = await collect(client(sdk), call(PROMPT, streaming=False))
    assert blocks(events) == [
        OpaqueBlock(block_type="compaction", raw=compact(COMPACTION)),
        OpaqueBlock(block_type="mcp_tool_use", raw=compact(MCP_USE)),
        OpaqueBlock(block_type="mcp_tool_result", raw=compact(MCP_RESULT)),
        TextBlock(text="The server echoed value1."),
    ]
    assert isinstance(events[-1], ModelResponseEnded) and events[-1].stop_reason == "end_turn"
    # and the machine can hold them: every block estimates (no text of None anywhere)
    conv = Conversation.of(
        [PROMPT]
        + [
            AssistantMessage(id=f"a{i}", response_id="r1", model=MODEL, content=(b,))
            for i, b in enumerate(blocks(events))
        ]
    )
    assert conv.token_count() > 0


@pytest.mark.spec("R-BLOCK-1")
@pytest.mark.anyio
async def test_non_streaming_malformed_body_is_an_event(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """A 200 answer whose body is no message (no content list) is one stream_broken failure
    naming the problem; a modelled type with a wrong field (text that is not a string) is kept
    opaque instead of becoming a block the machine cannot hold."""
    bad = response_script(BlockSpec({"type": "text", "text": None, "note": 1}))
    server.enqueue(bad)
    events = await collect(client(sdk), call(PROMPT, streaming=False))
    assert blocks(events) == [
        OpaqueBlock(block_type="text", raw='{"type":"text","text":null,"note":1}')
    ]

    deep = '{"a":' * 100_000 + "1" + "}" * 100_000  # past json's depth: a RecursionError
    server.enqueue(Body('{"id": "m", "content": 3}'), Body("<html>bad gateway</html>"), Body(deep))
    for expected in ("no content list", "malformed message body", "malformed message body"):
        events = await collect(client(sdk), call(PROMPT, streaming=False))
        assert len(events) == 1 and isinstance(events[0], ModelCallFailed)
        assert events[0].kind == "stream_broken" and expected in events[0].message


@pytest.mark.spec("R-BLOCK-1", "R-RETRY-5")
@pytest.mark.anyio
async def test_run_survives_unknown_blocks_after_a_stream_fallback(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic, tmp_path: Path
) -> None:
    """The crash the issue reports, end to end: a stream that breaks makes the machine resend
    without streaming, and that answer holds MCP and compaction blocks. The run ends
    ``completed`` with every block in the conversation, and the Claude Code transcript holds
    each block as the API sent it."""
    broken = search_script().cut(4, Drop())
    answer = response_script(
        BlockSpec(COMPACTION), BlockSpec(MCP_USE), BlockSpec(MCP_RESULT), text_block("Done.")
    )
    server.enqueue(broken, answer)
    items: list[Any] = []
    async with run(
        "Use the MCP server.",
        model=client(sdk),
        config=default(),
        permissions=PermissionPolicy(default="allow"),
        transcript_path=tmp_path / "session.jsonl",
    ) as r:
        async for item in r:
            items.append(item)
    assert r.result is not None and r.result.terminal == Completed()
    stored = [
        b for m in r.result.state.conversation if isinstance(m, AssistantMessage) for b in m.content
    ]
    assert [type(b).__name__ for b in stored] == [
        "OpaqueBlock",
        "OpaqueBlock",
        "OpaqueBlock",
        "TextBlock",
    ]
    assert [server.requests[i].stream for i in range(2)] == [True, False]
    lines = (tmp_path / "session.jsonl").read_text(encoding="utf-8").splitlines()
    written = [
        block
        for rec in map(json.loads, lines)
        if rec.get("type") == "assistant"
        for block in rec["message"]["content"]
    ]
    assert written == [COMPACTION, MCP_USE, MCP_RESULT, {"type": "text", "text": "Done."}]


# ---------------------------------------------------------------------------------------------
# Defect 5: a message_start that already holds the content, and the served model


def start_only_script() -> StreamScript:
    """As recorded from the API: message_start carries two code-execution results and a tool
    call with the stop reason; then message_stop, and no message_delta at all."""
    tool = {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "a.txt"}}
    message = {
        "id": "msg_start_only",
        "type": "message",
        "role": "assistant",
        "model": SERVED,
        "content": [EXEC_RESULT, {**EXEC_RESULT, "tool_use_id": "srvtoolu_03"}, tool],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 30, "output_tokens": 12},
    }
    return StreamScript(
        (
            Frame("message_start", {"type": "message_start", "message": message}),
            Frame("message_stop", {"type": "message_stop"}),
        )
    )


@pytest.mark.spec("R-BLOCK-1")
@pytest.mark.anyio
async def test_message_start_content_and_stop_reason_are_read(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """The blocks and the stop reason of a message_start are reported, as the SDK's own
    accumulator would; the answer is not lost, its tool call runs."""
    server.enqueue(start_only_script())
    events = await collect(client(sdk), call(PROMPT))
    assert blocks(events) == [
        OpaqueBlock(block_type="code_execution_tool_result", raw=compact(EXEC_RESULT)),
        OpaqueBlock(
            block_type="code_execution_tool_result",
            raw=compact({**EXEC_RESULT, "tool_use_id": "srvtoolu_03"}),
        ),
        ToolUseBlock(id="toolu_01", name="Read", input={"path": "a.txt"}),
    ]
    tool_event = events[2]
    assert isinstance(tool_event, ModelBlockReceived)
    assert tool_event.tool == ToolTraits(concurrency_safe=True)
    end = events[-1]
    assert isinstance(end, ModelResponseEnded)
    assert end.stop_reason == "tool_use" and end.model == SERVED
    assert end.usage.input_tokens == 30 and end.usage.output_tokens == 12


@pytest.mark.spec("R-MODEL-1")
@pytest.mark.anyio
async def test_records_name_the_served_model(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """The alias is what was asked for; the assistant records (emitted and stored) carry the
    model id that served the response, streaming and not."""
    server.enqueue(search_script(model=SERVED), search_script(model=SERVED))
    for streaming in (True, False):
        events = await collect(client(sdk), call(PROMPT, streaming=streaming))
        assert {e.model for e in events if isinstance(e, ModelBlockReceived)} == {SERVED}
    async with run("hi", model=_ScriptedServed(), config=default()) as r:
        emitted = [i async for i in r]
    records = [i for i in emitted if isinstance(i, AssistantMessage)]
    stored = [m for m in r.result.state.conversation if isinstance(m, AssistantMessage)]  # type: ignore[union-attr]
    assert {m.model for m in records} == {SERVED}
    assert {m.model for m in stored} == {"claude-test-9"}  # what ModelResponseEnded said


class _ScriptedServed:
    """A client that names the serving model on its blocks and a different one at the end
    (the machine keeps the end's: it is the last word on who served the response)."""

    async def stream(self, effect: CallModel) -> Any:
        yield ModelBlockReceived(call_id=effect.call_id, block=TextBlock(text="ok"), model=SERVED)
        yield ModelResponseEnded(
            call_id=effect.call_id,
            model="claude-test-9",
            stop_reason="end_turn",
            usage=Usage(input_tokens=3, output_tokens=1),
        )


# ---------------------------------------------------------------------------------------------
# Server-side blocks: streamed, kept, estimated and sent back byte-equal


@pytest.mark.spec("R-BLOCK-1", "R-BLOCK-2")
@pytest.mark.anyio
async def test_streamed_server_blocks_and_citations_are_kept(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """A streamed web search: the server tool call with its input folded in, the result whole,
    the text with its citation. Each is what the non-streaming answer holds, key for key."""
    server.enqueue(search_script(), search_script())
    streamed = blocks(await collect(client(sdk), call(PROMPT)))
    whole = blocks(await collect(client(sdk), call(PROMPT, streaming=False)))
    assert (
        streamed
        == whole
        == [
            TextBlock(text="Let me search."),
            OpaqueBlock(block_type="server_tool_use", raw=compact(SEARCH_USE)),
            OpaqueBlock(block_type="web_search_tool_result", raw=compact(SEARCH_RESULT)),
            TextBlock(text=CITED_TEXT, citations=compact([CITATION])),
        ]
    )


@pytest.mark.spec("R-BLOCK-2")
@pytest.mark.anyio
async def test_server_blocks_are_sent_back_byte_equal(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """The next request carries every block of the answer as the API sent it: the same keys in
    the same order with the same values, the citations with their text; no cache marker is
    put on an opaque block."""
    server.enqueue(search_script(), response_script(text_block("ok")))
    c = client(sdk)
    events = await collect(c, call(PROMPT))
    records = [
        AssistantMessage(id=f"a{i}", response_id="r1", model=MODEL, content=(b,))
        for i, b in enumerate(blocks(events))
    ]
    follow = UserMessage(id="u2", content=(TextBlock(text="Thanks."),))
    await collect(c, call(PROMPT, *records, follow, call_id=2))
    sent = server.requests[1].json["messages"][1]["content"]
    assert [compact(b) for b in sent] == [
        compact({"type": "text", "text": "Let me search."}),
        compact(SEARCH_USE),
        compact(SEARCH_RESULT),
        compact({"type": "text", "text": CITED_TEXT, "citations": [CITATION]}),
    ]
    # the pure request builder gives the same
    built = build_request(call(PROMPT, *records, follow, call_id=2))
    assert [compact(b) for b in built["messages"][1]["content"]] == [compact(b) for b in sent]


@pytest.mark.spec("R-BLOCK-2")
def test_cache_marker_skips_a_trailing_opaque_block() -> None:
    """When the latest message ends with an opaque block (a paused server tool loop that is
    resumed), the cache marker goes on the last block that may carry one."""
    records = [
        AssistantMessage(id="a1", response_id="r1", model=MODEL, content=(TextBlock(text="Hm."),)),
        AssistantMessage(
            id="a2",
            response_id="r1",
            model=MODEL,
            content=(OpaqueBlock(block_type="server_tool_use", raw=compact(SEARCH_USE)),),
        ),
    ]
    content = build_request(call(PROMPT, *records))["messages"][1]["content"]
    assert content[0] == {"type": "text", "text": "Hm.", "cache_control": {"type": "ephemeral"}}
    assert content[1] == SEARCH_USE


@pytest.mark.spec("R-TOK-1")
def test_opaque_blocks_are_estimated_on_their_json() -> None:
    """An opaque block counts as its JSON text (the reference's rule for blocks it has no
    other rule for); a cited text counts its text only, as in the reference."""
    raw = compact(SEARCH_RESULT)
    opaque = AssistantMessage(
        id="a1",
        response_id="r1",
        model=MODEL,
        content=(OpaqueBlock(block_type="web_search_tool_result", raw=raw),),
    )
    assert estimate_message(opaque) == estimate_text(raw) > 0
    cited = AssistantMessage(
        id="a2",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text=CITED_TEXT, citations=compact([CITATION])),),
    )
    assert estimate_message(cited) == estimate_text(CITED_TEXT)


@pytest.mark.spec("R-TOOL-4", "R-BLOCK-1")
@pytest.mark.anyio
async def test_cut_off_server_tool_input_is_dropped(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """A server tool call whose input JSON is cut off by max_tokens is reported as incomplete
    (the machine then never stores it: it could not be sent back)."""
    use_start = {**SEARCH_USE, "input": {}}
    server.enqueue(
        response_script(
            BlockSpec(use_start, ({"type": "input_json_delta", "partial_json": '{"query": "cl'},)),
            stop_reason="max_tokens",
        )
    )
    events = await collect(client(sdk), call(PROMPT))
    first = events[0]
    assert isinstance(first, ModelBlockReceived) and first.input_complete is False
    assert isinstance(first.block, OpaqueBlock)


COMPACTION_START = {"type": "compaction", "content": None}
COMPACTION_SUMMARY = "The user asked to fix the parser; tests pass now."


def compaction_script(*deltas: dict[str, Any]) -> StreamScript:
    return response_script(
        BlockSpec(COMPACTION_START, deltas), text_block("Continuing."), stop_reason="end_turn"
    )


@pytest.mark.spec("R-BLOCK-1", "R-BLOCK-2")
@pytest.mark.anyio
async def test_a_streamed_compaction_block_keeps_its_summary(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """A compaction block's compaction_delta is folded in (content and encrypted content set, as
    the SDK's accumulator does) and the block is sent back with its summary, never with
    ``content: null``."""
    delta = {
        "type": "compaction_delta",
        "content": COMPACTION_SUMMARY,
        "encrypted_content": "EqQBCkgIBRAB",
    }
    server.enqueue(compaction_script(delta), response_script(text_block("ok")))
    c = client(sdk)
    got = blocks(await collect(c, call(PROMPT)))
    whole = {
        "type": "compaction",
        "content": COMPACTION_SUMMARY,
        "encrypted_content": "EqQBCkgIBRAB",
    }
    assert got[0] == OpaqueBlock(block_type="compaction", raw=compact(whole))
    records = [
        AssistantMessage(id=f"a{i}", response_id="r1", model=MODEL, content=(b,))
        for i, b in enumerate(got)
    ]
    follow = UserMessage(id="u2", content=(TextBlock(text="Go on."),))
    await collect(c, call(PROMPT, *records, follow, call_id=2))
    sent = server.requests[1].json["messages"][1]["content"][0]
    assert sent == whole


@pytest.mark.spec("R-BLOCK-1")
@pytest.mark.anyio
async def test_an_unknown_delta_of_an_opaque_block_is_kept(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """A delta kind the client does not know is not dropped: its strings extend the block's
    strings, its other fields are set."""
    start = {"type": "future_block", "note": "a", "count": 0}
    deltas = (
        {"type": "future_delta", "note": "b", "count": 1},
        {"type": "future_delta", "note": "c", "extra": [1]},
    )
    server.enqueue(response_script(BlockSpec(start, deltas)))
    (got,) = blocks(await collect(client(sdk), call(PROMPT)))
    assert json.loads(got.raw) == {"type": "future_block", "note": "abc", "count": 1, "extra": [1]}
