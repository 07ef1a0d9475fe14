"""The default model client, with the real anthropic SDK against a local Messages API server."""

from __future__ import annotations

import gc
import json
import socket
import time
from contextlib import aclosing
from typing import Any

import anthropic
import anyio
import pytest

from steploop.effects.model import (
    AnthropicModelClient,
    build_request,
    classify_error,
    make_client,
    parse_tool_input,
    to_api_messages,
)
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel, TaskBudget
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
    ErrorInfo,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from tests.support.messages_server import (
    Drop,
    MessagesServer,
    Sleep,
    error_event,
    error_response,
    redacted_thinking_block,
    response_script,
    text_block,
    text_response,
    thinking_block,
    tool_use_block,
    tool_use_response,
)

MODEL = "claude-test-1"
TOOLS = [
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "Write",
        "description": "Write a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        },
    },
]
SYSTEM = "You are a careful test assistant."
EPHEMERAL = {"type": "ephemeral"}
USAGE = {
    "input_tokens": 120,
    "output_tokens": 42,
    "cache_creation_input_tokens": 7,
    "cache_read_input_tokens": 900,
}
READ_TIMEOUT = 0.3


class TraitsLog:
    """A traits_for that records its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, input: dict[str, Any]) -> ToolTraits:
        self.calls.append((name, input))
        return ToolTraits(concurrency_safe=name == "Read")


def model_client(sdk: anthropic.AsyncAnthropic, **kwargs: Any) -> AnthropicModelClient:
    kwargs.setdefault("system", SYSTEM)
    kwargs.setdefault("tools", TOOLS)
    kwargs.setdefault("traits_for", TraitsLog())
    kwargs.setdefault("idle_timeout", READ_TIMEOUT)
    return AnthropicModelClient(sdk, **kwargs)


def user(id: str, *blocks: Any) -> UserMessage:
    content = tuple(TextBlock(text=b) if isinstance(b, str) else b for b in blocks)
    return UserMessage(id=id, content=content)


def assistant(id: str, response_id: str, block: Any, **kwargs: Any) -> AssistantMessage:
    return AssistantMessage(id=id, response_id=response_id, model=MODEL, content=(block,), **kwargs)


def call(*messages: Message, call_id: int = 1, **kwargs: Any) -> CallModel:
    kwargs.setdefault("max_tokens", 1024)
    return CallModel(call_id=call_id, model=MODEL, conversation=Conversation.of(messages), **kwargs)


PROMPT = call(user("u1", "Hello there"))


async def collect(client: AnthropicModelClient, effect: CallModel) -> list[Event]:
    async with aclosing(client.stream(effect)) as events:
        return [e async for e in events]


def ended(
    stop_reason: str | None = "end_turn", usage: dict[str, int] = USAGE
) -> ModelResponseEnded:
    return ModelResponseEnded(call_id=1, model=MODEL, stop_reason=stop_reason, usage=Usage(**usage))


def block(b: Any, **kwargs: Any) -> ModelBlockReceived:
    """A block event of the test server's answer, which names the serving model (R-MODEL-1)."""
    kwargs.setdefault("model", MODEL)
    return ModelBlockReceived(call_id=1, block=b, **kwargs)


def only_failure(events: list[Event]) -> ModelCallFailed:
    assert len(events) >= 1
    last = events[-1]
    assert isinstance(last, ModelCallFailed)
    assert not any(isinstance(e, (ModelCallFailed, ModelResponseEnded)) for e in events[:-1])
    return last


# ---------------------------------------------------------------------------------------------
# Successful streams


@pytest.mark.anyio
async def test_text_response_yields_block_then_end(server: MessagesServer, sdk: Any) -> None:
    """A text answer streamed over several deltas becomes one block event, then the end event."""
    deltas: list[tuple[int, str]] = []
    server.enqueue(text_response("Hello, world!", chunks=4, usage=USAGE))
    client = model_client(sdk, on_text_delta=lambda i, t: deltas.append((i, t)))
    events = await collect(client, PROMPT)
    assert events == [block(TextBlock(text="Hello, world!")), ended()]
    assert "".join(t for _, t in deltas) == "Hello, world!"
    assert len(deltas) == 4 and {i for i, _ in deltas} == {0}
    (request,) = server.requests
    assert request.path == "/v1/messages" and request.json["stream"] is True


@pytest.mark.anyio
async def test_thinking_block_keeps_signature(server: MessagesServer, sdk: Any) -> None:
    """A thinking block arrives with its full text and the signature from signature_delta."""
    server.enqueue(
        response_script(
            thinking_block("Let me think step by step.", "sig-abc==", chunks=3),
            text_block("Answer."),
            usage=USAGE,
        )
    )
    events = await collect(
        model_client(sdk), call(user("u1", "Hello there"), max_tokens=4096, thinking_budget=2048)
    )
    assert events == [
        block(ThinkingBlock(thinking="Let me think step by step.", signature="sig-abc==")),
        block(TextBlock(text="Answer.")),
        ended(),
    ]
    assert server.requests[0].json["thinking"] == {"type": "enabled", "budget_tokens": 2048}


@pytest.mark.anyio
async def test_multi_block_response_keeps_order(server: MessagesServer, sdk: Any) -> None:
    """Thinking, redacted thinking, text and two tool calls come out in stream order."""
    traits = TraitsLog()
    server.enqueue(
        response_script(
            thinking_block("hmm", "s1"),
            redacted_thinking_block("opaque=="),
            text_block("I'll read both.", chunks=2),
            tool_use_block("toolu_a", "Read", {"path": "a.txt"}),
            tool_use_block("toolu_b", "Write", {"path": "b.txt", "content": "x"}),
            stop_reason="tool_use",
            usage=USAGE,
            pings=True,
        )
    )
    events = await collect(model_client(sdk, traits_for=traits), PROMPT)
    assert events == [
        block(ThinkingBlock(thinking="hmm", signature="s1")),
        block(RedactedThinkingBlock(data="opaque==")),
        block(TextBlock(text="I'll read both.")),
        block(
            ToolUseBlock(id="toolu_a", name="Read", input={"path": "a.txt"}),
            tool=ToolTraits(concurrency_safe=True),
        ),
        block(
            ToolUseBlock(id="toolu_b", name="Write", input={"path": "b.txt", "content": "x"}),
            tool=ToolTraits(concurrency_safe=False),
        ),
        ended("tool_use"),
    ]
    assert traits.calls == [
        ("Read", {"path": "a.txt"}),
        ("Write", {"path": "b.txt", "content": "x"}),
    ]


@pytest.mark.anyio
async def test_tool_input_split_over_many_deltas_is_parsed_strictly(
    server: MessagesServer, sdk: Any
) -> None:
    """Tool input cut into 40 input_json_delta pieces is joined and parsed once, exactly."""
    tool_input = {
        "path": "src/ünïcode/файл.py",
        "content": 'line 1\nline "2"\n\ttabbed\\',
        "nested": {"list": [1, 2.5, None, True], "empty": {}},
    }
    server.enqueue(tool_use_response("toolu_x", "Write", tool_input, chunks=40, usage=USAGE))
    events = await collect(model_client(sdk), PROMPT)
    assert events == [
        block(ToolUseBlock(id="toolu_x", name="Write", input=tool_input), tool=ToolTraits()),
        ended("tool_use"),
    ]
    deltas = [
        f
        for f in tool_use_response("toolu_x", "Write", tool_input, chunks=40).frames()
        if f.event == "content_block_delta"
    ]
    assert len(deltas) == 40


@pytest.mark.anyio
async def test_tool_input_cut_by_max_tokens_is_incomplete(server: MessagesServer, sdk: Any) -> None:
    """Tool input cut off by max_tokens is {} with input_complete=False, never a partial parse."""
    server.enqueue(
        tool_use_response(
            "toolu_cut", "Write", '{"path": "a.txt", "conte', stop_reason="max_tokens", usage=USAGE
        )
    )
    traits = TraitsLog()
    events = await collect(model_client(sdk, traits_for=traits), PROMPT)
    assert events == [
        block(
            ToolUseBlock(id="toolu_cut", name="Write", input={}),
            tool=ToolTraits(),
            input_complete=False,
        ),
        ended("max_tokens"),
    ]
    assert traits.calls == [("Write", {})]


@pytest.mark.anyio
async def test_tool_without_parameters_has_empty_complete_input(
    server: MessagesServer, sdk: Any
) -> None:
    """A tool_use block with no input deltas keeps the start frame's {} and is complete."""
    server.enqueue(tool_use_response("toolu_e", "Read", "", usage=USAGE))
    events = await collect(model_client(sdk), PROMPT)
    assert events[0] == block(
        ToolUseBlock(id="toolu_e", name="Read", input={}), tool=ToolTraits(concurrency_safe=True)
    )


@pytest.mark.anyio
async def test_context_window_exceeded_stop_reason_is_passed_on(
    server: MessagesServer, sdk: Any
) -> None:
    """The model_context_window_exceeded stop reason reaches ModelResponseEnded unchanged."""
    server.enqueue(
        text_response("partial", stop_reason="model_context_window_exceeded", usage=USAGE)
    )
    events = await collect(model_client(sdk), PROMPT)
    assert events == [
        block(TextBlock(text="partial")),
        ended("model_context_window_exceeded"),
    ]


@pytest.mark.anyio
async def test_clock_stamps_events(server: MessagesServer, sdk: Any) -> None:
    """With a clock, every event carries its reading in at_ms."""
    ticks = iter(range(100, 200))
    server.enqueue(text_response("hi", usage=USAGE))
    events = await collect(model_client(sdk, clock=lambda: next(ticks)), PROMPT)
    assert [e.at_ms for e in events] == [100, 101]


# ---------------------------------------------------------------------------------------------
# HTTP failures

HTTP_FAILURES = [
    (
        400,
        "invalid_request_error",
        "Prompt is too long: 210000 tokens > 200000 maximum",
        None,
        "prompt_too_long",
        None,
    ),
    (
        413,
        "request_too_large",
        "Request exceeds the maximum allowed number of bytes.",
        None,
        "media",
        None,
    ),
    (
        400,
        "invalid_request_error",
        "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum",
        None,
        "media",
        None,
    ),
    (400, "invalid_request_error", "The PDF specified was not valid.", None, "media", None),
    (
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your rate limit.",
        "7",
        "rate_limited",
        7000,
    ),
    (429, "rate_limit_error", "Slow down.", "0.25", "rate_limited", 250),
    (529, "overloaded_error", "Overloaded", None, "overloaded", None),
    (529, "overloaded_error", "Overloaded", "3", "overloaded", 3000),
    (500, "api_error", "Internal server error", None, "server_error", None),
    (503, "api_error", "Service unavailable", None, "server_error", None),
    (401, "authentication_error", "invalid x-api-key", None, "auth", None),
    (403, "permission_error", "Your API key does not have permission", None, "auth", None),
    (400, "invalid_request_error", "messages: roles must alternate", None, "invalid_request", None),
    (404, "not_found_error", "model: claude-nope", None, "invalid_request", None),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "error_type", "message", "retry_after", "kind", "retry_after_ms"), HTTP_FAILURES
)
async def test_http_error_is_classified(
    server: MessagesServer,
    sdk: Any,
    status: int,
    error_type: str,
    message: str,
    retry_after: str | None,
    kind: str,
    retry_after_ms: int | None,
) -> None:
    """Each HTTP error status becomes exactly one ModelCallFailed of the right kind, unretried."""
    server.enqueue(error_response(status, error_type, message, retry_after=retry_after))
    events = await collect(model_client(sdk), PROMPT)
    assert events == [
        ModelCallFailed(
            call_id=1, kind=kind, message=message, status=status, retry_after_ms=retry_after_ms
        )
    ]
    assert len(server.requests) == 1  # the SDK did not retry


@pytest.mark.anyio
async def test_retry_after_ms_header_wins(server: MessagesServer, sdk: Any) -> None:
    """A retry-after-ms header is used (in ms) in preference to retry-after."""
    server.enqueue(
        error_response(
            429,
            "rate_limit_error",
            "Slow down",
            retry_after="9",
            headers=[("retry-after-ms", "1500")],
        )
    )
    (failed,) = await collect(model_client(sdk), PROMPT)
    assert isinstance(failed, ModelCallFailed)
    assert (failed.kind, failed.retry_after_ms) == ("rate_limited", 1500)


# ---------------------------------------------------------------------------------------------
# Failures inside a 200 stream


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error_type", "kind"),
    [
        ("overloaded_error", "overloaded"),
        ("api_error", "server_error"),
        ("rate_limit_error", "rate_limited"),
        ("mystery_error", "unknown"),
    ],
)
async def test_error_event_inside_stream_is_classified_by_type(
    server: MessagesServer, sdk: Any, error_type: str, kind: str
) -> None:
    """An `event: error` after a completed block: the block, then one failure by error.type."""
    script = response_script(text_block("first"), text_block("second"), usage=USAGE)
    # message_start, then block 0 (start, delta, stop): the error replaces block 1.
    server.enqueue(script.cut(4).insert(4, error_event(error_type, "Trouble")))
    events = await collect(model_client(sdk), PROMPT)
    assert events == [
        block(TextBlock(text="first")),
        ModelCallFailed(call_id=1, kind=kind, message="Trouble", status=None),
    ]


@pytest.mark.anyio
@pytest.mark.parametrize("reset", [False, True], ids=["fin", "rst"])
async def test_drop_mid_block_is_stream_broken(
    server: MessagesServer, sdk: Any, reset: bool
) -> None:
    """A cut mid-block yields the finished blocks then stream_broken, never the partial block."""
    script = response_script(text_block("done"), text_block("never finished", chunks=3))
    # Inside block 1, after one delta; the pause lets the client read what was sent first.
    server.enqueue(script.cut(6, Sleep(0.05), Drop(reset=reset)))
    events = await collect(model_client(sdk), PROMPT)
    assert events[:-1] == [block(TextBlock(text="done"))]
    failed = only_failure(events)
    assert failed.kind == "stream_broken" and failed.status is None


@pytest.mark.anyio
async def test_stall_past_read_timeout_is_stream_broken(server: MessagesServer, sdk: Any) -> None:
    """A stream that goes silent longer than the idle timeout fails fast as stream_broken."""
    server.enqueue(text_response("hello", usage=USAGE).insert(2, Sleep(5.0)))
    started = time.perf_counter()
    events = await collect(model_client(sdk, idle_timeout=READ_TIMEOUT), PROMPT)
    elapsed = time.perf_counter() - started
    assert only_failure(events).kind == "stream_broken"
    assert events[:-1] == []
    assert READ_TIMEOUT * 0.9 < elapsed < 2.0


@pytest.mark.anyio
async def test_stream_without_message_stop_is_stream_broken(
    server: MessagesServer, sdk: Any
) -> None:
    """A stream that ends cleanly but never sends message_stop counts as truncated."""
    server.enqueue(text_response("hello", usage=USAGE).without("message_stop"))
    events = await collect(model_client(sdk), PROMPT)
    assert events[:-1] == [block(TextBlock(text="hello"))]
    failed = only_failure(events)
    assert failed.kind == "stream_broken" and "message_stop" in failed.message


@pytest.mark.anyio
async def test_drop_before_any_event_is_connection(server: MessagesServer, sdk: Any) -> None:
    """A reset right after the 200 headers, before any event, is a connection failure."""
    server.enqueue(text_response("x").cut(0, Drop(reset=True)))
    events = await collect(model_client(sdk), PROMPT)
    assert only_failure(events).kind == "connection"
    assert len(events) == 1


@pytest.mark.anyio
async def test_connection_refused_is_connection(anyio_backend: str) -> None:
    """A closed port: one connection failure, no status, no exception."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sdk = make_client(f"http://127.0.0.1:{port}", "k", connect_timeout=1.0, read_timeout=1.0)
    try:
        events = await collect(model_client(sdk), PROMPT)
    finally:
        await sdk.close()
    assert len(events) == 1
    failed = only_failure(events)
    assert (failed.kind, failed.status, failed.retry_after_ms) == ("connection", None, None)


# ---------------------------------------------------------------------------------------------
# Cancellation and early close


@pytest.mark.anyio
async def test_cancellation_propagates_and_is_not_an_event(
    server: MessagesServer, sdk: Any
) -> None:
    """Cancelling mid-stream propagates through stream() and produces no failure event."""
    server.enqueue(text_response("slow", usage=USAGE).insert(2, Sleep(5.0)))
    seen: list[Event] = []
    client = model_client(sdk, idle_timeout=5.0)
    with anyio.move_on_after(0.2) as scope:
        async with aclosing(client.stream(PROMPT)) as events:
            async for e in events:
                seen.append(e)
    assert scope.cancelled_caught
    assert seen == []


@pytest.mark.anyio
async def test_early_close_releases_everything(server: MessagesServer, sdk: Any) -> None:
    """Closing the event stream after the first block leaves no unclosed generator or socket."""
    server.enqueue(response_script(text_block("one"), text_block("two"), usage=USAGE))
    async with aclosing(model_client(sdk).stream(PROMPT)) as events:
        first = await events.__anext__()
    assert first == block(TextBlock(text="one"))
    gc.collect()  # a leaked SDK generator would warn here (warnings are errors)
    await anyio.sleep(0)


# ---------------------------------------------------------------------------------------------
# Non-streaming mode


@pytest.mark.anyio
async def test_non_streaming_call_yields_blocks_then_end(server: MessagesServer, sdk: Any) -> None:
    """streaming=False sends a request without stream and reports the whole message."""
    server.enqueue(
        response_script(
            thinking_block("t", "sig"),
            text_block("Reading."),
            tool_use_block("toolu_n", "Read", {"path": "n.txt"}),
            stop_reason="tool_use",
            usage=USAGE,
        )
    )
    events = await collect(
        model_client(sdk),
        call(user("u1", "hi"), streaming=False, max_tokens=2048, thinking_budget=1024),
    )
    assert events == [
        block(ThinkingBlock(thinking="t", signature="sig")),
        block(TextBlock(text="Reading.")),
        block(
            ToolUseBlock(id="toolu_n", name="Read", input={"path": "n.txt"}),
            tool=ToolTraits(concurrency_safe=True),
        ),
        ended("tool_use"),
    ]
    assert "stream" not in server.requests[0].json


@pytest.mark.anyio
async def test_non_streaming_max_tokens_tool_call_is_incomplete(
    server: MessagesServer, sdk: Any
) -> None:
    """Without streaming, a tool_use ending a max_tokens response is treated as cut off."""
    server.enqueue(
        tool_use_response("toolu_m", "Write", {"path": "a"}, stop_reason="max_tokens", usage=USAGE)
    )
    events = await collect(model_client(sdk), call(user("u1", "hi"), streaming=False))
    assert events[0] == block(
        ToolUseBlock(id="toolu_m", name="Write", input={}), tool=ToolTraits(), input_complete=False
    )
    assert events[1] == ended("max_tokens")


@pytest.mark.anyio
async def test_non_streaming_failure_is_classified(server: MessagesServer, sdk: Any) -> None:
    """Without streaming, an HTTP 529 is still one overloaded failure."""
    server.enqueue(error_response(529, "overloaded_error", "Overloaded"))
    events = await collect(model_client(sdk), call(user("u1", "hi"), streaming=False))
    assert events == [
        ModelCallFailed(call_id=1, kind="overloaded", message="Overloaded", status=529)
    ]


@pytest.mark.anyio
async def test_non_streaming_stall_is_stream_broken(server: MessagesServer, sdk: Any) -> None:
    """Without streaming, no answer within the read timeout is stream_broken, not a hang."""
    server.enqueue(text_response("late").insert(0, Sleep(5.0)))
    client = model_client(sdk, nonstreaming_timeout=READ_TIMEOUT)
    events = await collect(client, call(user("u1", "hi"), streaming=False))
    assert only_failure(events).kind == "stream_broken"


# ---------------------------------------------------------------------------------------------
# Requests: what is sent, and the cache-stable prefix


def split_body(raw: bytes) -> tuple[bytes, bytes]:
    """Split a raw request body into its messages array text and everything after it."""
    start = raw.index(b'"messages":[')
    end = raw.index(b'],"model":')
    return raw[start : end + 1], raw[end + 1 :]


@pytest.mark.anyio
async def test_successive_rounds_send_byte_identical_prefix(
    server: MessagesServer, sdk: Any
) -> None:
    """Round 2 resends round 1's tools/system part and earlier messages byte for byte."""
    base: list[Message] = [
        user("u0", "Please read a.txt"),
        assistant("a0", "r0", TextBlock(text="Sure.")),
        assistant("a0b", "r0", ToolUseBlock(id="toolu_0", name="Read", input={"path": "a.txt"})),
        user("u1", ToolResultBlock(tool_use_id="toolu_0", content="alpha")),
    ]
    more: list[Message] = [
        assistant("a1", "r1", TextBlock(text="It says alpha.")),
        user("u2", "Thanks, now b.txt"),
    ]
    server.enqueue(text_response("one", usage=USAGE), text_response("two", usage=USAGE))
    client = model_client(sdk)
    await collect(client, call(*base))
    await collect(client, call(*base, *more, call_id=2))
    first, second = (r.raw for r in server.requests)

    # The tools/system part (after the messages array) is byte-identical and carries a
    # breakpoint on the last tool.
    msgs1, tail1 = split_body(first)
    msgs2, tail2 = split_body(second)
    assert tail1 == tail2
    tail = json.loads(b"{" + tail1[1:])
    assert tail["tools"][-1]["cache_control"] == EPHEMERAL
    assert all("cache_control" not in t for t in tail["tools"][:-1])

    # Every message before round 1's latest is byte-identical in round 2.
    body1, body2 = json.loads(first), json.loads(second)
    latest1 = json.dumps(body1["messages"][-1], separators=(",", ":"), ensure_ascii=False)
    earlier = first[: first.index(latest1.encode())]
    assert second.startswith(earlier)
    assert len(earlier) > len(b'{"max_tokens":1024,"messages":[') + 100

    # Round 1's latest message differs only by its breakpoint, which moved to round 2's latest.
    prev = body1["messages"][-1]
    assert prev["content"][-1].pop("cache_control") == EPHEMERAL
    assert body2["messages"][len(body1["messages"]) - 1] == prev
    assert body2["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
    assert msgs2.count(b'"cache_control"') == 1 and msgs1.count(b'"cache_control"') == 1


@pytest.mark.anyio
async def test_task_budget_is_sent_in_output_config(server: MessagesServer, sdk: Any) -> None:
    """A task budget goes out as output_config.task_budget (remaining only when set)."""
    server.enqueue(text_response("a", usage=USAGE), text_response("b", usage=USAGE))
    client = model_client(sdk)
    await collect(client, call(user("u1", "hi"), task_budget=TaskBudget(total=50_000)))
    await collect(
        client, call(user("u1", "hi"), task_budget=TaskBudget(total=50_000, remaining=1_234))
    )
    first, second = server.requests
    assert first.json["output_config"] == {"task_budget": {"total": 50_000}}
    assert second.json["output_config"] == {"task_budget": {"total": 50_000, "remaining": 1_234}}
    assert "task-budgets" in first.headers["anthropic-beta"]


def test_build_request_converts_and_merges_messages() -> None:
    """Responses and user runs merge, tool results lead, notices and synthetic errors drop."""
    messages: list[Message] = [
        user("u0", "Read both files"),
        assistant("a1", "r1", ThinkingBlock(thinking="plan", signature="s")),
        assistant("a2", "r1", TextBlock(text="Reading.")),
        assistant("a3", "r1", ToolUseBlock(id="t1", name="Read", input={"path": "a"})),
        assistant("a4", "r1", ToolUseBlock(id="t2", name="Read", input={"path": "b"})),
        SystemMessage(id="s1", subtype="notice", text="compacting soon"),
        user("u1", ToolResultBlock(tool_use_id="t1", content="A")),
        AttachmentMessage(
            id="at1", attachment_type="queued_command", data=(("text", "go on"), ("n", 2))
        ),
        user("u2", ToolResultBlock(tool_use_id="t2", content="B", is_error=True)),
        AssistantMessage(
            id="e1",
            response_id="err",
            model="<synthetic>",
            content=(TextBlock(text="API Error"),),
            api_error=ErrorInfo(kind="overloaded", message="Overloaded", status=529),
        ),
        user("u3", "", "and then?"),
    ]
    request = build_request(call(*messages), system=SYSTEM, tools=TOOLS)
    assert request["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Read both files"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "t2", "name": "Read", "input": {"path": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "t2", "content": "B", "is_error": True},
                {
                    "type": "text",
                    "text": '<attachment type="queued_command">text=go on n=2</attachment>',
                },
                {"type": "text", "text": "and then?", "cache_control": EPHEMERAL},
            ],
        },
    ]
    assert request["model"] == MODEL and request["max_tokens"] == 1024
    assert request["system"] == [{"type": "text", "text": SYSTEM}]
    assert request["tools"][-1] == {**TOOLS[-1], "cache_control": EPHEMERAL}
    assert "cache_control" not in TOOLS[-1]  # the caller's definitions are not modified


def test_build_request_sends_thinking_only_when_configured() -> None:
    """With thinking on, thinking and redacted_thinking blocks are sent back unchanged."""
    messages: list[Message] = [
        user("u0", "hi"),
        assistant("a1", "r1", ThinkingBlock(thinking="plan", signature="s")),
        assistant("a2", "r1", RedactedThinkingBlock(data="xx")),
        assistant("a3", "r1", TextBlock(text="ok")),
        user("u1", "more"),
    ]
    on = build_request(call(*messages, max_tokens=8192, thinking_budget=4096))
    assert on["messages"][1]["content"][:2] == [
        {"type": "thinking", "thinking": "plan", "signature": "s"},
        {"type": "redacted_thinking", "data": "xx"},
    ]
    assert on["thinking"] == {"type": "enabled", "budget_tokens": 4096}
    off = build_request(call(*messages))
    assert off["messages"][1]["content"] == [{"type": "text", "text": "ok"}]
    assert "thinking" not in off


def test_build_request_breakpoints_without_tools_and_after_thinking() -> None:
    """Without tools the system block gets the breakpoint; thinking blocks never get one."""
    messages: list[Message] = [
        user("u0", "hi"),
        assistant("a1", "r1", TextBlock(text="partial")),
        assistant("a2", "r1", ThinkingBlock(thinking="t", signature="s")),
    ]
    request = build_request(call(*messages, max_tokens=2048, thinking_budget=1024), system=SYSTEM)
    assert request["system"] == [{"type": "text", "text": SYSTEM, "cache_control": EPHEMERAL}]
    assert "tools" not in request
    assert request["messages"][-1]["content"] == [
        {"type": "text", "text": "partial", "cache_control": EPHEMERAL},
        {"type": "thinking", "thinking": "t", "signature": "s"},
    ]
    assert "system" not in build_request(call(*messages))


def test_build_request_images_and_documents() -> None:
    """Images go out as image blocks and PDFs as document blocks, base64 sources."""
    request = build_request(
        call(
            user(
                "u0",
                ImageBlock(media_type="image/png", data="iVBOR"),
                ImageBlock(media_type="application/pdf", data="JVBER"),
                "what are these?",
            )
        )
    )
    content = request["messages"][0]["content"]
    assert content[0] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
    }
    assert content[1]["type"] == "document"
    assert content[1]["source"]["media_type"] == "application/pdf"


@pytest.mark.anyio
async def test_build_request_is_deterministic(sdk: Any) -> None:
    """The same effect always builds byte-identical JSON, and the client method agrees."""
    effect = call(
        user("u0", "hi"),
        assistant("a1", "r1", ToolUseBlock(id="t", name="Write", input={"b": 1, "a": [2]})),
        user("u1", ToolResultBlock(tool_use_id="t", content="ok")),
        task_budget=TaskBudget(total=10, remaining=5),
        thinking_budget=512,
    )
    dumps = [json.dumps(build_request(effect, system=SYSTEM, tools=TOOLS)) for _ in range(3)]
    assert len(set(dumps)) == 1
    client = AnthropicModelClient(
        sdk,
        system=SYSTEM,
        tools=TOOLS,
        traits_for=TraitsLog(),
    )
    assert json.dumps(client.build_request(effect)) == dumps[0]


def test_to_api_messages_separates_responses() -> None:
    """Consecutive assistant records of different responses stay separate messages."""
    out = to_api_messages(
        [
            assistant("a1", "r1", TextBlock(text="one")),
            assistant("a2", "r2", TextBlock(text="two")),
        ],
        keep_thinking=False,
    )
    assert [m["content"][0]["text"] for m in out] == ["one", "two"]


# ---------------------------------------------------------------------------------------------
# Pure helpers


@pytest.mark.parametrize(
    ("status", "error_type", "message", "kind"),
    [
        (None, "overloaded_error", "Overloaded", "overloaded"),
        (None, "api_error", "Internal", "server_error"),
        (None, "invalid_request_error", "prompt is too long", "prompt_too_long"),
        (None, "authentication_error", "bad key", "auth"),
        (None, "weird_error", "?", "unknown"),
        (413, "invalid_request_error", "Prompt is too long", "prompt_too_long"),
        (400, "invalid_request_error", "Request too large (max 32MB)", "media"),
        (500, "overloaded_error", "Overloaded", "overloaded"),
        (418, "teapot", "short and stout", "invalid_request"),
    ],
)
def test_classify_error_table(status: int | None, error_type: str, message: str, kind: str) -> None:
    """The pure classifier maps status, error type and message to the documented kind."""
    assert classify_error(status, error_type, message) == kind


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ('{"a": 1', None),
        ("[1, 2]", None),
        ('{"a": NaN}', None),
        ("", None),
    ],
)
def test_parse_tool_input_is_strict(text: str, expected: dict[str, Any] | None) -> None:
    """Only one complete JSON object parses; partial, non-object or NaN input does not."""
    assert parse_tool_input(text) == expected
