"""A recorded live parent with two sub-agent calls (E-AGENT-3's layout), for the tests of
``show`` and the viewer linking a parent's calls to their children (E-AGENT-6, VIEW-6)."""

from __future__ import annotations

from pathlib import Path

import anyio

from steploop.effects import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply, response, tool_use
from steploop.effects.subagent import AgentCall, AgentDefinition, AgentTool
from steploop.effects.tools import ToolRegistry
from steploop.effects.trace import TraceRecorder, make_provenance

CALLS = ("toolu_ag0", "toolu_ag1")


def live_parent(folder: Path, name: str = "parent") -> Path:
    """Record ``folder/<name>.jsonl``: one response with two Agent calls (``CALLS``), each child
    answering with a report, then the parent's answer; the children's traces go to
    ``folder/<name>/subagents/``."""

    def child(call: AgentCall) -> ScriptedModel:
        return ScriptedModel([reply(f"report on {call.prompt}")], traits_for=ToolRegistry([]).traits)

    tools = ToolRegistry([AgentTool([AgentDefinition(model=child)])])
    calls = response(
        *(
            tool_use("Agent", {"description": f"look {i}", "prompt": f"part {i}"}, id=tid)
            for i, tid in enumerate(CALLS)
        ),
        stop_reason="tool_use",
    )
    model = ScriptedModel([calls, reply("both reported")], traits_for=tools.traits)
    trace = folder / f"{name}.jsonl"

    async def go() -> None:
        with TraceRecorder(trace, provenance=make_provenance(model=model, workspace=folder)) as rec:
            r = rec.attach(
                run(
                    "investigate",
                    model=model,
                    tools=tools,
                    workspace=folder,
                    observer=rec,
                    permissions=PermissionPolicy(default="allow"),
                    session_id="sess-1",
                )
            )
            async with r:
                async for _ in r:
                    pass
        assert r.result is not None and r.result.terminal.TAG == "completed"
        assert "agentId: a" in str(r.result.state.conversation.messages()[-2])  # the children ran

    anyio.run(go)
    return trace
