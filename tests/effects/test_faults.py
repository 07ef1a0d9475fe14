"""The fault matrix: every handler × (raises, hangs past its deadline, is cancelled, returns
malformed data). The run ends in the Terminal the rules name, every tool_use has a result, and
no exception escapes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest

from steploop.effects import PermissionPolicy, PermissionRequest, run
from steploop.effects.compaction import ModelCompactor
from steploop.effects.run import Timeouts
from steploop.effects.scripted import ScriptedModel, reply, response, tool_use
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.reducer import LoopConfig, default
from steploop.reducer.effects import CallModel, Compact, RunStopHooks, SummarizeToolUse
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    InterruptBehavior,
    StopHooksFinished,
)
from steploop.reducer.messages import (
    AssistantMessage,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

FAULTS = ("raises", "hangs", "cancelled", "malformed")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Fault:
    """Acts out one fault once; ``started`` is set when the faulty handler is entered."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.started = anyio.Event()
        self.used = False

    async def act(self) -> Any:
        self.used = True
        self.started.set()
        if self.kind == "raises":
            raise RuntimeError("handler exploded")
        if self.kind in ("hangs", "cancelled"):
            await anyio.sleep(30)
        return object()  # malformed


class EchoTool:
    name = "Echo"
    description = "echoes"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, fault: Fault | None = None) -> None:
        self.fault = fault

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if self.fault is not None and not self.fault.used:
            result: Any = await self.fault.act()
            return result  # type: ignore[no-any-return]
        return ToolOutput(content="echo")


class FaultyModel:
    """Delegates to a scripted model, except that the first call acts out the fault."""

    def __init__(self, inner: ScriptedModel, fault: Fault | None) -> None:
        self.inner = inner
        self.fault = fault

    async def stream(self, effect: CallModel) -> AsyncIterator[Event]:
        if self.fault is not None and not self.fault.used:
            yield await self.fault.act()
            return
        async with aclosing(self.inner.stream(effect)) as inner:
            async for e in inner:
                yield e


class FaultyCompactor:
    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    async def compact(self, effect: Compact) -> CompactionFinished | CompactionFailed:
        result: Any = await self.fault.act()
        return result  # type: ignore[no-any-return]


class FaultyHooks:
    def __init__(self, fault: Fault) -> None:
        self.fault = fault

    async def run(self, effect: RunStopHooks, **kw: Any) -> StopHooksFinished:
        result: Any = await self.fault.act()
        return result  # type: ignore[no-any-return]


def _pairs_ok(messages: Any) -> bool:
    uses = [b.id for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b.tool_use_id for m in messages if isinstance(m, UserMessage) for b in m.content if isinstance(b, ToolResultBlock)]
    return sorted(uses) == sorted(results)


SMALL = default().with_overrides(
    {"context_window": 50_000, "gates.history_snip": False, "gates.context_collapse": False}
)
BIG = Usage(input_tokens=30_000, output_tokens=10)

# expected Terminal per (handler, fault), from specs/rules.md
EXPECTED = {
    # T-MODEL-1 for a raising or malformed client; R-RETRY-5 for a stall; I-2 for an interrupt
    ("model", "raises"): "model_error",
    ("model", "hangs"): "completed",
    ("model", "cancelled"): "aborted_streaming",
    ("model", "malformed"): "model_error",
    # a failing tool is an error result the model sees; I-3 for an interrupt
    ("tool", "raises"): "completed",
    ("tool", "hangs"): "completed",
    ("tool", "cancelled"): "aborted_tools",
    ("tool", "malformed"): "completed",
    # R-CTX-4 failure counts and the turn goes on; I-1 for an interrupt
    ("compactor", "raises"): "completed",
    ("compactor", "hangs"): "completed",
    ("compactor", "cancelled"): "aborted_streaming",
    ("compactor", "malformed"): "completed",
    # R-HOOK-4 a failing hook is a warning; I-6 for an interrupt
    ("stop_hooks", "raises"): "completed",
    ("stop_hooks", "hangs"): "completed",
    ("stop_hooks", "cancelled"): "stop_hook_prevented",
    ("stop_hooks", "malformed"): "completed",
    # R-SUM-1 a failing summary emits nothing; an interrupt while it runs hits the stream (I-2)
    ("summary", "raises"): "completed",
    ("summary", "hangs"): "completed",
    ("summary", "cancelled"): "completed",
    ("summary", "malformed"): "completed",
}


@pytest.mark.anyio
@pytest.mark.parametrize("fault_kind", FAULTS)
@pytest.mark.parametrize("handler", ["model", "tool", "compactor", "stop_hooks", "summary"])
async def test_fault_matrix(handler: str, fault_kind: str, tmp_path: Path) -> None:
    """Each handler fault ends in the Terminal the rules name, with every tool_use answered."""
    fault = Fault(fault_kind)
    tool = EchoTool(fault if handler == "tool" else None)
    tools = ToolRegistry([tool])
    script = [response(tool_use("Echo", {}), stop_reason="tool_use", usage=BIG if handler == "compactor" else None), reply("done")]
    model = FaultyModel(ScriptedModel(script, traits_for=tools.traits), fault if handler == "model" else None)
    cfg: LoopConfig = SMALL if handler == "compactor" else default()
    if handler == "summary":
        cfg = cfg.with_overrides({"gates.tool_use_summaries": True})

    async def summarizer(effect: SummarizeToolUse) -> str | None:
        result: Any = await fault.act()
        return result  # type: ignore[no-any-return]

    kwargs: dict[str, Any] = {}
    if handler == "compactor":
        kwargs["compactor"] = FaultyCompactor(fault)
    else:
        kwargs["compactor"] = ModelCompactor(ScriptedModel([], traits_for=tools.traits))
    if handler == "stop_hooks":
        kwargs["stop_hooks"] = FaultyHooks(fault)
    if handler == "summary":
        kwargs["summarizer"] = summarizer
    deadline = 0.2
    r = run(
        "go",
        model=model,
        tools=tools,
        workspace=tmp_path,
        config=cfg,
        permissions=PermissionPolicy(default="allow"),
        tool_timeout_s=deadline,
        timeouts=Timeouts(model_s=deadline, compaction_s=deadline, stop_hooks_s=deadline, summary_s=deadline),
        **kwargs,
    )

    async def interrupter() -> None:
        await fault.started.wait()
        await anyio.sleep(0.02)
        r.interrupt("hard")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with r:
                if fault_kind == "cancelled":
                    tg.start_soon(interrupter)
                async for item in r:
                    if isinstance(item, PermissionRequest):
                        item.allow()
            tg.cancel_scope.cancel()
    assert fault.used, "the fault was never exercised"
    assert r.result is not None
    expected = EXPECTED[(handler, fault_kind)]
    if handler == "summary" and fault_kind == "cancelled":
        # the interrupt lands while the summary runs beside the second round's stream
        assert r.result.terminal.TAG in ("completed", "aborted_streaming")
    else:
        assert r.result.terminal.TAG == expected, r.result.state.transition
    assert _pairs_ok(r.result.state.conversation.messages())


def test_matrix_covers_every_cell() -> None:
    """The expectation table names every handler × fault."""
    handlers = {h for h, _ in EXPECTED}
    assert {(h, f) for h in handlers for f in FAULTS} == set(EXPECTED)
    assert attrs.has(Timeouts)
