"""Helpers of the context management tests (tests/reducer/test_context*.py)."""

from __future__ import annotations

from typing import Any

from steploop.reducer import Conversation, LoopConfig, default
from steploop.reducer.config import Gates
from steploop.reducer.effects import CallModel, Compact
from steploop.reducer.events import ToolTraits
from steploop.reducer.messages import ToolResultBlock, Usage, UserMessage
from tests.reducer.driver import SAFE, Driver

MODEL = "claude-sonnet-4-5"


# --- helpers ----------------------------------------------------------------------------------


def small(**gates: bool) -> LoopConfig:
    """default() with a 50,000-token window: effective 42,000, auto-compact 29,000,
    blocking 39,000, snip 22,000, collapse 37,800 (see test_small_window_thresholds)."""
    return default(context_window=50_000, gates=Gates(**gates))


def u(inp: int, out: int = 0) -> Usage:
    return Usage(input_tokens=inp, output_tokens=out)


def tool_round(
    d: Driver,
    tid: str,
    content: str = "",
    use: Usage | None = None,
    name: str = "Read",
    traits: ToolTraits = SAFE,
    end_ms: int = 0,
    finish_ms: int = 0,
) -> tuple[Any, ...]:
    """One round: a single safe tool_use, allowed mid-stream, the response ends, the tool
    finishes (which starts the next round). Returns the effects of the finishing step."""
    d.tool_use(tid, name=name, traits=traits)
    d.allow(tid)
    d.end("tool_use", use or u(100), at_ms=end_ms)
    return d.finish_tool(tid, content, at_ms=finish_ms)


def calls(fx: Any) -> list[CallModel]:
    return [e for e in fx if isinstance(e, CallModel)]


def compacts(fx: Any) -> list[Compact]:
    return [e for e in fx if isinstance(e, Compact)]


def result_texts(conv: Conversation) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in conv.messages():
        if isinstance(m, UserMessage):
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    out[b.tool_use_id] = b.content
    return out
