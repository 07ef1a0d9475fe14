"""Item 10 (benchmarks/viewer_speed.py) on a small session: both commands on both traces, side
by side, and the report's table."""

from __future__ import annotations

from benchmarks import viewer_speed
from benchmarks.report import markdown


def test_the_item_measures_show_and_the_page_side_by_side() -> None:
    """In-process only (a fresh interpreter per command is the full run's): both traces, the
    ratio per repetition, both goals judged, and the Markdown section."""
    out = viewer_speed.measure(30, reps=1, commands=False, big=None)
    assert set(out["traces"]) == {"golden", "30_rounds"}
    assert out["traces"]["golden"]["steps"] == 14 and out["traces"]["30_rounds"]["steps"] == 5 * 30 + 4
    for t in out["traces"].values():
        assert t["in_process"]["ratio"]["n"] == 1 and t["in_process"]["ratio"]["median"] > 0
        assert t["page_bytes"] > 10_000
    assert set(out["goals"]) == {"golden", "long"}
    assert all(isinstance(g["met"], bool) for g in out["goals"].values())
    machine = {"date_utc": "now", "cpu": "cpu", "cores": 1, "platform": "p", "python": "py", "loadavg_1_5_15": None}
    text = markdown({"machine": machine, "command": "test", "quick": True, "items": {"10_viewer": out}})
    assert "## 10. show --html against text show" in text and "| golden | 14 |" in text
    assert "## 1. " not in text  # item 10 is not item 1
