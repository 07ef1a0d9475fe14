"""The tool-list read in the live world and in traces (specs/ R-REFRESH-1, E-MCP-5): the run
answers it with its registry's names and digest, the trace records it and replays exactly, a
trace written before the gate existed replays without it, and a run cut off while the list was
being read resumes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.trace import TraceRecorder, make_provenance, replay_exact, resume_trace
from steploop.reducer import claude_code_2_1_88
from steploop.reducer.effects import RefreshTools


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _record(ws: Path, path: Path, refresh: bool = True) -> ToolRegistry:
    (ws / "a.txt").write_text("hi\n")
    tools = ToolRegistry(builtin_tools(ws))
    model = ScriptedModel([tool_call("Read", {"file_path": "a.txt"}), reply("read it")], traits_for=tools.traits)
    cfg = claude_code_2_1_88().with_overrides({"gates.tool_refresh": refresh})
    with TraceRecorder(path, provenance=make_provenance(model=model)) as rec:
        r = rec.attach(
            run("read a.txt", model=model, tools=tools, workspace=ws, config=cfg, observer=rec,
                permissions=PermissionPolicy(default="allow"))
        )
        async with r:
            async for _ in r:
                pass
    assert r.result is not None and r.result.terminal.TAG == "completed"
    return tools


@pytest.mark.spec("R-REFRESH-1", "E-MCP-5")
@pytest.mark.anyio
async def test_the_live_run_answers_with_its_tool_list(tmp_path: Path) -> None:
    """Under the 2.1.88 profile the trace holds RefreshTools and the run's answer: the registry's names and digest."""
    path = tmp_path / "t.jsonl"
    tools = await _record(tmp_path, path)
    steps = [s for s in _lines(path) if s["record"] == "step"]
    asked = [e for s in steps for e in s["effects"] if e["type"] == "refresh_tools"]
    answered = [s["event"] for s in steps if (s["event"] or {}).get("type") == "tools_refreshed"]
    assert asked == [{"type": "refresh_tools", "call_id": 1}]
    assert len(answered) == 1
    assert answered[0]["tools"] == list(tools.names) and answered[0]["digest"] == tools.digest()
    assert replay_exact(path).ok


@pytest.mark.spec("R-REFRESH-1")
@pytest.mark.anyio
async def test_a_trace_from_before_the_gate_replays_without_it(tmp_path: Path) -> None:
    """A 2.1.88 trace whose header has no gates.tool_refresh (written before the gate) reads it as off."""
    path = tmp_path / "t.jsonl"
    await _record(tmp_path, path, refresh=False)
    lines = _lines(path)
    del lines[0]["config"]["gates"]["tool_refresh"]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = replay_exact(path)
    assert report.ok and report.complete, report.describe()
    assert not any(e["type"] == "refresh_tools" for s in lines[1:] for e in s.get("effects", []))


@pytest.mark.spec("R-REFRESH-1", "W-PROTO-4")
@pytest.mark.anyio
async def test_a_run_cut_off_while_reading_the_list_resumes(tmp_path: Path) -> None:
    """Killed after RefreshTools was issued: resume issues it again, the run answers, the turn ends and replays."""
    path = tmp_path / "t.jsonl"
    await _record(tmp_path, path)
    raw = path.read_bytes().splitlines(keepends=True)
    cut = next(
        i
        for i, line in enumerate(raw)
        if any(e["type"] == "refresh_tools" for e in json.loads(line).get("effects", []))
    )
    path.write_bytes(b"".join(raw[: cut + 1]))
    tools = ToolRegistry(builtin_tools(tmp_path))
    model = ScriptedModel([reply("read it")], traits_for=tools.traits)
    with resume_trace(path, clock_ms=lambda: 5) as rs:
        async with rs.run(model=model, tools=tools, workspace=tmp_path,
                          permissions=PermissionPolicy(default="allow"), clock_ms=lambda: 5) as r:
            async for _ in r:
                pass
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert rs.reissued == (RefreshTools(call_id=1),)  # the read was all the cut run owed
    report = replay_exact(path)
    assert report.ok and report.complete and report.resumes == 1, report.describe()
