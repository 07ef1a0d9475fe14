"""The scripted model: deterministic answers for tests and demos."""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Any

import anyio
import pytest

from steploop.effects.scripted import (
    ScriptedModel,
    ScriptError,
    ScriptExhausted,
    failure,
    reply,
    response,
    tool_call,
    tool_use,
    truncated_tool_call,
)
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.errors import SteploopError
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

MODEL = "claude-test-1"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def traits_for(name: str, input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=name == "Read")


def call(call_id: int = 1, text: str = "Hello there, model") -> CallModel:
    conversation = Conversation.of([UserMessage(id="u1", content=(TextBlock(text=text),))])
    return CallModel(call_id=call_id, model=MODEL, conversation=conversation, max_tokens=1024)


async def collect(model: ScriptedModel, effect: CallModel) -> list[Event]:
    async with aclosing(model.stream(effect)) as events:
        return [e async for e in events]


@pytest.mark.anyio
async def test_reply_yields_text_then_end_with_estimated_usage() -> None:
    """A reply streams one text block, then the end with a deterministic usage estimate."""
    model = ScriptedModel([reply("Hi! How can I help?")], traits_for)
    effect = call()
    events = await collect(model, effect)
    assert events == [
        ModelBlockReceived(call_id=1, block=TextBlock(text="Hi! How can I help?")),
        ModelResponseEnded(
            call_id=1,
            model=MODEL,
            stop_reason="end_turn",
            usage=Usage(input_tokens=effect.conversation.token_count(), output_tokens=5),
        ),
    ]
    assert model.calls == [effect] and model.remaining == 0


@pytest.mark.anyio
async def test_tool_calls_get_deterministic_ids_and_traits() -> None:
    """Tool calls without ids get toolu_001, ... by position, and traits from traits_for."""
    model = ScriptedModel(
        [
            tool_call("Read", {"path": "a.txt"}, text="Let me look."),
            tool_call("Write", {"path": "b.txt"}, id="toolu_custom"),
            response(
                tool_use("Read", {"path": "c"}),
                tool_use("Read", {"path": "d"}),
                stop_reason="tool_use",
            ),
            reply("done"),
        ],
        traits_for,
    )
    first = await collect(model, call(1))
    assert first[:2] == [
        ModelBlockReceived(call_id=1, block=TextBlock(text="Let me look.")),
        ModelBlockReceived(
            call_id=1,
            block=ToolUseBlock(id="toolu_001", name="Read", input={"path": "a.txt"}),
            tool=ToolTraits(concurrency_safe=True),
        ),
    ]
    end = first[2]
    assert isinstance(end, ModelResponseEnded) and end.stop_reason == "tool_use"
    second = await collect(model, call(2))
    assert second[0] == ModelBlockReceived(
        call_id=2,
        block=ToolUseBlock(id="toolu_custom", name="Write", input={"path": "b.txt"}),
        tool=ToolTraits(concurrency_safe=False),
    )
    third = await collect(model, call(3))
    ids = [
        e.block.id
        for e in third
        if isinstance(e, ModelBlockReceived) and isinstance(e.block, ToolUseBlock)
    ]
    assert ids == ["toolu_003", "toolu_004"]
    again = ScriptedModel(model.script, traits_for)
    assert again.script == model.script  # numbering is stable


@pytest.mark.anyio
async def test_truncated_tool_call_is_incomplete() -> None:
    """A tool call cut by max_tokens comes with input {} and input_complete=False."""
    model = ScriptedModel([truncated_tool_call("Write", text="Writing")], traits_for)
    events = await collect(model, call())
    assert events[1] == ModelBlockReceived(
        call_id=1,
        block=ToolUseBlock(id="toolu_001", name="Write", input={}),
        tool=ToolTraits(),
        input_complete=False,
    )
    end = events[2]
    assert isinstance(end, ModelResponseEnded) and end.stop_reason == "max_tokens"


@pytest.mark.anyio
async def test_failure_yields_partial_blocks_then_one_failure() -> None:
    """A scripted failure streams its partial blocks, then exactly one ModelCallFailed."""
    model = ScriptedModel(
        [
            failure("overloaded", 529, 2_000),
            failure("stream_broken", blocks=[TextBlock(text="half an ans")], message="dropped"),
        ],
        traits_for,
    )
    assert await collect(model, call(1)) == [
        ModelCallFailed(
            call_id=1,
            kind="overloaded",
            message="scripted overloaded",
            status=529,
            retry_after_ms=2_000,
        )
    ]
    assert await collect(model, call(2)) == [
        ModelBlockReceived(call_id=2, block=TextBlock(text="half an ans")),
        ModelCallFailed(call_id=2, kind="stream_broken", message="dropped"),
    ]


@pytest.mark.anyio
async def test_explicit_usage_model_and_thinking_are_reported() -> None:
    """A general response reports its own usage and model, and streams thinking blocks."""
    usage = Usage(input_tokens=1_000, output_tokens=20, cache_read_input_tokens=900)
    model = ScriptedModel(
        [
            response(
                ThinkingBlock(thinking="hmm", signature="sig"),
                RedactedThinkingBlock(data="xx"),
                TextBlock(text="ok"),
                usage=usage,
                model="claude-other",
                stop_reason="refusal",
            )
        ],
        traits_for,
    )
    events = await collect(model, call())
    assert [type(e.block) for e in events if isinstance(e, ModelBlockReceived)] == [
        ThinkingBlock,
        RedactedThinkingBlock,
        TextBlock,
    ]
    assert events[-1] == ModelResponseEnded(
        call_id=1, model="claude-other", stop_reason="refusal", usage=usage
    )


@pytest.mark.anyio
async def test_exhausted_script_raises_clear_error() -> None:
    """Asking for more answers than scripted raises ScriptExhausted naming the call."""
    model = ScriptedModel([reply("only one")], traits_for)
    await collect(model, call(1))
    with pytest.raises(ScriptExhausted, match=r"model call 7 .*holds 1 response,") as info:
        await collect(model, call(7))
    assert isinstance(info.value, SteploopError)
    assert info.value.call.call_id == 7
    assert len(model.calls) == 2


@pytest.mark.anyio
async def test_cancelled_call_does_not_consume_the_script() -> None:
    """A call cancelled before it starts leaves the script untouched."""
    model = ScriptedModel([reply("kept")], traits_for)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await collect(model, call())
    assert scope.cancelled_caught and model.remaining == 1 and model.calls == []


@pytest.mark.anyio
async def test_from_json_builds_every_entry_kind() -> None:
    """A JSON script (as a CLI reads it) covers every entry kind, with the same ids."""
    text = json.dumps(
        {
            "responses": [
                {"type": "tool_call", "name": "Read", "input": {"path": "a"}, "text": "Look"},
                {"type": "truncated_tool_call", "name": "Write"},
                {
                    "type": "response",
                    "blocks": [
                        {"type": "thinking", "thinking": "t", "signature": "s"},
                        {"type": "tool_use", "name": "Read", "input": {"path": "b"}},
                    ],
                    "stop_reason": "tool_use",
                    "usage": {"input_tokens": 5, "output_tokens": 2},
                },
                {"type": "failure", "kind": "rate_limited", "status": 429, "retry_after_ms": 100},
                {"type": "reply", "text": "Done."},
            ]
        }
    )
    model = ScriptedModel.from_json(json.loads(text), traits_for)
    assert model.script == (
        tool_call("Read", {"path": "a"}, id="toolu_001", text="Look"),
        truncated_tool_call("Write", id="toolu_002"),
        response(
            ThinkingBlock(thinking="t", signature="s"),
            tool_use("Read", {"path": "b"}, id="toolu_003"),
            stop_reason="tool_use",
            usage=Usage(input_tokens=5, output_tokens=2),
        ),
        failure("rate_limited", 429, 100),
        reply("Done."),
    )
    events = [await collect(model, call(i)) for i in range(1, 6)]
    assert isinstance(events[3][0], ModelCallFailed) and events[3][0].kind == "rate_limited"
    assert events[4][0] == ModelBlockReceived(call_id=5, block=TextBlock(text="Done."))


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"oops": []}, "expected a list of entries"),
        ("reply", "expected a list of entries"),
        ([{"type": "reply", "text": "a"}, "b"], "script[1]: expected an object"),
        ([{"type": "shout", "text": "a"}], "script[0]: unknown entry type 'shout'"),
        ([{"type": "reply"}], "script[0]: missing 'text'"),
        ([{"type": "reply", "text": 3}], "script[0]: 'text' must be a string"),
        (
            [{"type": "reply", "text": "a", "colour": "red"}],
            "script[0]: unexpected key(s) 'colour'",
        ),
        ([{"type": "failure", "kind": "boom"}], "script[0]: unknown failure kind 'boom'"),
        ([{"type": "failure", "kind": "auth", "status": True}], "'status' must be an integer"),
        ([{"type": "tool_call", "name": "R", "input": [1]}], "'input' must be an object"),
        (
            [{"type": "response", "blocks": [{"type": "text", "text": "a"}, {"type": "image"}]}],
            "script[0].blocks[1]: unknown block type 'image'",
        ),
        (
            [{"type": "reply", "text": "a", "usage": {"input_tokens": "many"}}],
            "script[0].usage: 'input_tokens' must be an integer",
        ),
    ],
)
def test_from_json_errors_name_the_bad_entry(data: object, fragment: str) -> None:
    """A malformed JSON script raises ScriptError whose message names the offending entry."""
    with pytest.raises(ScriptError) as info:
        ScriptedModel.from_json(data, traits_for)
    assert fragment in str(info.value)
    assert isinstance(info.value, SteploopError) and isinstance(info.value, ValueError)


def test_unknown_failure_kind_is_rejected_when_built() -> None:
    """failure() with a kind outside FAILURE_KINDS fails at construction, not mid-run."""
    with pytest.raises(ScriptError, match="unknown failure kind 'kaboom'"):
        failure("kaboom")


def test_non_entries_are_rejected() -> None:
    """Anything but scripted responses and failures in the script is a clear error."""
    with pytest.raises(ScriptError, match="script entry 1: expected a ScriptedResponse"):
        ScriptedModel([reply("a"), "b"], traits_for)  # type: ignore[list-item]


@pytest.mark.anyio
@pytest.mark.spec("B-MODEL-2")
async def test_numbered_ids_the_conversation_already_holds_move_to_free_numbers() -> None:
    """A script answering a session that already holds toolu_001 and toolu_003 (an earlier
    script's, a resumed history) numbers its calls past every id taken, never reusing one."""
    held = AssistantMessage(
        id="a0",
        response_id="r0",
        model=MODEL,
        content=(
            ToolUseBlock(id="toolu_001", name="Read", input={}),
            ToolUseBlock(id="toolu_003", name="Read", input={}),
        ),
    )
    conversation = Conversation.of([UserMessage(id="u1", content=(TextBlock(text="go"),)), held])
    model = ScriptedModel([tool_call("Read", {"path": str(i)}) for i in range(3)], traits_for)
    ids = []
    for n in range(1, 4):
        effect = CallModel(call_id=n, model=MODEL, conversation=conversation, max_tokens=1024)
        for e in await collect(model, effect):
            if isinstance(e, ModelBlockReceived) and isinstance(e.block, ToolUseBlock):
                ids.append(e.block.id)
    assert ids == ["toolu_004", "toolu_002", "toolu_005"]
    fresh = ScriptedModel([tool_call("Read", {"path": "a"})], traits_for)
    (first,) = [e for e in await collect(fresh, call(1)) if isinstance(e, ModelBlockReceived)]
    assert isinstance(first.block, ToolUseBlock) and first.block.id == "toolu_001"
