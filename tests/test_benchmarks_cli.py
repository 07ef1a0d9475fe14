"""The benchmark runner's command line: where results go (benchmarks/__main__.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import benchmarks.__main__ as bench


def test_only_full_runs_are_latest() -> None:
    every = list(bench.ITEMS)
    assert bench.results_name(every, quick=False) == "latest"
    assert bench.results_name(list(reversed(every)), quick=False) == "latest"
    assert bench.results_name(every, quick=True) == "partial"
    assert bench.results_name(["1", "4"], quick=False) == "partial"


def _fake(quick: bool) -> dict[str, Any]:
    return {"available": False, "reason": "not measured in this test"}


def test_a_partial_run_leaves_the_full_results_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(bench.RUNNERS, "streaming_tools", _fake)
    (tmp_path / "latest.json").write_text('{"full": true}\n')
    assert bench.main(["--only", "4", "--out", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "latest.json").read_text()) == {"full": True}
    partial = json.loads((tmp_path / "partial.json").read_text())
    assert list(partial["items"]) == ["4_streaming_tools"]
    assert (tmp_path / "partial.md").read_text().strip()


def test_name_picks_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bench.RUNNERS, "streaming_tools", _fake)
    assert bench.main(["--only", "4", "--out", str(tmp_path), "--name", "mine"]) == 0
    assert (tmp_path / "mine.json").exists() and (tmp_path / "mine.md").exists()


@pytest.mark.parametrize("bad", ["../escape", ".hidden", "a/b", ""])
def test_a_bad_name_is_refused(
    bad: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--only", "4", "--out", str(tmp_path), "--name", bad])
    assert exc.value.code == 2
    assert "--name must be a plain file name" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_an_unknown_item_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench.main(["--only", "99"])
    assert exc.value.code == 2
    assert "unknown item(s) 99" in capsys.readouterr().err
