"""Item 7: importing Claude Code transcripts, and replaying the traces (issue 14, specs/import.md).

What it measures, on the largest shipped transcript (``tests/data/cc-transcripts/spotter/
4d5611e5-….jsonl``: 3.2 MB, 1,512 records, three user turns, one auto compaction):

* **import speed**: transcript records (lines) per second through ``import_paths`` (reading,
  following the chain, driving the machine, comparing, writing one trace per turn and the
  report), in a fresh interpreter;
* **replay speed**: the traces the import wrote, replayed exactly (``replay_exact``), in trace
  records (lines) and events per second;
* **peak memory against file size**: the same session made longer, its records copied ``k``
  times with new uuids, each copy chained to the one before through a manual ``/compact`` (a
  boundary and a summary record), so one thread of ``3k`` user turns whose every copy starts
  from a compacted conversation, as the first did from an empty one; imported in a fresh
  interpreter for ``k`` = 1, 4 and 16 (3 to 50 MB). The peak resident set size (Linux
  ``VmHWM``) of the largest over the smallest is the goal (<= 1.1: equal, as item 3's); the
  importer keeps 15 bytes a record while it imports turns (88 at the chain's peak, before the
  first turn) and one turn's records at a time, never the file. Reported beside it: the peak
  at 16 copies over the peak at 4 (both past the fill of the bounded memo of canonical texts
  in ``steploop/reducer/canonical.py``, which one copy does not fill) and the growth per added record.

Run alone: ``.venv/bin/python -m benchmarks.import_speed [--quick] [--copies 1,4,16]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import progress

__all__ = ["LARGEST", "MEMORY_TOLERANCE", "grow", "measure"]

ROOT = Path(__file__).resolve().parent.parent
LARGEST = (
    ROOT
    / "tests"
    / "data"
    / "cc-transcripts"
    / "spotter"
    / "4d5611e5-241a-462a-8d15-5122611a9569.jsonl"
)
MEMORY_TOLERANCE = 1.10
_NS = uuid.UUID("6b1d0f3e-2c41-4f5e-9a7d-2f1b9e0c4d11")


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
                        "message": {"role": "user", "content": "The conversation so far, summarised."},
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


def _child(path: str, out: str, replay: bool) -> dict[str, Any]:
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


def _in_child(path: Path, out: Path, replay: bool) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
    args = ["--child", str(path), str(out)] + (["--replay"] if replay else [])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.import_speed", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the import child failed ({proc.returncode}): {proc.stderr.strip()}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def measure(copies: tuple[int, ...] = (1, 4, 16)) -> dict[str, Any]:
    """Import (and, for the real file, replay) in fresh interpreters; the goals."""
    if not LARGEST.exists():
        return {"available": False, "reason": f"{LARGEST.relative_to(ROOT)} is not in this tree"}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="steploop-import-") as tmp:
        for k in copies:
            src = Path(tmp) / f"session-x{k}.jsonl"
            lines = grow(LARGEST, k, src)
            progress(f"import: {k} cop{'y' if k == 1 else 'ies'} ({lines:,} records)")
            res = _in_child(src, Path(tmp) / f"out-x{k}", replay=k == copies[0])
            res["copies"] = k
            res["peak_rss_mb"] = round(res["peak_kib"] / 1024, 1)
            res["baseline_rss_mb"] = round(res["baseline_kib"] / 1024, 1)
            runs.append(res)
            progress(
                f"import: {res['records_per_s']:,} records/s, peak RSS {res['peak_rss_mb']} MB"
                f" (baseline {res['baseline_rss_mb']} MB), {res['reproduced']}/{res['turns']}"
                " turns reproduced"
            )
            src.unlink()
    small, large = runs[0], runs[-1]
    ratio = large["peak_kib"] / small["peak_kib"]
    middle = runs[len(runs) // 2] if len(runs) > 2 else None
    goals = {
        "import_speed": {
            "goal": f"import records/s on the largest shipped transcript ({small['records']:,} records)",
            "measured": small["records_per_s"],
            "met": None,
        },
        "replay_speed": {
            "goal": "exact replay of its traces, trace records/s",
            "measured": small["trace_records_per_s"],
            "met": None,
        },
        "flat_memory": {
            "goal": f"peak RSS importing {large['copies']}x the session / 1x <= {MEMORY_TOLERANCE:g} (equal)",
            "measured": round(ratio, 3),
            "met": ratio <= MEMORY_TOLERANCE,
        },
    }
    if middle is not None:
        added = large["records"] - middle["records"]
        grew = (large["peak_kib"] - middle["peak_kib"]) * 1024
        goals["flat_memory_past_the_memo"] = {
            "goal": f"peak RSS importing {large['copies']}x / {middle['copies']}x (no goal: both"
            " past the fill of the canonical-text memo)",
            "measured": round(large["peak_kib"] / middle["peak_kib"], 3),
            "met": None,
        }
        goals["memory_per_record"] = {
            "goal": f"peak RSS growth from {middle['copies']}x to {large['copies']}x, bytes per"
            " added record (the file holds about 2,000 bytes per record)",
            "measured": round(grew / added),
            "met": None,
        }
    return {"source": str(LARGEST.relative_to(ROOT)), "runs": runs, "goals": goals}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.import_speed")
    ap.add_argument("--quick", action="store_true", help="copies 1 and 2 only")
    ap.add_argument("--copies", default="", help="comma-separated copy counts (default 1,4,16)")
    ap.add_argument("--child", nargs=2, metavar=("FILE", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--replay", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.replay)))
        return 0
    copies = tuple(int(x) for x in args.copies.split(",") if x) or (
        (1, 2) if args.quick else (1, 4, 16)
    )
    print(json.dumps(measure(copies), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
