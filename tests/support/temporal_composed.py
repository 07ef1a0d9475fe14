"""A workflow of one's own that runs a steploop turn (tests/effects/test_temporal_plugin.py):
the way a Temporal user composes steploop, through the plugin and ``run_turn``."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from steploop.effects.answer import PermissionPolicy
    from steploop.effects.temporal.options import ActivityOptions
    from steploop.effects.temporal.turn import run_turn, turn_input_here

__all__ = ["ReviewWorkflow"]


@workflow.defn(name="review")
class ReviewWorkflow:
    """Runs one steploop turn on ``prompt``, the calls of the Look tool on ``side_queue``,
    then answers with what the turn ended with."""

    @workflow.run
    async def run(self, prompt: str, side_queue: str) -> dict[str, Any]:
        inp = turn_input_here(
            prompt,
            permissions=PermissionPolicy(default="allow"),
            provenance={"created_at": "2026-01-01T00:00:00Z"},
            activities={
                "model": ActivityOptions(start_to_close_s=42),
                "tools": ActivityOptions(heartbeat_s=3, attempts=5),
                "tool.Look": ActivityOptions(task_queue=side_queue, cancellation="try_cancel"),
            },
            turn_id="review",
        )
        result = await run_turn(inp)
        return {"terminal": result.terminal["type"], "steps": result.steps}
