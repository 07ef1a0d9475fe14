"""Helpers of the tests of the full mutation run's holes (tests/reducer/test_holes_full*.py)."""

from __future__ import annotations

from typing import Any

from steploop.reducer import Gates, LoopConfig, default
from steploop.reducer.effects import Emit
from steploop.reducer.messages import Usage
from tests.reducer.driver import SAFE, Driver

MODEL = "claude-sonnet-4-5"


# --- helpers ---------------------------------------------------------------------------------


def of(fx: Any, kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def emitted(fx: Any) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


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
