"""Helpers of the default model client's tests (tests/effects/test_model_client.py,
test_model_client_requests.py).
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anthropic

from steploop.effects.model import AnthropicModelClient
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import Event, ModelBlockReceived, ToolTraits
from steploop.reducer.messages import Message, TextBlock, UserMessage

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


def call(*messages: Message, call_id: int = 1, **kwargs: Any) -> CallModel:
    kwargs.setdefault("max_tokens", 1024)
    return CallModel(call_id=call_id, model=MODEL, conversation=Conversation.of(messages), **kwargs)


async def collect(client: AnthropicModelClient, effect: CallModel) -> list[Event]:
    async with aclosing(client.stream(effect)) as events:
        return [e async for e in events]


def block(b: Any, **kwargs: Any) -> ModelBlockReceived:
    """A block event of the test server's answer, which names the serving model (R-MODEL-1)."""
    kwargs.setdefault("model", MODEL)
    return ModelBlockReceived(call_id=1, block=b, **kwargs)
