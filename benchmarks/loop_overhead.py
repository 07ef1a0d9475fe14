"""Item 1: loop overhead per tool turn, steploop against the floor and the peer frameworks.

Every contender runs :mod:`benchmarks.workload` (a counter model, one instant tool call per turn,
a final text at turn n). Repetitions are interleaved: each repetition runs every size and, within
a size, every contender, in an order that rotates from one repetition to the next, so drift on a
shared machine hits them all alike. Each sample runs in a fresh event loop after a full garbage
collection.

The cost per turn is the span from the first to the last model call divided by the n-1 turns
between them: it leaves out building the agent and tearing it down, the same way for everyone.
The cost along the run is the mean gap between consecutive model calls in each tenth of the
run; flatness is the last tenth over the first.

Beside the times, the passes of the event loop per tool turn are counted for steploop and the
floor (a task that checkpoints once per pass runs beside one extra run of each): a count, not
a time, so the load of a shared machine does not blur it.

Each sample also reads the process time (``time.process_time``) at the first and the last
model call: the CPU per turn, which other processes on a shared machine do not inflate as they
do the wall time; the ratios to the floor are given in both. ``--shell`` adds a contender
``steploop-shell``: steploop with ``step()`` canned (its results from an earlier run returned
again), the interpreter's own cost beside the floor's.

Run alone: ``python -m benchmarks.loop_overhead [--quick] [--no-peers] [--backend trio]
[--sizes 50,200,1000] [--reps N] [--baseline REV] [--shell] [--profile]``.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib
import itertools
import json
import statistics
import subprocess
import sys
import time
import traceback
import types
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from benchmarks.common import profile_top, progress, ratio_summary, summarize
from benchmarks.workload import (
    Runner,
    Stamps,
    run_floor,
    run_steploop,
    run_steploop_shell,
    run_steploop_stamped,
)

__all__ = ["Contender", "contenders", "main", "measure", "sample"]

PEER_MODULES = ("langgraph_peer", "pydantic_ai_peer", "openai_agents_peer")
GOAL_VS_PEER = 100.0  # steploop at least this many times faster than the fastest peer
GOAL_VS_FLOOR = 1.5  # steploop at most this many times the floor (issue 24; 3.0 before)
GOAL_FLAT = 1.2  # last tenth at most this many times the first
OURS = ("steploop", "floor", "steploop-shell")


@dataclass
class Contender:
    name: str
    version: str
    runner: Runner | None
    missing: str | None = None  # why it cannot run here


def baseline(rev: str) -> Contender:
    """steploop with the interpreter (``steploop/effects/run.py``) of git revision ``rev`` and today's
    everything else: the same ``step()``, tools and workload, so the two interpreters compare
    side by side. The file is loaded from ``git show`` as a module of its own."""
    name = f"steploop@{rev}"
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:steploop/effects/run.py"],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        ).stdout
        module = types.ModuleType(f"_steploop_run_{abs(hash(rev))}")
        module.__file__ = f"{rev}:steploop/effects/run.py"
        sys.modules[module.__name__] = module  # attrs and typing look classes up by module
        exec(compile(source, module.__file__, "exec"), module.__dict__)
    except Exception as exc:
        return Contender(name, "", None, f"{type(exc).__name__}: {exc}")
    return Contender(
        name, f"steploop/effects/run.py of {rev}", functools.partial(run_steploop, run_fn=module.run)
    )


def contenders(
    peers: bool = True, baselines: Sequence[str] = (), shell: bool = False
) -> list[Contender]:
    """steploop, the floor, steploop with earlier interpreters, with ``shell`` steploop with
    ``step()`` canned (the interpreter's own cost), and each peer that imports (the others
    with the reason)."""
    from importlib.metadata import version

    out = [
        Contender("steploop", f"steploop {version('steploop')}", run_steploop),
        Contender("floor", f"anyio {version('anyio')}", run_floor),
        *(baseline(rev) for rev in baselines),
    ]
    if shell:
        out.append(
            Contender("steploop-shell", "steploop, step() canned", run_steploop_shell)
        )
    if not peers:
        return out
    for module_name in PEER_MODULES:
        try:
            module = importlib.import_module(f"benchmarks.peers.{module_name}")
            out.append(Contender(module.NAME, module.version(), module.run))
        except Exception as exc:  # not installed (the bench extra) or broken here
            name = module_name.removesuffix("_peer").replace("_", "-")
            out.append(Contender(name, "", None, f"{type(exc).__name__}: {exc}"))
    return out


def _tenths(gaps: Sequence[float]) -> list[float]:
    """Mean gap in each tenth of the run (µs), tenths as equal as the count allows."""
    k = len(gaps)
    edges = [round(i * k / 10) for i in range(11)]
    return [
        1e6 * statistics.fmean(gaps[edges[i] : edges[i + 1]])
        for i in range(10)
        if edges[i + 1] > edges[i]
    ]


def _ours(name: str) -> bool:
    return name in OURS or name.startswith("steploop@")


def sample(runner: Runner, n: int, backend: str = "asyncio") -> dict[str, Any]:
    """One run of ``n`` turns: cost per turn, per tenth, and the whole run's wall time."""
    gc.collect()
    stamps = Stamps(last=n)
    start = time.perf_counter()
    anyio.run(runner, n, stamps, backend=backend)
    wall = time.perf_counter() - start
    calls = stamps.calls
    if len(calls) != n:
        raise AssertionError(f"expected {n} model calls, saw {len(calls)}")
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    tenths = _tenths(gaps)
    cpu = stamps.cpu
    return {
        "per_turn_us": 1e6 * (calls[-1] - calls[0]) / (n - 1),
        "per_turn_cpu_us": 1e6 * (cpu[-1] - cpu[0]) / (n - 1) if len(cpu) == 2 else None,
        "tenths_us": tenths,
        "flatness": tenths[-1] / tenths[0],
        "wall_s": wall,
    }


async def _count_passes(runner: Runner, n: int, stamps: Stamps) -> int:
    """Passes of the event loop while ``runner`` runs ``n`` turns: a task beside it
    checkpoints once per pass."""
    passes = 0
    done = False

    async def ticker() -> None:
        nonlocal passes
        while not done:
            await anyio.lowlevel.checkpoint()
            passes += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.lowlevel.checkpoint()
        first = passes
        await runner(n, stamps)
        done = True
    return passes - first


def passes_per_turn(runner: Runner, n: int, backend: str = "asyncio") -> float:
    """Event-loop passes per tool turn over a run of ``n`` turns (start and end included)."""
    passes = anyio.run(_count_passes, runner, n, Stamps(), backend=backend)
    return round(passes / (n - 1), 2)


def measure(
    sizes: Sequence[int],
    reps: int,
    *,
    peers: bool = True,
    warmup_turns: int = 20,
    backend: str = "asyncio",
    baselines: Sequence[str] = (),
    shell: bool = False,
) -> dict[str, Any]:
    """Run every contender at every size, ``reps`` interleaved repetitions; see the module doc.
    The peers run on asyncio only; ``baselines`` are git revisions whose interpreter runs too;
    ``shell`` adds steploop with ``step()`` canned."""
    field = contenders(peers and backend == "asyncio", baselines, shell)
    runnable = [c for c in field if c.runner is not None]
    failed: dict[str, str] = {}
    for c in runnable:  # imports, first-call caches, lazy compilation
        assert c.runner is not None
        try:
            sample(c.runner, warmup_turns, backend)
        except Exception as exc:
            failed[c.name] = f"{type(exc).__name__}: {exc}"
            progress(f"loop overhead: {c.name} failed to run: {failed[c.name]}")
            traceback.print_exc()
    samples: dict[str, dict[int, list[dict[str, Any]]]] = {
        c.name: {n: [] for n in sizes} for c in runnable
    }
    for rep in range(reps):
        for n in sizes:
            active = [c for c in runnable if c.name not in failed]
            shift = rep % len(active)
            for c in active[shift:] + active[:shift]:
                assert c.runner is not None
                try:
                    s = sample(c.runner, n, backend)
                except Exception as exc:
                    failed[c.name] = f"{type(exc).__name__}: {exc}"
                    progress(f"loop overhead: {c.name} failed at n={n}: {failed[c.name]}")
                    continue
                samples[c.name][n].append({**s, "rep": rep})
                progress(
                    f"loop overhead rep {rep + 1}/{reps} n={n:>5} {c.name:<14}"
                    f" {s['per_turn_us']:10.1f} µs/turn ({s['per_turn_cpu_us'] or 0:.1f} CPU)"
                    f"  flat {s['flatness']:.2f}"
                )
    report = _report(field, sizes, samples, failed)
    report["backend"] = backend
    report["passes_per_turn"] = {
        c.name: {str(n): passes_per_turn(c.runner, n, backend) for n in sizes}
        for c in runnable
        if _ours(c.name) and c.name not in failed and c.runner is not None
    }
    return report


def _report(
    field: Sequence[Contender],
    sizes: Sequence[int],
    samples: dict[str, dict[int, list[dict[str, Any]]]],
    failed: dict[str, str],
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for c in field:
        entry: dict[str, Any] = {"version": c.version}
        reason = c.missing or failed.get(c.name)
        if reason is not None:
            entry["available"] = False
            entry["reason"] = reason
        else:
            entry["available"] = True
        by_size = samples.get(c.name, {})
        for n in sizes:
            runs = by_size.get(n, [])
            if not runs:
                continue
            tenths = [
                statistics.median(t) for t in zip(*(r["tenths_us"] for r in runs), strict=True)
            ]
            entry[str(n)] = {
                "per_turn_us": summarize([r["per_turn_us"] for r in runs], 2),
                "per_turn_cpu_us": summarize([r["per_turn_cpu_us"] for r in runs], 2),
                "flatness": summarize([r["flatness"] for r in runs]),
                "tenths_us_median": [round(t, 2) for t in tenths],
                "wall_s": summarize([r["wall_s"] for r in runs], 4),
            }
        results[c.name] = entry

    def by_rep(name: str, n: int, key: str = "per_turn_us") -> dict[int, float]:
        return {r["rep"]: r[key] for r in samples.get(name, {}).get(n, []) if r[key]}

    def paired(
        num: str, den: str, n: int, key: str = "per_turn_us"
    ) -> tuple[list[float], list[float]]:
        a, b = by_rep(num, n, key), by_rep(den, n, key)
        reps = sorted(set(a) & set(b))
        return [a[i] for i in reps], [b[i] for i in reps]

    largest = max(sizes)
    peers = [c.name for c in field if not _ours(c.name) and by_rep(c.name, largest)]
    earlier = [c.name for c in field if c.name.startswith("steploop@")]
    ratios: dict[str, Any] = {}
    for n in sizes:
        row: dict[str, Any] = {}
        num, den = paired("steploop", "floor", n)
        if num:
            row["steploop_over_floor"] = ratio_summary(num, den)
        # the same ratios in process time (CPU of the process from the first call to the last),
        # which other processes on a shared machine do not inflate
        num, den = paired("steploop", "floor", n, "per_turn_cpu_us")
        if num:
            row["steploop_over_floor_cpu"] = ratio_summary(num, den)
        num, den = paired("steploop-shell", "floor", n, "per_turn_cpu_us")
        if num:
            row["steploop-shell_over_floor_cpu"] = ratio_summary(num, den)
        for e in earlier:
            num, den = paired(e, "floor", n)
            if num:
                row[f"{e}_over_floor"] = ratio_summary(num, den)
            num, den = paired("steploop", e, n)
            if num:
                row[f"steploop_over_{e}"] = ratio_summary(num, den)
            num, den = paired(e, "floor", n, "per_turn_cpu_us")
            if num:
                row[f"{e}_over_floor_cpu"] = ratio_summary(num, den)
            num, den = paired("steploop", e, n, "per_turn_cpu_us")
            if num:
                row[f"steploop_over_{e}_cpu"] = ratio_summary(num, den)
        for p in peers:
            num, den = paired(p, "steploop", n)
            if num:
                row[f"{p}_over_steploop"] = ratio_summary(num, den, 1)
        ratios[str(n)] = row

    goals: dict[str, Any] = {}
    goal_peer = f">= {GOAL_VS_PEER:g}x faster than the fastest peer at {largest} turns"
    base = by_rep("steploop", largest)
    peer_reps = [by_rep(p, largest) for p in peers]
    common = sorted(set(base).intersection(*peer_reps)) if peer_reps else []
    if common:
        # Per repetition: the fastest peer of that repetition over steploop.
        speedup = summarize([min(p[i] for p in peer_reps) / base[i] for i in common], 1)
        fastest = min(peers, key=lambda p: statistics.median(by_rep(p, largest).values()))
        goals["faster_than_fastest_peer"] = {
            "goal": goal_peer,
            "fastest_peer": fastest,
            "measured": speedup,
            "met": speedup["median"] >= GOAL_VS_PEER,
        }
    else:
        goals["faster_than_fastest_peer"] = {
            "goal": goal_peer,
            "measured": None,
            "met": None,
            "note": "no peer framework could run here",
        }
    over_floor = ratios.get(str(largest), {}).get("steploop_over_floor")
    goals["within_floor"] = {
        "goal": f"<= {GOAL_VS_FLOOR:g}x the floor at {largest} turns",
        "measured": over_floor,
        "measured_cpu": ratios.get(str(largest), {}).get("steploop_over_floor_cpu"),
        "met": None if over_floor is None else over_floor["median"] <= GOAL_VS_FLOOR,
    }
    flat = results.get("steploop", {}).get(str(largest), {}).get("flatness")
    goals["flat"] = {
        "goal": f"last tenth / first tenth <= {GOAL_FLAT:g} at {largest} turns",
        "measured": flat,
        "met": None if flat is None else flat["median"] <= GOAL_FLAT,
    }
    return {
        "sizes": list(sizes),
        "reps": max((len(v) for s in samples.values() for v in s.values()), default=0),
        "contenders": results,
        "ratios": ratios,
        "goals": goals,
    }


def profile(n: int, *, stamped: bool = False, backend: str = "asyncio") -> dict[str, Any]:
    """cProfile of one steploop run of ``n`` turns (for a missed goal). ``stamped`` (the model
    stamps its own events) is kept for callers; since the clock fix it profiles the same."""
    runner = run_steploop_stamped if stamped else run_steploop
    return profile_top(
        lambda: anyio.run(runner, n, Stamps(), backend=backend),
        focus=(
            "steploop/reducer/machine/table.py:advance",
            "steploop/reducer/context.py:microcompact",
            "steploop/reducer/drive.py:work",
            "steploop/effects/run.py:_serve",
            "steploop/effects/tools/base.py:call",
        ),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes 50,200 and 3 repetitions")
    ap.add_argument("--no-peers", action="store_true", help="steploop and the floor only")
    ap.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the anyio backend (peers run on asyncio only)",
    )
    ap.add_argument("--sizes", help="turns per run, comma-separated (default 50,200,1000)")
    ap.add_argument("--reps", type=int, help="interleaved repetitions (default 5)")
    ap.add_argument(
        "--baseline",
        action="append",
        default=[],
        metavar="REV",
        help="also run steploop with the steploop/effects/run.py of this git revision",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also a cProfile of one steploop run at the largest size",
    )
    ap.add_argument(
        "--shell",
        action="store_true",
        help="also steploop with step() canned (the interpreter's own cost beside the floor)",
    )
    args = ap.parse_args()
    sizes: tuple[int, ...] = (50, 200) if args.quick else (50, 200, 1000)
    reps = 3 if args.quick else 5
    if args.sizes:
        sizes = tuple(int(x) for x in args.sizes.split(","))
    if args.reps:
        reps = args.reps
    result = measure(
        sizes,
        reps,
        peers=not args.no_peers,
        backend=args.backend,
        baselines=args.baseline,
        shell=args.shell,
    )
    if args.profile:
        result["profile"] = profile(max(sizes), backend=args.backend)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
