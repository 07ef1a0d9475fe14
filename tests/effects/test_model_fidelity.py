"""The retry layer, refusal and pause_turn against the real SDK and the local Messages API server:
what the client reports, what the machine decides, what goes over the wire."""

from __future__ import annotations

import json
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anthropic
import pytest

from steploop.effects.model import AnthropicModelClient, classify_error, parse_context_overflow
from steploop.effects.run import PermissionPolicy, RunResult, run
from steploop.reducer import LoopConfig, claude_code_2_1_88, default
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import Event, ModelCallFailed, ModelResponseEnded, ToolTraits
from steploop.reducer.messages import AssistantMessage, TextBlock, UserMessage
from steploop.reducer.transitions import Completed
from tests.support.messages_server import (
    BlockSpec,
    Frame,
    MessagesServer,
    StreamScript,
    error_response,
    response_script,
    text_block,
    text_response,
)

MODEL = "claude-test-1"
OVERFLOW = "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"


def traits(name: str, input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=True)


def client(sdk: anthropic.AsyncAnthropic) -> AnthropicModelClient:
    return AnthropicModelClient(sdk, traits_for=traits, idle_timeout=2.0)


async def turn(sdk: anthropic.AsyncAnthropic, cfg: LoopConfig, prompt: str = "hi") -> RunResult:
    async with run(
        prompt, model=client(sdk), config=cfg, permissions=PermissionPolicy(default="allow")
    ) as r:
        async for _ in r:
            pass
    assert r.result is not None
    return r.result


def api_errors(result: RunResult) -> list[AssistantMessage]:
    return [
        m
        for m in result.state.conversation
        if isinstance(m, AssistantMessage) and m.api_error is not None
    ]


# --- R-OVERFLOW-1 -----------------------------------------------------------------------------


def test_the_overflow_message_is_classified_and_parsed() -> None:
    """Only a 400 with the API's exact wording is a context overflow; its numbers are read."""
    assert classify_error(400, "invalid_request_error", OVERFLOW) == "context_overflow"
    assert classify_error(413, "request_too_large", OVERFLOW) == "media"
    assert classify_error(400, "invalid_request_error", "max_tokens too big") == "invalid_request"
    assert parse_context_overflow(OVERFLOW) == (188_059, 20_000, 200_000)
    assert parse_context_overflow("prompt is too long: 1 tokens > 0 maximum") is None


@pytest.mark.spec("R-OVERFLOW-1")
@pytest.mark.anyio
async def test_overflow_failure_carries_its_numbers(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """The client reports the 400 as context_overflow with the input and the limit."""
    server.enqueue(error_response(400, "invalid_request_error", OVERFLOW))
    effect = CallModel(
        call_id=1,
        model=MODEL,
        conversation=Conversation.of([UserMessage(id="u", content=(TextBlock(text="hi"),))]),
        max_tokens=20_000,
    )
    async with aclosing(client(sdk).stream(effect)) as stream:
        events: list[Event] = [e async for e in stream]
    assert events == [
        ModelCallFailed(
            call_id=1,
            kind="context_overflow",
            message=OVERFLOW,
            status=400,
            input_tokens=188_059,
            context_limit=200_000,
        )
    ]


@pytest.mark.spec("R-OVERFLOW-1")
@pytest.mark.parametrize("make", [default, claude_code_2_1_88])
@pytest.mark.anyio
async def test_a_run_resends_with_the_cap_that_fits(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic, make: Any
) -> None:
    """End to end: the second request asks for 200,000 - 188,059 - 1,000 tokens and the turn
    completes with its answer (before, the 400 ended the turn with an API error)."""
    server.enqueue(
        error_response(400, "invalid_request_error", OVERFLOW), text_response("It fits.")
    )
    result = await turn(sdk, make())
    assert result.terminal == Completed()
    assert [r.json["max_tokens"] for r in server.requests] == [
        make().default_max_tokens,
        10_941,
    ]
    assert not api_errors(result)


# --- R-REFUSAL-1 ------------------------------------------------------------------------------


def refusal_script() -> Any:
    """A streamed refusal: some text, then message_delta with stop_reason refusal and the
    API's stop_details."""
    script = response_script(text_block("I can"), stop_reason="refusal")
    frames = list(script.items)
    for i, item in enumerate(frames):
        if isinstance(item, Frame) and item.event == "message_delta":
            data = dict(item.data)
            data["delta"] = {**data["delta"], "stop_details": STOP_DETAILS}
            frames[i] = Frame("message_delta", data)
    return StreamScript(tuple(frames))


STOP_DETAILS = {"type": "refusal", "category": "bio", "explanation": "Dangerous lab methods."}


@pytest.mark.spec("R-REFUSAL-1")
@pytest.mark.anyio
async def test_a_refusal_ends_the_turn_with_its_explanation(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """End to end, streaming and not: the explanation the API gives in stop_details reaches the
    API-error message (before, the turn ended completed with no message at all)."""
    server.enqueue(refusal_script())
    result = await turn(sdk, default())
    assert result.terminal == Completed()
    (err,) = api_errors(result)
    assert err.api_error is not None and err.api_error.kind == "refusal"
    assert json.loads(err.api_error.details) == STOP_DETAILS
    assert "Policy category: bio. Dangerous lab methods." in err.api_error.message
    server.enqueue(refusal_script())
    effect = CallModel(
        call_id=1,
        model=MODEL,
        conversation=Conversation.of([UserMessage(id="u", content=(TextBlock(text="hi"),))]),
        max_tokens=100,
        streaming=False,
    )
    async with aclosing(client(sdk).stream(effect)) as stream:
        events = [e async for e in stream]
    end = events[-1]
    assert isinstance(end, ModelResponseEnded) and end.stop_reason == "refusal"
    assert end.stop_details is not None and json.loads(end.stop_details) == STOP_DETAILS


# --- S-PAUSE-1 --------------------------------------------------------------------------------

SEARCH_USE = {"type": "server_tool_use", "id": "srvtoolu_9", "name": "web_search", "input": {}}


@pytest.mark.spec("S-PAUSE-1", "R-BLOCK-2")
@pytest.mark.anyio
async def test_a_paused_turn_is_resumed_with_the_paused_response(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """Default profile, end to end: the second request sends the paused answer back as the
    last message, byte-equal; the turn completes with the continued answer. Under the 2.1.88
    profile the pause ends the turn after one request."""
    paused = response_script(
        text_block("Searching."), BlockSpec(SEARCH_USE), stop_reason="pause_turn"
    )
    server.enqueue(paused, text_response("Found it."))
    result = await turn(sdk, default())
    assert result.terminal == Completed()
    messages = server.requests[1].json["messages"]
    assert messages[-1]["role"] == "assistant"
    # the cache marker goes on the text: the opaque block is sent exactly as received
    assert [json.dumps(b) for b in messages[-1]["content"]] == [
        json.dumps({"type": "text", "text": "Searching.", "cache_control": {"type": "ephemeral"}}),
        json.dumps(SEARCH_USE),
    ]
    server.enqueue(paused)
    result = await turn(sdk, claude_code_2_1_88())
    assert result.terminal == Completed() and len(server.requests) == 3


# --- R-CATEGORY-1 in the transcript -----------------------------------------------------------


@pytest.mark.spec("R-CATEGORY-1")
@pytest.mark.parametrize(
    ("make", "error"), [(claude_code_2_1_88, "rate_limit"), (default, "rate_limited")]
)
@pytest.mark.anyio
async def test_the_transcript_names_the_api_error_category(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic, tmp_path: Path, make: Any, error: str
) -> None:
    """A 429 with no retry left: the Claude Code transcript's API-error record has the error
    name Claude Code writes under the 2.1.88 profile (steploop's kind by default)."""
    server.enqueue(error_response(429, "rate_limit_error", "Number of request tokens exceeded"))
    cfg = make().with_overrides({"retry.max_retries": 0})
    path = tmp_path / "session.jsonl"
    async with run("hi", model=client(sdk), config=cfg, transcript_path=path) as r:
        async for _ in r:
            pass
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    (rec,) = [x for x in records if x.get("isApiErrorMessage")]
    assert rec["error"] == error and rec["apiErrorStatus"] == 429
