"""Item 8 (benchmarks/counterfactual.py) on small sessions: it re-runs the whole session from
the recording and reports what it measured."""

from __future__ import annotations

from benchmarks import counterfactual
from benchmarks.report import markdown


def test_the_item_measures_both_replays_at_every_size() -> None:
    out = counterfactual.measure((20, 40), reps=1)
    assert [s["rounds"] for s in out["sizes"]] == [20, 40]
    assert [s["events"] for s in out["sizes"]] == [5 * 20 + 3, 5 * 40 + 3]  # and the last call
    for s in out["sizes"]:
        assert s["exact_us_per_event"]["n"] == s["counterfactual_us_per_event"]["n"] == 1
        assert s["ratio"]["median"] > 0
    assert set(out["goals"]) == {"ratio", "flat"}
    assert all(isinstance(g["met"], bool) for g in out["goals"].values())
    report = {
        "machine": {
            "date_utc": "now",
            "cpu": "cpu",
            "cores": 1,
            "platform": "p",
            "python": "py",
            "loadavg_1_5_15": None,
        },
        "command": "test",
        "quick": True,
        "items": {"8_counterfactual": out},
    }
    assert "## 8. Counterfactual replay" in markdown(report)


def test_a_baseline_revision_runs_beside_the_two() -> None:
    """--baseline REV adds the counterfactual replay of REV's recorded world, interleaved, with
    its ratios to the exact replay and to today's."""
    out = counterfactual.measure((20,), reps=2, baseline_rev="HEAD")
    size = out["sizes"][0]
    assert size["baseline"]["rev"] == "HEAD"
    assert size["baseline"]["counterfactual_us_per_event"]["n"] == 2
    assert size["baseline"]["counterfactual_over_baseline"]["median"] > 0
    assert size["wall"]["ratio"]["n"] == 2
