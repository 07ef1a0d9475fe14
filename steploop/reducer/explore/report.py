"""Counterexamples and the explorer's report."""

from __future__ import annotations

from typing import Any

import attrs

from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Effect
from steploop.reducer.events import Event
from steploop.reducer.machine import start, step
from steploop.reducer.state import LoopState, Request, Session

# =============================================================================================
# Counterexamples and the report
# =============================================================================================


@attrs.frozen(kw_only=True)
class Counterexample:
    """A violation, replayable: ``start(request, config, session)`` then ``events`` in order.

    ``labels`` name the moves the events came from. For a cycle (a lasso), ``loop_start`` is
    the index of the first event of the repeating part and :meth:`loop_labels` the moves of
    one lap; playing those labels again from the last state (ids are recomputed from the
    state, see :func:`moves`) goes round the loop once more.
    """

    config: LoopConfig
    request: Request
    events: tuple[Event, ...]
    invariant: str
    explanation: str
    session: Session | None = None
    labels: tuple[str, ...] = ()
    loop_start: int | None = None
    loop_move: int | None = None  # index in ``labels`` where the loop begins

    def loop_labels(self) -> tuple[str, ...]:
        """The moves of one lap of the loop (empty when this is not a lasso)."""
        return () if self.loop_move is None else self.labels[self.loop_move :]

    def trace_events(self) -> list[Event]:
        """The events to feed to step() after start(), in order."""
        return list(self.events)

    def replay(self) -> list[tuple[LoopState, tuple[Effect, ...]]]:
        """Run the counterexample: [(state, effects)] for start() and every event."""
        s, fx = start(self.request, self.config, self.session)
        out = [(s, fx)]
        for ev in self.events:
            s, fx = step(s, ev, self.config)
            out.append((s, fx))
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (steploop.reducer.serialize): the events and what they break."""
        from steploop.reducer.serialize import unstructure

        return {
            "invariant": self.invariant,
            "explanation": self.explanation,
            "profile": self.config.profile_name,
            "config": unstructure(self.config),
            "request": unstructure(self.request),
            "session": None if self.session is None else unstructure(self.session),
            "events": [unstructure(e) for e in self.events],
            "labels": list(self.labels),
            "loop_start": self.loop_start,
            "loop_move": self.loop_move,
        }


@attrs.frozen(kw_only=True)
class InvariantResult:
    id: str
    title: str
    applicable: bool
    exercised: int
    violations: int
    counterexample: Counterexample | None = None
    expected: str | None = None  # why this config breaks the rule on purpose (a quirk flag)

    @property
    def status(self) -> str:
        """``broken``, ``unexercised`` (a guard never reached), ``held`` or ``n/a``."""
        if not self.applicable:
            return "n/a"
        if self.violations:
            return "broken"
        if not self.exercised:
            return "unexercised"
        return "held"


@attrs.frozen(kw_only=True)
class ExploreProgress:
    """Handed to the progress callback every so often and when a new call layer starts."""

    states: int
    transitions: int
    expanded: int
    frontier: int
    rounds: int  # the model-call layer being explored
    bound: int | None  # the bound of the tier being explored (None: none)
    deep: bool  # exploring the deep tier


@attrs.frozen(kw_only=True)
class Report:
    """What a run of :func:`explore` found."""

    config: LoopConfig
    request: Request
    rounds_bound: int | None  # full alphabet within this many model calls (None: everywhere)
    deep_rounds_bound: int | None  # deep alphabet up to this many (None: no bound)
    deep: bool  # a deep tier was explored
    states: int
    transitions: int
    expanded: int
    rounds_reached: int
    complete: bool  # no state was left unexpanded (by a bound or max_states)
    results: tuple[InvariantResult, ...]
    errors: tuple[Counterexample, ...] = ()  # step() raised (specs/ M-5)
    longest_progress_free: int | None = None  # model answers; None = unbounded (a lasso)
    longest_progress_free_witness: Counterexample | None = None

    @property
    def broken(self) -> tuple[InvariantResult, ...]:
        return tuple(r for r in self.results if r.status == "broken")

    @property
    def unexercised(self) -> tuple[InvariantResult, ...]:
        return tuple(r for r in self.results if r.status == "unexercised")

    @property
    def counterexamples(self) -> tuple[Counterexample, ...]:
        found = [r.counterexample for r in self.results if r.counterexample is not None]
        return (*found, *self.errors)

    @property
    def ok(self) -> bool:
        """No invariant broken, every applicable guard exercised, step() never raised."""
        return not self.broken and not self.unexercised and not self.errors

    def result(self, inv_id: str) -> InvariantResult:
        for r in self.results:
            if r.id == inv_id:
                return r
        raise KeyError(inv_id)
