"""E-STALE-2: a session that goes on in another process (a resumed trace) knows what the model
had read: the files its Read calls read are read again, so Edit and Write accept them, as
Claude Code's resume does; what cannot be read now is skipped, never an error."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.cli import main
from steploop.effects.tools import Read, ToolContext, ToolRegistry, builtin_tools
from steploop.effects.trace import StepRecord, TraceReader
from steploop.reducer.effects import StartTool
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

NOT_READ = "File has not been read yet"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _history(*calls: tuple[str, Mapping[str, Any], bool]) -> list[Message]:
    """A conversation in which the model called Read once per (id, input, failed)."""
    out: list[Message] = [UserMessage(id="u0", content=(TextBlock(text="go"),))]
    for k, (tid, input, failed) in enumerate(calls):
        out.append(
            AssistantMessage(
                id=f"a{k}",
                response_id=f"r{k}",
                model="m",
                content=(ToolUseBlock(id=tid, name="Read", input=dict(input)),),
            )
        )
        out.append(
            UserMessage(
                id=f"u{k + 1}",
                content=(ToolResultBlock(tool_use_id=tid, content="...", is_error=failed),),
            )
        )
    return out


def _tools(workspace: Path) -> tuple[ToolRegistry, Read]:
    registry = ToolRegistry(builtin_tools(workspace))
    read = registry.get("Read")
    assert isinstance(read, Read)
    return registry, read


@pytest.mark.spec("E-STALE-2")
@pytest.mark.anyio
async def test_the_files_read_before_are_read_again(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    (tmp_path / "b.txt").write_text("B\n")
    registry, read = _tools(tmp_path)
    ctx = ToolContext(workspace=tmp_path, tool_use_id="toolu_x")
    edit = {"file_path": "a.txt", "old_string": "one", "new_string": "1"}
    refused = await registry.run("Edit", edit, ctx, 30.0)
    assert refused.is_error and NOT_READ in refused.content  # a new process: nothing read
    history = _history(("t1", {"file_path": "a.txt"}, False), ("t2", {"file_path": "b.txt"}, True))
    assert read.restore(history) == 1  # b.txt's Read had failed: not counted as read
    done = await registry.run("Edit", edit, ctx, 30.0)
    assert not done.is_error, done
    assert (tmp_path / "a.txt").read_text() == "1\ntwo\n"
    other = await registry.run("Edit", {**edit, "file_path": "b.txt", "old_string": "B"}, ctx, 30.0)
    assert other.is_error and NOT_READ in other.content


@pytest.mark.spec("E-STALE-2")
def test_what_cannot_be_read_now_is_skipped(tmp_path: Path) -> None:
    """Gone, now a directory (Claude Code's resume crashed on it: EISDIR), outside the
    workspace, past its end now, or a malformed input: skipped, the rest still restored."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "dir").mkdir()
    (ws / "short.txt").write_text("x\n")
    (ws / "ok.txt").write_text("ok\n")
    (tmp_path / "outside.txt").write_text("secret\n")
    _, read = _tools(ws)
    history = _history(
        ("t1", {"file_path": "gone.txt"}, False),
        ("t2", {"file_path": "dir"}, False),
        ("t3", {"file_path": "../outside.txt"}, False),
        ("t4", {"file_path": str(tmp_path / "outside.txt")}, False),
        ("t5", {"file_path": "short.txt", "offset": 40}, False),
        ("t6", {"path": "ok.txt"}, False),
        ("t7", {"file_path": "ok.txt", "offset": "x"}, False),
        ("t8", {"file_path": "ok.txt"}, False),
    )
    assert read.restore(history) == 1
    assert len(read.read_state) == 1


SCRIPT: list[dict[str, object]] = [
    {"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}},
    {"type": "reply", "text": "read it"},
    {
        "type": "tool_call",
        "name": "Edit",
        "input": {"file_path": "a.txt", "old_string": "A", "new_string": "Z"},
    },
    {"type": "reply", "text": "edited"},
]


@pytest.mark.spec("E-STALE-2")
def test_a_resumed_run_edits_a_file_the_killed_run_read(tmp_path: Path) -> None:
    """The run read a.txt, then was killed before the call that edits it: the resumed run (a
    new process, a new record of reads) edits it; before E-STALE-2 the Edit was refused."""
    (tmp_path / "a.txt").write_text("A\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([SCRIPT[0], SCRIPT[2], SCRIPT[3]]))
    trace = tmp_path / "t.jsonl"
    argv = ["run", "edit a", "--workspace", str(tmp_path), "--scripted", str(script)]
    assert main([*argv, "--trace", str(trace), "--yes"], out=io.StringIO()) == 0
    (tmp_path / "a.txt").write_text("A\n")  # as it was when the run was killed
    lines = trace.read_bytes().splitlines(keepends=True)
    cut = next(  # right after the step that issued the second model call
        k
        for k, line in enumerate(lines)
        if any(
            e.get("type") == "call_model" and e.get("call_id") == 2
            for e in json.loads(line).get("effects", [])
        )
    )
    trace.write_bytes(b"".join(lines[: cut + 1]))
    out = io.StringIO()
    resume = ["resume", str(trace), "--scripted", str(script), "--workspace", str(tmp_path)]
    assert main([*resume, "--yes"], out=out) == 0, out.getvalue()
    assert "read again: 1 file(s) the model had read" in out.getvalue()
    assert (tmp_path / "a.txt").read_text() == "Z\n"
    edits = [
        e
        for rec in TraceReader(trace)
        if isinstance(rec, StepRecord)
        for e in rec.effects
        if isinstance(e, StartTool) and e.name == "Edit"
    ]
    assert len(edits) == 1
