"""Built-in tools, each confined to one workspace directory.

Every path a tool is given may be relative (to the workspace) or absolute. It is walked from a
descriptor of the workspace by :mod:`steploop.effects.tools.confine`, without the kernel ever following
a link, and refused if it leads outside; what the walk checked (a descriptor) is what the tool
then reads, writes or lists. A tool is bound to its workspace when it is built;
``ToolContext.workspace`` is not consulted, so a context can never widen what a tool may touch.

Problems the model can fix (a missing file, an ambiguous edit, a path outside the workspace)
come back from ``call`` as ``<tool_use_error>`` outputs, never as exceptions. The file tools
work in worker threads that a cancellation always gives up at once
(:func:`steploop.effects.tools.fileio.guarded`).

The tools live by responsibility: Read, Write and Edit in :mod:`~steploop.effects.tools.files`
(with the read-before-write rule of :mod:`~steploop.effects.tools.readstate`), Glob and Grep
in :mod:`~steploop.effects.tools.search` (Grep's engine in :mod:`~steploop.effects.tools.regex`),
what they share in :mod:`~steploop.effects.tools.fileio`, and Bash here (its read-only rule in
:mod:`~steploop.effects.tools.bash_readonly`).

``Bash`` is not confined: it runs in the workspace as its working directory, nothing more, and
is therefore left out of :func:`builtin_tools` unless asked for. Its command and everything the
command starts are killed when the call ends (:mod:`steploop.effects.procs`).
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypedDict

import anyio
import anyio.abc
import attrs

from steploop.effects.procs import open_process_tree, tool_environment
from steploop.effects.tools.base import Tool, ToolContext, ToolOutput, tool_use_error
from steploop.effects.tools.bash_readonly import is_read_only_command
from steploop.effects.tools.fileio import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_RESULTS,
    resolve_workspace,
)
from steploop.effects.tools.fileio import schema as _schema
from steploop.effects.tools.files import Edit, Read, Write
from steploop.effects.tools.readstate import FileReadState
from steploop.effects.tools.search import Glob, Grep
from steploop.reducer.events import InterruptBehavior

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_RESULTS",
    "Bash",
    "Edit",
    "Glob",
    "Grep",
    "Read",
    "Write",
    "builtin_tools",
    "is_read_only_command",
]


def _resolve_workspace(workspace: Path | str) -> Path:
    return resolve_workspace(workspace)


class _Common(TypedDict):
    workspace: Path
    max_file_bytes: int
    max_results: int
    allow_hard_links: bool
    read_state: FileReadState


# -- Bash ------------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Bash:
    """Run a shell command with the workspace as working directory (not sandboxed).

    The command runs as a :class:`steploop.effects.procs.ProcessTree`: when the call is cancelled,
    times out or ends, the command and everything it started are killed (on Linux even what
    left the process group or session, and also when steploop itself is killed), so no
    child outlives the call. Output (stdout and stderr together) is kept up to
    ``max_output_chars`` characters.
    """

    name: ClassVar[str] = "Bash"
    description: ClassVar[str] = (
        "Run a bash command with the workspace as working directory. stdout and stderr are "
        "returned together; a non-zero exit status makes the result an error. Commands are "
        "killed after a timeout."
    )
    input_schema: ClassVar[Mapping[str, Any]] = _schema(
        {"command": {"type": "string", "description": "The command to run"}},
        ("command",),
    )
    interrupt: ClassVar[InterruptBehavior] = "cancel"
    cancels_siblings_on_error: ClassVar[bool] = True

    workspace: Path = attrs.field(converter=_resolve_workspace)
    timeout_s: float = 120.0
    max_output_chars: int = 30_000
    shell: str = "/bin/bash"
    pass_secrets: bool = False  # give the command ANTHROPIC_API_KEY and ANTHROPIC_AUTH_TOKEN

    @property
    def max_result_chars(self) -> int | None:
        return self.max_output_chars

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        command = input.get("command")
        return isinstance(command, str) and is_read_only_command(command)

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        command = str(input["command"])
        if not command.strip():
            return tool_use_error("command must not be empty")
        max_bytes = self.max_output_chars * 4
        buffer = bytearray()
        truncated = False
        # Shielded: a cancellation must not strike between the start and the moment the
        # tree is held (the finally below is what ends it).
        with anyio.CancelScope(shield=True):
            process = await open_process_tree(
                [self.shell, "-c", command],
                cwd=self.workspace,
                env=tool_environment(pass_secrets=self.pass_secrets),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        try:
            with anyio.move_on_after(self.timeout_s) as deadline:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    room = max_bytes - len(buffer)
                    if len(chunk) > room:
                        truncated = True
                    buffer.extend(chunk[: max(room, 0)])
                await process.wait()
        finally:
            await process.aclose()  # shielded: the whole tree is killed and reaped

        output = buffer.decode("utf-8", errors="replace")
        if len(output) > self.max_output_chars:
            output = output[: self.max_output_chars]
            truncated = True
        if truncated:
            output += f"\n(output truncated to {self.max_output_chars} characters)"
        if deadline.cancelled_caught:
            return ToolOutput(
                content=f"{output}\nCommand timed out after {self.timeout_s:g} s".lstrip("\n"),
                is_error=True,
            )
        code = process.returncode
        if code or process.lost:
            return ToolOutput(content=f"{output}\n({process.outcome})".lstrip("\n"), is_error=True)
        return ToolOutput(content=output)


# -- the default set -------------------------------------------------------------------------


def builtin_tools(
    workspace: Path | str,
    *,
    enable_bash: bool = False,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_results: int = DEFAULT_MAX_RESULTS,
    bash_timeout_s: float = 120.0,
    allow_hard_links: bool = False,
    require_read_before_write: bool = True,
) -> list[Tool]:
    """Read, Write, Edit, Glob and Grep confined to ``workspace``; Bash too if enabled.

    ``allow_hard_links`` lets the file tools use regular files with more than one hard link
    (refused by default, see :mod:`steploop.effects.tools.confine`). The file tools share one
    record of what the model has read (:class:`~steploop.effects.tools.readstate.FileReadState`):
    Edit, and Write over an existing file, refuse a file changed since it was read, and with
    ``require_read_before_write`` (the default, as Claude Code) one never read."""
    root = _resolve_workspace(workspace)
    shared = _Common(
        workspace=root,
        max_file_bytes=max_file_bytes,
        max_results=max_results,
        allow_hard_links=allow_hard_links,
        read_state=FileReadState(),
    )
    tools: list[Tool] = [
        Read(**shared),
        Write(**shared, require_read=require_read_before_write),
        Edit(**shared, require_read=require_read_before_write),
        Glob(**shared),
        Grep(**shared),
    ]
    if enable_bash:
        tools.append(Bash(workspace=root, timeout_s=bash_timeout_s))
    return tools
