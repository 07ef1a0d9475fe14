"""Item 9: corpus throughput, traces per second over many traces with 1 and with 2 workers.

The synthetic corpus (:func:`build_corpus`): templates recorded once (every golden scenario of
``specs/scenarios/``, one per transition, and synthetic tool-round traces of 20, 60 and 200
events built with :func:`benchmarks.replay_throughput.build_synthetic`), then written out as
``traces`` files, cycling through the templates. Every file is read and replayed in full; the
templates only spare the recording time.

Each command (``stats``: read and count; ``replay``: exact replay, every effect and state digest
checked) runs :func:`steploop.effects.corpus.map_corpus` over the whole corpus with ``jobs=1`` (this
process, what ``steploop stats --jobs 1`` does) and ``jobs=2`` (two local worker processes),
interleaved over repetitions (the order alternates), after one warm-up pass over a few hundred
traces. The time is what a user waits for: collecting the outcomes, starting the workers and
the merge included; the corpus is on the local disk and in the page cache (written just
before). The ratio 2 workers over 1 is taken per repetition. Every outcome must be ``ok``, or
the figure is not reported.

On a real cluster: ``--scheduler tcp://HOST:8786 --dir /shared/corpus`` writes the corpus where
the workers see it and times the cluster (``scheduler``) against this process (``jobs=1``).

Run: .venv/bin/python -m benchmarks.corpus_throughput [--traces N] [--reps R]
     [--commands stats,replay] [--scheduler ADDR] [--dir DIR] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import machine, progress, ratio_summary, summarize
from benchmarks.replay_throughput import build_synthetic
from steploop.effects.corpus import TraceOutcome, map_corpus, replay_task, stats_task

__all__ = ["build_corpus", "measure"]

ROOT = Path(__file__).resolve().parent.parent
SYNTHETIC_EVENTS = (20, 60, 200)
COMMANDS = ("stats", "replay")


def build_corpus(directory: Path, traces: int) -> dict[str, Any]:
    """Write ``traces`` trace files into ``directory``; returns what the corpus holds."""
    directory.mkdir(parents=True, exist_ok=True)
    templates: list[bytes] = [
        p.read_bytes() for p in sorted((ROOT / "specs" / "scenarios").glob("*.jsonl"))
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for n in SYNTHETIC_EVENTS:
            path = Path(tmp) / f"synthetic-{n}.jsonl"
            build_synthetic(path, n)
            templates.append(path.read_bytes())
    steps = [
        sum(json.loads(line)["record"] == "step" for line in t.splitlines()) for t in templates
    ]
    total_bytes = total_steps = 0
    for k in range(traces):
        t = k % len(templates)
        (directory / f"trace-{k:06d}.jsonl").write_bytes(templates[t])
        total_bytes += len(templates[t])
        total_steps += steps[t]
    return {
        "traces": traces,
        "templates": len(templates),
        "steps": total_steps,
        "steps_per_trace": round(total_steps / max(1, traces), 1),
        "mb": round(total_bytes / 1e6, 1),
    }


def _task(command: str) -> Any:
    return stats_task if command == "stats" else functools.partial(replay_task, verify="every")


def _timed(paths: Sequence[Path], command: str, **where: Any) -> tuple[float, list[TraceOutcome]]:
    t0 = time.perf_counter()
    out = map_corpus(paths, _task(command), **where)
    return time.perf_counter() - t0, out


def measure(
    traces: int,
    reps: int,
    commands: Sequence[str] = COMMANDS,
    *,
    directory: Path | None = None,
    scheduler: str | None = None,
) -> dict[str, Any]:
    """Traces per second for each command with 1 and 2 workers (or this process and the
    cluster at ``scheduler``), interleaved over ``reps`` repetitions."""
    keep = directory is not None
    root = directory or Path(tempfile.mkdtemp(prefix="steploop-corpus-"))
    try:
        t0 = time.perf_counter()
        corpus = build_corpus(root, traces)
        corpus["build_s"] = round(time.perf_counter() - t0, 1)
        progress(f"corpus: {traces:,} traces, {corpus['mb']} MB in {corpus['build_s']} s")
        paths = sorted(root.glob("trace-*.jsonl"))
        other: dict[str, Any] = {"scheduler": scheduler} if scheduler else {"jobs": 2}
        label = "cluster" if scheduler else "2 workers"
        result: dict[str, Any] = {
            "corpus": corpus,
            "reps": reps,
            "contenders": ["1 worker (this process)", label],
            "commands": {},
        }
        for command in commands:
            _timed(paths[: min(len(paths), 300)], command, jobs=1)  # warm-up
            one: list[float] = []
            two: list[float] = []
            for rep in range(reps):
                order = [("one", {"jobs": 1}), ("two", other)]
                if rep % 2:
                    order.reverse()
                for name, where in order:
                    secs, out = _timed(paths, command, **where)
                    bad = [o for o in out if o.status != "ok"]
                    if bad:
                        raise RuntimeError(f"{len(bad)} trace(s) not ok: {bad[0].message}")
                    (one if name == "one" else two).append(len(paths) / secs)
                    progress(
                        f"{command} rep {rep + 1}/{reps} {name}: {secs:.1f} s, "
                        f"{len(paths) / secs:,.0f} traces/s"
                    )
            result["commands"][command] = {
                "traces_per_s_1": summarize(one),
                "traces_per_s_2": summarize(two),
                "ratio_2_over_1": ratio_summary(two, one),
            }
        return result
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.corpus_throughput")
    ap.add_argument("--traces", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--commands", default=",".join(COMMANDS))
    ap.add_argument("--scheduler", default=None, help="a Dask scheduler: time the cluster")
    ap.add_argument("--dir", default=None, help="write (and keep) the corpus here")
    ap.add_argument("--quick", action="store_true", help="2,000 traces")
    args = ap.parse_args(argv)
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    if any(c not in COMMANDS for c in commands):
        ap.error(f"--commands takes {', '.join(COMMANDS)}")
    result = measure(
        2_000 if args.quick else args.traces,
        args.reps,
        commands,
        directory=Path(args.dir) if args.dir else None,
        scheduler=args.scheduler,
    )
    result["machine"] = machine()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
