"""Exact-replay throughput and peak memory on synthetic traces (issue 4, "Figures").

The synthetic turn never ends: every round the model says a line of text and calls a safe
tool (Read), the permission is granted and the tool answers, so each round is five events
(two blocks, the end of the response, the permission, the tool result). The auto-compact
threshold is set low (``autocompact_buffer``), so a compaction replaces the history every few
dozen rounds: the conversation, and with it the state, stays bounded however long the trace is.

For each size the trace is recorded with :func:`effects.trace.record_driver`, then replayed
with :func:`effects.trace.replay_exact` twice: once plainly for events/s, once under
``tracemalloc`` for the peak memory of the replay alone.

The peak includes ``reducer/canonical.py``'s memo of canonical texts, a global cache bounded by
its entry count that keeps the memoised values alive; ``digest_memo_entries`` says how full it
was. The replay itself holds one state, the message window and one line at a time.

The tracemalloc pass runs about ten times slower than the plain one (a few minutes per
100,000 events); ``--no-memory`` skips it. ``peak_allocated_blocks_growth`` (sampled from
``sys.getallocatedblocks()`` during the plain pass) is a cheap proxy for the same thing.
Set STEPLOOP_KEEP_TRACES=1 to keep the trace files (they are deleted otherwise).

``--verify checkpoint`` replays with the checkpoint policy (state digests at checkpoints, see
specs/trace-format.md section 7) instead of the default, which checks every digest.

Run: .venv/bin/python -m benchmarks.replay_throughput [--events N ...] [--quick] [--no-memory]
     [--verify every|checkpoint]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from effects.trace import VERIFY_POLICIES, StepRecord, Verify, record_driver, replay_exact
from reducer import LoopConfig, LoopState, Request, canonical, default
from reducer.effects import AskPermission, CallModel, Compact, Effect, RunStopHooks, StartTool
from reducer.events import (
    CompactionFinished,
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from reducer.messages import SystemMessage, TextBlock, ToolUseBlock, Usage, UserMessage

SAFE = ToolTraits(concurrency_safe=True, max_result_chars=None)
FLAT_RATIO = 1.5


def synthetic_config() -> LoopConfig:
    """The default profile with an auto-compact threshold of 2,000 tokens."""
    return default(autocompact_buffer=190_000)


def _answer(effect: Effect, state: LoopState) -> Iterable[Event]:
    n = getattr(effect, "call_id", 0)
    at = n * 10
    match effect:
        case CallModel(call_id=cid):
            used = effect.conversation.token_count()
            return [
                ModelBlockReceived(
                    call_id=cid,
                    block=TextBlock(text=f"Step {cid}: reading the next file."),
                    at_ms=at,
                ),
                ModelBlockReceived(
                    call_id=cid,
                    block=ToolUseBlock(
                        id=f"t{cid}", name="Read", input={"file_path": f"f{cid % 7}.py"}
                    ),
                    tool=SAFE,
                    at_ms=at + 1,
                ),
                ModelResponseEnded(
                    call_id=cid,
                    model=effect.model,
                    stop_reason="tool_use",
                    usage=Usage(input_tokens=used, output_tokens=20),
                    at_ms=at + 2,
                ),
            ]
        case AskPermission(generation=g, tool_use_id=t):
            return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow", at_ms=at + 3)]
        case StartTool(generation=g, tool_use_id=t):
            return [ToolFinished(generation=g, tool_use_id=t, content="x = 1\n" * 20, at_ms=at + 4)]
        case Compact(compact_id=c):
            return [
                CompactionFinished(
                    compact_id=c,
                    messages=(
                        SystemMessage(
                            id=f"c{c}-boundary", subtype="compact_boundary", text="compacted"
                        ),
                        UserMessage(
                            id=f"c{c}-summary",
                            content=(TextBlock(text=f"Summary {c}: files read so far."),),
                            is_meta=True,
                            origin="compact_summary",
                        ),
                    ),
                )
            ]
        case RunStopHooks(hooks_id=h):
            return [StopHooksFinished(hooks_id=h)]
    return []


def build_synthetic(path: str | os.PathLike[str], events: int) -> None:
    """Record a synthetic trace of exactly ``events`` events (plus the start step)."""
    record_driver(
        path,
        synthetic_config(),
        Request(prompt="Read every file, one at a time."),
        _answer,
        max_events=events,
        provenance={"created_at": "synthetic", "client": None},
    )


def measure_size(
    events: int, directory: Path, memory: bool = True, verify: Verify = "every"
) -> dict[str, Any]:
    """Record a synthetic trace of ``events`` events, replay it, report the figures."""
    path = directory / f"synthetic-{events}.jsonl"
    t0 = time.perf_counter()
    build_synthetic(path, events)
    record_s = time.perf_counter() - t0
    base = sys.getallocatedblocks()
    peak_blocks = base

    def sample(rec: StepRecord) -> None:
        nonlocal peak_blocks
        if rec.i % 64 == 0:
            peak_blocks = max(peak_blocks, sys.getallocatedblocks())

    report = replay_exact(path, on_step=sample, verify=verify)
    assert report.ok and report.steps == events + 1, report.describe()
    out: dict[str, Any] = {
        "events": events,
        "verify": verify,
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "record_s": round(record_s, 2),
        "replay_s": round(report.elapsed_s, 2),
        "events_per_s": round(report.events_per_s),
        "message_records": report.messages,
        "peak_allocated_blocks_growth": peak_blocks - base,
    }
    if memory:
        tracemalloc.start()
        tracemalloc.reset_peak()
        replay_exact(path, verify=verify)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["peak_replay_mb"] = round(peak / 1e6, 2)
        # reducer/canonical.py memoises canonical texts (a bounded cache that keeps its values
        # alive); how full it is explains most of the difference between sizes
        memo = getattr(canonical, "_MEMO", None)
        if memo is not None:
            out["digest_memo_entries"] = len(memo)
    if not os.environ.get("STEPLOOP_KEEP_TRACES"):
        path.unlink()
    return out


def run_benchmark(
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    memory: bool = True,
    verify: Verify = "every",
) -> dict[str, Any]:
    """Measure every size; ``quick``: 2,000 and 20,000 events instead of 10,000 and 1,000,000."""
    chosen = list(sizes or ((2_000, 20_000) if quick else (10_000, 1_000_000)))
    with tempfile.TemporaryDirectory() as tmp:
        results = [measure_size(n, Path(tmp), memory, verify) for n in chosen]
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": results,
    }
    if memory and len(results) >= 2:
        lo, hi = results[0], results[-1]
        ratio = round(hi["peak_replay_mb"] / lo["peak_replay_mb"], 3)
        out["goals"] = {
            "flat_replay_memory": {
                "goal": f"peak replay memory at {hi['events']:,} events / at {lo['events']:,} "
                f"<= {FLAT_RATIO:g}",
                "measured": ratio,
                "met": ratio <= FLAT_RATIO,
            }
        }
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--events", type=int, action="append", help="trace size (repeatable)")
    p.add_argument("--quick", action="store_true", help="2,000 and 20,000 events")
    p.add_argument("--no-memory", action="store_true", help="skip the (slow) tracemalloc pass")
    p.add_argument(
        "--verify",
        choices=VERIFY_POLICIES,
        default="every",
        help="exact replay's policy: every state digest (default) or at checkpoints",
    )
    args = p.parse_args(argv)
    result = run_benchmark(args.quick, args.events, not args.no_memory, args.verify)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
