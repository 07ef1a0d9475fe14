"""Item 7's workload (benchmarks/import_speed.py): a longer session is the same session again."""

from __future__ import annotations

from pathlib import Path

from benchmarks.import_speed import grow
from steploop.effects.importer.session import import_file

SMALL = Path(__file__).resolve().parent / "data" / "cc-transcripts" / "spotter" / "tool_heavy.jsonl"


def test_copies_are_one_thread_that_reproduces_like_the_original(tmp_path: Path) -> None:
    one = import_file(SMALL, None)
    lines = grow(SMALL, 3, tmp_path / "x3.jsonl")
    assert lines == 3 * 39 + 2 * 2  # the copies and, between them, a boundary and a summary
    three = import_file(tmp_path / "x3.jsonl", None)
    assert three.threads == 1 and len(three.turns) == 3 * len(one.turns)
    assert [t.reproduced for t in three.turns] == [t.reproduced for t in one.turns] * 3
    assert three.problems == []  # each boundary names the last record of the copy before it


def test_the_ratio_child_times_both_sides_on_the_same_files() -> None:
    """Item 7's ratio: per repetition one import and one plain read of the same files."""
    from benchmarks.import_speed import _child_ratio, plain_read

    assert plain_read([SMALL]) == 39
    res = _child_ratio(str(SMALL), 2)
    assert len(res["json_s"]) == len(res["import_s"]) == len(res["ratios"]) == 2
    assert res["lines"] == 39 and res["files"] == 1 and res["turns"] == 2
    assert res["bytes"] == SMALL.stat().st_size


def test_every_profiled_phase_names_code_that_runs() -> None:
    """The profile's phases name functions of the importer that exist and run (a renamed
    function would leave its phase at 0%), and the machine's share is counted apart."""
    from benchmarks.import_speed import _child_profile

    prof = _child_profile(str(SMALL))
    assert all(pct > 0 for pct in prof["phases_pct"].values()), prof["phases_pct"]
    assert 0 < prof["machine_step_pct"] < 100


def test_the_timed_phases_name_code_that_runs() -> None:
    """Item 7's CPU split: every phase's timer wraps a function the import calls."""
    from benchmarks.import_speed import _child_phases

    res = _child_phases(str(SMALL))
    assert set(res["phases_cpu_s"]) == {
        "read and index (first pass)",
        "chains and threads",
        "records: read again, convert, cut into turns",
        "driving the machine",
        "inside the machine's advance() (of driving)",
        "comparing",
        "the conversations turns start from",
        "writing traces",
        "the recorder's step records (of writing)",
        "the recorder's header (of writing)",
    }
    assert res["import_cpu_s"] >= res["phases_cpu_s"]["writing traces"] > 0
    import steploop.effects.importer.session as session

    put_back = getattr(session, "read_source")  # noqa: B009 (not exported by the module)
    assert put_back.__module__ == "steploop.effects.importer.source"  # the timers are removed
