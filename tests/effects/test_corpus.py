"""Corpus replay and stats (steploop/effects/corpus.py): the same tables and exit status in one process,
over local processes and on a Dask cluster (a LocalCluster on 127.0.0.1); a failing trace is
reported by name, never lost; progress over the whole corpus."""

from __future__ import annotations

import functools
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from steploop.effects.corpus import (
    CorpusError,
    TraceOutcome,
    collect,
    map_corpus,
    print_tables,
    replay_task,
    resolve_jobs,
    stats_task,
    summarize,
)
from steploop.effects.trace import VERSION, StepRecord, TraceReader
from steploop.effects.trace_cli import main as cli_main
from steploop.reducer.events import CompactionFinished, ModelResponseEnded

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "specs" / "scenarios").glob("*.jsonl"))
MALFORMED = ROOT / "tests" / "data" / "malformed_traces"


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    code = cli_main(argv, out)
    return code, out.getvalue(), capsys.readouterr().err


def _timeless(text: str) -> str:
    """The replay summary without its clock: steps in N s (N traces/s on WHERE)."""
    return re.sub(r" in [0-9.]+ s \([0-9,]+ traces/s on [^)]*\)", "", text)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every golden scenario twice (one per transition, 74 traces), one unreadable trace, and
    one whose recorded effects were edited (it reads, but does not replay exactly)."""
    d = tmp_path_factory.mktemp("corpus")
    for n in (1, 2):
        for p in SCENARIOS:
            shutil.copy(p, d / f"{n}-{p.name}")
    shutil.copy(MALFORMED / "newer_version.jsonl", d / "3-broken.jsonl")
    lines = (ROOT / "specs" / "scenarios" / "completed.jsonl").read_text().splitlines()
    for k, line in enumerate(lines):
        rec = json.loads(line)
        if rec["record"] == "step" and rec["effects"] and rec["i"] > 0:
            rec["effects"] = rec["effects"][:-1]
            lines[k] = json.dumps(rec)
            break
    (d / "3-edited.jsonl").write_text("\n".join(lines) + "\n")
    return d


def test_scenarios_are_a_corpus_of_every_transition() -> None:
    assert len(SCENARIOS) >= 18


def test_stats_over_processes_prints_the_tables_one_process_prints(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """stats with 2 workers: byte for byte the output of one process; the unreadable trace is
    a warning naming it; the counts are the sums of each trace's own."""
    one = cli(["stats", str(corpus), "--jobs", "1"], capsys)
    two = cli(["stats", str(corpus), "--jobs", "2", "--progress"], capsys)
    assert one[0] == two[0] == 0
    assert one[1] == two[1]
    assert f"{2 * len(SCENARIOS) + 1} trace(s) read, 1 skipped, in {corpus}" in one[1]
    (warning,) = one[2].splitlines()
    assert f"3-broken.jsonl:1: format version {VERSION + 1}" in warning and warning.endswith("(skipped)")
    assert (
        warning in two[2] and f"] {2 * len(SCENARIOS) + 2}/{2 * len(SCENARIOS) + 2} files" in two[2]
    )
    readable = [p for p in sorted(corpus.glob("*.jsonl")) if p.name != "3-broken.jsonl"]
    merged = io.StringIO()
    print_tables(summarize(stats_task(str(p)) for p in readable), merged)
    assert one[1].split("\n", 1)[1] == merged.getvalue()


def test_compactions_and_tokens_are_summed_over_the_corpus(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The compaction and token line (before the transition table) counts every readable
    trace's CompactionFinished events and response usage, cache tokens in the input; the
    same line from 1 or 2 workers, and from replay over the corpus."""
    compactions = tokens_in = tokens_out = 0
    for p in sorted(corpus.glob("*.jsonl")):
        if p.name == "3-broken.jsonl":
            continue
        for rec in TraceReader(p):
            if isinstance(rec, StepRecord) and isinstance(rec.event, CompactionFinished):
                compactions += 1
            elif isinstance(rec, StepRecord) and isinstance(rec.event, ModelResponseEnded):
                u = rec.event.usage
                tokens_in += (
                    u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
                )
                tokens_out += u.output_tokens
    assert compactions > 0 and tokens_in > 0 and tokens_out > 0
    line = (
        f"compactions {compactions:,}; tokens: {tokens_in:,} in (cache included), "
        f"{tokens_out:,} out"
    )
    for jobs in ("1", "2"):
        _, out, _ = cli(["stats", str(corpus), "--jobs", jobs], capsys)
        assert out.splitlines()[1] == line and out.splitlines()[2] == "transitions:"
    # replay over a corpus: after its summary line, the counts and tables stats prints
    two = [str(corpus / "1-reactive_compact_retry.jsonl"), str(corpus / "2-completed.jsonl")]
    _, one, _ = cli(["stats", *two], capsys)
    _, again, _ = cli(["replay", *two, "--jobs", "2"], capsys)
    assert one.splitlines()[1].startswith("compactions 1; tokens: ")
    assert one.splitlines()[1:] == again.splitlines()[1:]


def test_replay_over_a_corpus_reports_each_bad_trace_by_name(
    corpus: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay over the corpus: the edited trace's mismatch and the unreadable trace, each by
    name; exit status 2 (a trace could not be read); the same report over 2 processes."""
    code, out, _ = cli(["replay", str(corpus), "--jobs", "1"], capsys)
    code2, out2, _ = cli(["replay", str(corpus), "--jobs", "2"], capsys)
    assert code == code2 == 2
    assert _timeless(out) == _timeless(out2)
    first = out.splitlines()[0]
    assert first.startswith(f"{corpus / '3-broken.jsonl'}:1: format version {VERSION + 1}")
    assert first.endswith("(unreadable)")
    assert f"{corpus / '3-edited.jsonl'}: mismatch at step" in out
    n = 2 * len(SCENARIOS)
    assert f"{n + 2} trace(s) in {corpus}: {n} replayed exactly, 1 mismatched, 1 unreadable" in out
    assert "on 1 process)" in out and "on 2 local processes)" in out2
    assert "terminals:\n  completed" in out


def test_replay_exit_status_is_the_worst_trace(
    corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """0 when every trace replays exactly, 1 with a mismatch, 2 with an unreadable trace;
    traces come from paths, directories and @LIST files alike."""
    good = [str(corpus / "1-completed.jsonl"), str(corpus / "2-max_turns.jsonl")]
    code, out, _ = cli(["replay", *good], capsys)
    assert code == 0 and "2 trace(s) in 2 paths: 2 replayed exactly, 0 mismatched" in out
    listing = tmp_path / "list.txt"
    listing.write_text(f"# traces\n{corpus / '1-completed.jsonl'}\n\n3-edited.jsonl\n")
    shutil.copy(corpus / "3-edited.jsonl", tmp_path / "3-edited.jsonl")
    code, out, _ = cli(["replay", f"@{listing}"], capsys)
    assert code == 1 and "1 replayed exactly, 1 mismatched, 0 unreadable" in out
    code, out, _ = cli(["replay", f"@{listing}", str(corpus / "3-broken.jsonl")], capsys)
    assert code == 2
    code, _, err = cli(["replay", str(corpus), "--set", "max_turns=1"], capsys)
    assert code == 2 and err == "steploop: error: counterfactual replay takes one trace file\n"


def test_a_single_trace_replays_as_before(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(["replay", str(corpus / "1-completed.jsonl")], capsys)
    assert code == 0 and out.startswith(f"{corpus / '1-completed.jsonl'}: replayed exactly: ")
    assert "events/s" in out  # the one-trace report, not the corpus summary


def test_collect_names_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match=r"nothing\.jsonl: no such file$"):
        collect([str(tmp_path / "nothing.jsonl")])
    with pytest.raises(CorpusError, match=r"nowhere: no such directory$"):
        collect([str(tmp_path / "nowhere")])
    with pytest.raises(CorpusError, match=r": no \*\.jsonl trace files$"):
        collect([str(tmp_path)])
    with pytest.raises(CorpusError, match=r"list\.txt: no such file \(a list of traces\)$"):
        collect([f"@{tmp_path / 'list.txt'}"])


def test_progress_counts_to_the_whole_corpus(corpus: Path) -> None:
    seen: list[int] = []
    paths = sorted(corpus.glob("*.jsonl"))
    out = map_corpus(paths, stats_task, jobs=1, on_progress=seen.append)
    assert seen == list(range(len(paths) + 1))
    assert [o.path for o in out] == [str(p) for p in paths]


def test_resolve_jobs_runs_a_small_corpus_here() -> None:
    assert resolve_jobs(10, None) == 1
    assert resolve_jobs(1, 4) == 1
    assert resolve_jobs(10_000, None) == (os.cpu_count() or 1)
    with pytest.raises(ValueError, match="at least 1"):
        resolve_jobs(10, 0)


def _dies_on_poison(path: str) -> TraceOutcome:
    """A task whose worker process dies (as if killed) on one trace."""
    if path.endswith("poison.jsonl"):
        os._exit(3)
    return stats_task(path)


def test_a_dead_worker_loses_no_trace(corpus: Path, tmp_path: Path) -> None:
    """The worker running the poisoned trace dies (twice): that trace is reported failed by
    name; every other trace, including those the broken pool had not returned, is counted."""
    paths = [*sorted(corpus.glob("[12]-*.jsonl"))[:40]]
    shutil.copy(corpus / "1-completed.jsonl", poison := tmp_path / "poison.jsonl")
    paths.insert(7, poison)
    out = map_corpus(paths, _dies_on_poison, jobs=2)
    assert [o.path for o in out] == [str(p) for p in paths]
    bad = [o for o in out if o.status != "ok"]
    assert [(o.path, o.status) for o in bad] == [(str(poison), "failed")]
    assert bad[0].message == f"{poison}: its worker process died running it, alone"
    assert [o for o in out if o.status == "ok"] == [
        stats_task(str(p)) for p in paths if p != poison
    ]


def _raises_on_edited(path: str) -> TraceOutcome:
    if path.endswith("edited.jsonl"):
        raise MemoryError("out of memory")
    return stats_task(path)


def test_a_failing_task_is_an_outcome(corpus: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = map_corpus(sorted(corpus.glob("3-*.jsonl")), _raises_on_edited, jobs=1)
    assert [(Path(o.path).name, o.status) for o in out] == [
        ("3-broken.jsonl", "unreadable"),
        ("3-edited.jsonl", "failed"),
    ]
    assert out[1].message.endswith("3-edited.jsonl: MemoryError: out of memory")


# ---------------------------------------------------------------------------------------------
# Dask: a LocalCluster on the loopback address (threads in this process, TCP between them)


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=False,
        protocol="tcp",
        host="127.0.0.1",
        scheduler_port=0,
        dashboard_address=None,
    ) as cluster:
        yield str(cluster.scheduler_address)


def test_dask_gives_the_outcomes_one_process_gives(corpus: Path, scheduler: str) -> None:
    paths = sorted(corpus.glob("*.jsonl"))
    task = functools.partial(replay_task, verify="checkpoint")
    here = map_corpus(paths, task, jobs=1)
    seen: list[int] = []
    there = map_corpus(paths, task, scheduler=scheduler, on_progress=seen.append)
    assert there == here
    assert seen[0] == 0 and seen[-1] == len(paths) and seen == sorted(seen)


def test_dask_from_the_command_line(
    corpus: Path, scheduler: str, capsys: pytest.CaptureFixture[str]
) -> None:
    one = cli(["stats", str(corpus), "--jobs", "1"], capsys)
    code, out, err = cli(["stats", str(corpus), "--scheduler", scheduler], capsys)
    assert (code, out, err) == one
    code, out, _ = cli(["replay", str(corpus), "--scheduler", scheduler], capsys)
    assert code == 2 and f"on the Dask cluster at {scheduler})" in out


def test_an_unreachable_scheduler_is_one_line(
    corpus: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")
    monkeypatch.setattr("steploop.effects.corpus.CONNECT_TIMEOUT_S", 0.5)
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out, err = cli(["stats", str(corpus), "--scheduler", f"tcp://127.0.0.1:{port}"], capsys)
    assert code == 2 and out == ""
    assert err.startswith(
        f"steploop: error: cannot reach the Dask scheduler at tcp://127.0.0.1:{port}"
    )
    assert len(err.splitlines()) == 1


def test_the_benchmark_corpus_replays_exactly(tmp_path: Path) -> None:
    """Item 9's synthetic corpus: every trace replays exactly (a figure over traces that fail
    would measure nothing), and the report renders the item."""
    from benchmarks.corpus_throughput import build_corpus
    from benchmarks.report import _corpus, _goal_rows

    info = build_corpus(tmp_path, 45)
    paths = sorted(tmp_path.glob("trace-*.jsonl"))
    assert len(paths) == info["traces"] == 45 and info["templates"] > len(SCENARIOS)
    outcomes = map_corpus(paths, replay_task, jobs=1)
    assert all(o.status == "ok" for o in outcomes)
    assert sum(o.steps for o in outcomes) == info["steps"]
    s = {"median": 1.5, "q1": 1.4, "q3": 1.6}
    item = {
        "corpus": info,
        "reps": 1,
        "contenders": ["1 worker (this process)", "2 workers"],
        "commands": {"replay": {"traces_per_s_1": s, "traces_per_s_2": s, "ratio_2_over_1": s}},
    }
    assert "| replay | 1.50 (1.40–1.60) |" in "\n".join(_corpus(item))
    (row,) = _goal_rows({"items": {"9_corpus": item}})
    assert row.startswith("| 9 | replay over 45 traces: 2 workers / 1 | 1.50")


def test_dask_reports_traces_by_the_names_given(
    corpus: Path, scheduler: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers run elsewhere: they get absolute paths; the outcomes come back under the
    relative names given, as one process reports them."""
    monkeypatch.chdir(corpus)
    names = ["1-completed.jsonl", "3-broken.jsonl", "3-edited.jsonl"]
    there = map_corpus(names, replay_task, scheduler=scheduler)
    assert there == map_corpus(names, replay_task, jobs=1)
    assert [o.path for o in there] == names
    assert all(o.message.startswith(n + ":") for o, n in zip(there, names, strict=True))


def test_a_directory_gives_its_regular_files_only(tmp_path: Path) -> None:
    """A pipe named ``*.jsonl`` in a folder (or a folder so named) is no trace: reading a pipe
    nobody writes to waits for ever, and ``stats DIR`` / ``replay DIR`` hung on one."""
    trace = tmp_path / "a.jsonl"
    shutil.copy(Path(__file__).resolve().parents[2] / "specs" / "scenarios" / "completed.jsonl", trace)
    os.mkfifo(tmp_path / "pipe.jsonl")
    (tmp_path / "dir.jsonl").mkdir()
    assert collect([str(tmp_path)]) == [trace]
    assert collect([str(tmp_path / "pipe.jsonl")]) == [tmp_path / "pipe.jsonl"]  # named: as given
