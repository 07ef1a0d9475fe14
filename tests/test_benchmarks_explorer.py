"""Item 6 (benchmarks/external.py, the explorer): the measurement on a small cut, and its rows
against the issue-24 goals in the report."""

from __future__ import annotations

from typing import Any

from benchmarks import external
from benchmarks.report import markdown

MACHINE = {
    "date_utc": "now",
    "cpu": "cpu",
    "cores": 2,
    "platform": "p",
    "python": "py",
    "loadavg_1_5_15": None,
}


def test_the_item_measures_cpu_time_and_two_processes_with_the_same_counts(
    monkeypatch: Any,
) -> None:
    """A quick run (cut at 5,000 states, here at 600): states per CPU second against the goal,
    and two worker processes reaching the same counts; the report's rows judge the goals."""
    real = external._takes
    import steploop.reducer.explore as explore_package

    full = explore_package.explore

    def small(config: Any, **kw: Any) -> Any:
        return full(config, **{**kw, "max_states": 600})

    monkeypatch.setattr(explore_package, "explore", small)
    monkeypatch.setattr(external, "_takes", lambda fn, *names: real(full, *names))
    out = external.explorer(True)
    r = out["results"]
    assert r["states"] >= 600 and r["cpu_s"] > 0 and r["states_per_cpu_s"] > 0
    assert r["goal_states_per_cpu_s"] == 28_000 and isinstance(r["goal_met"], bool)
    assert r["two_processes"]["same_counts"] is True
    assert "check_process" not in r  # the whole-process run is the full suite's
    r["check_process"] = {
        "exit_status": 0,
        "elapsed_s": 9.5,
        "cpu_s": 9.1,
        "goal_s": 4.0,
        "goal_met": False,
        "help_elapsed_s": 0.6,
        "help_cpu_s": 0.5,
        "import_elapsed_s": 0.4,
        "import_cpu_s": 0.4,
    }
    text = markdown(
        {"machine": MACHINE, "command": "test", "quick": True, "items": {"6_explorer": out}}
    )
    assert "## 6. Explorer throughput at the CI bound" in text
    assert "| two worker processes (CPU: all processes; same counts: True)" in text
    assert "states/s (CPU) | ≥ 28,000: missed |" in text
    assert (
        "| `steploop check` at the CI bound, whole process | 9.5 s (9.1 s CPU) | ≤ 4.0 s: missed |"
        in text
    )
