"""Item 4: what starting safe tools mid-stream saves, against waiting for the end of the response.

The model streams for ``p`` seconds, then completes a concurrency-safe tool's block, then streams
for ``T`` more seconds before the response ends; the tool takes ``T``. The second call answers
with text at once. With ``gates.streaming_tool_execution`` on, the tool runs while the rest of
the response streams: the turn takes about p + T. Off, the tool starts when the response ends:
p + 2T. The ideal ratio on/off is (p+T)/(p+2T); with p = T/4 it is 5/9 ≈ 0.556.

On and off alternate; each pair gives one ratio, and the median of those is reported.

Run alone: ``python -m benchmarks.streaming_tools [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import AsyncGenerator, Mapping
from typing import Any

import anyio

from benchmarks.common import progress, ratio_summary, summarize
from steploop.effects.run import PermissionPolicy, run
from steploop.effects.tools.base import ToolContext, ToolOutput, ToolRegistry
from steploop.reducer import LoopConfig, default
from steploop.reducer.effects import CallModel
from steploop.reducer.events import Event, InterruptBehavior, ModelBlockReceived, ModelResponseEnded
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage

__all__ = ["main", "measure"]

_USAGE = Usage(input_tokens=100, output_tokens=10)


class SleepTool:
    """A concurrency-safe tool that takes ``seconds``."""

    name = "slow_read"
    description = "Reads slowly."
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    max_result_chars: int | None = None
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error = False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        await anyio.sleep(self.seconds)
        return ToolOutput(content="contents")


class SlowStreamModel:
    """First call: ``before`` s of streaming, the tool block, ``after`` s, the end. Then text."""

    def __init__(self, before: float, after: float, tools: ToolRegistry) -> None:
        self.before = before
        self.after = after
        self.tools = tools
        self.calls = 0

    async def stream(self, effect: CallModel) -> AsyncGenerator[Event, None]:
        self.calls += 1
        cid = effect.call_id
        if self.calls == 1:
            await anyio.sleep(self.before)
            block = ToolUseBlock(id="toolu_001", name=SleepTool.name, input={})
            yield ModelBlockReceived(
                call_id=cid, block=block, tool=self.tools.traits(SleepTool.name, {})
            )
            await anyio.sleep(self.after)
            reason = "tool_use"
        else:
            yield ModelBlockReceived(call_id=cid, block=TextBlock(text="done"))
            reason = "end_turn"
        yield ModelResponseEnded(call_id=cid, model=effect.model, stop_reason=reason, usage=_USAGE)


async def _turn(p: float, t: float, config: LoopConfig) -> float:
    tools = ToolRegistry([SleepTool(t)])
    model = SlowStreamModel(p, t, tools)
    start = time.perf_counter()
    async with run(
        "read it",
        model=model,
        tools=tools,
        config=config,
        permissions=PermissionPolicy(default="allow"),
    ) as r:
        async for _item in r:
            pass
    elapsed = time.perf_counter() - start
    assert r.result is not None and r.result.terminal.TAG == "completed", r.result
    assert model.calls == 2
    return elapsed


def measure(t: float = 0.2, reps: int = 7) -> dict[str, Any]:
    """Alternate on/off ``reps`` times with tool time ``t`` and p = t/4."""
    p = t / 4
    on_cfg = default().with_overrides({"gates.streaming_tool_execution": True})
    off_cfg = default().with_overrides({"gates.streaming_tool_execution": False})
    on: list[float] = []
    off: list[float] = []
    anyio.run(_turn, 0.0, 0.0, on_cfg)  # warm-up
    for rep in range(reps):
        pair = [(on, on_cfg), (off, off_cfg)]
        for bucket, cfg in pair if rep % 2 == 0 else reversed(pair):
            bucket.append(anyio.run(_turn, p, t, cfg))
        progress(f"streaming tools rep {rep + 1}/{reps} on {on[-1]:.4f}s off {off[-1]:.4f}s")
    ideal = (p + t) / (p + 2 * t)
    ratio = ratio_summary(on, off, 4)
    return {
        "T_s": t,
        "p_s": p,
        "on_s": summarize(on, 4),
        "off_s": summarize(off, 4),
        "ideal_on_s": round(p + t, 4),
        "ideal_off_s": round(p + 2 * t, 4),
        "ratio_on_over_off": ratio,
        "ideal_ratio": round(ideal, 4),
        "excess_over_ideal_pct": round(100 * (ratio["median"] / ideal - 1), 2),
        "overhead_on_ms": round(1e3 * (statistics.median(on) - (p + t)), 2),
        "overhead_off_ms": round(1e3 * (statistics.median(off) - (p + 2 * t)), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tool-seconds", type=float, default=0.2)
    args = ap.parse_args()
    print(json.dumps(measure(args.tool_seconds, 3 if args.quick else 7), indent=2))


if __name__ == "__main__":
    main()
