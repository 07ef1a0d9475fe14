"""What each fast path earns, on against off, side by side in one run (issue 22).

For each fast path of ``steploop/reducer/fastpaths.py`` that serves item 2 or 3, and for all
of them together: the same work with the path on and with it off, interleaved (each
repetition runs every variant, in an order that rotates), CPU time (``time.process_time``:
the 2-core machine is shared, and its wall clock is noisy). The figure is the ratio off/on
per repetition, summarized: 1.25 means the path makes its item 1.25 times faster.

- item 3: ``replay_exact`` of a synthetic trace (``benchmarks/replay_throughput.py``, default
  20,000 events), µs per event;
- item 2: one round through ``step()`` at 1,000 messages of history (``round_cost.py``), µs;
- item 1: a run of ``--turns`` tool turns through ``steploop.effects.run.run``
  (``workload.run_steploop``, its tool registry built inside the run, so under the switch), µs
  per turn.

Run alone: ``python -m benchmarks.fastpaths [--events N] [--reps R] [--rounds K]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from benchmarks.common import machine, progress, ratio_summary, summarize
from benchmarks.replay_throughput import build_synthetic
from benchmarks.round_cost import setup
from benchmarks.workload import Stamps, run_steploop
from steploop.effects.trace import replay_exact
from steploop.reducer import default, fastpaths, step

ITEM_PATHS = {
    "3": ("evolve", "canonical_text", "incremental_digest", "fast_structurers", "trace_decoders"),
    "2": ("evolve",),
    "1": ("evolve",),
}


def _cpu(fn: Callable[[], None]) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _replay(path: Path) -> Callable[[], None]:
    def run() -> None:
        assert replay_exact(path).ok

    return run


def _rounds(n: int, rounds: int) -> Callable[[], None]:
    cfg = default()
    s0, events = setup(n)

    def run() -> None:
        for _ in range(rounds):
            s = s0
            for e in events:
                s, _fx = step(s, e, cfg)

    return run


def _turns(n: int) -> Callable[[], None]:
    def run() -> None:
        anyio.run(functools.partial(run_steploop, n, Stamps()))

    return run


def side_by_side(
    work: Callable[[], None], paths: tuple[str, ...], reps: int, per: float, label: str
) -> dict[str, Any]:
    """``work`` with every path on, with each of ``paths`` off alone and with all of them off,
    interleaved over ``reps`` repetitions; per variant the cost (``per`` divides the seconds)
    and the ratio off/on per repetition."""
    variants: list[tuple[str, tuple[str, ...] | None]] = [("all on", None)]
    variants += [(f"{p} off", (p,)) for p in paths]
    variants.append(("all off", paths))
    samples: dict[str, list[float]] = {name: [] for name, _ in variants}
    work()  # warm: compiled tables and caches exist before the first timed run
    for rep in range(reps):
        k = rep % len(variants)
        for name, off in variants[k:] + variants[:k]:
            if off is None:
                samples[name].append(_cpu(work) / per)
            else:
                with fastpaths.off(*off):
                    samples[name].append(_cpu(work) / per)
        progress(f"fast paths {label} rep {rep + 1}/{reps}")
    on = samples["all on"]
    return {
        name: {
            "us": summarize([1e6 * x for x in v], 2),
            "off_over_on": None if name == "all on" else ratio_summary(v, on),
        }
        for name, v in samples.items()
    }


def run_benchmark(
    events: int = 20_000,
    reps: int = 5,
    rounds: int = 300,
    turns: int = 300,
    items: set[str] | frozenset[str] = frozenset({"1", "2", "3"}),
) -> dict[str, Any]:
    out: dict[str, Any] = {"machine": machine(), "events": events, "rounds": rounds, "turns": turns}
    if "3" in items:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "synthetic.jsonl"
            build_synthetic(path, events)
            out["item_3"] = side_by_side(_replay(path), ITEM_PATHS["3"], reps, events, "item 3")
    if "2" in items:
        work = _rounds(1_000, rounds)
        out["item_2"] = side_by_side(work, ITEM_PATHS["2"], reps, rounds, "item 2")
    if "1" in items:
        out["item_1"] = side_by_side(_turns(turns), ITEM_PATHS["1"], reps, turns, "item 1")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--items", default="1,2,3", help="which items (comma-separated)")
    args = ap.parse_args()
    items = set(args.items.split(","))
    print(
        json.dumps(run_benchmark(args.events, args.reps, args.rounds, args.turns, items), indent=2)
    )


if __name__ == "__main__":
    main()
