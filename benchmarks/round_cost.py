"""Cost of one full round through step() at growing history sizes (issue: reducer).

One round = ModelBlockReceived (a safe tool call) → PermissionAnswered → ToolFinished →
ModelResponseEnded, which ends the round with next_turn, runs the next round's pipeline and
returns the next CallModel. The state before the round is built once per history size; the
reducer is pure, so every repetition starts from the same state.

Item 2 of the suite (benchmarks/README.md). Run alone: ``python -m benchmarks.round_cost``.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from benchmarks.common import machine, profile_top, progress, ratio_summary, summarize
from steploop.reducer import LoopState, Request, Session, default, start, step
from steploop.reducer.conversation import Conversation
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.state import Ids

SAFE = ToolTraits(concurrency_safe=True, max_result_chars=None)


def history(n: int) -> Conversation:
    """n messages of earlier tool rounds (assistant tool_use + user tool_result pairs)."""
    msgs: list[Message] = [UserMessage(id="h0", content=(TextBlock(text="start"),))]
    i = 0
    while len(msgs) < n:
        i += 1
        msgs.append(
            AssistantMessage(
                id=f"h{i}a",
                response_id=f"hr{i}",
                model="m",
                content=(ToolUseBlock(id=f"old{i}", name="Read", input={"file_path": "a.py"}),),
                usage=Usage(input_tokens=1000, output_tokens=10),
            )
        )
        msgs.append(
            UserMessage(
                id=f"h{i}u",
                content=(ToolResultBlock(tool_use_id=f"old{i}", content="x" * 40),),
                origin="tool_result",
            )
        )
    return Conversation.of(msgs[:n])


@functools.cache
def setup(n: int) -> tuple[LoopState, tuple[Event, ...]]:
    """The state before the round at ``n`` messages of history, and the round's events
    (every event on one clock, ``at_ms`` 0, as the interpreter stamps them)."""
    cfg = default()
    session = Session(conversation=history(n), ids=Ids(msg=10 * n))
    s, _ = start(Request(prompt="go"), cfg, session)
    cid, gen = s.round.call_id, s.round.generation
    events: tuple[Event, ...] = (
        ModelBlockReceived(
            call_id=cid,
            block=ToolUseBlock(id="t1", name="Read", input={"file_path": "b.py"}),
            tool=SAFE,
        ),
        PermissionAnswered(generation=gen, tool_use_id="t1", decision="allow"),
        ToolFinished(generation=gen, tool_use_id="t1", content="print('hi')\n" * 5),
        ModelResponseEnded(
            call_id=cid,
            model=cfg.model,
            stop_reason="tool_use",
            usage=Usage(input_tokens=1200, output_tokens=12),
        ),
    )
    return s, events


def time_round(n: int, reps: int) -> list[float]:
    """Seconds per round, ``reps`` times, all from the same state."""
    cfg = default()
    s0, events = setup(n)
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        s = s0
        for e in events:
            s, _fx = step(s, e, cfg)
        samples.append(time.perf_counter() - t0)
    assert s.transition is not None and s.transition.TAG == "next_turn"
    return samples


GOAL_RATIO = 1.3  # a round at the largest history at most this many times the smallest


def measure(sizes: Sequence[int], reps: int, blocks: int = 5) -> dict[str, Any]:
    """Median cost of a round per size, interleaved in ``blocks`` blocks of ``reps`` rounds.

    The ratio largest/smallest is taken per block (measured side by side) and summarized
    over the blocks.
    """
    medians: dict[int, list[float]] = {n: [] for n in sizes}
    for b in range(blocks):
        order = list(sizes) if b % 2 == 0 else list(reversed(sizes))
        for n in order:
            medians[n].append(statistics.median(time_round(n, reps)))
        progress(
            f"round cost block {b + 1}/{blocks}: "
            + ", ".join(f"{n} msgs {1e6 * medians[n][-1]:.1f} µs" for n in sizes)
        )
    lo, hi = sizes[0], sizes[-1]
    ratio = ratio_summary(medians[hi], medians[lo])
    return {
        "sizes": list(sizes),
        "rounds_per_block": reps,
        "blocks": blocks,
        "us_per_round": {str(n): summarize([1e6 * x for x in medians[n]], 2) for n in sizes},
        "ratio_largest_over_smallest": ratio,
        "goals": {
            "flat_in_history": {
                "goal": f"round at {hi:,} messages / round at {lo} <= {GOAL_RATIO:g}",
                "measured": ratio,
                "met": ratio["median"] <= GOAL_RATIO,
            }
        },
    }


def profile(n: int, rounds: int = 300) -> dict[str, Any]:
    """cProfile of ``rounds`` rounds at ``n`` messages of history."""
    cfg = default()
    s0, events = setup(n)

    def body() -> None:
        for _ in range(rounds):
            s = s0
            for e in events:
                s, _fx = step(s, e, cfg)

    return profile_top(body, focus=("steploop/reducer/machine/table.py:step",))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=200, help="rounds per size per block")
    ap.add_argument("--blocks", type=int, default=15)
    ap.add_argument("--sizes", default="100,1000,10000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    out = {"machine": machine(), **measure(sizes, args.reps, args.blocks)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
