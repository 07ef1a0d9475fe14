"""The model client builds each request incrementally, and sends exactly what build_request says.

``AnthropicModelClient`` keeps the converted messages of its latest request and, when the next
conversation extends that one (the usual round), converts only the appended records. These tests
hold the incremental requests to the from-scratch ``build_request`` across growing, repeated,
shrinking and branching conversations, check that a request is never changed by a later one, and
compare what the local server really received.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any, Literal

import anthropic
import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steploop.effects.model import AnthropicModelClient, Thinking, build_request
from steploop.reducer import Request, claude_code_2_1_88, default, start, step
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import Event, ModelCallFailed, ToolTraits
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    ErrorInfo,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from tests.support.messages_server import MessagesServer, error_response, text_response

MODEL = "claude-test-1"
SYSTEM = "You are a careful test assistant."
TOOLS = [
    {
        "name": "Read",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
]


def _traits(name: str, input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=True)


def _client(thinking: Literal["adaptive"] | None = None) -> AnthropicModelClient:
    # Never connects: only the request builders are used.
    sdk = anthropic.AsyncAnthropic(base_url="http://127.0.0.1:9", api_key="k", max_retries=0)
    return AnthropicModelClient(
        sdk, system=SYSTEM, tools=TOOLS, traits_for=_traits, thinking=thinking
    )


def _call(
    conversation: Conversation, call_id: int = 1, thinking_budget: int | None = None
) -> CallModel:
    return CallModel(
        call_id=call_id,
        model=MODEL,
        conversation=conversation,
        max_tokens=1024,
        thinking_budget=thinking_budget,
    )


def _fresh(effect: CallModel, thinking: Thinking) -> str:
    return json.dumps(build_request(effect, system=SYSTEM, tools=TOOLS, thinking=thinking))


# ---------------------------------------------------------------------------------------------
# Records: every kind the conversion treats differently


def _block(kind: int, n: int) -> Block:
    blocks: list[Block] = [
        TextBlock(text=f"text {n}"),
        TextBlock(text=""),  # never sent
        ThinkingBlock(thinking=f"plan {n}", signature=f"sig{n}"),
        RedactedThinkingBlock(data=f"redacted {n}"),
        ToolUseBlock(id=f"toolu_{n}", name="Read", input={"path": f"f{n}.txt"}),
        ToolResultBlock(tool_use_id=f"toolu_{n}", content=f"result {n}", is_error=n % 2 == 0),
        ImageBlock(media_type="image/png", data="iVBORw0KGgo="),
        ImageBlock(media_type="application/pdf", data="JVBERi0x"),
    ]
    return blocks[kind]


def _record(kind: int, n: int, response: int, blocks: list[int]) -> Message:
    content = tuple(_block(b, n * 10 + i) for i, b in enumerate(blocks))
    if kind == 0:
        return UserMessage(id=f"u{n}", content=content or (TextBlock(text=f"hi {n}"),))
    if kind == 1:
        return AssistantMessage(
            id=f"a{n}", response_id=f"r{response}", model=MODEL, content=content
        )
    if kind == 2:
        data: tuple[tuple[str, str | int | bool | None], ...] = (("text", f"queued {n}"),)
        return AttachmentMessage(id=f"at{n}", attachment_type="queued_command", data=data)
    if kind == 3:
        return SystemMessage(id=f"s{n}", subtype="notice", text=f"notice {n}")
    return AssistantMessage(  # a synthetic API error: never sent
        id=f"e{n}",
        response_id=f"err{n}",
        model="<synthetic>",
        content=(TextBlock(text="API Error"),),
        api_error=ErrorInfo(kind="overloaded", message="Overloaded"),
    )


records = st.builds(
    _record,
    kind=st.integers(0, 4),
    n=st.integers(0, 99),
    response=st.integers(0, 3),
    blocks=st.lists(st.integers(0, 7), max_size=3),
)

# A step appends records to the conversation of an earlier request (``back`` requests ago;
# 0 is the latest), so conversations grow, repeat, shrink and branch.
steps = st.lists(
    st.tuples(st.integers(0, 3), st.lists(records, max_size=4)), min_size=1, max_size=12
)


@settings(max_examples=120, deadline=None)
@given(steps=steps, thinking=st.sampled_from([None, 1024]))
def test_incremental_requests_equal_fresh_ones(
    steps: list[tuple[int, list[Message]]], thinking: int | None
) -> None:
    """Every request equals build_request from scratch, and no later request changes it."""
    client = _client()
    seen: list[Conversation] = [Conversation.empty()]
    sent: list[tuple[dict[str, Any], str]] = []
    for call_id, (back, new) in enumerate(steps, start=1):
        conversation = seen[max(0, len(seen) - 1 - back)].extend(new)
        seen.append(conversation)
        effect = _call(conversation, call_id, thinking)
        request = client._request(effect)
        assert json.dumps(request) == _fresh(effect, None)
        assert json.dumps(client.build_request(effect)) == json.dumps(request)
        sent.append((request, json.dumps(request)))
    for request, dumped in sent:
        assert json.dumps(request) == dumped


def test_breakpoint_moves_without_touching_the_previous_request() -> None:
    """The latest message's breakpoint is on a copy: round 1's request keeps its own only."""
    client = _client()
    base = Conversation.of(
        [
            UserMessage(id="u0", content=(TextBlock(text="Read a.txt"),)),
            AssistantMessage(
                id="a0",
                response_id="r0",
                model=MODEL,
                content=(ToolUseBlock(id="t0", name="Read", input={"path": "a.txt"}),),
            ),
            UserMessage(id="u1", content=(ToolResultBlock(tool_use_id="t0", content="alpha"),)),
        ]
    )
    first = client._request(_call(base))
    first_json = json.dumps(first)
    grown = base.extend(
        [
            AssistantMessage(
                id="a1", response_id="r1", model=MODEL, content=(TextBlock(text="alpha"),)
            ),
            UserMessage(id="u2", content=(TextBlock(text="thanks"),)),
        ]
    )
    second = client._request(_call(grown, 2))
    assert json.dumps(first) == first_json
    assert json.dumps(second).count("cache_control") == 2  # the last tool and the latest block
    assert second["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in second["messages"][2]["content"][-1]
    # Earlier messages are shared with the client's fold, not rebuilt.
    assert second["messages"][1] is first["messages"][1]


def test_a_thinking_only_latest_message_is_not_shared_with_the_next_request() -> None:
    """With nothing to mark, the latest message still goes out as a copy: the fold carries on
    with the same response's next record without touching the request already built."""
    client = _client()
    thinking = AssistantMessage(
        id="a0",
        response_id="r0",
        model=MODEL,
        content=(ThinkingBlock(thinking="hm", signature="s"),),
    )
    one = Conversation.of([UserMessage(id="u0", content=(TextBlock(text="hello"),)), thinking])
    first = client._request(_call(one, thinking_budget=1024))
    first_json = json.dumps(first)
    assert "cache_control" not in json.dumps(first["messages"][-1])
    text = AssistantMessage(id="a1", response_id="r0", model=MODEL, content=(TextBlock(text="hi"),))
    second = client._request(_call(one.append(text), 2, thinking_budget=1024))
    assert json.dumps(first) == first_json
    assert [b["type"] for b in second["messages"][-1]["content"]] == ["thinking", "text"]


def test_a_conversation_that_does_not_extend_the_last_is_converted_afresh() -> None:
    """A compacted (rebuilt) conversation of equal content but new nodes gives the same request."""
    client = _client()
    messages: list[Message] = [
        UserMessage(id="u0", content=(TextBlock(text="hello"),)),
        AssistantMessage(id="a0", response_id="r0", model=MODEL, content=(TextBlock(text="hi"),)),
    ]
    one = Conversation.of(messages)
    client._request(_call(one))
    summary = Conversation.of([UserMessage(id="c0", content=(TextBlock(text="summary"),))])
    request = client._request(_call(summary, 2))
    assert [m["content"][0]["text"] for m in request["messages"]] == ["summary"]
    again = client._request(_call(Conversation.of(messages), 3))
    assert json.dumps(again) == _fresh(_call(one, 3), None)


# ---------------------------------------------------------------------------------------------
# What the server receives


@pytest.mark.anyio
async def test_server_receives_build_request_round_after_round(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """Growing, repeated and branched conversations: each body is build_request's, exactly."""
    client = AnthropicModelClient(sdk, system=SYSTEM, tools=TOOLS, traits_for=_traits)
    u0 = Conversation.of([UserMessage(id="u0", content=(TextBlock(text="Read a.txt"),))])
    r1 = u0.extend(
        [
            AssistantMessage(
                id="a1", response_id="r1", model=MODEL, content=(TextBlock(text="Sure."),)
            ),
            AssistantMessage(
                id="a2",
                response_id="r1",
                model=MODEL,
                content=(ToolUseBlock(id="t1", name="Read", input={"path": "a.txt"}),),
            ),
            UserMessage(id="u1", content=(ToolResultBlock(tool_use_id="t1", content="alpha"),)),
        ]
    )
    branch = u0.append(UserMessage(id="u9", content=(TextBlock(text="never mind"),)))
    conversations = [u0, r1, r1, branch, r1.append(SystemMessage(id="s", subtype="n", text="x"))]
    server.enqueue(*(text_response(f"answer {i}") for i in range(len(conversations))))
    for call_id, conversation in enumerate(conversations, start=1):
        effect = _call(conversation, call_id)
        async with aclosing(client.stream(effect)) as events:
            assert [e.TAG async for e in events][-1] == "model_response_ended"
        body = server.requests[-1].json
        expected = json.loads(_fresh(effect, None))
        assert body == {**expected, "stream": True}


# ---------------------------------------------------------------------------------------------
# One thinking setting (R-THINK-1): the loop config's budget, carried by CallModel

OVERFLOW = (
    "input length and `max_tokens` exceed context limit: 188240 + 32000 > 200000, "
    "decrease input length or `max_tokens` and try again"
)


def _budgets(server: MessagesServer) -> list[tuple[int, int]]:
    """(max_tokens, budget_tokens) of every request the server received."""
    out = []
    for r in server.requests:
        thinking = r.json["thinking"]
        assert thinking["type"] == "enabled"
        out.append((r.json["max_tokens"], thinking["budget_tokens"]))
    return out


async def _call_through(client: AnthropicModelClient, effect: CallModel) -> list[Event]:
    async with aclosing(client.stream(effect)) as events:
        return [e async for e in events]


@pytest.mark.spec("R-THINK-1", "R-OVERFLOW-1")
@pytest.mark.anyio
async def test_the_overflow_retry_leaves_room_for_the_configured_budget(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """The budget is set once, in the config: the SDK's requests carry it, and every one has
    max_tokens > budget_tokens, the overflow retry's (16,001 over 16,000) included."""
    cfg = claude_code_2_1_88(thinking_budget=16_000)
    client = AnthropicModelClient(sdk, system=SYSTEM, tools=TOOLS, traits_for=_traits)
    server.enqueue(error_response(400, "invalid_request_error", OVERFLOW), text_response("done"))
    state, fx = start(Request(prompt="think hard"), cfg)
    for _ in range(2):
        (effect,) = [e for e in fx if isinstance(e, CallModel)]
        assert effect.thinking_budget == 16_000
        for event in await _call_through(client, effect):
            state, fx = step(state, event, cfg)
    assert _budgets(server) == [(32_000, 16_000), (16_001, 16_000)]
    assert all(m > b for m, b in _budgets(server))


@pytest.mark.spec("R-THINK-1")
@pytest.mark.anyio
async def test_a_budget_above_the_calls_cap_is_sent_below_it(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """The default profile's capped 8,000-token call with a 16,000 budget: budget_tokens is
    max_tokens - 1 (the API requires it below max_tokens), so the request is one it takes."""
    cfg = default(thinking_budget=16_000)
    client = AnthropicModelClient(sdk, system=SYSTEM, tools=TOOLS, traits_for=_traits)
    server.enqueue(text_response("done"))
    _, fx = start(Request(prompt="think"), cfg)
    (effect,) = [e for e in fx if isinstance(e, CallModel)]
    await _call_through(client, effect)
    assert _budgets(server) == [(8_000, 7_999)]


@pytest.mark.spec("R-THINK-1")
def test_the_client_takes_no_budget_of_its_own() -> None:
    """AnthropicModelClient(thinking=16000) is refused, naming the one place a budget is set."""
    with pytest.raises(ValueError, match=r"LoopConfig\.thinking_budget"):
        _client(thinking=16_000)  # type: ignore[arg-type]
    assert _client(thinking="adaptive") is not None


@pytest.mark.spec("R-THINK-1")
@pytest.mark.anyio
async def test_an_adaptive_client_refuses_a_call_with_a_budget(
    server: MessagesServer, sdk: anthropic.AsyncAnthropic
) -> None:
    """Adaptive thinking on the client and a budget in the config are two settings: the call
    fails (invalid_request, naming both) and nothing is sent."""
    client = AnthropicModelClient(
        sdk, system=SYSTEM, tools=TOOLS, traits_for=_traits, thinking="adaptive"
    )
    effect = attrs.evolve(_call(Conversation.of([])), thinking_budget=4_096)
    (failed,) = await _call_through(client, effect)
    assert isinstance(failed, ModelCallFailed) and failed.kind == "invalid_request"
    assert "adaptive" in failed.message and "thinking_budget" in failed.message
    assert server.requests == []


@pytest.mark.spec("R-THINK-1")
def test_thinking_follows_the_effect() -> None:
    """No budget: no thinking (or adaptive, from the client); a budget: enabled, below the cap."""
    conv = Conversation.of([UserMessage(id="u0", content=(TextBlock(text="hi"),))])
    plain = _call(conv)
    assert "thinking" not in _client().build_request(plain)
    assert _client("adaptive").build_request(plain)["thinking"] == {"type": "adaptive"}
    budget = attrs.evolve(plain, max_tokens=4_000, thinking_budget=2_048)
    assert _client().build_request(budget)["thinking"] == {
        "type": "enabled",
        "budget_tokens": 2_048,
    }
    assert build_request(budget)["thinking"] == {"type": "enabled", "budget_tokens": 2_048}
    with pytest.raises(ValueError, match="adaptive"):
        build_request(budget, thinking="adaptive")
