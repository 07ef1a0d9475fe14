"""Where each microsecond of ``step()`` goes over a recorded trace (issue 24).

The events of a synthetic trace (``benchmarks/replay_throughput.py``, default 20,000 events)
are read once; then ``step()`` runs over them:

- per event, timed in CPU time (``time.process_time``: the 2-core machine is shared and its
  wall clock is noisy), the minimum of ``--reps`` passes;
- per event type, the same passes timed event by event (``time.process_time_ns`` around each
  call; the timer's own cost, measured on an empty call, is subtracted);
- under cProfile, own time grouped by what it is spent on (the attrs copies, building
  messages and effects, the conversation's appends and estimates, the handlers' own code,
  dispatch), as shares of ``step()``'s profiled time.

Run alone: ``python -m benchmarks.step_cost [--events N] [--reps R]``.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from benchmarks.common import machine
from benchmarks.replay_throughput import build_synthetic
from steploop.effects.trace import StepRecord, TraceHeader, TraceReader
from steploop.reducer import start, step
from steploop.reducer.events import Event

# own time of a profiled function, by what it is spent on (first match of its file:name)
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "evolve (copies of frozen records)",
        ("_replace.py:evolve", "__new__", "'copy' of 'dict'", "'update' of 'dict'", "<replace "),
    ),
    ("building messages, blocks, effects (attrs __init__)", ("<attrs generated methods",)),
    (
        "conversation: append, id index, token estimates",
        ("conversation.py:", "json/encoder.py", "helpers.py:count"),
    ),
    ("dispatch: step(), the table, FX", ("table.py:step", "table.py:advance", "protocol.py:")),
    ("the handlers' own code", ("machine/",)),
)


def load(path: Path) -> tuple[TraceHeader, list[Event]]:
    header: TraceHeader | None = None
    events: list[Event] = []
    for rec in TraceReader(path):
        if isinstance(rec, TraceHeader):
            header = rec
        elif isinstance(rec, StepRecord) and rec.event is not None:
            events.append(rec.event)
    assert header is not None
    return header, events


def _group(key: str) -> str:
    for name, marks in GROUPS:
        if any(m in key for m in marks):
            return name
    return "other (builtins: len, isinstance, all, dict.get, ...)"


def measure(path: Path, reps: int) -> dict[str, Any]:
    header, events = load(path)
    cfg = header.config

    def run() -> None:
        s, _ = start(header.request, cfg, header.session)
        for e in events:
            s, _ = step(s, e, cfg)

    run()  # warm
    whole = []
    for _ in range(reps):
        t0 = time.process_time()
        run()
        whole.append(time.process_time() - t0)
    per_type: dict[str, list[int]] = defaultdict(list)
    clock = time.process_time_ns
    overhead = min(-(clock() - clock()) for _ in range(10_000))
    for _ in range(reps):
        s, _ = start(header.request, cfg, header.session)
        for e in events:
            t0 = clock()
            s, _ = step(s, e, cfg)
            per_type[type(e).__name__].append(clock() - t0 - overhead)
    by_type = {
        name: {
            "events_per_pass": len(v) // reps,
            "us_mean": round(sum(v) / len(v) / 1e3, 2),
            "share_pct": round(100 * sum(v) / sum(sum(x) for x in per_type.values()), 1),
        }
        for name, v in sorted(per_type.items(), key=lambda kv: -sum(kv[1]))
    }
    prof = cProfile.Profile()
    prof.enable()
    run()
    prof.disable()
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    groups: dict[str, float] = defaultdict(float)
    total = 0.0
    for (file, line, name), (_cc, _nc, tt, _ct, _callers) in stats.items():
        if "benchmarks/" in file or name == "<method 'disable' of '_lsprof.Profiler' objects>":
            continue
        key = f"{file}:{name}" if line else name
        groups[_group(key)] += tt
        total += tt
    n = len(events)
    best = min(whole) / n * 1e6
    return {
        "events": n,
        "reps": reps,
        "us_per_event_cpu": round(best, 2),
        "events_per_s_ceiling": round(1e6 / best),
        "by_event_type": by_type,
        "profile_share_pct": {
            k: round(100 * v / total, 1) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])
        },
        "profile_us_per_event_at_that_share": {
            k: round(best * v / total, 2) for k, v in sorted(groups.items(), key=lambda kv: -kv[1])
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--trace", type=Path, help="an existing trace instead of a synthetic one")
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": machine()}
    if args.trace is not None:
        out.update(measure(args.trace, args.reps))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "synthetic.jsonl"
            build_synthetic(path, args.events)
            out.update(measure(path, args.reps))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
