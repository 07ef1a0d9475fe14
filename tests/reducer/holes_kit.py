"""Helpers of the tests of the independent mutation run's holes (tests/reducer/test_holes.py,
test_holes_interrupts.py).
"""

from __future__ import annotations

from typing import Any

from steploop.reducer import Gates, LoopConfig, default
from steploop.reducer.effects import Emit
from steploop.reducer.events import ModelCallFailed, StopHooksFinished
from steploop.reducer.messages import ToolResultBlock, Usage, UserMessage
from tests.reducer.driver import SAFE, Driver

FALLBACK = "claude-haiku-4-5"


# --- helpers ---------------------------------------------------------------------------------


def of(fx: Any, kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def emitted(fx: Any) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


def results_in(items: Any) -> list[tuple[str, str]]:
    """(tool_use_id, content) of every tool_result among ``items``, in order."""
    return [
        (b.tool_use_id, b.content)
        for m in items
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


def fail(d: Driver, kind: str, **kw: Any) -> tuple[Any, ...]:
    return d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, **kw))


def small(**gates: bool) -> LoopConfig:
    """A 50,000-token window: effective 42,000, auto-compact 29,000, blocking 39,000,
    snip 22,000, collapse 37,800."""
    return default(context_window=50_000, gates=Gates(**gates))


def tool_round(d: Driver, tid: str, content: str, out_usage: Usage) -> tuple[Any, ...]:
    """One round: a safe Read allowed mid-stream, the response ends, the tool finishes."""
    d.tool_use(tid, "Read", SAFE, file_path=f"{tid}.py")
    d.allow(tid)
    d.end("tool_use", out_usage)
    return d.finish_tool(tid, content)


def rounds(d: Driver, n: int, last_input: int, first: int = 1) -> tuple[Any, ...]:
    """``n`` tool rounds of one 8,000-char result each (2,002 tokens a segment), their ids
    ``t<first>`` on (an id is never reused: B-MODEL-2)."""
    fx: tuple[Any, ...] = ()
    for i in range(first, first + n):
        use = Usage(input_tokens=last_input if i == first + n - 1 else 1_000, output_tokens=0)
        fx = tool_round(d, f"t{i}", "x" * 8_000, use)
    return fx


# --- token budget [C-BUDGET-1] -------------------------------------------------------------------


def _budget_round(d: Driver, out: int) -> None:
    d.text("work")
    d.end("end_turn", Usage(input_tokens=1_000, output_tokens=out))
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id))
