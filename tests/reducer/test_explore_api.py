"""The explorer's alphabet for the API's own stop reasons and failures (specs/invariants.md
ABS-1..3, INV-6, INV-17): ``pause_turn`` (S-PAUSE-1), ``refusal`` (R-REFUSAL-1) and the context
overflow (R-OVERFLOW-1).

The CI-bound reports are the ones test_explore.py computes (cached per process).
"""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import LoopConfig, claude_code_2_1_88, default
from steploop.reducer.effects import CallModel, Emit, Finish, RunStopHooks
from steploop.reducer.events import ModelResponseEnded
from steploop.reducer.explore import (
    DEEP_WORLD,
    DEFAULT_REQUEST,
    Abstraction,
    NoHooksAfterApiError,
    Observation,
    PauseResumesBounded,
    World,
    catalogue,
    check_step,
    initial_monitors,
    moves,
)
from steploop.reducer.machine import advance, begin
from steploop.reducer.messages import AssistantMessage
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import Completed
from tests.reducer.test_explore import cc_report, ci_report

Step = tuple[LoopState, Any, tuple[Any, ...], LoopState, Any]


def play(cfg: LoopConfig, labels: list[str], world: World | None = None) -> list[Step]:
    """Play moves by label from the start; every step ``(state, event, effects, next, passed)``."""
    s, _, _ = begin(DEFAULT_REQUEST, cfg, None)
    out: list[Step] = []
    for lab in labels:
        offered = {m.label: m for m in moves(s, cfg, world)}
        assert lab in offered, (lab, sorted(offered))
        for ev in offered[lab].events:
            nxt, fx, passed = advance(s, ev, cfg)
            out.append((s, ev, fx, nxt, passed))
            s = nxt
    return out


def labels_at(cfg: LoopConfig, path: list[str], world: World | None = None) -> set[str]:
    """The labels ``world`` offers after ``path`` (played with the full alphabet)."""
    steps = play(cfg, path)
    s = steps[-1][3] if steps else begin(DEFAULT_REQUEST, cfg, None)[0]
    return {m.label for m in moves(s, cfg, world)}


# --- ABS-2: the new answers -------------------------------------------------------------------


@pytest.mark.spec("ABS-2", "S-PAUSE-1", "R-REFUSAL-1", "R-OVERFLOW-1")
def test_the_alphabet_answers_a_call_with_pauses_refusals_and_overflows() -> None:
    cfg = default()
    first = labels_at(cfg, [])
    assert {"pause:low", "pause:mid", "refusal"} <= first  # (high shares mid's band here)
    assert {"fail:context_overflow", "fail:context_overflow_full"} <= first
    assert "end_tools:refusal" in labels_at(cfg, ["tool:safe"])
    # the deep tier: no refusal, no overflow, and a pause only inside a run of resumed pauses
    deep = labels_at(cfg, [], DEEP_WORLD)
    assert not {lab for lab in deep if lab.startswith(("pause", "refusal", "fail:context"))}
    assert "pause:low" in labels_at(cfg, ["pause:low"], DEEP_WORLD)
    assert "pause:mid" not in labels_at(cfg, ["pause:low"], DEEP_WORLD)


@pytest.mark.spec("ABS-2", "S-PAUSE-1")
def test_a_pause_is_resumed_then_capped_by_the_default_profile() -> None:
    """Five pauses are resumed with a call each and no stop hooks; the sixth runs the hooks."""
    cfg = default()
    cap = cfg.pause_turn_resumes
    steps = play(cfg, ["pause:low"] * (cap + 1))
    ends = [st for st in steps if isinstance(st[1], ModelResponseEnded)]
    assert len(ends) == cap + 1
    for _, _, fx, _, passed in ends[:cap]:
        assert any(isinstance(e, CallModel) for e in fx) and passed == ()
        assert not any(isinstance(e, RunStopHooks) for e in fx)
    assert any(isinstance(e, RunStopHooks) for e in ends[-1][2])


@pytest.mark.spec("ABS-2", "R-REFUSAL-1", "INV-6")
def test_a_refusal_ends_the_turn_and_one_beside_a_tool_call_runs_it() -> None:
    cfg = default()
    steps = play(cfg, ["refusal"])
    s, _, fx, nxt, _ = steps[-1]
    errors = [e.item for e in fx if isinstance(e, Emit) and isinstance(e.item, AssistantMessage)]
    assert [m.api_error.kind for m in errors if m.api_error] == ["refusal"]
    assert nxt.phase == "done" and nxt.transition == Completed()
    assert not any(isinstance(e, RunStopHooks) for e in fx)
    # beside a complete tool call the error is emitted and the turn goes on to run the call;
    # INV-6 allows exactly that (R-REFUSAL-1) and nothing else
    steps = play(cfg, ["tool:safe", "end_tools:refusal"])
    s, ev, fx, nxt, passed = steps[-1]
    assert nxt.phase == "running_tools"
    o = Observation(cfg, s, ev, fx, nxt, passed)
    assert o.api_errors and o.terminal is None
    assert NoHooksAfterApiError().check(None, o)[2] is None
    # the same step without the tool slots is a violation (an error the turn went on after)
    bare = Observation(cfg, steps[0][0], ev, fx, nxt, passed)
    assert NoHooksAfterApiError().check(None, bare)[2] is not None


@pytest.mark.spec("ABS-2", "R-OVERFLOW-1")
def test_an_overflow_with_room_is_retried_lower_and_one_without_room_stands() -> None:
    cfg = default()
    (st,) = play(cfg, ["fail:context_overflow"])
    (call,) = [e for e in st[2] if isinstance(e, CallModel)]
    # the API said A + B > C by one token: the retry asks for B - 1 - the safety buffer
    assert call.max_tokens == cfg.default_max_tokens - 1 - cfg.overflow_safety_buffer
    assert st[3].round.retry_attempt == 1
    (st,) = play(cfg, ["fail:context_overflow_full"])
    assert st[3].phase == "done"
    errors = [e.item for e in st[2] if isinstance(e, Emit) and isinstance(e.item, AssistantMessage)]
    assert [m.api_error.kind for m in errors if m.api_error] == ["invalid_request"]
    assert any(isinstance(e, Finish) for e in st[2])


# --- ABS-1: the key counts resumes -------------------------------------------------------------


@pytest.mark.spec("ABS-1", "S-PAUSE-1")
def test_the_key_tells_resumes_in_a_row_apart() -> None:
    """Each resume up to the cap is its own key (else the cap would be merged away), and one
    bucket past it."""
    cfg = default()
    absn = Abstraction(cfg)
    keys = [absn.key(st[3]) for st in play(cfg, ["pause:low"] * cfg.pause_turn_resumes)[1::2]]
    assert len(set(keys)) == cfg.pause_turn_resumes


# --- INV-17 ------------------------------------------------------------------------------------


def _pause_observations(machine: LoopConfig, checked: LoopConfig, n: int) -> list[Any]:
    """INV-17's verdicts, under ``checked``, on ``n`` pauses played by a machine with ``machine``."""
    inv = PauseResumesBounded()
    mon = inv.initial(checked, DEFAULT_REQUEST, None)
    out = []
    for s, ev, fx, nxt, passed in play(machine, ["pause:low"] * n):
        mon, ex, bad = inv.check(mon, Observation(checked, s, ev, fx, nxt, passed))
        out.append((ex, bad))
    return out


@pytest.mark.spec("INV-17")
def test_inv17_fires_on_a_machine_that_resumes_one_pause_too_many() -> None:
    cfg = default()
    cap = cfg.pause_turn_resumes
    loose = cfg.with_overrides({"pause_turn_resumes": cap + 1})
    verdicts = _pause_observations(loose, cfg, cap + 2)
    bads = [bad for _, bad in verdicts if bad is not None]
    assert len(bads) == 1 and f"paused response {cap + 1} in a row was resumed" in bads[0]
    # done right: the same pauses under the real cap hold, and the capped one exercises it
    verdicts = _pause_observations(cfg, cfg, cap + 1)
    assert all(bad is None for _, bad in verdicts)
    assert [ex for ex, _ in verdicts if ex] == [True]


@pytest.mark.spec("INV-17", "S-PAUSE-1")
def test_inv17_under_the_reference_every_pause_ends_the_turn() -> None:
    cfg = claude_code_2_1_88()
    assert cfg.pause_turn_resumes == 0
    invs = catalogue()
    s, fx, passed = begin(DEFAULT_REQUEST, cfg, None)
    mons, _, _ = check_step(
        invs,
        initial_monitors(invs, cfg, DEFAULT_REQUEST),
        Observation(cfg, None, None, fx, s, passed),
    )
    for s, ev, fx, nxt, passed in play(cfg, ["pause:low"]):
        mons, exs, bads = check_step(invs, mons, Observation(cfg, s, ev, fx, nxt, passed))
        assert all(b is None for b in bads)
    assert exs[[i.id for i in invs].index("INV-17")]
    assert any(isinstance(e, RunStopHooks) for e in fx)


@pytest.mark.spec("INV-17", "ABS-3")
def test_inv17_holds_and_is_exercised_in_the_ci_runs() -> None:
    rep, _ = ci_report()
    r = rep.result("INV-17")
    assert r.status == "held" and r.exercised > 0
    r = cc_report().result("INV-17")
    assert r.status == "held" and r.exercised > 0
