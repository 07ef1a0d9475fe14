"""`scripts/mutation.py --report --json FILE` (issue 27 item 19): a report of nothing is one line
and exit 2, never a "kill rate 100.0%" of 0 mutants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support import mutation as mu


@pytest.mark.parametrize(("content", "why"), [(None, "no such file"), ("", "no outcome of these mutants")])
def test_a_report_of_nothing_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, why: str
) -> None:
    """A missing or empty outcomes file: one line naming it and why, exit 2, no kill rate."""
    path = tmp_path / "mutation.jsonl"
    if content is not None:
        path.write_text(content)
    assert mu.main(["--full", "--report", "--json", str(path)]) == 2
    out = capsys.readouterr().out
    assert out == f"mutation: --report: {path}: {why} (write it with --full --json FILE)\n"


def test_a_report_of_some_outcomes_sums_them_up(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """One recorded outcome: the summary says 1 of N have one and its kill rate (exit 1: not
    complete)."""
    first = mu.generate()[0]
    path = tmp_path / "mutation.jsonl"
    path.write_text(json.dumps(mu.as_record(mu.Outcome(first, "killed", "t", 0.1, 1), {})) + "\n")
    assert mu.main(["--full", "--report", "--json", str(path)]) == 1
    out = capsys.readouterr().out
    assert "1 of the " in out and "kill rate 100.0% of non-equivalent mutants" in out and "mutants 1: killed 1" in out
