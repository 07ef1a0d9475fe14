"""The default model client, with the real anthropic SDK against a local Messages API server:
what is sent (the requests and their cache-stable prefix), and the pure helpers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from steploop.effects.model import (
    AnthropicModelClient,
    build_request,
    classify_error,
    parse_tool_input,
    to_api_messages,
)
from steploop.reducer.effects import TaskBudget
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
)
from tests.effects.model_client_kit import (
    MODEL,
    SYSTEM,
    TOOLS,
    USAGE,
    TraitsLog,
    call,
    collect,
    model_client,
    user,
)
from tests.support.messages_server import MessagesServer, text_response

EPHEMERAL = {"type": "ephemeral"}


def assistant(id: str, response_id: str, block: Any, **kwargs: Any) -> AssistantMessage:
    return AssistantMessage(id=id, response_id=response_id, model=MODEL, content=(block,), **kwargs)


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
