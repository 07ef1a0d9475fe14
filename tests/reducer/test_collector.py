"""R-COST-4: the cycle collector is paused over explorations and replays, swept at a bound,
and given back as it was; what those loops build is reclaimed without it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.replay_throughput import build_synthetic
from steploop.effects.trace import replay_counterfactual, replay_exact
from steploop.reducer import collector, default, fastpaths
from steploop.reducer.explore import ExploreProgress, explore

pytestmark = pytest.mark.spec("R-COST-4")

SCENARIOS = Path(__file__).resolve().parents[2] / "specs" / "scenarios"


@pytest.fixture(autouse=True)
def paused_collector_on() -> Iterator[None]:
    """The fast path on for these tests (the suite may run with every fast path off,
    STEPLOOP_NO_FAST_PATHS=1), as it was after."""
    with fastpaths.off("paused_collector"):
        fastpaths.enable("paused_collector")
        yield


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The generation of every collection that starts while the test runs."""
    seen: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.collect()
    gc.callbacks.append(callback)
    try:
        yield seen
    finally:
        gc.callbacks.remove(callback)


def test_an_exploration_runs_with_the_collector_paused(collections: list[int]) -> None:
    explore(default(), rounds=1, max_states=1_500)
    paused = list(collections)
    collections.clear()
    with fastpaths.off("paused_collector"):  # the twin: the collector keeps its own pace
        explore(default(), rounds=1, max_states=1_500)
    assert len(collections) > 20 and max(collections) >= 1  # the same work collects often
    # paused: only the sweeps, of the youngest generation, one per SWEEP_AT objects piled up
    assert all(g == 0 for g in paused)
    assert len(paused) <= 3
    assert gc.isenabled()


class _Stop(Exception):
    pass


def test_the_collector_is_given_back_as_it_was() -> None:
    def stop(p: ExploreProgress) -> None:
        assert not gc.isenabled()
        raise _Stop

    with pytest.raises(_Stop):
        explore(default(), rounds=1, on_progress=stop)
    assert gc.isenabled()  # given back when the search raises
    gc.disable()
    try:
        explore(default(), rounds=1, max_states=50)
        assert not gc.isenabled()  # a caller's pause is not ended by ours
        with collector.paused():
            with collector.paused():
                pass
            assert not gc.isenabled()
    finally:
        gc.enable()
    with collector.paused():
        with collector.paused():
            pass
        assert not gc.isenabled()  # an inner pause leaves the outer one in force
    assert gc.isenabled()


def test_a_sweep_collects_young_cycles_once_enough_piled_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Node:
        other: object = None

    def cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    with collector.paused():
        gc.collect()
        dead = cycle()
        monkeypatch.setattr(collector, "SWEEP_AT", 10**9)
        collector.sweep()
        assert dead() is not None  # below the bound: nothing is collected
        monkeypatch.setattr(collector, "SWEEP_AT", 0)
        collector.sweep()
        assert dead() is None
    dead = cycle()
    gc.collect()
    assert dead() is None
    gc.disable()
    try:  # a collector turned off by someone else: still swept
        dead = cycle()
        collector.sweep()
        assert dead() is None
    finally:
        gc.enable()
    with fastpaths.off("paused_collector"), collector.paused():
        assert gc.isenabled()  # the twin leaves it as it is


def test_the_replays_run_with_the_collector_paused() -> None:
    states: list[bool] = []
    report = replay_exact(
        SCENARIOS / "walkthrough.jsonl", on_step=lambda r: states.append(gc.isenabled())
    )
    assert report.ok and states and not any(states)
    assert gc.isenabled()
    seen: list[bool] = []
    cf = replay_counterfactual(
        SCENARIOS / "walkthrough.jsonl",
        {"max_turns": 1_000},
        progress=lambda p: seen.append(gc.isenabled()),
        progress_every=1,
    )
    assert cf.status == "finished" and seen and not any(seen)
    assert gc.isenabled()


def test_explorations_and_replays_make_no_cyclic_garbage(tmp_path: Path) -> None:
    """Why pausing is safe: while they run, what an exploration and a replay build and drop is
    reclaimed by reference counting. A full collection now and then during the work (after
    the first, which finds what starting up left) finds nothing; the explored graph and the
    replay's reader are let go as a whole at the end, when the collector is back."""
    found: list[int] = []

    def collect(*_: object) -> None:
        found.append(gc.collect())

    gc.collect()
    explore(default(), rounds=1, max_states=3_000, on_progress=collect, progress_every=200)
    assert len(found) > 10 and sum(found[1:]) == 0
    trace = tmp_path / "synthetic.jsonl"
    build_synthetic(trace, 3_000)
    found.clear()
    steps = [0]

    def every_100(_: object) -> None:
        steps[0] += 1
        if steps[0] % 100 == 0:
            collect()

    assert replay_exact(trace, on_step=every_100).ok
    assert len(found) > 10 and sum(found[1:]) == 0
    found.clear()
    cf = replay_counterfactual(trace, {"max_turns": 10**6}, progress=collect, progress_every=100)
    assert cf.status in ("finished", "stalled") and len(found) > 10 and sum(found[1:]) == 0
