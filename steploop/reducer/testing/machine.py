"""``LoopMachine``: a Hypothesis rule-based state machine that drives ``step()`` and checks the
invariant catalogue of specs/invariants.md on every transition.

Each example draws a config (:func:`steploop.reducer.testing.configs`) and a request, starts a user
turn, and then lets Hypothesis pick, step by step, one of the world's answers legal in the
current state (the explorer's move generator), a queued command, a late tool result, a ready
tool-use summary, or (once a turn is done) the next user turn of the same session. Every
transition goes through :func:`steploop.reducer.explore.check_step`; a violation fails the example with
the rule, the explanation and the events of the turn, which Hypothesis then shrinks.

A state that comes back (same abstraction key, same monitors) after a model call with no
progress step in between is a progress-free cycle (INV-13) and fails the example too.

Invariants a config breaks on purpose, because a compatibility flag reproduces the reference's
flaw, are skipped (:func:`steploop.reducer.explore.expected_breaks`).

Subclass to add your own checks: override :meth:`LoopMachine.on_step` (every transition),
add Hypothesis ``@invariant()`` methods (between steps), add :class:`steploop.reducer.explore.Invariant`
objects through :meth:`LoopMachine.loop_invariants`, or narrow :meth:`LoopMachine.configs` and
:meth:`LoopMachine.requests`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Effect
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import (
    CommandQueued,
    Event,
    Interrupted,
    ModelCallFailed,
    ModelResponseEnded,
    ToolFinished,
    ToolUseSummaryReady,
)
from steploop.reducer.explore import (
    Abstraction,
    Invariant,
    Observation,
    World,
    catalogue,
    check_step,
    expected_breaks,
    initial_monitors,
)
from steploop.reducer.machine import advance, begin, step
from steploop.reducer.state import LoopState, Request, Session
from steploop.reducer.testing.strategies import configs, moves_for, requests
from steploop.reducer.transitions import Transition

__all__ = ["InvariantViolation", "LoopMachine"]


class InvariantViolation(AssertionError):
    """A catalogue rule (or one of yours) failed on a transition."""


def _not_done(self: LoopMachine) -> bool:
    return self.state is not None and self.state.phase != "done"


class LoopMachine(RuleBasedStateMachine):
    """Drives ``step()`` with legal events and checks the invariant catalogue.

    Attributes available to subclasses: ``config``, ``request``, ``state`` (the latest),
    ``trace`` (the events of the current user turn), ``effects`` (every effect of the turn),
    ``observation`` (the latest :class:`steploop.reducer.explore.Observation`), ``user_turns``,
    ``model_answers`` (model answers in this turn).
    """

    world: ClassVar[World] = World(max_tools=2, tool_outcomes=("ok", "error", "hook_stop"))
    check_progress_cycles: ClassVar[bool] = True
    skip_expected_breaks: ClassVar[bool] = True  # see steploop.reducer.explore.expected_breaks

    def __init__(self) -> None:
        super().__init__()
        self.config: LoopConfig | None = None
        self.request: Request | None = None
        self.state: LoopState | None = None
        self.trace: list[Event] = []
        self.effects: list[Effect] = []
        self.observation: Observation | None = None
        self.user_turns = 0
        self.model_answers = 0
        self._invs: tuple[Invariant, ...] = ()
        self._checked: tuple[bool, ...] = ()
        self._monitors: tuple[Hashable, ...] = ()
        self._abstraction: Abstraction | None = None
        self._seen: dict[Hashable, int] = {}
        self._commands = 0

    # --- what to draw (override in subclasses) ------------------------------------------------

    def configs(self) -> st.SearchStrategy[LoopConfig]:
        """The configs examples run under (default: every profile, random toggles)."""
        return configs()

    def requests(self) -> st.SearchStrategy[Request]:
        return requests()

    def loop_invariants(self) -> Sequence[Invariant]:
        """The rules checked on every transition (default: the whole catalogue)."""
        return catalogue()

    def on_step(self, o: Observation) -> None:
        """Called after every transition, once the catalogue has passed. Raise (or assert)
        to report a violation of your own rule."""

    # --- driving ------------------------------------------------------------------------------

    @initialize(data=st.data())
    def begin(self, data: st.DataObject) -> None:
        self.config = data.draw(self.configs(), label="config")
        self._abstraction = Abstraction(self.config)
        invs = tuple(self.loop_invariants())
        skip = expected_breaks(self.config) if self.skip_expected_breaks else {}
        self._invs = invs
        self._checked = tuple(inv.applies(self.config) and inv.id not in skip for inv in invs)
        self._start(data.draw(self.requests(), label="request"), None)

    def _start(self, request: Request, session: Session | None) -> None:
        assert self.config is not None
        self.request = request
        self.user_turns += 1
        self.trace = []
        self.effects = []
        self.model_answers = 0
        self._seen = {}
        self._monitors = initial_monitors(self._invs, self.config, request, session)
        s, fx, passed = begin(request, self.config, session)
        self._observe(None, None, fx, s, passed)

    def feed(self, event: Event) -> None:
        """Step the machine with one event and check every rule on the transition."""
        assert self.config is not None and self.state is not None
        before = self.state
        nxt, fx, passed = advance(before, event, self.config)
        self.trace.append(event)
        self._observe(before, event, fx, nxt, passed)

    def _observe(
        self,
        state: LoopState | None,
        event: Event | None,
        fx: tuple[Effect, ...],
        nxt: LoopState,
        passed: tuple[Transition, ...],
    ) -> None:
        assert self.config is not None
        o = Observation(self.config, state, event, fx, nxt, passed)
        self._monitors, _, bads = check_step(self._invs, self._monitors, o)
        for inv, checked, bad in zip(self._invs, self._checked, bads, strict=True):
            if checked and bad is not None:
                raise InvariantViolation(self._explain(inv.id, bad))
        self.state = nxt
        self.effects.extend(fx)
        self.observation = o
        if o.current_call_event and isinstance(event, (ModelResponseEnded, ModelCallFailed)):
            self.model_answers += 1
        self._progress_cycle(o)
        self.on_step(o)

    def _progress_cycle(self, o: Observation) -> None:
        """INV-13 on a concrete run: an abstract state seen again after a model answer and no
        progress step closes a progress-free cycle."""
        if not self.check_progress_cycles or self.state is None or self.state.phase == "done":
            return
        if "INV-13" not in {inv.id for inv, c in zip(self._invs, self._checked, strict=True) if c}:
            return
        if o.progress:
            self._seen = {}
        assert self._abstraction is not None
        key = (self._abstraction.key(self.state), self._monitors)
        first = self._seen.setdefault(key, self.model_answers)
        if first < self.model_answers:
            raise InvariantViolation(
                self._explain(
                    "INV-13",
                    f"the same abstract state came back after {self.model_answers - first} "
                    "model answer(s) with no progress step",
                )
            )

    def _explain(self, inv_id: str, text: str) -> str:
        assert self.config is not None
        events = "\n".join(f"  {i:3d}. {e!r}" for i, e in enumerate(self.trace, 1))
        return (
            f"{inv_id} broken: {text}\n"
            f"profile {self.config.profile_name}, user turn {self.user_turns}, "
            f"request {self.request!r}\nevents of this turn:\n{events}"
        )

    @precondition(_not_done)
    @rule(data=st.data())
    def world_answers(self, data: st.DataObject) -> None:
        """The world answers: one move of the alphabet legal in the current state."""
        assert self.config is not None and self.state is not None
        mv = data.draw(moves_for(self.state, self.config, self.world), label="move")
        for ev in mv.events:
            self.feed(ev)

    @precondition(_not_done)
    @rule()
    def user_queues_a_command(self) -> None:
        self._commands += 1
        self.feed(CommandQueued(command_id=f"q{self._commands}", text="also run the linter"))

    @precondition(_not_done)
    @rule()
    def late_tool_result(self) -> None:
        """A result from a generation that no longer exists (R-TOOL-8): a legal no-op."""
        self.feed(ToolFinished(generation=0, tool_use_id="stale", content="late"))

    @precondition(lambda self: _not_done(self) and self.state.summary_id != 0)
    @rule(text=st.none() | st.just("Read a.py, then edited it."))
    def summary_ready(self, text: str | None) -> None:
        assert self.state is not None
        self.feed(ToolUseSummaryReady(summary_id=self.state.summary_id, summary=text))

    @precondition(lambda self: self.state is not None and self.state.phase == "done")
    @rule(data=st.data())
    def next_user_turn(self, data: st.DataObject) -> None:
        """The user writes again: a new turn of the same session (R-SESSION-1)."""
        assert self.state is not None
        self._start(data.draw(self.requests(), label="request"), self.state.session())

    @invariant()
    def a_finished_turn_accepts_nothing(self) -> None:
        """INV-12, probed: after Finish even an interrupt is refused."""
        if self.state is None or self.state.phase != "done" or self.config is None:
            return
        try:
            step(self.state, Interrupted(kind="hard"), self.config)
        except IllegalEvent:
            return
        raise InvariantViolation(self._explain("INV-12", "step() accepted an event after Finish"))
