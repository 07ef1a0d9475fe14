"""The ready-made workflow: one user turn of the loop, durable.

:class:`TurnWorkflow` runs a :class:`~steploop.effects.temporal.turn.SteploopTurn` (the turn as
workflow code: see :mod:`steploop.effects.temporal.turn`) and continues as new every
``rounds_per_run`` rounds. Its handlers are the turn's: :meth:`TurnWorkflow.answer_permission`
(update), :meth:`~TurnWorkflow.interrupt` and :meth:`~TurnWorkflow.queue_command` (signals),
:meth:`~TurnWorkflow.pending_permissions`, :meth:`~TurnWorkflow.items` and
:meth:`~TurnWorkflow.progress` (queries). A turn run inside a workflow of one's own registers the
same names (:func:`~steploop.effects.temporal.turn.run_turn`), so every client and the
``steploop temporal`` commands reach both alike.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from steploop.effects.temporal.turn import (
        DECISIONS,
        Carried,
        SteploopTurn,
        TurnInput,
        TurnResult,
        policy_of,
    )

__all__ = [
    "DECISIONS",
    "WORKFLOW_NAME",
    "Carried",
    "TurnInput",
    "TurnResult",
    "TurnWorkflow",
    "policy_of",
]

WORKFLOW_NAME = "steploop.turn"


@workflow.defn(name=WORKFLOW_NAME)
class TurnWorkflow:
    @workflow.init
    def __init__(self, inp: TurnInput) -> None:
        self._turn = SteploopTurn(inp, continue_as_new=True)

    @workflow.run
    async def run(self, inp: TurnInput) -> TurnResult:
        return await self._turn.run()

    @workflow.update
    async def answer_permission(
        self, tool_use_id: str, decision: str, reason: str = "", at_ms: int = 0
    ) -> None:
        """Answer a pending permission request: allow, deny_by_rule or rejected_by_user."""
        await self._turn.answer_permission(tool_use_id, decision, reason, at_ms)

    @answer_permission.validator
    def _check_answer(
        self, tool_use_id: str, decision: str, reason: str = "", at_ms: int = 0
    ) -> None:
        self._turn.check_answer(tool_use_id, decision, reason, at_ms)

    @workflow.signal
    def interrupt(self, kind: str = "hard", at_ms: int = 0) -> None:
        """Interrupt the turn: hard (Esc) or submit (a new message was sent)."""
        self._turn.interrupt(kind, at_ms)

    @workflow.signal
    def queue_command(self, command_id: str, text: str, at_ms: int = 0) -> None:
        self._turn.queue_command(command_id, text, at_ms)

    @workflow.query
    def pending_permissions(self) -> list[dict[str, Any]]:
        return self._turn.pending_permissions()

    @workflow.query
    def items(self, since: int = 0) -> list[dict[str, Any]]:
        """Items emitted from index ``since`` on (see ``SteploopTurn.items``)."""
        return self._turn.items(since)

    @workflow.query
    def progress(self) -> dict[str, Any]:
        return self._turn.progress()
