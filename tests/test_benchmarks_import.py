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
