"""Helpers of the tool layer's tests (tests/effects/test_tools.py,
test_tools_files.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry


def ctx(workspace: Path, tool_use_id: str = "toolu_1") -> ToolContext:
    return ToolContext(workspace=workspace, tool_use_id=tool_use_id)


async def run(
    registry: ToolRegistry,
    workspace: Path,
    name: str,
    input: Mapping[str, Any],
    timeout_s: float = 30.0,
) -> ToolOutput:
    return await registry.run(name, input, ctx(workspace), timeout_s)
