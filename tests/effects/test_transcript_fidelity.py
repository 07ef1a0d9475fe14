"""The transcript steploop writes against real Claude Code transcripts, record kind by record
kind and field by field.

``tests/data/cc_transcripts/records.jsonl`` holds one real record of each kind (cut from public
Claude Code session fixtures, long strings shortened; see the README there). A real run of
steploop (the built-in tools, a compaction, a blocking stop hook) writes its transcript; for
every kind both have, steploop's record has no field the real one lacks, every field of the
real one is written or listed in ``NOT_WRITTEN`` with the reason, and every common field has
the same JSON type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.compaction import ModelCompactor
from steploop.effects.hooks import PythonStopHook, StopHookInput, StopHookResult, StopHooks
from steploop.effects.run import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply, response, tool_use
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.reducer import default
from steploop.reducer.messages import Usage

DATA = Path(__file__).resolve().parent.parent / "data" / "cc_transcripts" / "records.jsonl"
SESSION = "0b6f6c1e-2f55-4a8e-9f43-6f1e6c0d7a10"

#: Fields of real records steploop does not write, and why (dotted paths; ``*`` any record).
NOT_WRITTEN = {
    "*.gitBranch": "steploop does not look at git",
    "*.slug": "a UI name Claude Code gives a session",
    "user.thinkingMetadata": "older versions only; steploop has no thinking budget per prompt",
    "user.message.content.0.is_error": "written when true; Claude Code also writes false for Bash",
    "user.todos": "older versions only; no TodoWrite tool",
    "user.permissionMode": "older versions only; the hook input carries permission_mode",
    "user.toolUseResult.file.totalLines": "",  # written; listed for the empty-file case
    "assistant.message.usage.cache_creation": "the API's per-TTL split, not reported by the client",
    "assistant.message.usage.service_tier": "not reported by the model client",
    "assistant.message.usage.inference_geo": "not reported by the model client",
    "assistant.message.usage.server_tool_use": "no server tools",
    "assistant.message.container": "no code-execution containers",
    "assistant.message.context_management": "no server-side context management",
    "assistant.message.content.0.caller": "the API's caller of a tool call (programmatic tool calling)",
    "user.toolUseResult.stdout_lines": "",
    "user.toolUseResult.noOutputExpected": "a Claude Code UI hint",
    "user.toolUseResult.returnCodeInterpretation": "a Claude Code UI hint",
    "user.toolUseResult.backgroundTaskId": "no background shells",
    "user.toolUseResult.originalFile": "",
    "system.compactMetadata.userContext": "no user context in steploop",
}
#: Fields steploop writes that a sample lacks (dotted paths), and why.
NOT_IN_SAMPLE = {
    "sourceToolAssistantUUID": "written since 2.1 (the Edit and Write error samples are 1.0.x)",
    "hookInfos.0.durationMs": "optional in Claude Code's hookInfos; this sample has none",
}
# Leaves whose JSON type legitimately varies between records of one kind.
NULLABLE = {"message.stop_reason", "toolUseResult.originalFile", "logicalParentUuid", "parentUuid"}


def _kind(r: dict[str, Any], names: dict[str, str]) -> str | None:
    t = r.get("type")
    if t == "assistant":
        c = r["message"]["content"]
        if r.get("isApiErrorMessage"):
            return "assistant:api_error"
        return f"assistant:{c[0]['type']}" if c else None
    if t == "user":
        c = r["message"]["content"]
        if r.get("isCompactSummary"):
            return "user:compact_summary"
        if isinstance(c, str):
            return "user:meta" if r.get("isMeta") else "user:prompt"
        if c and c[0].get("type") == "tool_result":
            name = names.get(c[0]["tool_use_id"], "?")
            return f"user:tool_result:{name}" + (":error" if isinstance(r.get("toolUseResult"), str) else "")
        return None
    if t == "system":
        return f"system:{r.get('subtype')}"
    return None


def _type(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _compare(kind: str, real: Any, ours: Any, path: str, out: list[str]) -> None:
    top = kind.split(":")[0]
    if isinstance(real, dict) and isinstance(ours, dict):
        if path.endswith("input."):
            return  # a tool's own input: its fields are the tool's
        for key in ours.keys() - real.keys():
            if f"{path}{key}" in NOT_IN_SAMPLE:
                continue
            out.append(f"{kind}: {path}{key} is written but real records have no such field")
        for key in real.keys() - ours.keys():
            dotted = f"{path}{key}"
            if f"*.{dotted}" not in NOT_WRITTEN and f"{top}.{dotted}" not in NOT_WRITTEN:
                out.append(f"{kind}: {dotted} is missing")
        for key in real.keys() & ours.keys():
            _compare(kind, real[key], ours[key], f"{path}{key}.", out)
        return
    if isinstance(real, list) and isinstance(ours, list) and real and ours:
        if isinstance(real[0], dict) and isinstance(ours[0], dict):
            _compare(kind, real[0], ours[0], f"{path}0.", out)  # the block (one per record)
            return
    leaf = path[:-1]
    if _type(real) != _type(ours) and leaf not in NULLABLE and not (
        {_type(real), _type(ours)} <= {"int", "float"}
    ):
        out.append(f"{kind}: {leaf} is {_type(ours)} here, {_type(real)} in real records")


@pytest.fixture(scope="module")
def steploop_records(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """A session with every record kind steploop writes, through the real interpreter."""
    import anyio

    ws = tmp_path_factory.mktemp("ws")
    (ws / "a.txt").write_text("x = 1\n")
    tools = ToolRegistry(builtin_tools(ws, enable_bash=True))
    cfg = default().with_overrides(
        {"context_window": 50_000, "gates.history_snip": False, "gates.context_collapse": False}
    )
    big = Usage(input_tokens=30_000, output_tokens=10, cache_read_input_tokens=5)
    model = ScriptedModel(
        [
            response(tool_use("Read", {"file_path": "a.txt"}), stop_reason="tool_use", usage=big),
            response(
                tool_use("Glob", {"pattern": "*.txt"}),
                tool_use("Grep", {"pattern": "x"}),
                tool_use("Write", {"file_path": "b.txt", "content": "b\n"}),
                tool_use("Edit", {"file_path": "a.txt", "old_string": "1", "new_string": "2"}),
                tool_use("Bash", {"command": "echo hi"}),
                tool_use("Bash", {"command": "exit 3"}),
                tool_use("Read", {"file_path": "missing.txt"}),
                tool_use("Glob", {"pattern": "/abs"}),
                tool_use("Write", {"file_path": "../out.txt", "content": "no"}),
                tool_use("Edit", {"file_path": "a.txt", "old_string": "absent", "new_string": "z"}),
                stop_reason="tool_use",
            ),
            reply("Done."),
            reply("Done, really."),
        ],
        traits_for=tools.traits,
    )
    summariser = ScriptedModel([reply("The user asked to read a.txt.")], traits_for=tools.traits)

    def once(p: StopHookInput) -> StopHookResult | None:
        return None if p.stop_hook_active else StopHookResult(blocking_error="[check.sh]: run the tests")

    hooks = StopHooks([PythonStopHook(once, name="check.sh")])
    path = ws.parent / f"{SESSION}.jsonl"

    async def go() -> None:
        async with run(
            "Tidy up",
            model=model,
            tools=tools,
            workspace=ws,
            config=cfg,
            compactor=ModelCompactor(summariser),
            permissions=PermissionPolicy(default="allow"),
            stop_hooks=hooks,
            session_id=SESSION,
            transcript_path=path,
        ) as r:
            async for _ in r:
                pass
        assert r.result is not None and r.result.terminal.TAG == "completed"

    anyio.run(go)
    return [json.loads(line) for line in path.read_text().splitlines()]


def _by_kind(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    names: dict[str, str] = {}
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("type") == "assistant":
            for b in r["message"]["content"]:
                if b.get("type") == "tool_use":
                    names[b["id"]] = b["name"]
        k = _kind(r, names)
        if k is not None:
            out.setdefault(k, []).append(r)
    return out


@pytest.mark.spec("TR-1")
def test_every_record_kind_matches_the_real_shape(steploop_records: list[dict[str, Any]]) -> None:
    real = {d["kind"]: d["record"] for d in map(json.loads, DATA.read_text().splitlines())}
    ours = _by_kind(steploop_records)
    expected = {
        "user:prompt", "user:meta", "user:compact_summary", "assistant:tool_use", "assistant:text",
        "system:compact_boundary", "system:stop_hook_summary",
        *(f"user:tool_result:{n}" for n in ("Read", "Write", "Edit", "Glob", "Grep", "Bash")),
        *(f"user:tool_result:{n}:error" for n in ("Read", "Write", "Edit", "Glob", "Bash")),
    }
    assert expected <= ours.keys(), sorted(expected - ours.keys())
    problems: list[str] = []
    for kind in sorted(expected):
        for rec in ours[kind]:
            _compare(kind, real[kind], rec, "", problems)
    assert not problems, "\n".join(sorted(set(problems)))


@pytest.mark.spec("TR-1")
def test_usage_stop_reason_and_ids_on_the_records_of_a_response(
    steploop_records: list[dict[str, Any]],
) -> None:
    """Every record of a response shares message.id and requestId and carries its usage; the
    last one carries the stop reason; the session id is a UUID."""
    import uuid

    responses: dict[str, list[dict[str, Any]]] = {}
    for r in steploop_records:
        assert str(uuid.UUID(r["sessionId"])) == r["sessionId"]
        if r["type"] == "assistant":
            responses.setdefault(r["message"]["id"], []).append(r)
    first = next(iter(responses.values()))
    assert first[0]["message"]["usage"]["input_tokens"] == 30_000
    for recs in responses.values():
        assert len({r["requestId"] for r in recs}) == 1 and recs[0]["requestId"].startswith("req_")
        assert all(r["message"]["id"].startswith("msg_") for r in recs)
        assert len({json.dumps(r["message"]["usage"]) for r in recs}) == 1
        assert [r["message"]["stop_reason"] for r in recs][:-1] == [None] * (len(recs) - 1)
        assert recs[-1]["message"]["stop_reason"] in ("tool_use", "end_turn")
    assert len(responses) == 4


def test_compaction_and_stop_hook_records(steploop_records: list[dict[str, Any]]) -> None:
    by = _by_kind(steploop_records)
    (boundary,) = by["system:compact_boundary"]
    assert boundary["parentUuid"] is None and boundary["logicalParentUuid"]
    assert boundary["compactMetadata"] == {"trigger": "auto", "preTokens": boundary["compactMetadata"]["preTokens"]}
    assert boundary["compactMetadata"]["preTokens"] > 0
    (summary,) = by["user:compact_summary"]
    assert summary["parentUuid"] == boundary["uuid"] and "isMeta" not in summary
    first, second = by["system:stop_hook_summary"]
    assert second["hasOutput"] is False and first["hasOutput"] is True
    assert first["hookCount"] == 1 and first["hookInfos"][0]["command"] == "check.sh"
    assert first["hookErrors"] == [] and first["preventedContinuation"] is False
    (feedback,) = by["user:meta"]
    assert feedback["message"]["content"] == "Stop hook feedback:\n[check.sh]: run the tests"
    edit = by["user:tool_result:Edit"][0]["toolUseResult"]
    assert (edit["oldString"], edit["newString"], edit["replaceAll"]) == ("1", "2", False)
    read = by["user:tool_result:Read"][0]["toolUseResult"]["file"]
    assert read["content"] == "x = 1" and read["numLines"] == 1 and read["filePath"].endswith("/a.txt")
