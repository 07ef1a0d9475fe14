"""A tool hook's stop through run(): which hook and its reason reach the machine's
``hook_stopped_continuation`` attachment (specs/ E-HOOK-1, T-HOOK-1)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.reducer.events import Event, InterruptBehavior, ToolFinished
from steploop.reducer.messages import AttachmentMessage, ToolResultBlock, UserMessage


class HookedTool:
    """A tool whose (simulated) tool hook stops the turn with the given output fields."""

    name = "Hooked"
    description = "runs, then its hook stops the turn"
    input_schema: Mapping[str, Any] = {"type": "object"}
    max_result_chars = None
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error = False

    def __init__(self, **fields: Any) -> None:
        self.fields = fields

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        out = ToolOutput(content=self.fields.pop("content", "ran"), hook_stopped=True)
        for k, v in self.fields.items():
            object.__setattr__(out, k, v)  # what a careless tool can hand over
        return out


async def _turn(tmp_path: Path, **fields: Any) -> tuple[list[Any], list[ToolFinished], str]:
    tools = ToolRegistry([HookedTool(**fields)])
    model = ScriptedModel([tool_call("Hooked", {}, "toolu_1"), reply("more")], traits_for=tools.traits)
    finished: list[ToolFinished] = []

    def seen(e: Event | None, _s: object, _fx: object) -> None:
        if isinstance(e, ToolFinished):
            finished.append(e)

    r = run(
        "go",
        model=model,
        tools=tools,
        workspace=tmp_path,
        permissions=PermissionPolicy(default="allow"),
        observer=seen,
    )
    async with r:
        items = [item async for item in r]
    assert r.result is not None
    return items, finished, r.result.terminal.TAG


def _stops(items: list[Any]) -> list[dict[str, Any]]:
    return [
        dict(i.data)
        for i in items
        if isinstance(i, AttachmentMessage) and i.attachment_type == "hook_stopped_continuation"
    ]


@pytest.mark.anyio
@pytest.mark.spec("E-HOOK-1")
async def test_the_hook_event_and_reason_reach_the_attachment(tmp_path: Path) -> None:
    items, finished, terminal = await _turn(
        tmp_path, hook_event="PreToolUse", hook_stop_reason="blocked by policy"
    )
    assert terminal == "hook_stopped"
    assert [(e.hook_stopped, e.hook_event, e.hook_stop_reason) for e in finished] == [
        (True, "PreToolUse", "blocked by policy")
    ]
    assert _stops(items) == [
        {
            "message": "blocked by policy",
            "hookName": "PreToolUse:Hooked",
            "toolUseID": "toolu_1",
            "hookEvent": "PreToolUse",
        }
    ]


@pytest.mark.anyio
@pytest.mark.spec("E-HOOK-1")
async def test_defaults_and_cleaned_text_keep_the_hook(tmp_path: Path) -> None:
    """A PostToolUse stop without a reason gets the reference's text; content and reason with
    lone surrogates are cleaned without losing which hook stopped."""
    items, _, terminal = await _turn(tmp_path)
    assert terminal == "hook_stopped"
    assert _stops(items)[0]["message"] == "Execution stopped by PostToolUse hook"
    assert _stops(items)[0]["hookEvent"] == "PostToolUse"
    items, finished, _ = await _turn(
        tmp_path, content="bad \ud800", hook_event="PreToolUse", hook_stop_reason="why \udfff"
    )
    assert (finished[0].content, finished[0].hook_event) == ("bad \ufffd", "PreToolUse")
    assert _stops(items)[0]["message"] == "why \ufffd"


@pytest.mark.anyio
@pytest.mark.spec("E-HOOK-1")
@pytest.mark.parametrize(
    "fields",
    [{"hook_event": "Stop"}, {"hook_event": None}, {"hook_stop_reason": 3}],
    ids=["unknown-event", "none-event", "int-reason"],
)
async def test_a_malformed_hook_stop_is_an_error_result(
    tmp_path: Path, fields: dict[str, Any]
) -> None:
    items, finished, terminal = await _turn(tmp_path, **fields)
    assert terminal == "completed" and _stops(items) == []  # nothing stopped the turn
    (e,) = finished
    assert e.is_error and not e.hook_stopped
    assert "hook_event must be PreToolUse or PostToolUse" in e.content
    (result,) = [
        b
        for i in items
        if isinstance(i, UserMessage)
        for b in i.content
        if isinstance(b, ToolResultBlock)
    ]
    assert result.is_error
