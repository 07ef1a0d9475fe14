"""Sub-agents (steploop/effects/subagent.py, specs/ E-AGENT-*): the Agent tool runs nested loops
under the sub-agent configuration, side by side; their traces are linked from the parent's and
replay exactly; their transcripts are sidechains; an interrupt of the parent stops them; a
child that fails is the call's error."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.hooks import StopHookInput, StopHookResult
from steploop.effects.scripted import ScriptedModel, failure, reply, response, tool_call, tool_use
from steploop.effects.subagent import (
    AgentCall,
    AgentDefinition,
    AgentTool,
    subagent_path,
    subagent_traces,
)
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.effects.trace import TraceReader, TraceRecorder, make_provenance, replay_exact
from steploop.reducer import LoopConfig, default
from steploop.reducer.events import InterruptBehavior
from steploop.reducer.messages import ToolResultBlock, UserMessage


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Meet:
    """A tool each sub-agent calls: it waits (up to 10 s) until ``expected`` calls are inside
    at once, so a test passes only if the sub-agents run side by side. ``forever`` makes it wait
    until cancelled (an interrupt)."""

    name = "Meet"
    description = "wait for the others"
    input_schema: Mapping[str, Any] = {"type": "object"}
    max_result_chars: int | None = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, expected: int, forever: bool = False) -> None:
        self.expected = expected
        self.forever = forever
        self.inside = 0
        self.most = 0
        self.all_in = anyio.Event()
        self.cancelled = 0

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.inside += 1
        self.most = max(self.most, self.inside)
        if self.inside >= self.expected:
            self.all_in.set()
        try:
            if self.forever:
                await anyio.sleep_forever()
            with anyio.fail_after(10):
                await self.all_in.wait()
            return ToolOutput(content=f"met {self.most}")
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.inside -= 1


def _child_scripts(call: AgentCall) -> ScriptedModel:
    """Each child meets the other, then reports what its prompt asked for."""
    tools = ToolRegistry([Meet(0)])
    return ScriptedModel([tool_call("Meet", {}), reply(f"report on {call.prompt}")], traits_for=tools.traits)


def _parent(agents: AgentTool, script: list[Any]) -> tuple[ToolRegistry, ScriptedModel]:
    tools = ToolRegistry([agents])
    return tools, ScriptedModel(script, traits_for=tools.traits)


def _agent_calls(*prompts: str) -> Any:
    return response(
        *(
            tool_use("Agent", {"description": f"look {i}", "prompt": p}, id=f"toolu_ag{i}")
            for i, p in enumerate(prompts)
        ),
        stop_reason="tool_use",
    )


def _results(state: Any) -> dict[str, tuple[str, bool]]:
    out: dict[str, tuple[str, bool]] = {}
    for m in state.conversation.messages():
        if isinstance(m, UserMessage):
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    out[b.tool_use_id] = (b.content, b.is_error)
    return out


async def _run_parent(
    tmp_path: Path, tools: ToolRegistry, model: ScriptedModel, config: LoopConfig | None = None, on_item: Any = None
) -> tuple[Any, Path, Path]:
    trace = tmp_path / "parent.jsonl"
    transcript = tmp_path / "session.jsonl"
    with TraceRecorder(trace, provenance=make_provenance(model=model, workspace=tmp_path)) as rec:
        r = rec.attach(
            run(
                "investigate",
                model=model,
                tools=tools,
                workspace=tmp_path,
                observer=rec,
                permissions=PermissionPolicy(default="allow"),
                transcript_path=transcript,
                config=config,
                session_id="sess-1",
            )
        )
        async with r:
            async for item in r:
                if on_item is not None:
                    on_item(r, item)
    assert r.result is not None
    return r.result, trace, transcript


@pytest.mark.spec("E-AGENT-1", "E-AGENT-2", "E-AGENT-3")
@pytest.mark.anyio
async def test_two_subagents_run_concurrently_and_their_traces_replay(tmp_path: Path) -> None:
    """One response with two Agent calls: both children run at once (they meet), under the
    sub-agent config; both child traces and the parent's replay exactly and are linked."""
    meet = Meet(2)
    seen: list[tuple[str, str | None, str | None]] = []

    async def subagent_stop(payload: StopHookInput) -> StopHookResult:
        seen.append((payload.hook_event_name, payload.agent_id, payload.agent_type))
        return StopHookResult()

    def child(call: AgentCall) -> ScriptedModel:
        reg = ToolRegistry([meet])
        return ScriptedModel([tool_call("Meet", {}), reply(f"report on {call.prompt}")], traits_for=reg.traits)

    agents = AgentTool(
        [AgentDefinition(model=child, tools=lambda call: [meet], stop_hooks=[subagent_stop], max_turns=5)]
    )
    tools, model = _parent(agents, [_agent_calls("the parser", "the lexer"), reply("both reported")])
    cfg = default().with_overrides({"gates.tool_use_summaries": True})  # a sub-agent asks for none
    res, trace, transcript = await _run_parent(tmp_path, tools, model, cfg)
    assert res.terminal.TAG == "completed" and meet.most == 2
    got = _results(res.state)
    assert got["toolu_ag0"][0].startswith("report on the parser\n\nagentId: a")
    assert got["toolu_ag1"][0].startswith("report on the lexer\n\nagentId: a")
    assert "<usage>total_tokens: " in got["toolu_ag0"][0] and "tool_uses: 1\n" in got["toolu_ag0"][0]
    assert replay_exact(trace).ok
    children = subagent_traces(trace)
    assert set(children) == {"toolu_ag0", "toolu_ag1"}
    ids = set()
    for tid, path in children.items():
        report = replay_exact(path)
        assert report.ok and report.complete, report.describe()
        header = next(iter(TraceReader(path)))
        prov = header.provenance  # type: ignore[union-attr]
        agent_id = prov["agent_id"]
        ids.add(agent_id)
        assert prov["parent_trace"] == "parent.jsonl" and prov["parent_tool_use_id"] == tid
        assert f"agentId: {agent_id} " in got[tid][0]
        config = header.config  # type: ignore[union-attr]
        assert config.is_subagent and config.agent_id == agent_id and config.max_turns == 5
        assert config.query_source == "agent:builtin:general-purpose"
        assert path == subagent_path(trace, agent_id)
        effects = {e["type"] for line in path.read_text().splitlines() for e in json.loads(line).get("effects", [])}
        assert "summarize_tool_use" not in effects and "run_stop_hooks" in effects
        side = subagent_path(transcript, agent_id)
        records = [json.loads(line) for line in side.read_text().splitlines()]
        assert records and all(r["isSidechain"] is True and r["agentId"] == agent_id for r in records)
        assert all(r["sessionId"] == "sess-1" for r in records)
    assert sorted(seen) == sorted(("SubagentStop", i, "general-purpose") for i in ids)
    parent_effects = {e["type"] for line in trace.read_text().splitlines() for e in json.loads(line).get("effects", [])}
    assert "summarize_tool_use" in parent_effects  # the parent's own rule is untouched


@pytest.mark.spec("E-AGENT-4")
@pytest.mark.anyio
async def test_an_interrupt_of_the_parent_stops_the_children(tmp_path: Path) -> None:
    """While both children wait in a tool, the parent is interrupted: the children are
    interrupted too, their traces end aborted and replay exactly, and nothing keeps running."""
    meet = Meet(2, forever=True)

    def child(call: AgentCall) -> ScriptedModel:
        reg = ToolRegistry([meet])
        return ScriptedModel([tool_call("Meet", {}), reply("never")], traits_for=reg.traits)

    agents = AgentTool([AgentDefinition(model=child, tools=[meet])], interrupt_grace_s=5)
    tools, model = _parent(agents, [_agent_calls("a", "b"), reply("never")])

    async def interrupt_when_met(r: Any) -> None:
        await meet.all_in.wait()
        r.interrupt("hard")

    async with anyio.create_task_group() as tg:
        trace = tmp_path / "parent.jsonl"
        with TraceRecorder(trace, provenance=make_provenance(model=model)) as rec:
            r = rec.attach(
                run("go", model=model, tools=tools, workspace=tmp_path, observer=rec,
                    permissions=PermissionPolicy(default="allow"))
            )
            with anyio.fail_after(30):
                async with r:
                    tg.start_soon(interrupt_when_met, r)
                    async for _ in r:
                        pass
    assert r.result is not None and r.result.terminal.TAG == "aborted_tools"
    assert meet.cancelled == 2 and meet.inside == 0
    assert replay_exact(trace).ok
    children = subagent_traces(trace)
    assert len(children) == 2
    for path in children.values():
        report = replay_exact(path)
        assert report.ok and report.complete, report.describe()
        assert report.terminal is not None and report.terminal.TAG == "aborted_tools"


@pytest.mark.spec("E-AGENT-5")
@pytest.mark.anyio
async def test_a_failing_child_is_the_calls_error(tmp_path: Path) -> None:
    """A child that ends in model_error, an unknown agent type and a broken factory are error results."""

    def child(call: AgentCall) -> ScriptedModel:
        if call.prompt == "break":
            raise RuntimeError("no model for you")
        return ScriptedModel([failure("unknown", message="the model fell over")], traits_for=ToolRegistry([]).traits)

    agents = AgentTool([AgentDefinition(name="Explore", model=child)])
    script = [
        response(
            tool_use("Agent", {"description": "d", "prompt": "fail"}, id="t1"),
            tool_use("Agent", {"description": "d", "prompt": "x", "subagent_type": "Plan"}, id="t2"),
            tool_use("Agent", {"description": "d", "prompt": "break"}, id="t3"),
            stop_reason="tool_use",
        ),
        reply("noted"),
    ]
    tools, model = _parent(agents, script)
    res, trace, _ = await _run_parent(tmp_path, tools, model)
    got = _results(res.state)
    assert got["t1"][1] and got["t1"][0].startswith("Agent Explore ended model_error")
    assert got["t2"] == ("<tool_use_error>Agent type 'Plan' not found. Available agents: Explore</tool_use_error>", True)
    assert got["t3"][1] and "RuntimeError: no model for you" in got["t3"][0]
    assert res.terminal.TAG == "completed" and replay_exact(trace).ok


@pytest.mark.spec("E-AGENT-5")
@pytest.mark.anyio
async def test_outside_a_run_the_tool_says_so(tmp_path: Path) -> None:
    """Called with no caller (not from a run), the tool gives an error result, never raises."""
    tool = AgentTool([AgentDefinition(model=lambda call: _child_scripts(call))])
    out = await tool.call({"description": "d", "prompt": "p"}, ToolContext(workspace=tmp_path, tool_use_id="t"))
    assert out.is_error and "runs only inside a run" in out.content
    assert ToolRegistry([tool]).traits("Agent", {"description": "d", "prompt": "p"}).concurrency_safe
