"""The loop-overhead workload shared by steploop, the floor and the peer frameworks.

A run of ``n`` turns: the fake model answers calls 1 .. n-1 with one call of the ``noop`` tool and
call n with a final text. The model never reads the history: its answer depends only on how many
times it was called (a counter), so its own cost is O(1) and every microsecond measured beyond it
belongs to the loop. The tool returns a constant string at once.

Each run records ``time.perf_counter()`` when each model call begins, so the cost of turn i is the
gap between calls i and i+1 (the loop's bookkeeping, the tool round trip and the next call).
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from steploop.effects.run import PermissionPolicy, run
from steploop.effects.tools.base import ToolContext, ToolOutput, ToolRegistry
from steploop.reducer import LoopConfig, default
from steploop.reducer.effects import CallModel
from steploop.reducer.events import (
    Event,
    InterruptBehavior,
    ModelBlockReceived,
    ModelResponseEnded,
    ToolTraits,
)
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage

__all__ = [
    "FINAL_TEXT",
    "PROMPT",
    "TOOL_NAME",
    "TOOL_RESULT",
    "CounterModel",
    "InstantTool",
    "Runner",
    "Stamps",
    "run_floor",
    "run_steploop",
    "run_steploop_shell",
    "run_steploop_stamped",
    "wall_ms",
]

PROMPT = "Call the tool until told to stop."
TOOL_NAME = "noop"
TOOL_RESULT = "ok"
FINAL_TEXT = "done"

Runner = Callable[[int, "Stamps"], Awaitable[None]]
"""An async function that runs the workload for ``n`` turns, stamping each model call."""


@dataclass
class Stamps:
    """The start time of every model call of one run (seconds, ``time.perf_counter``), and the
    process time (``time.process_time``, CPU of the whole process) at the first call and at
    call ``last`` (0: never), read only there because a read costs about 0.6 µs here."""

    calls: list[float] = field(default_factory=list)
    last: int = 0
    cpu: list[float] = field(default_factory=list)

    def mark(self) -> int:
        """Record a model call; returns its 1-based number."""
        calls = self.calls
        calls.append(time.perf_counter())
        k = len(calls)
        if k == 1 or k == self.last:
            self.cpu.append(time.process_time())
        return k


# ---------------------------------------------------------------------------------------------
# steploop


class InstantTool:
    """A concurrency-safe tool with no parameters that answers ``ok`` at once."""

    name = TOOL_NAME
    description = "Does nothing and says ok."
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    max_result_chars: int | None = None
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=TOOL_RESULT)


_USAGE = Usage(input_tokens=100, output_tokens=10)


def wall_ms() -> int:
    return int(time.time() * 1000)


class CounterModel:
    """A zero-latency ``ModelClient``: a tool call per call until call ``n``, then a text.

    Like ``AnthropicModelClient`` and ``ScriptedModel`` with their default ``clock=None``, it
    leaves the events' ``at_ms`` at 0 unless given a ``clock``.
    """

    def __init__(
        self,
        n: int,
        stamps: Stamps,
        traits_for: Callable[[str, dict[str, Any]], ToolTraits],
        clock: Callable[[], int] | None = None,
    ) -> None:
        self._n = n
        self._stamps = stamps
        self._traits_for = traits_for
        self._clock = clock

    async def stream(self, effect: CallModel) -> AsyncGenerator[Event, None]:
        k = self._stamps.mark()
        cid = effect.call_id
        at = self._clock() if self._clock is not None else 0
        if k < self._n:
            block = ToolUseBlock(id=f"toolu_{k:06d}", name=TOOL_NAME, input={})
            tool = self._traits_for(TOOL_NAME, {})
            yield ModelBlockReceived(call_id=cid, block=block, tool=tool, at_ms=at)
            reason = "tool_use"
        else:
            yield ModelBlockReceived(call_id=cid, block=TextBlock(text=FINAL_TEXT), at_ms=at)
            reason = "end_turn"
        yield ModelResponseEnded(
            call_id=cid, model=effect.model, stop_reason=reason, usage=_USAGE, at_ms=at
        )


async def run_steploop(
    n: int,
    stamps: Stamps,
    config: LoopConfig | None = None,
    model_clock: Callable[[], int] | None = None,
    run_fn: Callable[..., Any] = run,
) -> None:
    """The workload through ``steploop.effects.run.run`` (reducer + interpreter), items consumed.

    ``model_clock`` stamps the model's events (None: ``at_ms`` 0, as the default clients do);
    ``run_fn`` is the interpreter's ``run`` (another version's, to compare interpreters).
    """
    tools = ToolRegistry([InstantTool()])
    model = CounterModel(n, stamps, tools.traits, model_clock)
    async with run_fn(
        PROMPT,
        model=model,
        tools=tools,
        config=config or default(),
        permissions=PermissionPolicy(default="allow"),
    ) as r:
        async for _item in r:
            pass
    assert r.result is not None and r.result.terminal.TAG == "completed", r.result
    assert len(stamps.calls) == n


_CANNED: dict[int, list[Any]] = {}


async def run_steploop_shell(n: int, stamps: Stamps) -> None:
    """:func:`run_steploop` with ``step()`` canned: what ``step()`` returned for each event of
    an earlier run of ``n`` turns (recorded once per ``n``, outside the timing) is returned
    again in order, so the interpreter, the model client, the tools and the consumer do all
    their work and ``step()`` costs a list lookup. The interpreter's own cost, apart from the
    reducer's (whose results it cannot tell from real ones: the workload is deterministic)."""
    import steploop.reducer.drive as drive

    # the driver loop calls the name ``advance`` of its module: replaced for the canned run
    real: Any = getattr(drive, "advance")  # noqa: B009
    canned = _CANNED.get(n)
    if canned is None:
        got: list[Any] = []

        def recording(state: Any, event: Any, config: Any) -> Any:
            out = real(state, event, config)
            got.append(out)
            return out

        setattr(drive, "advance", recording)  # noqa: B010
        try:
            await run_steploop(n, Stamps())
        finally:
            setattr(drive, "advance", real)  # noqa: B010
        canned = _CANNED[n] = got
    replayed = iter(canned)
    setattr(drive, "advance", lambda state, event, config: next(replayed))  # noqa: B010
    try:
        await run_steploop(n, stamps)
    finally:
        setattr(drive, "advance", real)  # noqa: B010
    if next(replayed, None) is not None:  # a driver loop that does not call drive.advance
        raise RuntimeError("step() was not canned: the driver loop does not call drive.advance")


async def run_steploop_stamped(n: int, stamps: Stamps) -> None:
    """:func:`run_steploop` with the model's events stamped with the wall clock."""
    await run_steploop(n, stamps, model_clock=wall_ms)


# ---------------------------------------------------------------------------------------------
# The floor: the least an anyio agent loop can do with the same concurrency primitive


async def _floor_tool(args: dict[str, Any]) -> str:
    return TOOL_RESULT


async def run_floor(n: int, stamps: Stamps) -> None:
    """A minimal anyio loop with a dict state.

    Per turn: call the counter model, start the tool as a task of one task group, get its
    result back through a memory object stream, append both messages to the state: the
    plainest anyio way to run a tool concurrently and hear back from it, and nothing else: no
    reducer, no validation, no permissions, no consumer.
    """
    state: dict[str, Any] = {"messages": [{"role": "user", "content": PROMPT}], "turn": 0}
    send, recv = anyio.create_memory_object_stream[tuple[str, str]](1)

    async def tool_task(call_id: Any, args: Any) -> None:
        await send.send((call_id, await _floor_tool(args)))

    async with send, recv, anyio.create_task_group() as tg:
        while True:
            k = stamps.mark()
            state["turn"] += 1
            if k >= n:
                state["messages"].append({"role": "assistant", "content": FINAL_TEXT})
                break
            call = {"id": f"toolu_{k:06d}", "name": TOOL_NAME, "input": {}}
            state["messages"].append({"role": "assistant", "content": [call]})
            tg.start_soon(tool_task, call["id"], call["input"])
            call_id, result = await recv.receive()
            state["messages"].append({"role": "user", "tool_use_id": call_id, "content": result})
    assert len(stamps.calls) == n
