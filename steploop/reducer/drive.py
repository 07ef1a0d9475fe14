"""One driver loop over a pluggable world (specs/rules.md, W-DRIVE-1 ... W-DRIVE-4).

A *world* answers the machine's effects. :class:`Loop` is the loop every driver of steploop
runs: it steps one event at a time through :func:`steploop.reducer.machine.advance` and hands every
effect the step returned to the world, in order, before it steps the next event. Answers the
world gives at once are queued and stepped in turn; an answer still queued when a cancel
withdraws its request is dropped (W-DRIVE-2). The loop knows nothing of the world but this.

Three ways to run it:

- :func:`drive` (synchronous) and :func:`drive_async`: the loop asks the world for the next
  event whenever nothing is queued (``next_event``), until the turn ends or the world has
  nothing more. The README's synchronous driver, :func:`steploop.effects.trace.record_driver`,
  counterfactual replay (a recorded world) and the conformance check run this way.
- Pushed: the world feeds events itself (:meth:`Loop.feed`) as they happen, and the loop steps
  each at once unless it is busy or held. The anyio interpreter (:mod:`steploop.effects.run`, the live
  world) runs this way, so no task is woken just to step an event.

A world implements :class:`World` (``perform``, and ``next_event`` for the pulled forms; an
:class:`AsyncWorld`'s ``next_event`` is awaited). :func:`check_world` runs a world through the
loop and reports every breach of the world protocol (:mod:`steploop.reducer.protocol`): an answer to a
request never opened, an answer after a cancel, a request answered twice, a request the state
waits for that is never answered, an event the machine rejects.

The module is pure: the loop calls the world, and the world does what it does.
"""

from __future__ import annotations

import typing
from collections import deque
from collections.abc import Callable, Iterable
from typing import Literal, Protocol, TypeAlias

import attrs

from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Effect, Finish
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import Event
from steploop.reducer.machine import advance, begin
from steploop.reducer.protocol import Ledger, awaiting, not_withdrawn, withdraws_any
from steploop.reducer.state import LoopState, Request, Session
from steploop.reducer.transitions import Terminal, Transition

__all__ = [
    "AsyncWorld",
    "Conformance",
    "Loop",
    "Observer",
    "Outcome",
    "Perform",
    "World",
    "check_world",
    "check_world_async",
    "drive",
    "drive_async",
]

EVENT_TYPES: tuple[type, ...] = typing.get_args(Event)

Perform: TypeAlias = Callable[[Effect, LoopState], Iterable[Event] | None]
"""Perform one effect in the state that asked for it; return the events that answer it at once
(or None). Called for every effect, fire-and-forget ones included (an ``Emit`` to show, a
cancel to honour, the ``Finish``)."""

Observer: TypeAlias = Callable[
    [Event | None, LoopState, tuple[Effect, ...], tuple[Transition, ...]], None
]
"""Called after ``start()`` (event None) and after every step, before any of its effects is
performed: the event, the new state, its effects and the transitions it passed through."""


class World(Protocol):
    """What a synchronous world does: perform each effect (answering at once or later), and,
    when nothing is queued, bring the next event (None: nothing more)."""

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None: ...

    def next_event(self, state: LoopState) -> Event | None: ...


class AsyncWorld(Protocol):
    """A world whose next event is awaited (a live model, a recorded world with a live
    fallback). ``perform`` stays synchronous: it starts or queues the work."""

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None: ...

    async def next_event(self, state: LoopState) -> Event | None: ...


class Loop:
    """The driver loop (see the module docstring).

    Args:
        config: the turn's config.
        perform: the world's ``perform``.
        observe: called after start() and every step (see :data:`Observer`).
        on_error: an exception of ``step()``, ``perform`` or ``observe`` goes here and the loop
            stops for good; without it, it propagates to whoever fed the event.
        max_events: stop (``stopped``) instead of stepping the event after this many.
        keep_transitions: keep ``transitions`` (off: constant memory however long the run).

    ``state`` is the latest state; ``terminal`` the Terminal once ``Finish`` was performed;
    ``transitions`` every transition passed so far, in order; ``events`` the events stepped.
    """

    def __init__(
        self,
        config: LoopConfig,
        perform: Perform,
        *,
        observe: Observer | None = None,
        on_error: Callable[[Exception], None] | None = None,
        max_events: int | None = None,
        keep_transitions: bool = True,
    ) -> None:
        self.config = config
        self._keep = keep_transitions
        self._perform = perform
        self._observe = observe
        self._on_error = on_error
        self.max_events = max_events
        self.state: LoopState | None = None
        self.terminal: Terminal | None = None
        self.transitions: list[Transition] = []
        self.events = 0
        self.stopped = False  # max_events reached
        self._pending: deque[Effect] = deque()  # effects returned by step(), not performed
        self._inbox: deque[Event] = deque()  # events not stepped yet, in arrival order
        self._busy = True  # stepping now, held, or finished: feed() only queues
        self._held = False

    # -- starting ---------------------------------------------------------------------------

    def begin(self, request: Request, session: Session | None = None) -> None:
        """``start()`` the turn and perform its effects."""
        state, fx, passed = begin(request, self.config, session)
        self._started(None, state, fx, passed)

    def resume(self, state: LoopState, effects: Iterable[Effect]) -> None:
        """Continue from ``state`` with ``effects`` still to perform (a resumed trace)."""
        self.state = state
        self._pending.extend(effects)
        self._busy = False
        self.work()

    def _started(
        self,
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        self.state = state
        if passed and self._keep:
            self.transitions.extend(passed)
        try:
            if self._observe is not None:
                self._observe(event, state, fx, passed)
        except Exception as exc:
            if self._on_error is None:
                raise
            self._on_error(exc)
            return
        self._pending.extend(fx)
        self._busy = False
        self.work()

    # -- running ----------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Nothing queued and nothing held: the loop waits for the world's next event."""
        return not self._busy and not self._inbox and not self._pending

    @property
    def done(self) -> bool:
        """The turn ended (``Finish`` performed) or ``max_events`` was reached."""
        return self.terminal is not None or self.stopped

    def feed(self, event: Event) -> None:
        """Queue an event; step it (and all it leads to) now unless the loop is busy or held."""
        self._inbox.append(event)
        if not self._busy:
            self.work()

    def hold(self) -> None:
        """Called by ``perform``: stop after this effect until :meth:`release` (an item waits
        for a consumer that is not waiting for it: backpressure)."""
        self._held = True

    def release(self) -> None:
        """Carry on with the work :meth:`hold` stopped."""
        self._held = False
        self._busy = False
        self.work()

    def work(self) -> None:
        """Perform the pending effects and step the queued events until both are empty, the
        world holds the loop, the turn ends or ``max_events`` is reached."""
        if self._busy:
            return
        self._busy = True
        pending, inbox, perform, observe = self._pending, self._inbox, self._perform, self._observe
        config, keep = self.config, self._keep
        state = self.state
        assert state is not None, "begin() or resume() first"
        try:
            while True:
                if pending:
                    effect = pending.popleft()
                    if inbox and withdraws_any(effect):
                        self._drop_withdrawn(effect)
                    got = perform(effect, state)
                    if got:
                        inbox.extend(got)
                    if effect.__class__ is Finish:
                        self.terminal = effect.terminal
                        return  # Finish is the last effect; nothing may follow it
                    if self._held:
                        return
                elif inbox:
                    if self.max_events is not None and self.events >= self.max_events:
                        self.stopped = True
                        return
                    event = inbox.popleft()
                    state, fx, passed = advance(state, event, config)
                    self.state = state
                    self.events += 1
                    if passed and keep:
                        self.transitions.extend(passed)
                    if observe is not None:
                        observe(event, state, fx, passed)
                    pending.extend(fx)
                else:
                    break
        except Exception as exc:
            if self._on_error is None:
                raise
            self._on_error(exc)
            return
        self._busy = False

    def close(self) -> None:
        """Stop for good: nothing queued is stepped or performed any more."""
        self._busy = True
        self._inbox.clear()
        self._pending.clear()

    def _drop_withdrawn(self, effect: Effect) -> None:
        """Answers still queued for a request ``effect`` withdraws are never stepped."""
        keep = not_withdrawn(self._inbox, effect)
        if len(keep) != len(self._inbox):
            self._inbox.clear()
            self._inbox.extend(keep)


# ---------------------------------------------------------------------------------------------
# The pulled forms


Status: TypeAlias = Literal["finished", "stalled", "stopped"]


@attrs.frozen(kw_only=True)
class Outcome:
    """How a driven turn ended: ``finished`` (the ``Finish`` was performed; ``terminal`` is
    its Terminal), ``stalled`` (the world had no next event while the state still waits:
    ``awaiting``) or ``stopped`` (``max_events`` reached)."""

    status: Status
    state: LoopState = attrs.field(repr=False)
    terminal: Terminal | None
    transitions: tuple[Transition, ...]
    events: int
    awaiting: tuple[tuple[object, ...], ...] = ()


def _outcome(loop: Loop) -> Outcome:
    state = loop.state
    assert state is not None
    if loop.terminal is not None:
        status: Status = "finished"
    elif loop.stopped:
        status = "stopped"
    else:
        status = "stalled"
    return Outcome(
        status=status,
        state=state,
        terminal=loop.terminal,
        transitions=tuple(loop.transitions),
        events=loop.events,
        awaiting=awaiting(state) if status == "stalled" else (),
    )


def _loop(
    world: World | AsyncWorld,
    config: LoopConfig,
    observer: Observer | None,
    max_events: int | None,
) -> Loop:
    return Loop(config, world.perform, observe=observer, max_events=max_events)


def drive(
    world: World,
    request: Request,
    config: LoopConfig,
    session: Session | None = None,
    *,
    resume: tuple[LoopState, Iterable[Effect]] | None = None,
    observer: Observer | None = None,
    max_events: int | None = None,
) -> Outcome:
    """Run one user turn against a synchronous world.

    ``start()`` (or, with ``resume=(state, effects)``, the given state and the effects still
    to perform), then the loop: every effect to ``world.perform`` in order, every answer
    stepped in turn, and ``world.next_event(state)`` whenever nothing is queued.

    Returns:
        The :class:`Outcome`. ``IllegalEvent`` (an answer the machine refuses) and whatever
        the world raises propagate.
    """
    loop = _loop(world, config, observer, max_events)
    if resume is None:
        loop.begin(request, session)
    else:
        loop.resume(*resume)
    next_event = world.next_event
    while not loop.done:
        state = loop.state
        assert state is not None
        event = next_event(state)
        if event is None:
            break
        loop.feed(event)
    return _outcome(loop)


async def drive_async(
    world: AsyncWorld,
    request: Request,
    config: LoopConfig,
    session: Session | None = None,
    *,
    resume: tuple[LoopState, Iterable[Effect]] | None = None,
    observer: Observer | None = None,
    max_events: int | None = None,
) -> Outcome:
    """:func:`drive` for a world whose next event is awaited."""
    loop = _loop(world, config, observer, max_events)
    if resume is None:
        loop.begin(request, session)
    else:
        loop.resume(*resume)
    next_event = world.next_event
    while not loop.done:
        state = loop.state
        assert state is not None
        event = await next_event(state)
        if event is None:
            break
        loop.feed(event)
    return _outcome(loop)


# ---------------------------------------------------------------------------------------------
# The conformance check


@attrs.frozen(kw_only=True)
class Conformance:
    """What :func:`check_world` found: ``problems`` (one line each; empty: the world kept the
    protocol on this run) and the run's :class:`Outcome` (None if the machine refused an
    event)."""

    problems: tuple[str, ...]
    outcome: Outcome | None

    @property
    def ok(self) -> bool:
        return not self.problems


class _Checked:
    """A world seen through a :class:`Ledger`: every effect issued, every event delivered."""

    def __init__(self, world: World | AsyncWorld) -> None:
        self.world = world
        self.ledger = Ledger()
        self.problems: list[str] = []
        self.step = 0

    def observe(
        self,
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        if event is not None:
            self.step += 1
            wrong = self.ledger.deliver(event)
            if wrong is not None:
                self.problems.append(f"step {self.step}: {type(event).__name__} {wrong}")
        self.ledger.issue(fx)

    def end(self, outcome: Outcome) -> Conformance:
        if outcome.status == "stalled":
            for key in outcome.awaiting:
                shown = f"{key[0]}({', '.join(repr(x) for x in key[1:])})"
                self.problems.append(
                    f"after step {self.step}: {shown} is awaited and was never answered"
                )
        return Conformance(problems=tuple(self.problems), outcome=outcome)

    def refused(self, err: IllegalEvent) -> Conformance:
        event = err.event
        name = type(event).__name__
        wrong = self.ledger.deliver(event) if isinstance(event, EVENT_TYPES) else None  # type: ignore[arg-type]
        if wrong is not None:
            self.problems.append(f"step {self.step + 1}: {name} {wrong}")
        self.problems.append(f"step {self.step + 1}: the machine refuses the event: {err}")
        return Conformance(problems=tuple(self.problems), outcome=None)


def check_world(
    world: World,
    request: Request,
    config: LoopConfig,
    session: Session | None = None,
    *,
    max_events: int = 100_000,
) -> Conformance:
    """Run ``world`` through one turn and check it keeps the world protocol (W-PROTO-5):
    every request the state waits for is answered, once; no answer comes for a request that
    was withdrawn (a cancel honoured) or never opened; the machine accepts every event."""
    checked = _Checked(world)
    try:
        outcome = drive(
            world, request, config, session, observer=checked.observe, max_events=max_events
        )
    except IllegalEvent as err:
        return checked.refused(err)
    return checked.end(outcome)


async def check_world_async(
    world: AsyncWorld,
    request: Request,
    config: LoopConfig,
    session: Session | None = None,
    *,
    max_events: int = 100_000,
) -> Conformance:
    """:func:`check_world` for an :class:`AsyncWorld`."""
    checked = _Checked(world)
    try:
        outcome = await drive_async(
            world, request, config, session, observer=checked.observe, max_events=max_events
        )
    except IllegalEvent as err:
        return checked.refused(err)
    return checked.end(outcome)
