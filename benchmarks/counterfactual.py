"""Counterfactual replay against exact replay, per event, by trace length (item 8).

A synthetic session of ``rounds`` tool rounds (the model says a line and reads a file, the
permission is granted, the tool answers; five events a round) whose history is never compacted:
the model reports a small usage, so the conversation grows to three messages a round, 30,000 at
10,000 rounds. The last call answers in text and the turn completes. The trace is recorded with
:func:`steploop.effects.trace.record_driver`, then replayed side by side, interleaved, in this process:

- exactly (:func:`steploop.effects.trace.replay_exact`, every digest checked);
- counterfactually (:func:`steploop.effects.trace.replay_counterfactual`) under a changed config
  (``max_turns`` set, far above the session: every request still matches the recording, so
  the whole session is re-run from recorded answers: the full cost of matching).

Goals: the counterfactual replay costs at most 1.3x the exact replay per event at every size
(the ratio taken per repetition; 1.5x before issue 24), and its cost per event is flat from
1,000 to 10,000 rounds (at 10,000 / at 1,000 <= 1.2). Before the fingerprints were chained per
conversation node, a model call's fingerprint re-encoded the whole history, which made the
replay quadratic. Times are process time (``time.process_time``), which other processes on a
shared machine do not inflate; the wall time is kept beside it.

``--baseline REV`` adds a third contender, interleaved with the two: the counterfactual replay
with the ``steploop/effects/trace/counterfactual.py`` of git revision REV (today's everything
else), so two versions of the recorded world compare side by side.

Run alone: ``python -m benchmarks.counterfactual [--rounds 1000,10000] [--reps N]
[--baseline REV]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import progress, ratio_summary, summarize
from steploop.effects.trace import record_driver, replay_counterfactual, replay_exact
from steploop.reducer import LoopConfig, LoopState, Request, default
from steploop.reducer.effects import AskPermission, CallModel, Effect, RunStopHooks, StartTool
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage

__all__ = ["GOAL_FLAT", "GOAL_RATIO", "build", "measure"]

GOAL_RATIO = 1.3  # counterfactual / exact, per event (issue 24; 1.5 before)
GOAL_FLAT = 1.2  # counterfactual per event, largest size / smallest
SAFE = ToolTraits(concurrency_safe=True, max_result_chars=None)
CHANGE = {"max_turns": 1_000_000}


def config() -> LoopConfig:
    return default()


def _answers(rounds: int) -> Any:
    def answer(effect: Effect, state: LoopState) -> Iterable[Event]:
        match effect:
            case CallModel(call_id=c) if c > rounds:
                return [
                    ModelBlockReceived(call_id=c, block=TextBlock(text="All files read.")),
                    ModelResponseEnded(
                        call_id=c,
                        model=effect.model,
                        stop_reason="end_turn",
                        usage=Usage(input_tokens=900, output_tokens=20),
                    ),
                ]
            case CallModel(call_id=c):
                return [
                    ModelBlockReceived(
                        call_id=c, block=TextBlock(text=f"Step {c}: reading the next file.")
                    ),
                    ModelBlockReceived(
                        call_id=c,
                        block=ToolUseBlock(
                            id=f"t{c}", name="Read", input={"file_path": f"f{c}.py"}
                        ),
                        tool=SAFE,
                    ),
                    ModelResponseEnded(
                        call_id=c,
                        model=effect.model,
                        stop_reason="tool_use",
                        usage=Usage(input_tokens=900, output_tokens=20),
                    ),
                ]
            case AskPermission(generation=g, tool_use_id=t):
                return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow")]
            case StartTool(generation=g, tool_use_id=t):
                return [ToolFinished(generation=g, tool_use_id=t, content=f"x = {g}\n")]
            case RunStopHooks(hooks_id=h):
                return [StopHooksFinished(hooks_id=h)]
        return []

    return answer


def build(path: str | os.PathLike[str], rounds: int) -> None:
    """Record the synthetic session of ``rounds`` tool rounds (and the final answer)."""
    record_driver(
        path,
        config(),
        Request(prompt="Read every file, one at a time."),
        _answers(rounds),
        provenance={"created_at": "synthetic", "client": None},
    )


def _timed_exact(path: Path) -> tuple[float, float, int]:
    """Process time and wall time of an exact replay (s), and its steps."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    report = replay_exact(path)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if not report.ok or not report.complete:
        raise SystemExit(f"{path} does not replay exactly: {report.describe()}")
    return cpu, wall, report.steps


def _timed_counterfactual(path: Path, steps: int, replay: Any = None) -> tuple[float, float]:
    """Process time and wall time of a counterfactual replay (s); ``replay``: another
    version's ``replay_counterfactual``."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    report = (replay or replay_counterfactual)(path, CHANGE)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    if report.status != "finished" or report.steps != steps:
        raise SystemExit(f"{path}: the counterfactual run did not re-run the session: {report}")
    return cpu, wall


def baseline(rev: str) -> Any:
    """``replay_counterfactual`` of ``steploop/effects/trace/counterfactual.py`` at git revision
    ``rev``, loaded from ``git show`` as a module of its own (today's everything else)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:steploop/effects/trace/counterfactual.py"],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    ).stdout
    module = types.ModuleType(f"_steploop_counterfactual_{abs(hash(rev))}")
    module.__file__ = f"{rev}:steploop/effects/trace/counterfactual.py"
    sys.modules[module.__name__] = module  # typing looks classes up by module
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module.replay_counterfactual


def measure(
    rounds: Sequence[int] = (1_000, 10_000), reps: int = 3, baseline_rev: str | None = None
) -> dict[str, Any]:
    """Per size: µs per event of each replay, process time (median of ``reps`` interleaved
    repetitions; the wall time beside it), and their ratio per repetition; the goals on the
    ratio and on flatness. ``baseline_rev``: also the counterfactual replay of that revision."""
    sizes: list[dict[str, Any]] = []
    old = baseline(baseline_rev) if baseline_rev else None
    order = ("exact", "counterfactual", *(("baseline",) if old is not None else ()))
    with tempfile.TemporaryDirectory(prefix="steploop-counterfactual-") as tmp:
        for n in rounds:
            path = Path(tmp) / f"session-{n}.jsonl"
            progress(f"counterfactual: recording {n:,} rounds")
            build(path, n)
            *_, steps = _timed_exact(path)  # a warm-up, and the number of events
            events = steps - 1
            cpu: dict[str, list[float]] = {k: [] for k in order}
            wall: dict[str, list[float]] = {k: [] for k in order}
            for k in range(reps):
                shift = k % len(order)
                for which in order[shift:] + order[:shift]:
                    if which == "exact":
                        c, w, _ = _timed_exact(path)
                    else:
                        c, w = _timed_counterfactual(
                            path, steps, old if which == "baseline" else None
                        )
                    cpu[which].append(1e6 * c / events)
                    wall[which].append(1e6 * w / events)
            exact, counter = cpu["exact"], cpu["counterfactual"]
            progress(
                f"counterfactual: {n:,} rounds ({events:,} events): exact "
                f"{summarize(exact)['median']} µs/event, counterfactual "
                f"{summarize(counter)['median']} µs/event (process time)"
            )
            size: dict[str, Any] = {
                "rounds": n,
                "events": events,
                "bytes": path.stat().st_size,
                "exact_us_per_event": summarize(exact),
                "counterfactual_us_per_event": summarize(counter),
                "ratio": ratio_summary(counter, exact),
                "wall": {
                    "exact_us_per_event": summarize(wall["exact"]),
                    "counterfactual_us_per_event": summarize(wall["counterfactual"]),
                    "ratio": ratio_summary(wall["counterfactual"], wall["exact"]),
                },
            }
            if old is not None:
                size["baseline"] = {
                    "rev": baseline_rev,
                    "counterfactual_us_per_event": summarize(cpu["baseline"]),
                    "ratio": ratio_summary(cpu["baseline"], exact),
                    "counterfactual_over_baseline": ratio_summary(counter, cpu["baseline"]),
                }
            sizes.append(size)
            path.unlink()
    worst = max(s["ratio"]["median"] for s in sizes)
    flat = (
        sizes[-1]["counterfactual_us_per_event"]["median"]
        / sizes[0]["counterfactual_us_per_event"]["median"]
    )
    first, last = sizes[0]["rounds"], sizes[-1]["rounds"]
    shown = ", ".join(f"{s['rounds']:,}" for s in sizes)
    return {
        "change": CHANGE,
        "clock": "process time (time.process_time); wall time under each size's 'wall'",
        "reps": reps,
        "sizes": sizes,
        "goals": {
            "ratio": {
                "goal": f"counterfactual / exact replay per event <= {GOAL_RATIO:g}"
                f" at {shown} rounds (the worst size)",
                "measured": round(worst, 3),
                "met": worst <= GOAL_RATIO,
            },
            "flat": {
                "goal": f"counterfactual per event at {last:,} rounds / at {first:,}"
                f" <= {GOAL_FLAT:g}",
                "measured": round(flat, 3),
                "met": flat <= GOAL_FLAT,
            },
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.counterfactual")
    ap.add_argument("--rounds", default="1000,10000", help="comma-separated session lengths")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="also the counterfactual replay of steploop/effects/trace/counterfactual.py at REV",
    )
    args = ap.parse_args(argv)
    rounds = [int(x) for x in args.rounds.split(",") if x.strip()]
    json.dump(measure(rounds, args.reps, args.baseline), sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
