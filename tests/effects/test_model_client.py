"""The default model client, with the real anthropic SDK against a local Messages API server:
successful streams, failures, cancellation and the non-streaming mode. What is sent (the
requests, the cache-stable prefix) and the pure helpers are in test_model_client_requests.py."""

from __future__ import annotations

import gc
import socket
import time
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from steploop.effects.model import make_client
from steploop.reducer.events import Event, ModelCallFailed, ModelResponseEnded, ToolTraits
from steploop.reducer.messages import (
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)
from tests.effects.model_client_kit import (
    MODEL,
    READ_TIMEOUT,
    USAGE,
    TraitsLog,
    block,
    call,
    collect,
    model_client,
    user,
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

PROMPT = call(user("u1", "Hello there"))


def ended(
    stop_reason: str | None = "end_turn", usage: dict[str, int] = USAGE
) -> ModelResponseEnded:
    return ModelResponseEnded(call_id=1, model=MODEL, stop_reason=stop_reason, usage=Usage(**usage))


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


@pytest.mark.spec("R-RETRY-1")
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("ms", "seconds", "expected"),
    [
        (None, "inf", None),  # float() reads it; rounding it to ms raised OverflowError
        (None, "1e400", None),
        ("nan", "2", 2000),  # a header that is no number gives way to the next
        ("1e308", None, None),  # finite, but past what a trace keeps exactly: backoff
        (None, "Wed, 21 Oct 2026 07:28:00 GMT", None),  # an HTTP date: backoff
        (str(2**53), None, 2**53),
    ],
)
async def test_a_retry_after_that_is_no_usable_number_is_none(
    server: MessagesServer, sdk: Any, ms: str | None, seconds: str | None, expected: int | None
) -> None:
    """The failure is still one event, and the machine's own backoff applies (R-RETRY-1)."""
    headers = [("retry-after-ms", ms)] if ms is not None else []
    server.enqueue(
        error_response(429, "rate_limit_error", "Slow down", retry_after=seconds, headers=headers)
    )
    (failed,) = await collect(model_client(sdk), PROMPT)
    assert isinstance(failed, ModelCallFailed)
    assert (failed.kind, failed.retry_after_ms) == ("rate_limited", expected)


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
