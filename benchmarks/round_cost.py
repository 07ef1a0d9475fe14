"""Cost of one full round through step() at growing history sizes (issue: reducer).

One round = ModelBlockReceived (a safe tool call) → PermissionAnswered → ToolFinished →
ModelResponseEnded, which ends the round with next_turn, runs the next round's pipeline and
returns the next CallModel. The state before the round is built once per history size; the
reducer is pure, so every repetition starts from the same state.

Run: .venv/bin/python -m benchmarks.round_cost [--reps N]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

from reducer import LoopState, Request, Session, default, start, step
from reducer.conversation import Conversation
from reducer.events import (
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    ToolFinished,
    ToolTraits,
)
from reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from reducer.state import Ids

SAFE = ToolTraits(concurrency_safe=True, max_result_chars=None)


def history(n: int) -> Conversation:
    """n messages of earlier tool rounds (assistant tool_use + user tool_result pairs)."""
    msgs: list[Message] = [UserMessage(id="h0", content=(TextBlock(text="start"),))]
    i = 0
    while len(msgs) < n:
        i += 1
        msgs.append(AssistantMessage(id=f"h{i}a", response_id=f"hr{i}", model="m",
                                     content=(ToolUseBlock(id=f"old{i}", name="Read", input={"file_path": "a.py"}),),
                                     usage=Usage(input_tokens=1000, output_tokens=10)))
        msgs.append(UserMessage(id=f"h{i}u", content=(ToolResultBlock(tool_use_id=f"old{i}", content="x" * 40),), origin="tool_result"))
    return Conversation.of(msgs[:n])


def setup(n: int) -> tuple[LoopState, list[Event]]:
    cfg = default()
    session = Session(conversation=history(n), ids=Ids(msg=10 * n))
    s, _ = start(Request(prompt="go"), cfg, session)
    cid, gen = s.round.call_id, s.round.generation
    events: list[Event] = [
        ModelBlockReceived(call_id=cid, block=ToolUseBlock(id="t1", name="Read", input={"file_path": "b.py"}), tool=SAFE),
        PermissionAnswered(generation=gen, tool_use_id="t1", decision="allow"),
        ToolFinished(generation=gen, tool_use_id="t1", content="print('hi')\n" * 5),
        ModelResponseEnded(call_id=cid, model=cfg.model, stop_reason="tool_use", usage=Usage(input_tokens=1200, output_tokens=12)),
    ]
    return s, events


def time_round(n: int, reps: int) -> list[float]:
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3000)
    ap.add_argument("--sizes", default="100,1000,10000")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    # interleave sizes so drift on the machine hits them equally
    per: dict[int, list[float]] = {n: [] for n in sizes}
    for _ in range(5):
        for n in sizes:
            per[n].extend(time_round(n, args.reps // 5))
    med = {n: statistics.median(v) * 1e6 for n, v in per.items()}
    out = {
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}".strip(),
        "median_us_per_round": {str(n): round(med[n], 2) for n in sizes},
        "ratio_largest_to_smallest": round(med[sizes[-1]] / med[sizes[0]], 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
