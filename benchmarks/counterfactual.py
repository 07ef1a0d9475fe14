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

Goals: the counterfactual replay costs at most 1.5x the exact replay per event at every size
(the ratio taken per repetition), and its cost per event is flat from 1,000 to 10,000 rounds
(at 10,000 / at 1,000 <= 1.2). Before the fingerprints were chained per conversation node, a
model call's fingerprint re-encoded the whole history, which made the replay quadratic.

Run alone: ``python -m benchmarks.counterfactual [--rounds 1000,10000] [--reps N]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time
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

GOAL_RATIO = 1.5  # counterfactual / exact, per event
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


def _timed_exact(path: Path) -> tuple[float, int]:
    gc.collect()
    t0 = time.perf_counter()
    report = replay_exact(path)
    elapsed = time.perf_counter() - t0
    if not report.ok or not report.complete:
        raise SystemExit(f"{path} does not replay exactly: {report.describe()}")
    return elapsed, report.steps


def _timed_counterfactual(path: Path, steps: int) -> float:
    gc.collect()
    t0 = time.perf_counter()
    report = replay_counterfactual(path, CHANGE)
    elapsed = time.perf_counter() - t0
    if report.status != "finished" or report.steps != steps:
        raise SystemExit(f"{path}: the counterfactual run did not re-run the session: {report}")
    return elapsed


def measure(rounds: Sequence[int] = (1_000, 10_000), reps: int = 3) -> dict[str, Any]:
    """Per size: µs per event of each replay (median of ``reps`` interleaved repetitions) and
    their ratio per repetition; the goals on the ratio and on flatness."""
    sizes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="steploop-counterfactual-") as tmp:
        for n in rounds:
            path = Path(tmp) / f"session-{n}.jsonl"
            progress(f"counterfactual: recording {n:,} rounds")
            build(path, n)
            _, steps = _timed_exact(path)  # a warm-up, and the number of events
            events = steps - 1
            exact: list[float] = []
            counter: list[float] = []
            for k in range(reps):
                for which in ("exact", "counterfactual")[:: 1 if k % 2 == 0 else -1]:
                    if which == "exact":
                        exact.append(1e6 * _timed_exact(path)[0] / events)
                    else:
                        counter.append(1e6 * _timed_counterfactual(path, steps) / events)
            progress(
                f"counterfactual: {n:,} rounds ({events:,} events): exact "
                f"{summarize(exact)['median']} µs/event, counterfactual "
                f"{summarize(counter)['median']} µs/event"
            )
            sizes.append(
                {
                    "rounds": n,
                    "events": events,
                    "bytes": path.stat().st_size,
                    "exact_us_per_event": summarize(exact),
                    "counterfactual_us_per_event": summarize(counter),
                    "ratio": ratio_summary(counter, exact),
                }
            )
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
    args = ap.parse_args(argv)
    rounds = [int(x) for x in args.rounds.split(",") if x.strip()]
    json.dump(measure(rounds, args.reps), sys.stdout, indent=2, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
