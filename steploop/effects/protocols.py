"""The handler protocols: what the interpreter (:mod:`steploop.effects.run`) asks of a model client,
a compactor, a stop-hook runner and a step observer. Handlers implement them without importing
the interpreter.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Protocol

from steploop.effects.hooks import StopEventName
from steploop.reducer import LoopState
from steploop.reducer.drive import Observer
from steploop.reducer.effects import CallModel, Compact, Effect, RunStopHooks
from steploop.reducer.events import CompactionFailed, CompactionFinished, Event, StopHooksFinished
from steploop.reducer.transitions import Transition

__all__ = ["Compactor", "ModelClient", "StepObserver", "StopHookRunner", "observer_of"]


class ModelClient(Protocol):
    """Streams one model call as reducer events, ending with exactly one of
    ``ModelResponseEnded`` or ``ModelCallFailed`` (steploop/effects/model/, steploop/effects/scripted.py)."""

    def stream(self, effect: CallModel) -> AsyncIterator[Event]: ...


class Compactor(Protocol):
    async def compact(self, effect: Compact) -> CompactionFinished | CompactionFailed: ...


class StopHookRunner(Protocol):
    async def run(
        self,
        effect: RunStopHooks,
        *,
        session_id: str,
        transcript_path: str,
        cwd: str,
        event_name: StopEventName = "Stop",
    ) -> StopHooksFinished: ...


StepObserver = Callable[[Event | None, LoopState, tuple[Effect, ...]], None]
"""Called after start() (event None) and after every step(); the trace recorder is one. It
runs in the task that stepped the event (a runner, the consumer, the driver), never two at
once, before any of the step's effects is executed; if it raises, the run fails with that.
An observer that also has a method ``observe(event, state, effects, transitions)`` (the
recorder does) is called through it instead, with every transition the step passed through
(``steploop.reducer.drive.Observer``)."""


def observer_of(observer: StepObserver | None) -> Observer | None:
    """The loop's observer for ``observer=``: an object with ``observe(event, state, effects,
    transitions)`` (a :class:`steploop.effects.trace.TraceRecorder`) is called with the transitions; a
    plain callable ``(event, state, effects)`` without them."""
    if observer is None:
        return None
    observe = getattr(observer, "observe", None)
    if callable(observe):
        return observe  # type: ignore[no-any-return]
    three = observer

    def call(
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        three(event, state, fx)

    return call
