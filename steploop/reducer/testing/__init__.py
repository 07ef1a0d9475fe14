"""The Hypothesis testing kit (optional extra ``steploop[testing]``).

``import steploop.reducer`` never imports Hypothesis, and neither does ``import steploop.reducer.testing``: the
names below load :mod:`steploop.reducer.testing.strategies` and :mod:`steploop.reducer.testing.machine` (and with
them Hypothesis) on first use.

* strategies: :func:`configs` (profiles with random gate and flag toggles, small context
  windows), :func:`requests`, :func:`moves_for` and :func:`events_for` (what ``step()`` accepts
  in a state), :func:`worlds`;
* :class:`LoopMachine`: a ``RuleBasedStateMachine`` that starts user turns, drives ``step()``
  with legal events and checks the invariant catalogue (specs/invariants.md) on every
  transition;
* settings profiles ``"steploop-ci"`` and ``"steploop-slow"`` (:func:`ci_settings`,
  :func:`slow_settings`).

Add your own invariant by subclassing ``LoopMachine``::

    from hypothesis.stateful import invariant

    from steploop.reducer.testing import LoopMachine, ci_settings, configs


    class OutputCapsHold(LoopMachine):
        '''My runtime pays per output token: every model call asks for the capped
        default, or for the escalated cap after a truncated reply, or (a retry in a round
        whose cap a context overflow lowered, R-OVERFLOW-1) for no more than that cap.'''

        def configs(self):
            return configs(profiles=("default",))

        def on_step(self, o):  # every transition, after the catalogue passed
            cfg = self.config
            allowed = {cfg.default_max_tokens, cfg.escalated_max_output_tokens}
            for call in o.calls:
                lowered = o.state is not None and call.max_tokens <= o.state.round.max_tokens
                assert call.max_tokens in allowed or lowered, call.max_tokens

        @invariant()
        def turn_count_within_max_turns(self):  # between steps
            cfg, s = self.config, self.state
            if cfg is not None and s is not None and cfg.max_turns is not None:
                assert s.turn_count <= cfg.max_turns


    TestOutputCapsHold = OutputCapsHold.TestCase
    TestOutputCapsHold.settings = ci_settings()

A rule with a monitor (state carried from transition to transition, also usable by the
explorer) is a :class:`steploop.reducer.explore.Invariant`; return it from ``loop_invariants()``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from steploop.reducer.testing.machine import InvariantViolation, LoopMachine
    from steploop.reducer.testing.strategies import (
        CI_PROFILE,
        SLOW_PROFILE,
        ci_settings,
        configs,
        events_for,
        moves_for,
        requests,
        slow_settings,
        worlds,
    )

__all__ = [
    "CI_PROFILE",
    "SLOW_PROFILE",
    "InvariantViolation",
    "LoopMachine",
    "ci_settings",
    "configs",
    "events_for",
    "moves_for",
    "requests",
    "slow_settings",
    "worlds",
]

_WHERE = {
    "InvariantViolation": "steploop.reducer.testing.machine",
    "LoopMachine": "steploop.reducer.testing.machine",
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'steploop.reducer.testing' has no attribute {name!r}")
    from importlib import import_module

    module = import_module(_WHERE.get(name, "steploop.reducer.testing.strategies"))
    value = getattr(module, name)
    globals()[name] = value
    return value
