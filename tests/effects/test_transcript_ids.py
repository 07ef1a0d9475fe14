"""The transcript's ids (specs/ TR-2): a UUID session id unless one is given, and the API's own
message id and request id on the records of each response, through the real SDK against the
local Messages API server."""

from __future__ import annotations

import json
import uuid
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anthropic
import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.model import AnthropicModelClient
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.transcript import TranscriptWriter
from steploop.reducer import Request, default
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import ToolTraits
from steploop.reducer.messages import TextBlock, UserMessage
from tests.support.messages_server import (
    MessagesServer,
    StreamScript,
    response_script,
    text_block,
    tool_use_block,
)


def _answer(script: StreamScript, request_id: str) -> StreamScript:
    return StreamScript(script.items, (("request-id", request_id),))


def _traits(_name: str, _input: dict[str, Any]) -> ToolTraits:
    return ToolTraits(concurrency_safe=True)


async def _transcript(
    tmp_path: Path, sdk: anthropic.AsyncAnthropic, **kwargs: Any
) -> list[dict[str, Any]]:
    path = tmp_path / "t.jsonl"
    if path.exists():
        path.unlink()
    (tmp_path / "a.txt").write_text("alpha\n")
    tools = ToolRegistry(builtin_tools(tmp_path))
    model = AnthropicModelClient(sdk, tools=tools.definitions(), traits_for=tools.traits)
    r = run(
        Request(prompt="read a.txt"),
        model=model,
        tools=tools,
        config=default(),
        workspace=tmp_path,
        permissions=PermissionPolicy(default="allow"),
        transcript_path=path,
        **kwargs,
    )
    async with r:
        async for _ in r:
            pass
    assert r.result is not None and r.result.terminal.TAG == "completed"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.anyio
@pytest.mark.spec("TR-2")
async def test_records_carry_the_apis_ids_and_a_uuid_session(
    tmp_path: Path, sdk: anthropic.AsyncAnthropic, server: MessagesServer
) -> None:
    """Each response's records carry its message_start id and its request-id header; the
    session id is a fresh UUID per run, or the one given."""
    tool = response_script(
        text_block("Reading."),
        tool_use_block("toolu_1", "Read", {"file_path": "a.txt"}),
        stop_reason="tool_use",
        message_id="msg_01ToolRound",
    )
    done = response_script(text_block("It says alpha."), message_id="msg_01Final")
    server.enqueue(_answer(tool, "req_011CToolRound"), _answer(done, "req_011CFinal"))
    records = await _transcript(tmp_path, sdk)
    ids = [(r["message"]["id"], r["requestId"]) for r in records if r["type"] == "assistant"]
    assert ids == [
        ("msg_01ToolRound", "req_011CToolRound"),
        ("msg_01ToolRound", "req_011CToolRound"),
        ("msg_01Final", "req_011CFinal"),
    ]
    sessions = {r["sessionId"] for r in records}
    (session,) = sessions
    assert str(uuid.UUID(session)) == session and uuid.UUID(session).version == 4

    server.enqueue(_answer(tool, "req_011CToolRound"), _answer(done, "req_011CFinal"))
    again = await _transcript(tmp_path, sdk)
    assert {r["sessionId"] for r in again} != sessions  # a new run, a new session
    server.enqueue(_answer(tool, "not an id"), done)
    given = await _transcript(tmp_path, sdk, session_id="my-session")
    assert {r["sessionId"] for r in given} == {"my-session"}
    request_ids = [r["requestId"] for r in given if r["type"] == "assistant"]
    # a header that is no plausible id is not written: the derived id stands in
    assert request_ids[0].startswith("req_steploop") and request_ids[-1] == "req_test"


def _call(streaming: bool) -> CallModel:
    prompt = UserMessage(id="u1", content=(TextBlock(text="hi"),))
    return CallModel(
        call_id=7,
        model="claude-sonnet-4-5",
        conversation=Conversation.of((prompt,)),
        max_tokens=1024,
        streaming=streaming,
    )


@pytest.mark.anyio
@pytest.mark.spec("TR-2")
@pytest.mark.parametrize("streaming", [True, False])
async def test_the_client_keeps_each_calls_ids_once(
    streaming: bool, sdk: anthropic.AsyncAnthropic, server: MessagesServer
) -> None:
    """Streamed or not, the client keeps the response's message id and request id for its
    call, hands them out once, and keeps only the newest when nobody takes them."""
    client = AnthropicModelClient(sdk, traits_for=_traits)
    script = response_script(text_block("hello"), message_id="msg_01Whole")
    server.enqueue(_answer(script, "req_011CWhole"))
    async with aclosing(client.stream(_call(streaming))) as events:
        assert [e.TAG async for e in events][-1] == "model_response_ended"
    assert client.api_ids(7) == ("msg_01Whole", "req_011CWhole")
    assert client.api_ids(7) == (None, None)  # taken
    for n in range(20):
        effect = CallModel(
            call_id=100 + n,
            model="m",
            conversation=_call(streaming).conversation,
            max_tokens=16,
            streaming=streaming,
        )
        server.enqueue(response_script(text_block("x"), message_id=f"msg_{n}"))
        async with aclosing(client.stream(effect)) as events:
            _ = [e async for e in events]
    assert client.api_ids(100) == (None, None)  # dropped: only the last few are kept
    assert client.api_ids(119) == ("msg_19", "req_test")


def test_a_writer_without_an_id_makes_a_uuid(tmp_path: Path) -> None:
    w = TranscriptWriter(tmp_path / "t.jsonl", cwd="/", version="v")
    assert uuid.UUID(w.session_id).version == 4
    assert TranscriptWriter(tmp_path / "u.jsonl", cwd="/", version="v").session_id != w.session_id
    assert (
        TranscriptWriter(tmp_path / "v.jsonl", session_id="s", cwd="/", version="v").session_id
        == "s"
    )


@pytest.mark.anyio
@pytest.mark.spec("TR-2")
async def test_the_client_knows_the_ids_from_the_responses_start(
    sdk: anthropic.AsyncAnthropic, server: MessagesServer
) -> None:
    """The ids are the client's from message_start on, before the response ends: the first
    block's event already finds them."""
    client = AnthropicModelClient(sdk, traits_for=_traits)
    script = response_script(text_block("hello"), text_block("again"), message_id="msg_01Early")
    server.enqueue(_answer(script, "req_011CEarly"))
    async with aclosing(client.stream(_call(True))) as events:
        first = await anext(events)
        assert first.TAG == "model_block_received"
        assert client.api_ids(7) == ("msg_01Early", "req_011CEarly")
        _ = [e async for e in events]


@pytest.mark.spec("TR-2")
def test_records_written_before_their_response_ends_carry_its_ids(tmp_path: Path) -> None:
    """A tool result written while its response still streams (a safe tool that finished
    first) flushes the response's held records: they carry the API's ids all the same."""
    from steploop.reducer.events import ModelResponseEnded
    from steploop.reducer.messages import AssistantMessage, ToolResultBlock, ToolUseBlock, Usage

    asked: list[int] = []

    def ids(call_id: int) -> tuple[str | None, str | None]:
        asked.append(call_id)
        return ("msg_01Held", "req_011CHeld")

    path = tmp_path / "t.jsonl"
    w = TranscriptWriter(path, session_id="s", cwd="/", version="v", api_ids=ids)
    w.observe(None, None, (_call(True),))
    use = ToolUseBlock(id="toolu_1", name="Read", input={})
    w.record(AssistantMessage(id="m2", response_id="r7", model="m", content=(use,)))
    result = ToolResultBlock(tool_use_id="toolu_1", content="alpha")
    w.record(UserMessage(id="m3", content=(result,), origin="tool_result"))
    w.record(
        AssistantMessage(id="m4", response_id="r7", model="m", content=(TextBlock(text="ok"),))
    )
    ended = ModelResponseEnded(call_id=7, model="m", stop_reason="end_turn", usage=Usage())
    w.observe(ended, None, ())
    w.close()
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assistant = [(r["message"]["id"], r["requestId"]) for r in records if r["type"] == "assistant"]
    assert assistant == [("msg_01Held", "req_011CHeld")] * 2
    assert asked == [7]  # asked once, kept for the call's later records
