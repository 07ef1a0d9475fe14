"""The interpreter as the live world of the driver loop (steploop/reducer/drive.py, steploop/reducer/protocol.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects import PermissionPolicy, PermissionRequest, run
from steploop.effects.scripted import ScriptedModel, reply, response, tool_use
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.effects.trace import StepRecord, TraceReader, TraceRecorder, replay_exact
from steploop.reducer.events import InterruptBehavior
from steploop.reducer.transitions import CONTINUE_TYPES


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Failing:
    """A safe tool that fails a moment later and cancels its siblings (like Bash)."""

    name = "fail"
    description = "fails"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = True

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        await anyio.sleep(0.05)
        return ToolOutput(content="exit 2", is_error=True)


class Asked:
    """A safe tool the policy asks the user about."""

    name = "asked"
    description = "needs permission"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="ok")


@pytest.mark.anyio
@pytest.mark.spec("W-PROTO-3")
async def test_a_cancelled_tool_withdraws_its_permission_request(tmp_path: Path) -> None:
    """A sibling's error cancels a call still asking for permission: the request the consumer
    holds is withdrawn, and answering it afterwards does nothing."""
    tools = ToolRegistry([Failing(), Asked()])
    model = ScriptedModel(
        [
            response(tool_use("fail"), tool_use("asked"), stop_reason="tool_use"),
            reply("Done."),
        ],
        traits_for=tools.traits,
    )
    held: list[PermissionRequest] = []
    policy = PermissionPolicy(allow=frozenset({"fail"}), default="ask")
    async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=policy) as r:
        async for item in r:
            if isinstance(item, PermissionRequest):
                held.append(item)  # not answered: the sibling fails first
    assert r.result is not None and r.result.terminal.TAG == "completed"
    (request,) = held
    assert request.withdrawn
    request.allow()  # ignored: the machine no longer waits for it
    assert [t.TAG for t in r.transitions] == ["next_turn", "completed"]


@pytest.mark.anyio
@pytest.mark.spec("W-DRIVE-3", "W-DRIVE-4")
async def test_a_recorded_run_holds_the_transitions_the_loop_reported(tmp_path: Path) -> None:
    """The recorder as observer gets each step's transitions from the loop; the trace holds
    them and replays exactly."""
    tools = ToolRegistry([Asked()])
    model = ScriptedModel(
        [response(tool_use("asked"), stop_reason="tool_use"), reply("Done.")],
        traits_for=tools.traits,
    )
    path = tmp_path / "t.jsonl"
    policy = PermissionPolicy(default="allow")
    with TraceRecorder(path) as rec:
        r = rec.attach(
            run(
                "go", model=model, tools=tools, workspace=tmp_path, permissions=policy, observer=rec
            )
        )
        async with r:
            async for _ in r:
                pass
    recorded = [
        rec.transition
        for rec in TraceReader(path)
        if isinstance(rec, StepRecord) and rec.transition
    ]
    assert recorded == r.transitions
    assert sum(isinstance(t, CONTINUE_TYPES) for t in recorded) == 1
    assert replay_exact(path).ok
