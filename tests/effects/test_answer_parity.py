"""Every world answers through one layer (specs/ W-ANSWER-1): the same scripted sessions run
through the live world (``run()``, real tools on a temporary workspace) and the Temporal world
(the time-skipping test server, a worker with the same handlers) write the same trace, times
and the provenance aside: tools (a Read, an Edit), a permission the policy denies, a compaction,
a tool stopped by its PreToolUse hook (E-HOOK-1), a response that repeats a tool_use id
(B-MODEL-1) and text with lone surrogates (B-TEXT-1)."""

from __future__ import annotations

import asyncio
import difflib
import json
import shutil
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

pytest.importorskip("temporalio")

from temporalio.testing import WorkflowEnvironment

from steploop.effects.compaction import ModelCompactor
from steploop.effects.run import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply
from steploop.effects.temporal.activities import ByCallId, SteploopActivities
from steploop.effects.temporal.client import start_turn, turn_input, worker
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools
from steploop.effects.trace import TraceRecorder
from steploop.reducer import Request
from steploop.reducer.events import InterruptBehavior, ToolTraits
from tests.support.temporal_world import time_skipping

FIXED = {"created_at": "2026-01-01T00:00:00Z"}
ALLOW = PermissionPolicy(default="allow")
TRAITS = ToolTraits()


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # temporalio runs on asyncio only


@pytest.fixture(scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkflowEnvironment]:
    async with time_skipping(tmp_path_factory.mktemp("blobs")) as e:
        yield e


@attrs.define
class HookedTool:
    """A tool whose PreToolUse hook stops the turn, saying why (as a tool hook reports it)."""

    name: str = "Guarded"
    description: str = "its hook stops the turn"
    input_schema: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object"})
    max_result_chars: int | None = None
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error: bool = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return False

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(
            content="Blocked by the guard hook",
            hook_stopped=True,
            hook_event="PreToolUse",
            hook_stop_reason="the guard refuses " + str(input.get("what", "")),
        )


def tools_in(ws: Path) -> ToolRegistry:
    return ToolRegistry([*builtin_tools(ws), HookedTool()])


def calls(*tools: tuple[str, dict[str, Any]], ids: tuple[str, ...] = ()) -> dict[str, Any]:
    blocks = [{"type": "tool_use", "name": n, "input": i} for n, i in tools]
    for block, tid in zip(blocks, ids, strict=False):
        block["id"] = tid
    return {
        "type": "response",
        "blocks": blocks,
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


def done(text: str = "Done.") -> dict[str, Any]:
    return {"type": "reply", "text": text, "usage": {"input_tokens": 120, "output_tokens": 5}}


@attrs.frozen
class Session:
    """A scripted session, the policy it runs under, and texts its trace must show."""

    script: list[dict[str, Any]]
    policy: PermissionPolicy
    shows: tuple[str, ...]
    prompt: str = "go"


SESSIONS: dict[str, Session] = {
    "tools-denial-compaction": Session(
        [
            calls(("Read", {"file_path": "a.txt"})),
            calls(("Edit", {"file_path": "a.txt", "old_string": "one", "new_string": "two"})),
            calls(("Write", {"file_path": "b.txt", "content": "never"})),
            {"type": "failure", "kind": "prompt_too_long", "status": 400},  # drains the collapse
            {"type": "failure", "kind": "prompt_too_long", "status": 400},  # compacts
            done(),
        ],
        PermissionPolicy(default="allow", deny=frozenset({"Write"})),
        (
            "1\\tone",
            "Replaced 1 occurrence in a.txt",
            '"decision": "deny_by_rule"',
            '"type": "compaction_finished"',
            "The summary.",
            '"type": "completed"',
        ),
    ),
    "hook-stop": Session(
        [calls(("Guarded", {"what": "this"})), done("never")],
        ALLOW,
        (
            '"hook_event": "PreToolUse"',
            '"hook_stop_reason": "the guard refuses this"',
            '"type": "hook_stopped"',
        ),
    ),
    "duplicate-id": Session(
        [
            calls(("Read", {"file_path": "a.txt"}), ("Glob", {"pattern": "*"}), ids=("t1", "t1")),
            done("never"),
        ],
        ALLOW,
        ("tool_use id 't1' appears twice in one response", '"type": "model_error"'),
    ),
    "dirty-text": Session(
        [calls(("Read", {"file_path": "bad\ud800.txt"})), done("fine \udfff")],
        ALLOW,
        ("bad \\ufffd prompt", "File does not exist: bad\\ufffd.txt", "fine \\ufffd"),
        "bad \udc80 prompt",
    ),
}


def workspace(root: Path) -> Path:
    ws = root / "ws"
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir()
    (ws / "a.txt").write_text("one\n")
    return ws


def compactor() -> ModelCompactor:
    """Summarises with a model of its own (one answer: no tool calls)."""
    return ModelCompactor(ScriptedModel([reply("The summary.")], traits_for=lambda n, i: TRAITS))


async def live(session: Session, ws: Path, trace: Path) -> None:
    tools = tools_in(ws)
    model = ScriptedModel.from_json(session.script, traits_for=tools.traits)
    with TraceRecorder(trace, provenance=FIXED) as rec:
        r = rec.attach(
            run(
                Request(prompt=session.prompt, at_ms=1_000),
                model=model,
                tools=tools,
                workspace=ws,
                permissions=session.policy,
                compactor=compactor(),
                observer=rec,
            )
        )
        async with r:
            async for _ in r:
                pass


async def durable(env: WorkflowEnvironment, session: Session, ws: Path, trace: Path) -> None:
    tools = tools_in(ws)
    model = ByCallId(ScriptedModel.from_json(session.script, traits_for=tools.traits))
    acts = SteploopActivities(model=model, tools=tools, workspace=ws, compactor=compactor())
    queue = f"q-{uuid.uuid4().hex[:12]}"
    async with worker(env.client, acts, task_queue=queue):
        inp = turn_input(
            Request(prompt=session.prompt, at_ms=1_000),
            permissions=session.policy,
            trace_path=trace,
            provenance=FIXED,
        )
        handle = await start_turn(
            env.client, inp, workflow_id=f"parity-{uuid.uuid4().hex[:12]}", task_queue=queue
        )
        await asyncio.wait_for(handle.result(), 60)


def _aside(value: Any) -> Any:
    """``value`` without its times (``at_ms``)."""
    if isinstance(value, dict):
        return {k: _aside(v) for k, v in value.items() if k != "at_ms"}
    if isinstance(value, list):
        return [_aside(v) for v in value]
    return value


def records(trace: Path) -> list[str]:
    """The trace's records, one JSON text each, times and provenance aside: of the state
    digests a step record holds (they cover the times too), the names of the fields that
    changed."""
    out = []
    for line in trace.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        rec.pop("provenance", None)
        rec.pop("digest", None)
        if "fields" in rec:
            rec["fields"] = sorted(rec["fields"])
        out.append(json.dumps(_aside(rec), sort_keys=True))
    return out


@pytest.mark.anyio
@pytest.mark.spec("W-ANSWER-1", "E-HOOK-1", "B-MODEL-1", "B-TEXT-1")
@pytest.mark.parametrize("name", list(SESSIONS))
async def test_the_live_and_the_temporal_world_write_the_same_trace(
    env: WorkflowEnvironment, tmp_path: Path, name: str
) -> None:
    """One scripted session through both worlds: the same records, times aside."""
    session = SESSIONS[name]
    ws = workspace(tmp_path)
    await live(session, ws, tmp_path / "live.jsonl")
    after_live = sorted((p.name, p.read_bytes()) for p in ws.iterdir())
    ws = workspace(tmp_path)
    await durable(env, session, ws, tmp_path / "temporal.jsonl")
    assert sorted((p.name, p.read_bytes()) for p in ws.iterdir()) == after_live
    got, want = records(tmp_path / "temporal.jsonl"), records(tmp_path / "live.jsonl")
    assert got == want, "\n".join(difflib.unified_diff(want, got, "live", "temporal", n=0))
    text = "\n".join(want)
    assert [t for t in session.shows if t not in text] == []
