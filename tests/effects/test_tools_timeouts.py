"""A tool that holds the event loop, or waits where cancellation cannot reach, does not hold
the run past its timeout (steploop/effects/tools/watchdog.py)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import anyio.to_thread
import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.tools import Isolated, ToolContext, ToolOutput, ToolRegistry
from steploop.effects.tools.watchdog import WATCHDOG_SIGNAL
from steploop.reducer.events import InterruptBehavior
from steploop.reducer.messages import ToolResultBlock, UserMessage


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Blocking:
    """A tool whose call blocks in the way ``how`` says."""

    name = "Block"
    description = "blocks"
    input_schema: ClassVar[Mapping[str, Any]] = {"type": "object", "properties": {}}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, how: str, seconds: float = 3.0) -> None:
        self.how = how
        self.seconds = seconds
        self.finished = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return False

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if self.how == "sleep":  # a synchronous call on the event loop
            time.sleep(self.seconds)
        elif self.how == "spin":  # pure Python, never returning to the loop
            end = time.monotonic() + self.seconds
            while time.monotonic() < end:
                pass
        elif self.how == "later":  # one await, then a blocking step
            await anyio.sleep(0)
            time.sleep(self.seconds)
        elif self.how == "swallow":  # catches Exception around the blocking call
            try:
                time.sleep(self.seconds)
            except Exception:
                return ToolOutput(content="swallowed")
        elif self.how == "thread":  # a worker thread that cannot be abandoned
            await anyio.to_thread.run_sync(time.sleep, self.seconds)
        self.finished = True
        return ToolOutput(content="finished")


class _IsolatedBlocking(_Blocking):
    isolation = "thread"


needs_signal = pytest.mark.skipif(
    WATCHDOG_SIGNAL is None, reason="needs a real-time signal to interrupt the loop"
)


async def _timed(registry: ToolRegistry, timeout_s: float) -> tuple[ToolOutput, float]:
    ctx = ToolContext(workspace=Path("."), tool_use_id="toolu_1")
    started = time.monotonic()
    output = await registry.run("Block", {}, ctx, timeout_s)
    return output, time.monotonic() - started


@needs_signal
@pytest.mark.spec("E-TIMEOUT-1")
@pytest.mark.anyio
@pytest.mark.parametrize("how", ["sleep", "spin", "later", "swallow"])
async def test_step_holding_the_loop_ends_at_its_timeout(how: str) -> None:
    """A tool blocking the event loop for 3 s (a synchronous sleep, a busy loop, after an
    await, under ``except Exception``) gives the timeout result at its 0.4 s timeout."""
    tool = _Blocking(how)
    output, elapsed = await _timed(ToolRegistry([tool]), 0.4)
    assert output == ToolOutput(content="Tool Block timed out after 0.4 s", is_error=True)
    assert 0.35 < elapsed < 1.2, elapsed
    assert not tool.finished


@needs_signal
@pytest.mark.spec("E-TIMEOUT-1")
@pytest.mark.anyio
async def test_run_is_not_held_by_a_tool_blocking_the_loop(tmp_path: Path) -> None:
    """In a run, a tool blocking the loop for 3 s against a 0.5 s tool timeout ends at its
    timeout with a timeout result, and the turn goes on to complete."""
    tools = ToolRegistry([_Blocking("sleep")])
    model = ScriptedModel([tool_call("Block", {}), reply("done")], traits_for=tools.traits)
    started = time.monotonic()
    async with run(
        "go",
        model=model,
        tools=tools,
        workspace=tmp_path,
        permissions=PermissionPolicy(default="allow"),
        tool_timeout_s=0.5,
    ) as r:
        items = [item async for item in r]
    elapsed = time.monotonic() - started
    assert r.result is not None and r.result.terminal.TAG == "completed"
    results = [
        block
        for item in items
        if isinstance(item, UserMessage) and not isinstance(item.content, str)
        for block in item.content
        if isinstance(block, ToolResultBlock)
    ]
    assert [r.is_error for r in results] == [True]
    assert "timed out after 0.5 s" in str(results[0].content)
    assert elapsed < 1.5, elapsed


@pytest.mark.spec("E-TIMEOUT-1")
@pytest.mark.anyio
@pytest.mark.parametrize("wrap", ["attribute", "Isolated"])
async def test_isolated_tool_blocking_in_a_thread_ends_at_its_timeout(wrap: str) -> None:
    """A tool that waits 3 s on a worker thread that cannot be abandoned is left behind at
    its 0.5 s timeout when it runs isolated (its class says so, or Isolated wraps it)."""
    tool = _IsolatedBlocking("thread") if wrap == "attribute" else Isolated(_Blocking("thread"))
    output, elapsed = await _timed(ToolRegistry([tool]), 0.5)
    assert output == ToolOutput(content="Tool Block timed out after 0.5 s", is_error=True)
    assert 0.45 < elapsed < 1.3, elapsed


@pytest.mark.anyio
async def test_isolated_tool_results_and_errors() -> None:
    """An isolated call that finishes gives its result; one that raises, an error result."""

    class Fails(_IsolatedBlocking):
        async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            await anyio.sleep(0.01)
            raise ValueError("bad input")

    done, _ = await _timed(ToolRegistry([_IsolatedBlocking("none")]), 5.0)
    assert done == ToolOutput(content="finished")
    failed, _ = await _timed(ToolRegistry([Fails("none")]), 5.0)
    assert failed.is_error and "ValueError: bad input" in failed.content


@pytest.mark.anyio
async def test_quick_tools_are_not_disturbed() -> None:
    """Many short calls, some blocking briefly, all finish with their own results."""
    tool = _Blocking("sleep", 0.01)
    registry = ToolRegistry([tool])
    for _ in range(20):
        output, _ = await _timed(registry, 1.0)
        assert output == ToolOutput(content="finished")
