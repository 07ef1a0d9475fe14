"""What a counterfactual replay reports: :class:`CounterfactualReport` and, when the new run
asked for what the recording could not answer, its :class:`Divergence`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import attrs

from steploop.effects.trace.replay import Mismatch
from steploop.reducer import LoopState
from steploop.reducer.transitions import Terminal

__all__ = ["CounterfactualReport", "Divergence", "runs"]


@attrs.frozen(kw_only=True)
class Divergence:
    """The first effect of the new run that the recording could not answer."""

    step: int  # the new run's step that asked for it
    kind: str  # the effect's tag: call_model, compact, start_tool, ...
    ordinal: int  # 1-based, among the new run's effects of this kind
    effect: str  # what the new run asked for
    recorded: str | None  # what the recording had at that ordinal (None: nothing)
    reason: str
    recorded_step: int | None = None  # the recording's step that asked for it
    change: str | None = None  # a model call: what differs from the recorded request
    layers: tuple[str, ...] = ()  # the context layers that changed it (layers.LAYERS order)

    def describe(self) -> str:
        had = self.recorded if self.recorded is not None else "none"
        line = (
            f"diverged at step {self.step}: the new run asks for {self.kind} #{self.ordinal}: "
            f"{self.effect}; recorded at that ordinal: {had} ({self.reason})"
        )
        if self.change is not None:
            line += f"\n  the request: {self.change}"
        return line


@attrs.frozen(kw_only=True)
class CounterfactualReport:
    path: str
    status: Literal["finished", "diverged", "stalled"]
    terminal: Terminal | None
    steps: int
    transitions: tuple[str, ...]
    matched: dict[str, int] = attrs.field(eq=False)
    out_of_order: int
    by_policy: dict[str, int] = attrs.field(eq=False)
    divergence: Divergence | None
    stalled_phase: str | None
    recorded_terminal: Terminal | None
    recorded_steps: int
    recorded_transitions: tuple[str, ...]
    recording_mismatch: Mismatch | None
    state: LoopState = attrs.field(eq=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "finished"

    def describe(self) -> str:
        lines = []
        if self.status == "finished":
            assert self.terminal is not None
            lines.append(f"new run: {self.steps} steps, terminal {self.terminal.TAG}")
        elif self.status == "diverged":
            assert self.divergence is not None
            lines.append(self.divergence.describe())
        else:
            lines.append(
                f"stalled after step {self.steps - 1}: the new run waits in phase "
                f"{self.stalled_phase!r} and the recording holds no answer for it"
            )
        lines.append(f"transitions: {runs(self.transitions)}")
        matched = ", ".join(f"{k} {v}" for k, v in sorted(self.matched.items())) or "nothing"
        lines.append(f"answered from the recording: {matched}")
        if self.out_of_order:
            lines.append(f"  ({self.out_of_order} matched at another ordinal by fingerprint)")
        if self.by_policy:
            lines.append(
                "answered by the policy: "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.by_policy.items()))
            )
        rec_end = self.recorded_terminal.TAG if self.recorded_terminal else "no end record"
        lines.append(
            f"recording: {self.recorded_steps} steps, {rec_end}; "
            f"transitions: {runs(self.recorded_transitions)}"
        )
        if self.recording_mismatch is not None:
            lines.append(
                f"note: the recording does not replay exactly from step "
                f"{self.recording_mismatch.step}; answers were matched to what this steploop asks"
            )
        return "\n".join(lines)


def runs(tags: Sequence[str]) -> str:
    """next_turn ×3, completed"""
    out: list[str] = []
    for tag in tags:
        if out and out[-1].split(" ×")[0] == tag:
            n = int(out[-1].split(" ×")[1]) if " ×" in out[-1] else 1
            out[-1] = f"{tag} ×{n + 1}"
        else:
            out.append(tag)
    return ", ".join(out) or "none"
