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
  per turn;
- item 6: ``explore(default(), rounds=--explore-rounds)`` (3, the CI bound, by default), µs per
  abstract state;
- item 8: ``replay_counterfactual`` of item 8's session of ``--cf-rounds`` tool rounds (4,000
  by default) with ``max_turns`` changed, µs per event; the exact replay of the same trace is
  measured beside it the same way.

Items 1, 2 and 3 run by default; ``--items 6,8`` runs the others (they take minutes).

Run alone: ``python -m benchmarks.fastpaths [--events N] [--reps R] [--rounds K] [--items 1,2,3]
[--explore-rounds N] [--cf-rounds N]``.
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

from benchmarks import counterfactual
from benchmarks.common import machine, progress, ratio_summary, summarize
from benchmarks.replay_throughput import build_synthetic
from benchmarks.round_cost import setup
from benchmarks.workload import Stamps, run_steploop
from steploop.effects.trace import replay_counterfactual, replay_exact
from steploop.reducer import default, fastpaths, step
from steploop.reducer.explore import explore

ITEM_PATHS = {
    "3": ("evolve", "canonical_text", "incremental_digest", "fast_structurers", "trace_decoders"),
    "2": ("evolve",),
    "1": ("evolve",),
    "6": ("paused_collector",),
    "8": ("paused_collector", "same_request", "same_address"),
    "8 exact": ("paused_collector",),
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


def _explore(rounds: int) -> Callable[[], None]:
    def run() -> None:
        explore(default(), rounds=rounds)

    return run


def _counterfactual(path: Path) -> Callable[[], None]:
    def run() -> None:
        assert replay_counterfactual(path, counterfactual.CHANGE).status == "finished"

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
    explore_rounds: int = 3,
    cf_rounds: int = 4_000,
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
    if "6" in items:
        states = explore(default(), rounds=explore_rounds).states
        out["explore_rounds"], out["states"] = explore_rounds, states
        work = _explore(explore_rounds)
        out["item_6"] = side_by_side(work, ITEM_PATHS["6"], reps, states, "item 6")
    if "8" in items:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "counterfactual.jsonl"
            counterfactual.build(path, cf_rounds)
            n = replay_exact(path).steps
            out["cf_rounds"], out["cf_events"] = cf_rounds, n
            work = _counterfactual(path)
            out["item_8"] = side_by_side(work, ITEM_PATHS["8"], reps, n, "item 8")
            exact = _replay(path)
            out["item_8_exact"] = side_by_side(
                exact, ITEM_PATHS["8 exact"], reps, n, "item 8 exact"
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--items", default="1,2,3", help="which items (comma-separated: 1,2,3,6,8)")
    ap.add_argument("--explore-rounds", type=int, default=3, help="item 6's bound (default 3)")
    ap.add_argument("--cf-rounds", type=int, default=4_000, help="item 8's rounds (default 4000)")
    args = ap.parse_args()
    items = set(args.items.split(","))
    unknown = items - {"1", "2", "3", "6", "8"}
    if unknown:
        ap.error(f"no item {', '.join(sorted(unknown))} here (1, 2, 3, 6 and 8 are)")
    out = run_benchmark(
        args.events,
        args.reps,
        args.rounds,
        args.turns,
        items,
        args.explore_rounds,
        args.cf_rounds,
    )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
