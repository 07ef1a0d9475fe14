"""Exact-replay throughput and peak memory on synthetic traces (issue 4, "Figures").

The synthetic turn never ends: every round the model says a line of text and calls a safe
tool (Read), the permission is granted and the tool answers, so each round is five events
(two blocks, the end of the response, the permission, the tool result). The auto-compact
threshold is set low (``autocompact_buffer``), so a compaction replaces the history every few
dozen rounds: the conversation, and with it the state, stays bounded however long the trace is.

For each size the trace is recorded with :func:`steploop.effects.trace.record_driver`, then replayed
with :func:`steploop.effects.trace.replay_exact`: once in a fresh interpreter (:func:`replay_in_child`)
for events/s and peak memory, and once here under ``tracemalloc`` for the peak memory the
Python objects of the replay alone take.

Peak memory, three ways:

* ``peak_rss_mb``: the fresh interpreter's peak resident set size, replay included, next to
  ``rss_baseline_mb``, the same before the replay began (steploop imported). This is the peak
  memory a user sees, and it costs no extra replay, so it is taken at every size.
* ``peak_replay_mb`` (tracemalloc): only the replay's own allocations. The pass runs about
  ten times slower than the plain replay (a few minutes per 100,000 events); ``--no-memory``
  skips it. It includes ``steploop/reducer/canonical.py``'s memo of canonical texts, a global cache
  bounded by its entry count that keeps the memoised values alive; ``digest_memo_entries``
  says how full it was. The replay itself holds one state, the message window and one line
  at a time.
* ``peak_allocated_blocks_growth``: ``sys.getallocatedblocks()`` sampled during the timed
  replay, above its value before; a coarse proxy, which also counts caches warming up.

Set STEPLOOP_KEEP_TRACES=1 to keep the trace files (they are deleted otherwise).

``--verify checkpoint`` replays with the checkpoint policy (state digests at checkpoints, see
specs/trace-format.md section 7) instead of the default, which checks every digest.

``--breakdown`` (:func:`breakdown`, in a fresh interpreter) also takes the replay of the first
size apart, the parts interleaved over repetitions: reading and decoding the file alone,
``step()`` alone over the decoded events, and the whole replay under each verify policy.
``step()`` alone bounds what any replay of these events can reach on this machine, however
cheap reading and checking get.

Run: .venv/bin/python -m benchmarks.replay_throughput [--events N ...] [--quick] [--no-memory]
     [--verify every|checkpoint] [--breakdown]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from steploop.effects.trace import (
    VERIFY_POLICIES,
    StepRecord,
    TraceHeader,
    TraceReader,
    Verify,
    record_driver,
    replay_exact,
)
from steploop.reducer import LoopConfig, LoopState, Request, canonical, default, start, step
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import SystemMessage, TextBlock, ToolUseBlock, Usage, UserMessage

SAFE = ToolTraits(concurrency_safe=True, max_result_chars=None)
FLAT_RATIO = 1.10  # "equal" peak memory, as in the suite (benchmarks/external.py)


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
    events: int,
    directory: Path,
    memory: bool = True,
    verify: Verify = "every",
    *,
    breakdown_reps: int = 0,
) -> dict[str, Any]:
    """Record a synthetic trace of ``events`` events, replay it, report the figures.

    The timed replay runs in a fresh interpreter (:func:`replay_in_child`), which also reports
    its peak RSS and samples the allocated-blocks proxy. ``memory``: also replay here under
    tracemalloc; ``breakdown_reps``: if above 0, take the replay apart (:func:`breakdown`, in
    another fresh interpreter) over that many repetitions.
    """
    path = directory / f"synthetic-{events}.jsonl"
    t0 = time.perf_counter()
    build_synthetic(path, events)
    record_s = time.perf_counter() - t0
    child = replay_in_child(path, verify)
    if child["steps"] != events + 1:
        raise RuntimeError(f"replayed {child['steps']} steps, expected {events + 1}")
    out: dict[str, Any] = {
        "events": events,
        "verify": verify,
        "file_mb": round(path.stat().st_size / 1e6, 1),
        "record_s": round(record_s, 2),
        "replay_s": round(child["elapsed_s"], 2),
        "events_per_s": round(child["events_per_s"]),
        "message_records": child["messages"],
        "peak_allocated_blocks_growth": child["peak_allocated_blocks_growth"],
        "rss_baseline_mb": round(child["baseline_kib"] / 1024, 1),
        "peak_rss_mb": round(child["peak_kib"] / 1024, 1),
        "rss_source": child["source"],
    }
    if breakdown_reps > 0:
        out["breakdown"] = breakdown_in_child(path, breakdown_reps)
    if memory:
        tracemalloc.start()
        tracemalloc.reset_peak()
        replay_exact(path, verify=verify)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        out["peak_replay_mb"] = round(peak / 1e6, 2)
        # steploop/reducer/canonical.py memoises canonical texts (a bounded cache that keeps its values
        # alive); how full it is explains most of the difference between sizes
        memo = getattr(canonical, "_MEMO", None)
        if memo is not None:
            out["digest_memo_entries"] = len(memo)
    if not os.environ.get("STEPLOOP_KEEP_TRACES"):
        path.unlink()
    return out


ROOT = Path(__file__).resolve().parent.parent


def replay_in_child(path: str | os.PathLike[str], verify: Verify = "every") -> dict[str, Any]:
    """Replay ``path`` exactly in a fresh interpreter and report what it measured.

    Keys: ``events_per_s``, ``elapsed_s``, ``steps``, ``messages``;
    ``peak_allocated_blocks_growth`` (``sys.getallocatedblocks()`` sampled every 64 steps,
    above its value before the replay); ``baseline_kib`` (peak RSS with steploop imported and
    nothing replayed yet) and ``peak_kib`` (the most the process ever held, replay included).
    The RSS figures are Linux's ``VmHWM``, the high-water mark of this process image
    (``ru_maxrss`` would also count the parent's pages at the fork); elsewhere they are
    ``ru_maxrss``, and ``source`` says which.
    """
    return _in_child("replay", path, verify=verify)


def breakdown_in_child(path: str | os.PathLike[str], reps: int = 5) -> dict[str, Any]:
    """:func:`breakdown` in a fresh interpreter.

    The suite's own process has held the peers and every earlier item by then; its cyclic
    garbage collector has that much more to walk, which would be charged to the replay.
    """
    return _in_child("breakdown", path, reps=reps)


def profile_in_child(path: str | os.PathLike[str], verify: Verify = "every") -> dict[str, Any]:
    """cProfile of ``replay_exact(path)`` in a fresh interpreter, after one unprofiled replay
    of the same trace (so the profile is of a warm replay, as the timed figures are)."""
    return _in_child("profile", path, verify=verify)


CHILD_KINDS = ("replay", "breakdown", "profile")


def _in_child(
    kind: str, path: str | os.PathLike[str], *, verify: Verify = "every", reps: int = 5
) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(ROOT), env.get("PYTHONPATH")) if x)
    args = ["--child", kind, str(path), "--verify", verify, "--reps", str(reps)]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.replay_throughput", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"the {kind} child failed ({proc.returncode}): {proc.stderr.strip()}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


def _child(kind: str, path: str, verify: Verify, reps: int) -> dict[str, Any]:
    if kind == "replay":
        return _replay_child(path, verify)
    if kind == "breakdown":
        return breakdown(path, reps)
    if kind == "profile":
        from benchmarks.common import Profiler

        if not replay_exact(path, verify=verify).ok:
            raise SystemExit(f"{path} does not replay exactly")
        with Profiler() as prof:
            replay_exact(path, verify=verify)
        return prof.report(focus=("steploop/reducer/machine/table.py:advance", "steploop/effects/trace/replay.py:_check_step"))
    raise SystemExit(f"unknown child kind {kind!r}; expected one of {', '.join(CHILD_KINDS)}")


def _high_water_kib() -> tuple[int, str]:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]), "VmHWM"
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "ru_maxrss"


def _replay_child(path: str, verify: Verify) -> dict[str, Any]:
    before, source = _high_water_kib()
    base = sys.getallocatedblocks()
    peak_blocks = base

    def sample(rec: StepRecord) -> None:
        nonlocal peak_blocks
        if rec.i % 64 == 0:
            peak_blocks = max(peak_blocks, sys.getallocatedblocks())

    report = replay_exact(path, on_step=sample, verify=verify)
    if not report.ok:
        raise SystemExit(report.describe())
    peak, _ = _high_water_kib()
    out = {
        "events_per_s": report.events_per_s,
        "elapsed_s": report.elapsed_s,
        "steps": report.steps,
        "messages": report.messages,
        "peak_allocated_blocks_growth": peak_blocks - base,
        "baseline_kib": before,
        "peak_kib": peak,
        "source": source,
    }
    return out


def breakdown(path: str | os.PathLike[str], reps: int = 5) -> dict[str, Any]:
    """Where an exact replay of ``path`` spends its time, in µs per event.

    Interleaved over ``reps`` repetitions (each runs every part once), medians:
    ``read``: iterating a :class:`TraceReader` (parse, decode, validate); ``step``: ``step()``
    over the already decoded events; ``replay_every`` and ``replay_checkpoint``: the whole
    ``replay_exact`` under each verify policy. ``step_ceiling_events_per_s`` is 10^6 / step:
    the throughput a replay could not pass even if reading and checking cost nothing.
    """
    header: TraceHeader | None = None
    events: list[Event] = []
    for rec in TraceReader(path):
        if isinstance(rec, TraceHeader):
            header = rec
        elif isinstance(rec, StepRecord) and rec.event is not None:
            events.append(rec.event)
    assert header is not None and events
    cfg = header.config

    def read() -> None:
        for _ in TraceReader(path):
            pass

    def step_only() -> None:
        s, _ = start(header.request, cfg, header.session)
        for e in events:
            s, _ = step(s, e, cfg)

    def every() -> None:
        assert replay_exact(path, verify="every").ok

    def checkpoint() -> None:
        assert replay_exact(path, verify="checkpoint").ok

    parts: dict[str, Any] = {
        "read": read,
        "step": step_only,
        "replay_every": every,
        "replay_checkpoint": checkpoint,
    }
    samples: dict[str, list[float]] = {k: [] for k in parts}
    for rep in range(reps):
        order = list(parts)
        order = order[rep % len(order) :] + order[: rep % len(order)]  # rotate who goes first
        for k in order:
            t0 = time.perf_counter()
            parts[k]()
            samples[k].append((time.perf_counter() - t0) / len(events) * 1e6)
    us = {k: round(statistics.median(v), 2) for k, v in samples.items()}
    return {
        "events": len(events),
        "reps": reps,
        "us_per_event": us,
        "step_ceiling_events_per_s": round(1e6 / us["step"]),
        "events_per_s": {
            "every": round(1e6 / us["replay_every"]),
            "checkpoint": round(1e6 / us["replay_checkpoint"]),
        },
    }


def run_benchmark(
    quick: bool = False,
    sizes: Sequence[int] | None = None,
    memory: bool = True,
    verify: Verify = "every",
    with_breakdown: bool = False,
) -> dict[str, Any]:
    """Measure every size; ``quick``: 2,000 and 20,000 events instead of 10,000 and 1,000,000.
    ``with_breakdown``: take the first size's replay apart (5 repetitions)."""
    chosen = list(sizes or ((2_000, 20_000) if quick else (10_000, 1_000_000)))
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            measure_size(
                n, Path(tmp), memory, verify, breakdown_reps=5 if with_breakdown and k == 0 else 0
            )
            for k, n in enumerate(chosen)
        ]
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "results": results,
    }
    goals: dict[str, Any] = {}
    if len(results) >= 2:
        lo, hi = results[0], results[-1]
        if memory:
            ratio = round(hi["peak_replay_mb"] / lo["peak_replay_mb"], 3)
            goals["flat_replay_memory"] = {
                "goal": f"tracemalloc peak at {hi['events']:,} events / at {lo['events']:,} "
                f"<= {FLAT_RATIO:g}",
                "measured": ratio,
                "met": ratio <= FLAT_RATIO,
            }
        ratio = round(hi["peak_rss_mb"] / lo["peak_rss_mb"], 3)
        goals["flat_peak_rss"] = {
            "goal": f"peak RSS at {hi['events']:,} events / at {lo['events']:,} <= {FLAT_RATIO:g}",
            "measured": ratio,
            "met": ratio <= FLAT_RATIO,
        }
        out["goals"] = goals
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--events", type=int, action="append", help="trace size (repeatable)")
    p.add_argument("--quick", action="store_true", help="2,000 and 20,000 events")
    p.add_argument("--no-memory", action="store_true", help="skip the (slow) tracemalloc pass")
    p.add_argument(
        "--breakdown",
        action="store_true",
        help="also take the replay of the first size apart (read, step(), verify policies)",
    )
    p.add_argument("--child", nargs=2, metavar=("KIND", "TRACE"), help=argparse.SUPPRESS)
    p.add_argument("--reps", type=int, default=5, help=argparse.SUPPRESS)
    p.add_argument(
        "--verify",
        choices=VERIFY_POLICIES,
        default="every",
        help="exact replay's policy: every state digest (default) or at checkpoints",
    )
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(_child(args.child[0], args.child[1], args.verify, args.reps)))
        return
    result = run_benchmark(args.quick, args.events, not args.no_memory, args.verify, args.breakdown)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
