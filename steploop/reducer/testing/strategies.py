"""Hypothesis strategies for steploop: configs, requests, and the events legal in a state.

Importing this module imports Hypothesis (the optional ``testing`` extra); ``import steploop.reducer``
never does. The events come from the explorer's move generator (:func:`steploop.reducer.explore.moves`),
so everything drawn here is an input ``step()`` must accept.

Settings profiles (registered on import, loaded by nobody but you):

* ``"steploop-ci"``: no deadline, 200 examples of up to 50 steps (seconds per machine);
* ``"steploop-slow"``: 2,000 examples of up to 200 steps (minutes).
"""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from steploop.reducer.config import PROFILES, Compat, Gates, LoopConfig
from steploop.reducer.events import Event
from steploop.reducer.explore import Move, World, moves
from steploop.reducer.state import LoopState, Request

__all__ = [
    "CI_PROFILE",
    "SLOW_PROFILE",
    "ci_settings",
    "configs",
    "events_for",
    "moves_for",
    "requests",
    "slow_settings",
    "worlds",
]

CI_PROFILE = "steploop-ci"
SLOW_PROFILE = "steploop-slow"

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

settings.register_profile(
    CI_PROFILE,
    deadline=None,
    max_examples=200,
    stateful_step_count=50,
    suppress_health_check=_QUIET,
)
settings.register_profile(
    SLOW_PROFILE,
    deadline=None,
    max_examples=2_000,
    stateful_step_count=200,
    suppress_health_check=_QUIET,
)


def ci_settings() -> settings:
    """The ``steploop-ci`` profile as a settings object (``@ci_settings()`` or ``.settings``)."""
    return settings.get_profile(CI_PROFILE)


def slow_settings() -> settings:
    """The ``steploop-slow`` profile as a settings object."""
    return settings.get_profile(SLOW_PROFILE)


WINDOWS = (40_000, 60_000, 100_000, 200_000)


@st.composite
def configs(
    draw: st.DrawFn,
    profiles: tuple[str, ...] = tuple(PROFILES),
    *,
    toggle_gates: bool = True,
    toggle_compat: bool = True,
    small_windows: bool = True,
    toggle_legacy: bool = False,
) -> LoopConfig:
    """A profile with random gate and compatibility-flag toggles, small context windows and
    small limits (so breakers, caps and max_turns are reached in a few steps); with
    ``toggle_legacy``, the behaviours of earlier Claude Code versions too (the ``legacy``
    group, specs/ VER-*)."""
    base = PROFILES[draw(st.sampled_from(profiles))]()
    changes: dict[str, Any] = {}
    if toggle_gates:  # each gate flipped or not; shrinks towards the profile itself
        gates = base.gates
        flips = {
            f.name: not getattr(gates, f.name) for f in attrs.fields(Gates) if draw(st.booleans())
        }
        changes["gates"] = attrs.evolve(gates, **flips)
    if toggle_compat:
        compat = base.compat
        flips = {
            f.name: not getattr(compat, f.name) for f in attrs.fields(Compat) if draw(st.booleans())
        }
        changes["compat"] = attrs.evolve(compat, **flips)
    if toggle_legacy:
        legacy = base.legacy
        changes["legacy"] = attrs.evolve(
            legacy,
            stop_hooks_after_api_error=draw(st.booleans()),
            no_stop_hook_summary=draw(st.booleans()),
            api_errors_1_0=draw(st.booleans()),
            context_count=draw(
                st.sampled_from(("estimate_from_first", "estimate_from_last", "last_usage"))
            ),
        )
    if small_windows:
        changes["context_window"] = draw(st.sampled_from(WINDOWS))
    changes["max_turns"] = draw(st.none() | st.integers(1, 4))
    changes["stop_hook_block_cap"] = draw(st.sampled_from((base.stop_hook_block_cap, None, 1, 2)))
    changes["max_autocompact_failures"] = draw(st.integers(1, 3))
    changes["mot_recovery_limit"] = draw(st.integers(0, 3))
    changes["fallback_model"] = draw(st.sampled_from((None, "claude-haiku-4-5")))
    changes["autocompact_breaker_scope"] = draw(st.sampled_from(("turn", "session")))
    changes["retry"] = attrs.evolve(
        base.retry,
        max_retries=draw(st.integers(0, 3)),
        max_consecutive_529=draw(st.integers(1, 3)),
    )
    return attrs.evolve(base, **changes)


def requests(budgets: bool = True) -> st.SearchStrategy[Request]:
    """A user turn: a short prompt and, sometimes, a token budget or a task budget."""
    prompt = st.sampled_from(("Fix the failing test", "Refactor the parser", "go"))
    if not budgets:
        return st.builds(Request, prompt=prompt)
    return st.builds(
        Request,
        prompt=prompt,
        token_budget=st.none() | st.sampled_from((500, 2_000, 20_000)),
        task_budget=st.none() | st.just(50_000),
    )


def worlds() -> st.SearchStrategy[World]:
    """Alphabets from the deep one to the full one (with hook stops)."""
    return st.builds(
        World,
        max_tools=st.integers(1, 3),
        tool_outcomes=st.sampled_from((("ok",), ("ok", "error"), ("ok", "error", "hook_stop"))),
        output_tokens=st.sampled_from((50, 400, 3_000)),
    )


def moves_for(
    state: LoopState, config: LoopConfig, world: World | None = None
) -> st.SearchStrategy[Move]:
    """One of the world's answers legal in ``state`` (a short event sequence).

    Raises:
        ValueError: the state is done (no event is legal after Finish).
    """
    legal = moves(state, config, world)
    if not legal:
        raise ValueError("no event is legal once the turn is done")
    return st.sampled_from(legal)


def events_for(
    state: LoopState, config: LoopConfig, world: World | None = None
) -> st.SearchStrategy[Event]:
    """One event ``step(state, event, config)`` accepts: the first event of a legal move.

    Raises:
        ValueError: the state is done (no event is legal after Finish).
    """
    legal = moves(state, config, world)
    if not legal:
        raise ValueError("no event is legal once the turn is done")
    firsts: list[Event] = []
    for m in legal:
        if m.events[0] not in firsts:
            firsts.append(m.events[0])
    return st.sampled_from(firsts)
