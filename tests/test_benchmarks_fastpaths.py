"""The fast-path and step-cost benchmarks on tiny workloads (benchmarks/fastpaths.py,
benchmarks/step_cost.py): every variant is measured, the switch is back as it was, and the
step profile accounts for every event."""

from __future__ import annotations

from pathlib import Path

from benchmarks import fastpaths as fp
from benchmarks import step_cost
from benchmarks.replay_throughput import build_synthetic
from steploop.reducer import fastpaths


def test_every_registered_path_of_items_2_and_3_is_measured_and_the_switch_is_restored() -> None:
    """Each item's paths are registered; each is measured off alone and all together, against
    all on; afterwards every path is as it was."""
    before = [fastpaths.on(n) for n in fastpaths.names()]
    for paths in fp.ITEM_PATHS.values():
        assert set(paths) <= set(fastpaths.names())
    out = fp.run_benchmark(events=200, reps=2, rounds=3, turns=5)
    for item in ("1", "2", "3"):
        got = out[f"item_{item}"]
        want = {"all on", "all off", *(f"{p} off" for p in fp.ITEM_PATHS[item])}
        assert set(got) == want
        assert got["all on"]["off_over_on"] is None
        assert all(v["us"]["n"] == 2 and v["us"]["median"] > 0 for v in got.values())
    assert [fastpaths.on(n) for n in fastpaths.names()] == before


def test_the_step_profile_counts_every_event_of_the_trace(tmp_path: Path) -> None:
    """Per event type the counts add up to the trace's events; the shares add up to 100%."""
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 300)
    out = step_cost.measure(path, reps=1)
    assert out["events"] == 300
    assert sum(v["events_per_pass"] for v in out["by_event_type"].values()) == 300
    assert abs(sum(out["profile_share_pct"].values()) - 100) < 1
