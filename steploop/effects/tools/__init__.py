"""The shell's tool layer: the tool contract, the registry, and the built-in tools."""

from steploop.effects.tools.base import (
    Isolated,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    tool_use_error,
)
from steploop.effects.tools.builtin import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_RESULTS,
    Bash,
    Edit,
    Glob,
    Grep,
    Read,
    Write,
    builtin_tools,
    is_read_only_command,
)
from steploop.effects.tools.readstate import FileReadState

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_RESULTS",
    "Bash",
    "Edit",
    "FileReadState",
    "Glob",
    "Grep",
    "Isolated",
    "Read",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "Write",
    "builtin_tools",
    "is_read_only_command",
    "tool_use_error",
]
