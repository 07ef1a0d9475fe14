"""Item 3's measurements on a small trace (benchmarks/replay_throughput.py): what they report
is what they measured, and a replay that fails is an error, never a figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import replay_throughput as rt


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("replay") / "small.jsonl"
    rt.build_synthetic(path, 200)
    return path


def test_the_child_replays_the_whole_trace_and_reports_its_peak(trace: Path) -> None:
    out = rt.replay_in_child(trace)
    assert out["steps"] == 201
    assert out["messages"] > 0 and out["events_per_s"] > 0 and out["elapsed_s"] > 0
    assert out["source"] in ("VmHWM", "ru_maxrss")
    assert 0 < out["baseline_kib"] <= out["peak_kib"]


def test_a_trace_that_does_not_replay_is_an_error(trace: Path, tmp_path: Path) -> None:
    lines = trace.read_text().splitlines(keepends=True)
    k = next(i for i, line in enumerate(lines) if '"record":"step"' in line and '"i":5,' in line)
    rec = json.loads(lines[k])
    rec["digest"] = "0" * 32  # a recorded state digest the replay cannot reproduce
    lines[k] = json.dumps(rec) + "\n"
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(lines))
    with pytest.raises(RuntimeError, match="the replay child failed"):
        rt.replay_in_child(bad)
    with pytest.raises(RuntimeError, match=r"the profile child failed.*does not replay exactly"):
        rt.profile_in_child(bad)


def test_breakdown_times_each_part_on_the_same_events(trace: Path) -> None:
    out = rt.breakdown(trace, reps=2)
    assert out["events"] == 200 and out["reps"] == 2
    us = out["us_per_event"]
    assert set(us) == {"read", "step", "replay_every", "replay_checkpoint"}
    assert all(v > 0 for v in us.values())
    # a whole replay reads and steps every event, so it cannot cost less than step() alone
    assert us["replay_every"] > us["step"] and us["replay_checkpoint"] > us["step"]
    assert out["step_ceiling_events_per_s"] == round(1e6 / us["step"])
    assert out["events_per_s"]["every"] == round(1e6 / us["replay_every"])


def test_the_breakdown_child_reports_the_same_parts(trace: Path) -> None:
    out = rt.breakdown_in_child(trace, reps=1)
    assert out["events"] == 200 and out["reps"] == 1
    assert set(out["us_per_event"]) == {"read", "step", "replay_every", "replay_checkpoint"}


def test_the_profile_child_profiles_a_replay(trace: Path) -> None:
    out = rt.profile_in_child(trace)
    assert out["total_s"] > 0
    names = [row["function"] for row in out["top_by_tottime"]]
    assert any("trace/" in n or "machine/" in n or "_replace.py" in n for n in names)
    assert 0 < out["cumulative_share_pct"]["steploop/reducer/machine/table.py:advance"] < 100


def test_measure_size_reports_every_memory_figure(tmp_path: Path) -> None:
    out = rt.measure_size(300, tmp_path, memory=True)
    assert out["events"] == 300
    assert out["peak_rss_mb"] >= out["rss_baseline_mb"] > 0
    assert out["peak_replay_mb"] > 0
    assert "breakdown" not in out
    assert not (tmp_path / "synthetic-300.jsonl").exists()
