"""The retry layer, refusal and pause_turn against the real SDK and the local Messages API server:
what the client reports, what the machine decides, what goes over the wire."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anthropic
import pytest

from effects.model import AnthropicModelClient, classify_error, parse_context_overflow
from effects.run import PermissionPolicy, RunResult, run
from reducer import LoopConfig, claude_code_2_1_88, default
from reducer.conversation import Conversation
from reducer.effects import CallModel
from reducer.events import Event, ModelCallFailed, ToolTraits
from reducer.messages import AssistantMessage, TextBlock, UserMessage
from reducer.transitions import Completed
from tests.support.messages_server import MessagesServer, error_response, text_response

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
