"""Item 5: steploop's interpreter over the raw anthropic SDK, against a bare loop on that SDK.

A scripted Messages API server runs in a separate process (:mod:`benchmarks.sse_server`) and
serves the same streams to both sides, run after run: N-1 responses with a short text and one
tool call, then a final text. Both sides share one ``AsyncAnthropic`` client (made by
``effects.model.make_client``) and make the same number of calls with the same growing
conversation:

- steploop: ``effects.run.run`` with ``AnthropicModelClient`` and an instant tool;
- bare: a plain loop over ``client.messages.create(stream=True)`` (the call the handler makes),
  iterating the SDK's events, assembling the blocks, running the tool and appending the
  assistant message and the tool result, until the final text.

Runs alternate between the two sides; each pair gives one ratio steploop/bare.

Run alone: ``python -m benchmarks.sdk_overhead [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import anthropic
import anyio
from anthropic import types as sdk

from benchmarks.common import Profiler, progress, ratio_summary, summarize
from benchmarks.workload import PROMPT, TOOL_NAME, InstantTool
from effects.model import AnthropicModelClient, make_client
from effects.run import PermissionPolicy, run
from effects.tools.base import ToolContext, ToolRegistry
from reducer import LoopConfig, default

__all__ = ["GOAL", "main", "measure", "server_process"]

GOAL = 1.05  # steploop's run at most this many times the bare loop's
_ROOT = Path(__file__).resolve().parent.parent

Side = Callable[[anthropic.AsyncAnthropic, int, LoopConfig], Awaitable[int]]


@contextmanager
def server_process(turns: int, runs: int) -> Iterator[str]:
    """Start :mod:`benchmarks.sse_server` in a child process; yields its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.sse_server", "--turns", str(turns), "--runs", str(runs)],
        cwd=_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError(f"the server did not start (said {line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the server stops when its stdin closes
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def steploop_run(client: anthropic.AsyncAnthropic, turns: int, config: LoopConfig) -> int:
    """One agent run through steploop; returns the number of model calls."""
    tools = ToolRegistry([InstantTool()])
    model = AnthropicModelClient(client, tools=tools.definitions(), traits_for=tools.traits)
    async with run(
        PROMPT,
        model=model,
        tools=tools,
        config=config,
        permissions=PermissionPolicy(default="allow"),
    ) as r:
        async for _item in r:
            pass
    assert r.result is not None and r.result.terminal.TAG == "completed", r.result
    calls = r.result.state.turn_count
    assert calls == turns, (calls, turns)
    return calls


async def bare_run(client: anthropic.AsyncAnthropic, turns: int, config: LoopConfig) -> int:
    """The same agent run as a bare loop over ``messages.create(stream=True)``."""
    tool = InstantTool()
    tool_defs = ToolRegistry([tool]).definitions()
    ctx = ToolContext(workspace=_ROOT, tool_use_id="")
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    calls = 0
    while True:
        calls += 1
        stream = await client.messages.create(
            model=config.model,
            max_tokens=config.default_max_tokens,
            messages=cast("list[sdk.MessageParam]", messages),
            tools=cast("list[sdk.ToolParam]", tool_defs),
            stream=True,
        )
        blocks: dict[int, dict[str, Any]] = {}
        json_parts: dict[int, list[str]] = {}
        stop_reason: str | None = None
        async for event in stream:
            if isinstance(event, sdk.RawContentBlockStartEvent):
                blocks[event.index] = event.content_block.model_dump(exclude_none=True)
            elif isinstance(event, sdk.RawContentBlockDeltaEvent):
                delta = event.delta
                if isinstance(delta, sdk.TextDelta):
                    blocks[event.index]["text"] += delta.text
                elif isinstance(delta, sdk.InputJSONDelta):
                    json_parts.setdefault(event.index, []).append(delta.partial_json)
            elif isinstance(event, sdk.RawMessageDeltaEvent):
                stop_reason = event.delta.stop_reason
        for index, parts in json_parts.items():
            blocks[index]["input"] = json.loads("".join(parts))
        content = [blocks[i] for i in sorted(blocks)]
        messages.append({"role": "assistant", "content": content})
        if stop_reason != "tool_use":
            break
        results = []
        for block in content:
            if block["type"] == "tool_use" and block["name"] == TOOL_NAME:
                out = await tool.call(block["input"], ctx)
                results.append(
                    {"type": "tool_result", "tool_use_id": block["id"], "content": out.content}
                )
        messages.append({"role": "user", "content": results})
    assert calls == turns, (calls, turns)
    return calls


async def _timed(
    side: Side, client: anthropic.AsyncAnthropic, turns: int, cfg: LoopConfig
) -> float:
    start = time.perf_counter()
    await side(client, turns, cfg)
    return time.perf_counter() - start


async def _alternate(base_url: str, turns: int, reps: int, with_profile: bool) -> dict[str, Any]:
    config = default()
    # One client for both sides, in one event loop (building the first client costs ~140 ms).
    client = make_client(base_url, "test", connect_timeout=10.0, read_timeout=60.0)
    steploop: list[float] = []
    bare: list[float] = []
    profile: dict[str, Any] | None = None
    warnings.filterwarnings("ignore", message=r"The model .* is deprecated")
    try:
        await _timed(steploop_run, client, turns, config)  # warm-up, both sides
        await _timed(bare_run, client, turns, config)
        for rep in range(reps):
            pair: list[tuple[list[float], Side]] = [(steploop, steploop_run), (bare, bare_run)]
            for bucket, side in pair if rep % 2 == 0 else reversed(pair):
                bucket.append(await _timed(side, client, turns, config))
            progress(
                f"sdk overhead rep {rep + 1}/{reps} steploop {1e3 * steploop[-1] / turns:.3f}"
                f" ms/call, bare {1e3 * bare[-1] / turns:.3f} ms/call"
            )
        ratio = ratio_summary(steploop, bare, 4)
        if with_profile and ratio["median"] > GOAL:
            with Profiler() as prof:
                await steploop_run(client, turns, config)
            profile = prof.report(
                focus=(
                    "reducer/machine.py:step",
                    "effects/model.py:stream",
                    "effects/model.py:build_request",
                )
            )
    finally:
        await client.close()
    out: dict[str, Any] = {
        "turns_per_run": turns,
        "calls_per_side": turns * reps,
        "steploop_ms_per_call": summarize([1e3 * s / turns for s in steploop]),
        "bare_ms_per_call": summarize([1e3 * s / turns for s in bare]),
        "ratio_steploop_over_bare": ratio,
        "goals": {
            "overhead_over_sdk": {
                "goal": f"steploop / bare SDK loop <= {GOAL:g}",
                "measured": ratio,
                "met": ratio["median"] <= GOAL,
            }
        },
    }
    if profile is not None:
        out["profile"] = profile
    return out


def measure(turns: int = 40, reps: int = 31, *, with_profile: bool = False) -> dict[str, Any]:
    """Alternate steploop and bare runs of ``turns`` calls, ``reps`` pairs (plus a warm-up).

    With ``with_profile``, a missed goal adds a cProfile of one more steploop run.
    """
    runs = 2 * (reps + 1) + (1 if with_profile else 0)
    with server_process(turns, runs) as base_url:
        return anyio.run(_alternate, base_url, turns, reps, with_profile)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    turns, reps = (20, 7) if args.quick else (40, 31)
    print(json.dumps(measure(turns, reps, with_profile=True), indent=2))


if __name__ == "__main__":
    main()
