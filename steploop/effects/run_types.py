"""What a run hands its consumer and takes from its caller (:mod:`steploop.effects.run`): a
permission request to answer, raw text deltas, the deadlines of the handlers, the result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import attrs

from steploop.reducer import LoopState
from steploop.reducer.effects import AskPermission
from steploop.reducer.events import PermissionDecision
from steploop.reducer.messages import Usage
from steploop.reducer.transitions import Terminal

__all__ = ["Caller", "PermissionRequest", "RunResult", "TextDelta", "Timeouts"]


class PermissionRequest:
    """A tool call waiting for the user's answer. Call :meth:`allow` or :meth:`reject`."""

    def __init__(
        self,
        effect: AskPermission,
        on_answer: Callable[[PermissionRequest, PermissionDecision, str], None],
    ) -> None:
        self._effect = effect
        self._on_answer = on_answer  # the run's: steps the answer unless it was withdrawn
        self.answered = False
        self.withdrawn = False
        """The machine withdrew the request (``CancelTools``: an interrupt, a sibling's
        error); an answer is then ignored."""

    @property
    def effect(self) -> AskPermission:
        """The machine's request."""
        return self._effect

    @property
    def tool_use_id(self) -> str:
        return self._effect.tool_use_id

    @property
    def name(self) -> str:
        return self._effect.name

    @property
    def input(self) -> Mapping[str, Any]:
        return self._effect.input

    def _answer(self, decision: PermissionDecision, reason: str = "") -> None:
        if self.answered:
            raise RuntimeError(f"permission for {self.tool_use_id} was already answered")
        self.answered = True
        if not self.withdrawn:  # else the machine no longer waits for it (W-PROTO-3)
            self._on_answer(self, decision, reason)

    def allow(self) -> None:
        self._answer("allow")

    def reject(self) -> None:
        """The user said no: the round is aborted (specs/ R-PERM-3)."""
        self._answer("rejected_by_user")

    def __repr__(self) -> str:
        return f"PermissionRequest({self.name}, {dict(self.input)!r})"


@attrs.frozen(kw_only=True)
class Timeouts:
    """Deadlines for the handlers (seconds; None = no deadline). A handler past its deadline is
    cancelled and reported as the failure the machine expects: a stalled model call as
    ``stream_broken``, a compaction as ``CompactionFailed``, stop hooks as a hook error, a
    summary as None. Tools have their own ``tool_timeout_s``."""

    model_s: float | None = None
    compaction_s: float | None = 600.0
    stop_hooks_s: float | None = 600.0
    summary_s: float | None = 60.0


@attrs.frozen(kw_only=True)
class TextDelta:
    """Raw text as the model streams it (``run(..., text_deltas=True)``), for live display.
    The complete block still arrives as an emitted message; deltas are best effort."""

    index: int
    text: str


@attrs.frozen(kw_only=True)
class RunResult:
    """How the turn ended: the Terminal, the final state (``state.session()`` continues the
    conversation) and the usage summed over every model response."""

    terminal: Terminal
    state: LoopState
    usage: Usage


@attrs.frozen(kw_only=True)
class Caller:
    """What a tool call may know of the run that makes it (``ToolContext.caller``): a
    sub-agent reads it to run as the run's child, under its session, config, permission policy
    and deadlines, its trace and transcript beside the run's, its spans under the call's."""

    session_id: str
    config: Any  # LoopConfig
    workspace: Path
    transcript_path: Path | None
    trace_path: str | Path | None  # the run's trace file, when a TraceRecorder records it
    permissions: Any  # PermissionPolicy
    spans: Any  # steploop.effects.telemetry.TurnSpans, or None
    tool_timeout_s: float
    state: Callable[[], LoopState | None]
