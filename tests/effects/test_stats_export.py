"""``steploop stats --format parquet|csv|json OUT``: one row per turn and one per round, with
the documented columns and types, readable without steploop (STATS-1)."""

from __future__ import annotations

import contextlib
import io
import math
import re
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.cli import main
from steploop.effects.corpus import map_corpus
from steploop.effects.stats_export import ROUNDS, TURNS, export_task, turn_rows
from steploop.effects.trace import record_driver
from steploop.reducer import Request, default
from tests.support.viewer import synthetic_trace

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "specs" / "scenarios"
pd: Any = pytest.importorskip("pandas")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three golden traces, a compacting one, an imported one that diverged, a bad one."""
    d = tmp_path_factory.mktemp("corpus")
    for name in ("next_turn", "stop_hook_blocking", "model_error"):
        (d / f"{name}.jsonl").write_bytes((SCENARIOS / f"{name}.jsonl").read_bytes())
    synthetic_trace(d / "grown.jsonl", 14, growing=True, overrides={"context_window": 30_000})
    prov = {
        "created_at": "2026-01-01T00:00:00Z",
        "client": None,
        "session_id": "s-1",
        "turn": 3,
        "claude_code_version": "2.1.88",
        "reproduced": False,
        "cause": "auto-compact-timing",
        "divergence": "step 12: the machine compacts a round later",
    }
    record_driver(d / "imported.jsonl", default(), Request(prompt="hi"), lambda e, s: [], provenance=prov)
    (d / "broken.jsonl").write_text("not json\n")
    return d


def _export(corpus: Path, fmt: str, out: Path) -> str:
    text, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["stats", str(corpus), "--jobs", "1", "--format", fmt, str(out)], out=text)
    assert code == 0, err.getvalue()
    assert "broken.jsonl" in err.getvalue() and "(skipped)" in err.getvalue()
    return text.getvalue()


def _same(a: Any, b: Any) -> bool:
    missing = a is None or (isinstance(a, float) and math.isnan(a)) or a is pd.NA
    return (b is None) if missing else a == b


@pytest.mark.spec("STATS-1")
def test_parquet_round_trips_through_pandas_with_the_documented_columns(corpus: Path, tmp_path: Path) -> None:
    """turns.parquet and rounds.parquet: the documented columns, in order, with their Arrow
    types and nullability; pandas reads back exactly the rows steploop made."""
    pq: Any = pytest.importorskip("pyarrow.parquet")
    shown = _export(corpus, "parquet", tmp_path / "out")
    assert "wrote " in shown and "turns.parquet (5 rows)" in shown
    arrow = {"int": "int64", "str": "string", "bool": "bool"}
    nullable = {"int": "Int64", "str": "string", "bool": "boolean"}
    for name, columns in (("turns", TURNS), ("rounds", ROUNDS)):
        path = tmp_path / "out" / f"{name}.parquet"
        schema = pq.read_schema(path)
        assert [(f.name, str(f.type), f.nullable) for f in schema] == [
            (c, arrow[t.rstrip("?")], t.endswith("?")) for c, t, _ in columns
        ]
        frame = pd.read_parquet(path, dtype_backend="numpy_nullable")
        assert list(frame.columns) == [c for c, _, _ in columns]
        assert [str(frame[c].dtype) for c, _, _ in columns] == [nullable[t.rstrip("?")] for _, t, _ in columns]
    turns = pd.read_parquet(tmp_path / "out" / "turns.parquet")
    rounds = pd.read_parquet(tmp_path / "out" / "rounds.parquet")
    expected = {p.name: turn_rows(str(p)) for p in sorted(corpus.glob("*.jsonl")) if p.name != "broken.jsonl"}
    assert [Path(t).name for t in turns["trace"]] == list(expected)
    for k, (turn, rows) in enumerate(expected.values()):
        got = turns.iloc[k]
        assert all(_same(got[c], turn[c]) for c, _, _ in TURNS), turn["trace"]
        mine = rounds[rounds["trace"] == turn["trace"]]
        assert len(mine) == len(rows) == turn["rounds"]
        for (_, g), row in zip(mine.iterrows(), rows, strict=True):
            assert all(_same(g[c], row[c]) for c, _, _ in ROUNDS)


@pytest.mark.spec("STATS-1")
def test_the_rows_say_what_happened(corpus: Path) -> None:
    """A golden trace's transitions and rules; the compacting run's compaction points against
    its threshold and the snip before them; the importer's verdict and cause."""
    turn, rounds = turn_rows(str(corpus / "stop_hook_blocking.jsonl"))
    assert turn["terminal"] == "completed" and turn["n_stop_hook_blocking"] == 1 and turn["hook_blocks"] >= 1
    assert [r["transition"] for r in rounds] == ["stop_hook_blocking", "completed"]
    assert rounds[0]["rules"].startswith("C-BLOCKING-1") and turn["replays_exactly"] is True
    turn, rounds = turn_rows(str(corpus / "grown.jsonl"))
    points = [r for r in rounds if r["compactions"]]
    assert [r["round"] for r in points] == list(range(10, 16))
    assert all(r["compacted_at"] >= r["autocompact_threshold"] for r in points)
    assert turn["removed_snip"] > 0 and turn["removed_compaction"] == sum(r["removed_compaction"] for r in rounds) > 0
    turn, _ = turn_rows(str(corpus / "imported.jsonl"))
    assert (turn["session_id"], turn["turn"], turn["claude_code_version"]) == ("s-1", 3, "2.1.88")
    assert (turn["reproduced"], turn["divergence_cause"]) == (False, "auto-compact-timing")
    turn, _ = turn_rows(str(SCENARIOS / "next_turn.jsonl"))
    assert turn["reproduced"] is None and turn["divergence_cause"] is None


@pytest.mark.spec("STATS-1")
@pytest.mark.parametrize(("fmt", "read"), [("csv", "read_csv"), ("json", "read_json")])
def test_csv_and_json_lines_hold_the_same_rows(corpus: Path, tmp_path: Path, fmt: str, read: str) -> None:
    """CSV (a header row, empty for null) and JSON Lines: the same columns and row counts."""
    _export(corpus, fmt, tmp_path / "out")
    suffix = {"csv": "csv", "json": "jsonl"}[fmt]
    kw = {"lines": True} if fmt == "json" else {}
    turns = getattr(pd, read)(tmp_path / "out" / f"turns.{suffix}", **kw)
    rounds = getattr(pd, read)(tmp_path / "out" / f"rounds.{suffix}", **kw)
    assert list(turns.columns) == [c for c, _, _ in TURNS] and len(turns) == 5
    assert list(rounds.columns) == [c for c, _, _ in ROUNDS] and len(rounds) == int(turns["rounds"].sum())


def test_workers_return_the_rows(corpus: Path) -> None:
    """The rows travel back from worker processes whole, in the order given."""
    paths = [str(p) for p in sorted(corpus.glob("*.jsonl")) if p.name != "broken.jsonl"]
    outcomes = map_corpus(paths, export_task, jobs=2)
    assert [o.rows for o in outcomes] == [export_task(p).rows for p in paths]


def test_parquet_without_pyarrow_and_a_bad_format_are_one_line(
    corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No pyarrow: one line naming the extra, exit 2, nothing written; an unknown format too."""
    import importlib

    real = importlib.import_module

    def without(name: str, *a: Any) -> Any:
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a)

    monkeypatch.setattr(importlib, "import_module", without)
    for fmt, said in (("parquet", "steploop[parquet]"), ("xlsx", "expected one of parquet, csv, json")):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["stats", str(corpus / "next_turn.jsonl"), "--format", fmt, str(tmp_path / fmt)], out=io.StringIO())
        assert code == 2 and said in err.getvalue() and err.getvalue().count("\n") == 1, err.getvalue()
        assert not (tmp_path / fmt).exists()


def test_every_column_is_documented() -> None:
    """docs/viewer.md names every column of both tables."""
    doc = (ROOT / "docs" / "viewer.md").read_text("utf-8")
    named = set(re.findall(r"`([a-z_0-9]+)`", doc))
    assert {c for c, _, _ in (*TURNS, *ROUNDS)} <= named


def test_the_recipe_runs(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """docs/recipes/compaction-points.md's script runs on an exported corpus and finds its
    compactions."""
    pytest.importorskip("pyarrow")
    _export(corpus, "parquet", tmp_path / "tables")
    capsys.readouterr()
    text = (ROOT / "docs" / "recipes" / "compaction-points.md").read_text("utf-8")
    code = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "compaction-points.md", "exec"), {"__name__": "recipe"})
    out = capsys.readouterr().out
    assert out.startswith("6 compaction(s) in 1 trace(s) of 5") and "grown.jsonl" in out
