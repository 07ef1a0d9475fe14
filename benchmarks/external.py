"""Items 3 and 6, measured with code that other parts of the project own.

- Item 3, exact replay throughput and peak memory: :mod:`benchmarks.replay_throughput`
  (``measure(events, directory, memory=True)`` records a synthetic trace with
  ``effects.trace.record_driver`` and replays it with ``replay_exact``, once plainly and once
  under ``tracemalloc``).
- Item 6, explorer throughput: :func:`reducer.explore.explore` at the CI bound
  (``DEFAULT_ROUNDS`` model calls per path) on the default profile.

When the module is missing, or its entry point is not the one described here, the item says
"not available" with the reason instead of a number.
"""

from __future__ import annotations

import importlib
import inspect
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Profiler, progress

__all__ = ["REPLAY_GOAL_EVENTS_PER_S", "REPLAY_MEMORY_TOLERANCE", "explorer", "replay"]

REPLAY_GOAL_EVENTS_PER_S = 100_000
REPLAY_MEMORY_TOLERANCE = 1.10  # "equal" peak memory: the larger trace within 10% of the smaller


def _module(name: str) -> tuple[Any, str | None]:
    try:
        return importlib.import_module(name), None
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            return None, f"{name} is not in this tree"
        return None, f"{name} failed to import: {exc}"
    except Exception as exc:
        return None, f"{name} failed to import: {type(exc).__name__}: {exc}"


def _takes(fn: Any, *names: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return all(n in params for n in names)


def replay(quick: bool) -> dict[str, Any]:
    """Item 3: events/s at the largest trace; peak memory, small trace against large.

    Full run: 10,000 and 100,000 events with the tracemalloc pass (it runs about ten times
    slower than the replay itself), 1,000,000 events without it. Peak memory at 1,000,000 is
    compared through ``peak_allocated_blocks_growth``, which ``measure_size`` samples during
    the plain replay at every size; the tracemalloc peaks compare 10,000 with 100,000.
    """
    module, problem = _module("benchmarks.replay_throughput")
    if module is None:
        return {"available": False, "reason": problem}
    measure = getattr(module, "measure_size", None) or getattr(module, "measure", None)
    if measure is None or not _takes(measure, "events", "directory", "memory"):
        return {
            "available": False,
            "reason": "benchmarks.replay_throughput has no measure_size(events, directory, memory)",
        }
    plan = (
        [(2_000, True), (10_000, True)]
        if quick
        else [
            (10_000, True),
            (100_000, True),
            (1_000_000, False),
        ]
    )
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="steploop-replay-") as tmp:
        for n, memory in plan:
            progress(f"replay: recording and replaying {n:,} events (tracemalloc: {memory})")
            start = time.perf_counter()
            result = dict(measure(n, Path(tmp), memory=memory))
            result["elapsed_s"] = round(time.perf_counter() - start, 1)
            runs.append(result)
            (Path(tmp) / f"synthetic-{n}.jsonl").unlink(missing_ok=True)
            progress(
                f"replay: {n:,} events: {result.get('events_per_s')} events/s,"
                f" tracemalloc peak {result.get('peak_replay_mb', '-')} MB,"
                f" allocated blocks growth {result.get('peak_allocated_blocks_growth', '-')}"
            )
    small, large = runs[0], runs[-1]
    goals: dict[str, Any] = {}
    speed = float(large["events_per_s"])
    goals["throughput"] = {
        "goal": f">= {REPLAY_GOAL_EVENTS_PER_S:,} events/s replaying {large['events']:,} events",
        "measured": speed,
        "met": speed >= REPLAY_GOAL_EVENTS_PER_S,
    }
    key = "peak_allocated_blocks_growth"
    if key in small and key in large and small[key] > 0:
        ratio = float(large[key]) / float(small[key])
        goals["bounded_memory_blocks"] = {
            "goal": f"peak allocated blocks at {large['events']:,} events / at"
            f" {small['events']:,} <= {REPLAY_MEMORY_TOLERANCE:g} (equal)",
            "measured": round(ratio, 3),
            "met": ratio <= REPLAY_MEMORY_TOLERANCE,
        }
    traced = [r for r in runs if "peak_replay_mb" in r]
    if len(traced) >= 2:
        lo, hi = traced[0], traced[-1]
        ratio = float(hi["peak_replay_mb"]) / float(lo["peak_replay_mb"])
        goals["bounded_memory_tracemalloc"] = {
            "goal": f"tracemalloc peak at {hi['events']:,} events / at {lo['events']:,}"
            f" <= {REPLAY_MEMORY_TOLERANCE:g} (equal)",
            "measured": round(ratio, 3),
            "met": ratio <= REPLAY_MEMORY_TOLERANCE,
        }
    out: dict[str, Any] = {
        "available": True,
        "entry_point": f"benchmarks.replay_throughput.{measure.__name__}",
        "runs": runs,
        "note": "one run per size; events/s from the plain replay; tracemalloc peaks from a"
        " second replay where marked (about ten times slower, so not at the largest size);"
        " allocated-blocks growth sampled during the plain replay at every size",
        "goals": goals,
    }
    build = getattr(module, "build_synthetic", None)
    if not goals["throughput"]["met"] and build is not None:
        out["profile"] = _replay_profile(build, 5_000)
    return out


def _replay_profile(build: Any, events: int) -> dict[str, Any]:
    """cProfile of ``effects.trace.replay_exact`` on a synthetic trace of ``events`` events."""
    from effects.trace import replay_exact

    progress(f"replay: profiling the replay of {events:,} events")
    with tempfile.TemporaryDirectory(prefix="steploop-replay-") as tmp:
        path = Path(tmp) / "profiled.jsonl"
        build(path, events)
        with Profiler() as prof:
            replay_exact(path)
    return prof.report(focus=("reducer/machine.py:step", "effects/trace.py:_check_step"))


def explorer(quick: bool) -> dict[str, Any]:
    """Item 6: abstract states per second exploring the default profile at the CI bound."""
    module, problem = _module("reducer.explore")
    if module is None:
        return {"available": False, "reason": problem}
    explore = getattr(module, "explore", None)
    bound = getattr(module, "DEFAULT_ROUNDS", None)
    if explore is None or bound is None or not _takes(explore, "config", "rounds", "max_states"):
        return {
            "available": False,
            "reason": "reducer.explore has no explore(config, rounds=, max_states=) and"
            " DEFAULT_ROUNDS",
        }
    from reducer import default

    max_states = 5_000 if quick else None

    def on_progress(p: Any) -> None:
        progress(
            f"explorer: {p.states:,} states, {p.transitions:,} transitions,"
            f" layer {p.rounds}/{p.bound}"
        )

    start = time.perf_counter()
    kwargs: dict[str, Any] = {"rounds": bound, "max_states": max_states}
    if _takes(explore, "on_progress", "progress_every"):
        kwargs.update(on_progress=on_progress, progress_every=20_000)
    report = explore(default(), **kwargs)
    elapsed = time.perf_counter() - start
    return {
        "available": True,
        "entry_point": "reducer.explore.explore",
        "results": {
            "profile": "default",
            "rounds_bound": bound,
            "max_states": max_states,
            "states": report.states,
            "transitions": report.transitions,
            "expanded": report.expanded,
            "complete": report.complete,
            "report_ok": report.ok,
            "elapsed_s": round(elapsed, 2),
            "states_per_s": round(report.states / elapsed, 1),
            "transitions_per_s": round(report.transitions / elapsed, 1),
        },
    }
