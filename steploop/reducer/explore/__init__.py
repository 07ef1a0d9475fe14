"""The exhaustive explorer: every reachable abstract state, every guard checked (specs/invariants.md).

The explorer plays the world against the machine. From the state that :func:`steploop.reducer.start`
returns it tries, in every state, every answer of a small *world alphabet* (:class:`World`): a
model call is answered with a text reply, a safe or an unsafe tool call, a truncated reply,
a truncated tool input, a paused reply (``pause_turn``), a refusal, or one of the failures
(prompt too long, media, overloaded, a context overflow, ...), each reply with a usage that
puts the context below, between or over the thresholds; compaction
succeeds or fails; stop hooks pass, block or prevent; permissions allow, deny or reject; tools
finish, fail or stop the turn; and the user interrupts (hard or submit) in every phase. Each
such answer is a :class:`Move`: a short sequence of events computed from the state, so every
event is one the machine must accept.

States are merged under the abstraction key of rule ABS-1 (:class:`Abstraction`): the phase,
the flags, the counters saturated just past their bounds, the token class of the context,
the shape of the tool slots (no ids, no text), and the monitors of the invariants. The key
space is finite, so the search ends.

The search is breadth first in (model calls, moves), so the first path found to a state is the
shortest, and the first violation of an invariant comes back as its shortest counterexample:
a :class:`Counterexample` holding the config, the request and the exact events to feed. Two
tiers keep it affordable (ABS-3): the full alphabet within ``rounds`` model calls per path,
then a deep alphabet (:data:`DEEP_WORLD`: the answers that move the round-level counters) to
the end of the graph, deep enough for the stop-hook cap and the breaker.

Every invariant (:data:`CATALOGUE`) is checked on every transition ``(state, event, effects,
next_state)`` through an :class:`Observation`, with a small *monitor* of its own that follows
the observable history (a count of failed auto-compactions, of nudges, ...), so a machine that
forgets to count is still caught. Each invariant also counts how often its guard was
*exercised* (the situation it protects against came up); a guard never exercised proves
nothing and fails the run. After the search, the abstract graph is analysed for cycles with no
progress step (INV-13) and for the longest progress-free path.

The module is pure (specs/ R-PURE-1): no clock, no I/O. Progress is reported through a
callback; the caller measures time.

The package, one job per module: :mod:`~steploop.reducer.explore.world` (the alphabet and :func:`moves`),
:mod:`~steploop.reducer.explore.abstraction` (the key), :mod:`~steploop.reducer.explore.observation` (what a
transition shows), :mod:`~steploop.reducer.explore.invariants` (the catalogue),
:mod:`~steploop.reducer.explore.report` (counterexamples, the report), :mod:`~steploop.reducer.explore.state_graph`
(the explored graph), :mod:`~steploop.reducer.explore.search` (:func:`explore`) and
:mod:`~steploop.reducer.explore.cycles` (cycle and path analysis). Everything public is importable from
``steploop.reducer.explore``.
"""

from __future__ import annotations

from steploop.reducer.explore.abstraction import Abstraction
from steploop.reducer.explore.invariants import (
    CATALOGUE,
    AutoCompactBreaker,
    DrainOnce,
    EscalateOnce,
    FinalResponseCommitted,
    Invariant,
    MaxTurnsBound,
    MessageIdsFromTheCounter,
    MotRecoveryLimit,
    NoHooksAfterApiError,
    NoProgressFreeCycle,
    NothingAfterFinish,
    PauseResumesBounded,
    ReactiveOnce,
    ResultsNeverReplaced,
    StopHookCap,
    ToolResultPairing,
    TruncatedInputsNeverRun,
    Verdict,
    WithheldErrors,
    catalogue,
    check_step,
    expected_breaks,
    initial_monitors,
)
from steploop.reducer.explore.observation import Observation
from steploop.reducer.explore.report import Counterexample, ExploreProgress, InvariantResult, Report
from steploop.reducer.explore.search import (
    DEEP_WORLD,
    DEFAULT_REQUEST,
    DEFAULT_ROUNDS,
    RETRY_DEEP_WORLD,
    explore,
)
from steploop.reducer.explore.world import Move, World, apply_move, moves, usage_for

__all__ = [
    "CATALOGUE",
    "DEEP_WORLD",
    "DEFAULT_REQUEST",
    "DEFAULT_ROUNDS",
    "RETRY_DEEP_WORLD",
    "Abstraction",
    "AutoCompactBreaker",
    "Counterexample",
    "DrainOnce",
    "EscalateOnce",
    "ExploreProgress",
    "FinalResponseCommitted",
    "Invariant",
    "InvariantResult",
    "MaxTurnsBound",
    "MessageIdsFromTheCounter",
    "MotRecoveryLimit",
    "Move",
    "NoHooksAfterApiError",
    "NoProgressFreeCycle",
    "NothingAfterFinish",
    "Observation",
    "PauseResumesBounded",
    "ReactiveOnce",
    "Report",
    "ResultsNeverReplaced",
    "StopHookCap",
    "ToolResultPairing",
    "TruncatedInputsNeverRun",
    "Verdict",
    "WithheldErrors",
    "World",
    "apply_move",
    "catalogue",
    "check_step",
    "expected_breaks",
    "explore",
    "initial_monitors",
    "moves",
    "usage_for",
]
