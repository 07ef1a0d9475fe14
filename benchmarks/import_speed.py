"""Item 7: importing Claude Code transcripts, against a plain JSON read (issues 14 and 21).

What it measures, each import in a fresh interpreter (``import_paths``: reading, following the
chains, driving the machine, comparing, writing one trace per turn and the report):

* **the ratio to a plain JSON read**, side by side in one interpreter: per repetition, the
  import and a plain read (``json.loads`` of every line of the same files), in an order that
  alternates, and the ratio taken per pair. On the largest shipped transcript, on the session
  every turn of which reproduces (``spotter/4d5611e5-….jsonl``, 3.2 MB: the machine driven
  through every record), and on the whole shipped folder ``tests/data/cc-transcripts/`` copied
  16 times (about 256 MB, 16 × 34 files), measured copy by copy (a ratio per copy, the two
  sides seconds apart, so that a shared machine's load weighs on both). Goal: at most 3.
* **peak RSS** (Linux ``VmHWM``) of the imports of the shipped folder once and 16 times, each in
  a fresh interpreter: memory flat in the input's size (goal: 16 copies over 1 at most 1.1).
* **where the time goes**: one import of the shipped folder under cProfile, its time cut into
  the importer's phases (read, chains, records, driving, comparing, writing traces, the report)
  and, apart, the share spent inside the machine's ``begin()``/``advance()`` (``step()``),
  wherever called: the part of the gap that is the machine's and not the importer's.
* **one long thread**: the session made longer, its records copied ``k`` times with new uuids,
  each copy chained to the one before through a manual ``/compact``, so one thread of ``3k``
  user turns, for ``k`` = 1, 4 and 16 (3 to 50 MB); peak RSS of the largest over the smallest
  (flat memory within one thread), and the traces of one copy replayed exactly.

``--baseline REV`` measures the same workloads with the ``steploop`` package of git revision
REV beside the working tree's (each in its own interpreters, in turn), so a change is reported
before and after in one run.

Run alone: ``.venv/bin/python -m benchmarks.import_speed [--quick] [--copies 1,4,16]
[--folder-copies 16] [--reps 3] [--baseline REV]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import progress, summarize

__all__ = [
    "DATA",
    "LARGEST",
    "MEMORY_TOLERANCE",
    "RATIO_GOAL",
    "SESSION",
    "grow",
    "largest_shipped",
    "measure",
    "plain_read",
]

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "cc-transcripts"
#: The session whose every turn reproduces: the machine is driven through all its records.
SESSION = DATA / "spotter" / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
LARGEST = SESSION  # the one long thread is made of it (the name item 7 has always used)
MEMORY_TOLERANCE = 1.10
RATIO_GOAL = 3.0
_NS = uuid.UUID("6b1d0f3e-2c41-4f5e-9a7d-2f1b9e0c4d11")


def largest_shipped() -> Path:
    """The largest shipped transcript (the derived cases left out)."""
    files = [p for p in DATA.rglob("*.jsonl") if "derived" not in p.relative_to(DATA).parts]
    return max(files, key=lambda p: (p.stat().st_size, str(p)))


def plain_read(files: list[Path]) -> int:
    """The floor: ``json.loads`` of every line of ``files``; returns the lines read."""
    n = 0
    for path in files:
        with open(path, "rb") as f:
            for line in f:
                n += 1
                try:
                    json.loads(line)
                except ValueError:
                    pass
    return n


def grow(source: Path, copies: int, dest: Path) -> int:
    """Write ``source``'s records ``copies`` times into ``dest``, each copy with fresh uuids
    and its root chained to the previous copy's last record. Returns the number of lines."""
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    n = 0
    last: str | None = None
    with dest.open("w", encoding="utf-8") as out:
        for k in range(copies):

            def remap(value: Any, k: int = k) -> Any:
                if isinstance(value, str) and k > 0:
                    return str(uuid.uuid5(_NS, f"{k}:{value}"))
                return value

            copy_last: str | None = None
            if last is not None:  # a manual /compact between copies: each starts afresh
                boundary = str(uuid.uuid5(_NS, f"{k}:boundary"))
                summary = str(uuid.uuid5(_NS, f"{k}:summary"))
                for extra in (
                    {
                        "parentUuid": None,
                        "logicalParentUuid": last,
                        "isSidechain": False,
                        "type": "system",
                        "subtype": "compact_boundary",
                        "content": "Conversation compacted",
                        "level": "info",
                        "compactMetadata": {"trigger": "manual", "preTokens": 0},
                        "uuid": boundary,
                    },
                    {
                        "parentUuid": boundary,
                        "isSidechain": False,
                        "type": "user",
                        "isCompactSummary": True,
                        "message": {
                            "role": "user",
                            "content": "The conversation so far, summarised.",
                        },
                        "uuid": summary,
                    },
                ):
                    out.write(json.dumps(extra, separators=(",", ":")) + "\n")
                    n += 1
                last = summary
            for r in records:
                r = dict(r)
                for key in ("uuid", "parentUuid", "logicalParentUuid"):
                    if key in r:
                        r[key] = remap(r[key])
                if "uuid" in r and r.get("parentUuid") is None and not r.get("logicalParentUuid"):
                    r["parentUuid"] = last  # chain the copy's root to the previous copy
                if isinstance(r.get("uuid"), str) and r.get("type") in (
                    "user",
                    "assistant",
                    "system",
                ):
                    copy_last = r["uuid"]
                out.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n")
                n += 1
            last = copy_last
    return n


def copy_folder(copies: int, dest: Path) -> Path:
    """The shipped folder ``copies`` times under ``dest`` (``copy-1/``, ``copy-2/``, ...)."""
    for k in range(1, copies + 1):
        shutil.copytree(DATA, dest / f"copy-{k}", ignore=shutil.ignore_patterns("*.py", "*.md"))
    return dest


# -- the children (fresh interpreters) ------------------------------------------------------------


def _high_water_kib() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def _files(path: str) -> list[Path]:
    from steploop.effects.importer import find_sources

    return [p for p, _ in find_sources([path])]


def _child_ratio(path: str, reps: int) -> dict[str, Any]:
    """The import and the plain read of ``path``, side by side, ``reps`` times. A folder of
    copies (``copy-1/``, ...) is measured copy by copy, each import beside the read of the same
    copy (a ratio per copy: the two sides of each ratio a second or two apart, so a load that
    comes and goes weighs on both)."""
    from steploop.effects.importer import import_paths

    root = Path(path)
    units = sorted(root.glob("copy-*")) if root.is_dir() else []
    units = units or [root]
    counts: dict[str, int] = {}
    unit_files = {u: _files(str(u)) for u in units}

    def imp(unit: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
            s = import_paths([unit], out)
        for k, v in (
            ("turns", s.turns),
            ("ended", s.ended),
            ("reproduced", s.reproduced),
            ("files", len(s.files)),
        ):
            counts[k] = counts.get(k, 0) + v

    def plain(unit: Path) -> None:
        counts["lines"] = counts.get("lines", 0) + plain_read(unit_files[unit])

    with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
        import_paths([DATA / "spotter" / "tool_heavy.jsonl"], out)  # warm-up: lazy imports
    for u in units:
        plain_read(unit_files[u])  # and the page cache
    json_s: list[float] = []
    import_s: list[float] = []
    ratios: list[float] = []
    for r in range(reps):
        counts.clear()
        json_total = import_total = 0.0
        for k, u in enumerate(units):
            took: dict[str, float] = {}
            order: list[tuple[str, Callable[[Path], None]]] = [("json", plain), ("import", imp)]
            for label, fn in order if (r + k) % 2 == 0 else reversed(order):
                t0 = time.perf_counter()
                fn(u)
                took[label] = time.perf_counter() - t0
            ratios.append(took["import"] / took["json"])
            json_total += took["json"]
            import_total += took["import"]
        json_s.append(json_total)
        import_s.append(import_total)
    return {
        "bytes": sum(p.stat().st_size for fs in unit_files.values() for p in fs),
        **counts,
        "json_s": json_s,
        "import_s": import_s,
        "ratios": ratios,
    }


def _child_rss(path: str) -> dict[str, Any]:
    from steploop.effects.importer import import_paths

    base = _high_water_kib()
    with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
        t0 = time.perf_counter()
        s = import_paths([path], out)
        elapsed = time.perf_counter() - t0
    return {
        "bytes": sum(p.stat().st_size for p in _files(path)),
        "import_s": round(elapsed, 3),
        "turns": s.turns,
        "reproduced": s.reproduced,
        "baseline_kib": base,
        "peak_kib": _high_water_kib(),
    }


def _child_thread(path: str, out: str, replay: bool) -> dict[str, Any]:
    from steploop.effects.importer import import_paths
    from steploop.effects.trace import replay_exact

    base = _high_water_kib()
    lines = sum(1 for _ in open(path, "rb"))
    t0 = time.perf_counter()
    summary = import_paths([path], out)
    elapsed = time.perf_counter() - t0
    result: dict[str, Any] = {
        "records": lines,
        "bytes": os.path.getsize(path),
        "import_s": round(elapsed, 3),
        "records_per_s": round(lines / elapsed),
        "turns": summary.turns,
        "reproduced": summary.reproduced,
        "baseline_kib": base,
        "peak_kib": _high_water_kib(),
    }
    if replay:
        traces = sorted(Path(out).glob("*.jsonl"))
        trace_lines = sum(sum(1 for _ in open(p, "rb")) for p in traces)
        t0 = time.perf_counter()
        events = 0
        for p in traces:
            rep = replay_exact(p)
            if not rep.ok:
                raise SystemExit(f"{p} does not replay exactly: {rep.describe()}")
            events += rep.steps
        elapsed = time.perf_counter() - t0
        result.update(
            replay_s=round(elapsed, 3),
            trace_records=trace_lines,
            trace_records_per_s=round(trace_lines / elapsed),
            events_per_s=round(events / elapsed),
        )
    return result


#: The importer's phases, as (name, functions whose cumulative time is the phase's): a
#: function is named by a suffix of its file and its name. The phases do not nest.
PHASES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("read and index (first pass)", ("importer/source.py:read_source",)),
    ("chains and threads", ("importer/chain.py:threads",)),
    ("records: read again, convert, cut into turns", ("importer/segment.py:segments",)),
    ("driving the machine", ("importer/driver.py:run",)),
    ("comparing", ("importer/compare.py:first_difference",)),
    # before the traces were written from the driver's steps, record_sequence stepped the
    # machine again: both names, so a --baseline run is cut the same way
    ("writing traces", ("importer/tracing.py:write_trace", "trace/record.py:record_sequence")),
    ("the report", ("importer/__init__.py:add",)),
)


def _child_profile(path: str) -> dict[str, Any]:
    import cProfile
    import io
    import pstats

    from steploop.effects.importer import import_paths

    with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
        import_paths([path], out)  # warm-up
    with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
        prof = cProfile.Profile()
        prof.enable()
        import_paths([path], out)
        prof.disable()
    stats = pstats.Stats(prof, stream=io.StringIO())
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = float(stats.total_tt)  # type: ignore[attr-defined]

    def cum(*wanted: str) -> float:
        t = 0.0
        for (filename, _line, name), (_cc, _n, _tt, cumtime, _c) in raw.items():
            for want in wanted:
                path_part, _, func = want.rpartition(":")
                if name == func and filename.replace(os.sep, "/").endswith(path_part):
                    t += cumtime
        return t

    def pct(t: float) -> float:
        return round(100 * t / total, 1) if total else 0.0

    # the machine's own cost: begin() and advance() of steploop/reducer/machine*, wherever
    # called (driving, and any stepping again while writing)
    machine = 0.0
    for (filename, _line, name), (_cc, _n, _tt, cumtime, _c) in raw.items():
        if name in ("begin", "advance") and "steploop/reducer/machine" in filename.replace(
            os.sep, "/"
        ):
            machine += cumtime
    rows = sorted(
        (
            (tt, ct, n, f"{Path(fn).name}:{line}({name})")
            for (fn, line, name), (_c, n, tt, ct, _) in raw.items()
        ),
        reverse=True,
    )[:15]
    return {
        "total_s": round(total, 3),
        "phases_pct": {name: pct(cum(*funcs)) for name, funcs in PHASES},
        "machine_step_pct": pct(machine),
        "top_by_tottime": [
            {"function": w, "ncalls": n, "tottime_s": round(tt, 4), "cumtime_s": round(ct, 4)}
            for tt, ct, n, w in rows
        ],
    }


def _child_phases(path: str) -> dict[str, Any]:
    """CPU seconds of one import of ``path`` by phase, timed without a profiler (which weighs
    Python code over C): each phase's functions wrapped in a timer, the machine's ``advance``
    as the driver loop calls it, a plain JSON read of the same files beside it. The phases
    nest as listed: the machine's steps are inside "driving", the recorder's step records and
    header inside "writing traces"."""
    import importlib

    from steploop.effects.importer import import_paths

    spent: dict[str, float] = {}
    undo: list[tuple[Any, str, Any]] = []

    def timed(owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name, None)
        if fn is None:
            return
        undo.append((owner, name, fn))

        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*a, **k)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t0

        setattr(owner, name, wrapper)

    session = importlib.import_module("steploop.effects.importer.session")
    driver = importlib.import_module("steploop.effects.importer.driver")
    drive = importlib.import_module("steploop.reducer.drive")
    record = importlib.import_module("steploop.effects.trace.record")
    timed(session, "read_source", "read and index (first pass)")
    timed(session, "threads", "chains and threads")
    timed(session, "first_difference", "comparing")
    timed(session, "_extend", "the conversations turns start from")
    timed(session, "write_trace", "writing traces")
    timed(session, "record_sequence", "writing traces")
    timed(driver.TurnDriver, "run", "driving the machine")
    timed(drive, "advance", "inside the machine's advance() (of driving)")
    timed(record.TraceRecorder, "_lines", "the recorder's step records (of writing)")
    timed(record.TraceRecorder, "header", "the recorder's header (of writing)")
    segments = session.segments

    def timed_segments(*a: Any, **k: Any) -> Any:
        it = segments(*a, **k)
        label = "records: read again, convert, cut into turns"
        while True:
            t0 = time.process_time()
            try:
                seg = next(it)
            except StopIteration:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t0
                return
            spent[label] = spent.get(label, 0.0) + time.process_time() - t0
            yield seg

    undo.append((session, "segments", segments))
    setattr(session, "segments", timed_segments)  # noqa: B010 (mypy types the module loosely)
    try:
        with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
            import_paths([DATA / "spotter" / "tool_heavy.jsonl"], out)  # warm-up
        files = _files(path)
        plain_read(files)
        spent.clear()
        t0 = time.process_time()
        plain_read(files)
        json_s = time.process_time() - t0
        with tempfile.TemporaryDirectory(prefix="steploop-import-") as out:
            t0 = time.process_time()
            import_paths([path], out)
            total = time.process_time() - t0
    finally:
        for owner, name, fn in reversed(undo):
            setattr(owner, name, fn)
    return {
        "json_cpu_s": round(json_s, 3),
        "import_cpu_s": round(total, 3),
        "phases_cpu_s": {k: round(v, 3) for k, v in spent.items()},
        "phases_x_json": {k: round(v / json_s, 2) for k, v in spent.items()},
    }


def _run_child(args: list[str], tree: Path | None) -> dict[str, Any]:
    """Run a child in a fresh interpreter; ``tree``: a folder holding another ``steploop``
    package, put first on the path (the baseline)."""
    env = dict(os.environ)
    path = [str(ROOT)] if tree is None else [str(tree), str(ROOT)]
    env["PYTHONPATH"] = os.pathsep.join([*path, *[p for p in [env.get("PYTHONPATH")] if p]])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.import_speed", *args],
        # not the repository: ``-m`` puts the working folder first on the path, where it
        # would shadow the baseline's package
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the import child failed ({proc.returncode}): {proc.stderr.strip()}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def _baseline_tree(rev: str, dest: Path) -> Path:
    """The ``steploop`` package of git revision ``rev``, extracted under ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "archive", rev, "steploop"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


# -- the measurement ------------------------------------------------------------------------------


def _ratios(name: str, path: Path, reps: int, trees: dict[str, Path | None]) -> dict[str, Any]:
    out: dict[str, Any] = {"workload": name}
    for label, tree in trees.items():
        progress(f"import: {name}, {label}: {reps} repetitions beside a plain JSON read")
        res = _run_child(["--child-ratio", str(path), "--reps", str(reps)], tree)
        ratio = summarize(res["ratios"])
        out[label] = {
            "bytes": res["bytes"],
            "lines": res["lines"],
            "files": res["files"],
            "turns": res["turns"],
            "ended": res["ended"],
            "reproduced": res["reproduced"],
            "json_s": summarize(res["json_s"]),
            "import_s": summarize(res["import_s"]),
            "ratio": ratio,
        }
        progress(
            f"import: {name}, {label}: {res['import_s'][0]:.2f} s against {res['json_s'][0]:.3f} s"
            f" (median ratio {ratio['median']}), {res['reproduced']}/{res['turns']} turns reproduced"
        )
    return out


def measure(
    copies: tuple[int, ...] = (1, 4, 16),
    *,
    folder_copies: int = 16,
    reps: int = 3,
    baseline: str | None = None,
    profile: bool = True,
) -> dict[str, Any]:
    """Every workload in fresh interpreters; the goals (see the module docstring)."""
    if not SESSION.exists():
        return {"available": False, "reason": f"{SESSION.relative_to(ROOT)} is not in this tree"}
    result: dict[str, Any] = {"source": str(SESSION.relative_to(ROOT))}
    with tempfile.TemporaryDirectory(prefix="steploop-import-") as tmp:
        trees: dict[str, Path | None] = {"now": None}
        if baseline is not None:
            trees = {f"baseline {baseline}": _baseline_tree(baseline, Path(tmp) / "base"), **trees}
            result["baseline"] = baseline
        folder = copy_folder(folder_copies, Path(tmp) / "folder")
        one = Path(tmp) / "folder" / "copy-1"
        largest = largest_shipped()
        ratios = [
            _ratios(f"largest shipped file ({largest.relative_to(DATA)})", largest, reps, trees),
            _ratios(f"every turn reproduced ({SESSION.relative_to(DATA)})", SESSION, reps, trees),
            _ratios(f"shipped folder x{folder_copies}", folder, 1, trees),
        ]
        result["ratios"] = ratios
        memory: list[dict[str, Any]] = []
        for label, tree in trees.items():
            for k, path in ((1, one), (folder_copies, folder)):
                progress(f"import: peak RSS, shipped folder x{k}, {label}")
                res = _run_child(["--child-rss", str(path)], tree)
                res.update(copies=k, tree=label, peak_rss_mb=round(res["peak_kib"] / 1024, 1))
                res["baseline_rss_mb"] = round(res["baseline_kib"] / 1024, 1)
                memory.append(res)
        result["folder_memory"] = memory
        if profile:
            result["profile"] = {}
            result["phases"] = {}
            for label, tree in trees.items():
                progress(f"import: cProfile of the shipped folder, {label}")
                result["profile"][label] = _run_child(["--child-profile", str(one)], tree)
                progress(f"import: CPU time by phase, shipped folder, {label}")
                result["phases"][label] = _run_child(["--child-phases", str(one)], tree)
        runs: list[dict[str, Any]] = []
        for k in copies:
            src = Path(tmp) / f"session-x{k}.jsonl"
            lines = grow(SESSION, k, src)
            progress(f"import: one thread, {k} cop{'y' if k == 1 else 'ies'} ({lines:,} records)")
            res = _run_child(
                ["--child", str(src), str(Path(tmp) / f"out-x{k}")]
                + (["--replay"] if k == copies[0] else []),
                None,
            )
            res["copies"] = k
            res["peak_rss_mb"] = round(res["peak_kib"] / 1024, 1)
            res["baseline_rss_mb"] = round(res["baseline_kib"] / 1024, 1)
            runs.append(res)
            src.unlink()
        result["runs"] = runs
    result["goals"] = _goals(result, folder_copies)
    return result


def _goals(result: dict[str, Any], folder_copies: int) -> dict[str, Any]:
    goals: dict[str, Any] = {}
    for r in result["ratios"]:
        now = r["now"]["ratio"]["median"]
        goals[f"ratio: {r['workload']}"] = {
            "goal": f"import time / plain JSON read of the same files <= {RATIO_GOAL:g}",
            "measured": now,
            "met": now <= RATIO_GOAL,
        }
    mem = [m for m in result["folder_memory"] if m["tree"] == "now"]
    small, large = mem[0], mem[-1]
    flat = large["peak_kib"] / small["peak_kib"]
    goals["flat_memory_folder"] = {
        "goal": f"peak RSS importing the shipped folder x{folder_copies} / x1 <= {MEMORY_TOLERANCE:g}",
        "measured": round(flat, 3),
        "met": flat <= MEMORY_TOLERANCE,
    }
    runs = result["runs"]
    first, last = runs[0], runs[-1]
    ratio = last["peak_kib"] / first["peak_kib"]
    goals["flat_memory"] = {
        "goal": f"peak RSS importing one thread of {last['copies']}x the session / 1x <= "
        f"{MEMORY_TOLERANCE:g}",
        "measured": round(ratio, 3),
        "met": ratio <= MEMORY_TOLERANCE,
    }
    if "trace_records_per_s" in first:
        goals["replay_speed"] = {
            "goal": "exact replay of one copy's traces, trace records/s",
            "measured": first["trace_records_per_s"],
            "met": None,
        }
    return goals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.import_speed")
    ap.add_argument("--quick", action="store_true", help="copies 1 and 2, the folder twice, 1 rep")
    ap.add_argument("--copies", default="", help="comma-separated copy counts (default 1,4,16)")
    ap.add_argument("--folder-copies", type=int, default=0, help="default 16 (quick: 2)")
    ap.add_argument("--reps", type=int, default=0, help="repetitions (default 3, quick: 1)")
    ap.add_argument("--baseline", default=None, metavar="REV", help="measure REV's steploop too")
    ap.add_argument("--no-profile", action="store_true", help="leave out the cProfile")
    ap.add_argument("--child", nargs=2, metavar=("FILE", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-ratio", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--child-rss", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--child-profile", metavar="PATH", help=argparse.SUPPRESS)
    ap.add_argument("--child-phases", metavar="PATH", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child_thread(args.child[0], args.child[1], args.replay)))
        return 0
    if args.child_ratio:
        print(json.dumps(_child_ratio(args.child_ratio, args.reps or 3)))
        return 0
    if args.child_rss:
        print(json.dumps(_child_rss(args.child_rss)))
        return 0
    if args.child_profile:
        print(json.dumps(_child_profile(args.child_profile)))
        return 0
    if args.child_phases:
        print(json.dumps(_child_phases(args.child_phases)))
        return 0
    copies = tuple(int(x) for x in args.copies.split(",") if x) or (
        (1, 2) if args.quick else (1, 4, 16)
    )
    result = measure(
        copies,
        folder_copies=args.folder_copies or (2 if args.quick else 16),
        reps=args.reps or (1 if args.quick else 3),
        baseline=args.baseline,
        profile=not args.no_profile,
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
