"""Item 5: steploop's interpreter over the raw anthropic SDK, against a bare loop on that SDK.

A scripted Messages API server runs in a separate process (:mod:`benchmarks.sse_server`) and
serves the same streams to every side, run after run: N-1 responses with a short text and one
tool call, then a final text. The sides share one ``AsyncAnthropic`` client (made by
``steploop.effects.model.make_client``) and make the same number of calls with the same growing
conversation, through the same SDK call, ``client.messages.create(stream=True)``:

- steploop: ``steploop.effects.run.run`` with ``AnthropicModelClient`` and an instant tool;
- bare: a plain loop iterating the SDK's typed stream events (what the SDK documents),
  assembling the blocks, running the tool and appending the assistant message and the tool
  result, until the final text. The goal is steploop / bare.

Two more sides, measured in the same rotation, say where steploop's time goes (no goal):

- handler: ``AnthropicModelClient.stream`` driven by the least loop that can drive it (a
  ``CallModel`` per call, the conversation grown with the blocks and the tool result; no
  ``run()``, no ``step()``). steploop - handler is the interpreter and ``step()``.
- bare-raw: the bare loop reading the raw server-sent events as the handler does
  (``AsyncStream.raw_events`` and one JSON parse per event) instead of the SDK's typed
  events. handler - bare-raw is the handler's own work; bare - bare-raw is what the SDK's
  Pydantic event objects cost a consumer that uses them.

Each repetition runs every side once, in an order that rotates; ratios are taken per repetition.
Wall time is the measure; the client process's CPU time (``time.process_time``, the server
process excluded) is reported beside it.

Run alone: ``python -m benchmarks.sdk_overhead [--quick] [--reps R] [--turns N]``.
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
from steploop.effects.model import AnthropicModelClient, make_client
from steploop.effects.run import PermissionPolicy, run
from steploop.effects.tools.base import ToolContext, ToolRegistry
from steploop.reducer import LoopConfig, default
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.events import ModelBlockReceived, ModelCallFailed, ModelResponseEnded
from steploop.reducer.messages import (
    AssistantMessage,
    Block,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

__all__ = [
    "GOAL",
    "SIDES",
    "bare_raw_run",
    "bare_run",
    "handler_run",
    "main",
    "measure",
    "server_process",
    "steploop_run",
]

GOAL = 1.05  # steploop's run at most this many times the bare loop's
_PROFILED_RUNS = 3  # steploop runs under cProfile when the goal is missed
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


async def bare_raw_run(client: anthropic.AsyncAnthropic, turns: int, config: LoopConfig) -> int:
    """The bare loop reading the raw server-sent events (one JSON parse each), as the handler
    reads them, instead of the SDK's typed events."""
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
        parts: dict[int, list[str]] = {}
        stop_reason: str | None = None
        async for sse in anthropic.AsyncStream.raw_events(stream.response):
            event = json.loads(sse.data)
            kind = event["type"]
            if kind == "content_block_delta":
                delta = event["delta"]
                if delta["type"] == "text_delta":
                    parts[event["index"]].append(delta["text"])
                elif delta["type"] == "input_json_delta":
                    parts[event["index"]].append(delta["partial_json"])
            elif kind == "content_block_start":
                blocks[event["index"]] = dict(event["content_block"])
                parts[event["index"]] = []
            elif kind == "message_delta":
                stop_reason = event["delta"]["stop_reason"]
            elif kind == "error":
                raise RuntimeError(f"error event: {sse.data}")
        for index, block in blocks.items():
            if block["type"] == "text":
                block["text"] += "".join(parts[index])
            elif block["type"] == "tool_use" and parts[index]:
                block["input"] = json.loads("".join(parts[index]))
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


async def handler_run(client: anthropic.AsyncAnthropic, turns: int, config: LoopConfig) -> int:
    """``AnthropicModelClient.stream`` driven by the least loop that can drive it: no ``run()``,
    no ``step()``; the conversation grows with the blocks and the tool result."""
    tool = InstantTool()
    tools = ToolRegistry([tool])
    model = AnthropicModelClient(client, tools=tools.definitions(), traits_for=tools.traits)
    ctx = ToolContext(workspace=_ROOT, tool_use_id="")
    conversation = Conversation.empty().append(
        UserMessage(id="u0", content=(TextBlock(text=PROMPT),))
    )
    calls = 0
    while True:
        calls += 1
        effect = CallModel(
            call_id=calls,
            model=config.model,
            conversation=conversation,
            max_tokens=config.default_max_tokens,
        )
        blocks: list[Block] = []
        stop_reason: str | None = None
        async for event in model.stream(effect):
            if isinstance(event, ModelBlockReceived):
                blocks.append(event.block)
            elif isinstance(event, ModelResponseEnded):
                stop_reason = event.stop_reason
            elif isinstance(event, ModelCallFailed):
                raise RuntimeError(f"model call failed: {event}")
        for i, block in enumerate(blocks):
            conversation = conversation.append(
                AssistantMessage(
                    id=f"a{calls}.{i}",
                    response_id=f"r{calls}",
                    model=config.model,
                    content=(block,),
                )
            )
        if stop_reason != "tool_use":
            break
        results: list[Block] = []
        for block in blocks:
            if isinstance(block, ToolUseBlock) and block.name == TOOL_NAME:
                out = await tool.call(block.input, ctx)
                results.append(ToolResultBlock(tool_use_id=block.id, content=out.content))
        conversation = conversation.append(UserMessage(id=f"u{calls}", content=tuple(results)))
    assert calls == turns, (calls, turns)
    return calls


SIDES: dict[str, Side] = {
    "steploop": steploop_run,
    "handler": handler_run,
    "bare": bare_run,
    "bare_raw": bare_raw_run,
}
"""Every side, in the order of the first repetition (later ones rotate it)."""


async def _timed(
    side: Side, client: anthropic.AsyncAnthropic, turns: int, cfg: LoopConfig
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) for one run."""
    cpu, start = time.process_time(), time.perf_counter()
    await side(client, turns, cfg)
    return time.perf_counter() - start, time.process_time() - cpu


def _per_call_us(a: list[float], b: list[float], turns: int) -> dict[str, float | int]:
    """(a - b) per model call in microseconds, per repetition, summarized."""
    return summarize([1e6 * (x - y) / turns for x, y in zip(a, b, strict=True)], 1)


async def _alternate(base_url: str, turns: int, reps: int, with_profile: bool) -> dict[str, Any]:
    config = default()
    # One client for every side, in one event loop (building the first client costs ~140 ms).
    client = make_client(base_url, "test", connect_timeout=10.0, read_timeout=60.0)
    names = list(SIDES)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    profile: dict[str, Any] | None = None
    warnings.filterwarnings("ignore", message=r"The model .* is deprecated")
    try:
        for name in names:  # warm-up, every side
            await _timed(SIDES[name], client, turns, config)
        for rep in range(reps):
            k = rep % len(names)
            for name in names[k:] + names[:k]:
                w, c = await _timed(SIDES[name], client, turns, config)
                wall[name].append(w)
                cpu[name].append(c)
            progress(
                f"sdk overhead rep {rep + 1}/{reps} ms/call: "
                + ", ".join(f"{n} {1e3 * wall[n][-1] / turns:.3f}" for n in names)
            )
        ratio = ratio_summary(wall["steploop"], wall["bare"], 4)
        if with_profile and ratio["median"] > GOAL:
            with Profiler() as prof:
                for _ in range(_PROFILED_RUNS):
                    await steploop_run(client, turns, config)
            profile = prof.report(
                focus=(
                    "steploop/reducer/machine/table.py:advance",
                    "steploop/effects/model/client.py:stream",
                    "steploop/effects/model/client.py:_request",
                    "steploop/effects/model/client.py:_dispose",
                )
            )
    finally:
        await client.close()
    out: dict[str, Any] = {
        "turns_per_run": turns,
        "calls_per_side": turns * reps,
        "steploop_ms_per_call": summarize([1e3 * s / turns for s in wall["steploop"]]),
        "bare_ms_per_call": summarize([1e3 * s / turns for s in wall["bare"]]),
        "ratio_steploop_over_bare": ratio,
        "goals": {
            "overhead_over_sdk": {
                "goal": f"steploop / bare SDK loop <= {GOAL:g}",
                "measured": ratio,
                "met": ratio["median"] <= GOAL,
            }
        },
        "diagnostics": {
            "ms_per_call": {n: summarize([1e3 * s / turns for s in wall[n]]) for n in names},
            "cpu_ms_per_call": {n: summarize([1e3 * s / turns for s in cpu[n]]) for n in names},
            "ratios": {
                "steploop_over_bare_cpu": ratio_summary(cpu["steploop"], cpu["bare"], 4),
                "steploop_over_bare_raw": ratio_summary(wall["steploop"], wall["bare_raw"], 4),
                "steploop_over_handler": ratio_summary(wall["steploop"], wall["handler"], 4),
                "handler_over_bare": ratio_summary(wall["handler"], wall["bare"], 4),
                "handler_over_bare_raw": ratio_summary(wall["handler"], wall["bare_raw"], 4),
                "bare_over_bare_raw": ratio_summary(wall["bare"], wall["bare_raw"], 4),
            },
            "us_per_call": {
                "steploop_minus_bare": _per_call_us(wall["steploop"], wall["bare"], turns),
                "interpreter_and_step (steploop_minus_handler)": _per_call_us(
                    wall["steploop"], wall["handler"], turns
                ),
                "handler_minus_bare_raw": _per_call_us(wall["handler"], wall["bare_raw"], turns),
                "sdk_typed_events (bare_minus_bare_raw)": _per_call_us(
                    wall["bare"], wall["bare_raw"], turns
                ),
            },
        },
    }
    if profile is not None:
        out["profile"] = profile
    return out


def measure(turns: int = 40, reps: int = 31, *, with_profile: bool = False) -> dict[str, Any]:
    """Run every side ``reps`` times (plus a warm-up), ``turns`` calls a run, rotating the order.

    With ``with_profile``, a missed goal adds a cProfile of a few more steploop runs.
    """
    runs = len(SIDES) * (reps + 1) + (_PROFILED_RUNS if with_profile else 0)
    with server_process(turns, runs) as base_url:
        return anyio.run(_alternate, base_url, turns, reps, with_profile)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="7 repetitions of 20-call runs")
    ap.add_argument("--reps", type=int, help="repetitions (default 31; quick 7)")
    ap.add_argument("--turns", type=int, help="model calls per run (default 40; quick 20)")
    args = ap.parse_args()
    turns, reps = (20, 7) if args.quick else (40, 31)
    print(json.dumps(measure(args.turns or turns, args.reps or reps, with_profile=True), indent=2))


if __name__ == "__main__":
    main()
