"""Read, Write and Edit: one file at a time, confined to the workspace (specs/ E-CONFINE-*),
and, as in Claude Code, no change to an existing file the model has not read or that changed
since it did (specs/ E-STALE-1, :mod:`steploop.effects.tools.readstate`)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attrs

from steploop.effects.tools.base import ToolContext, ToolOutput
from steploop.effects.tools.confine import Refused, Walker, check_links
from steploop.effects.tools.fileio import (
    Basis,
    Guard,
    Replaced,
    ToolError,
    WorkspaceTool,
    decode,
    guarded,
    open_regular,
    replace_file,
    schema,
    split_lines,
)
from steploop.reducer.events import InterruptBehavior
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

__all__ = ["Edit", "Read", "Write"]


def _kept_note(replaced: Replaced) -> str:
    if not replaced.kept_bytes:
        return ""
    return (
        f"; {replaced.kept_bytes} bytes another process appended meanwhile were kept at the "
        "end (read the file again before changing it)"
    )


@attrs.frozen(kw_only=True)
class Read(WorkspaceTool):
    """Read a text file, with 1-based line numbers; optionally a window of lines."""

    name: ClassVar[str] = "Read"
    description: ClassVar[str] = (
        "Read a UTF-8 text file in the workspace. file_path is relative to the workspace or "
        "absolute. Lines come back numbered from 1 as '<number>\\t<text>'. Use offset (first "
        "line, 1-based) and limit (number of lines) to read part of a long file."
    )
    input_schema: ClassVar[Mapping[str, Any]] = schema(
        {
            "file_path": {"type": "string", "description": "The file to read"},
            "offset": {"type": "integer", "minimum": 1, "description": "First line (1-based)"},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines"},
        },
        ("file_path",),
    )
    max_result_chars: ClassVar[int | None] = None
    interrupt: ClassVar[InterruptBehavior] = "cancel"
    cancels_siblings_on_error: ClassVar[bool] = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await guarded(lambda guard: self._read(input))

    def remember(self, input: Mapping[str, Any]) -> bool:
        """Read the file of a Read call made earlier (an input the model gave) again, now, and
        record it as seen, as the call did (E-STALE-1); nothing is returned to anyone. False
        when it cannot be read now (gone, a directory, outside the workspace, too large, not
        text, the input malformed)."""
        try:
            return not self._read(input).is_error
        except (ToolError, Refused, OSError, ValueError, TypeError, KeyError):
            return False

    def restore(self, messages: Iterable[Message]) -> int:
        """What the model had read, when a session goes on in another process (a resumed
        trace, a session continued from its history): every Read call of ``messages`` that
        succeeded, by this tool's name, is read again now (:meth:`remember`), so Edit and
        Write accept the files the model read before. Claude Code does the same when it
        resumes a session: it reads again the files its Read tool read (and a path that has
        become a directory crashed its resume, anthropics/claude-code#41470; here it is
        skipped). Returns the number of files read again."""
        calls: dict[str, Mapping[str, Any]] = {}
        restored = 0
        for message in messages:
            if not isinstance(message, (UserMessage, AssistantMessage)):
                continue
            for block in message.content:
                if isinstance(block, ToolUseBlock) and block.name == self.name:
                    calls[block.id] = block.input
                elif isinstance(block, ToolResultBlock) and not block.is_error:
                    call = calls.pop(block.tool_use_id, None)
                    if call is not None and self.remember(call):
                        restored += 1
        return restored

    def _read(self, input: Mapping[str, Any]) -> ToolOutput:
        raw = str(input["file_path"])
        offset = int(input.get("offset", 1))
        limit = input.get("limit")
        partial = "offset" in input or limit is not None
        with Walker(self.workspace, raw) as walker:
            name = walker.walk(walker.split(raw))
            if name is None:
                raise ToolError(f"Path is a directory, not a file: {raw}")
            data, st = open_regular(walker, name, raw, self.max_file_bytes, self.allow_hard_links)
            key = walker.display(name)
        text = decode(data, raw)
        lines = split_lines(text)
        if not lines:
            self.read_state.record(key, st, data, partial=partial)
            return ToolOutput(content=f"(file is empty: {raw})")
        if offset > len(lines):
            raise ToolError(
                f"offset {offset} is past the end of the file ({len(lines)} lines): {raw}"
            )
        end = len(lines) if limit is None else min(len(lines), offset - 1 + int(limit))
        numbered = (f"{n:>6}\t{lines[n - 1]}" for n in range(offset, end + 1))
        self.read_state.record(key, st, data, partial=partial)
        return ToolOutput(content="\n".join(numbered))


@attrs.frozen(kw_only=True)
class Write(WorkspaceTool):
    """Create or overwrite a file (parent directories are created inside the workspace)."""

    name: ClassVar[str] = "Write"
    description: ClassVar[str] = (
        "Write a UTF-8 text file in the workspace, replacing it if it exists. file_path is "
        "relative to the workspace or absolute; missing parent directories are created. An "
        "existing file must have been read first and not changed since."
    )
    input_schema: ClassVar[Mapping[str, Any]] = schema(
        {
            "file_path": {"type": "string", "description": "The file to write"},
            "content": {"type": "string", "description": "The whole new content"},
        },
        ("file_path", "content"),
    )
    max_result_chars: ClassVar[int | None] = 10_000
    interrupt: ClassVar[InterruptBehavior] = "block"
    cancels_siblings_on_error: ClassVar[bool] = False

    #: Refuse to overwrite an existing file the model has not read (Claude Code's rule).
    require_read: bool = True

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return False

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str(input["file_path"])
        data = str(input["content"]).encode("utf-8")

        def work(guard: Guard) -> ToolOutput:
            if len(data) > self.max_file_bytes:
                raise ToolError(
                    f"Content is too large ({len(data)} bytes; the limit is "
                    f"{self.max_file_bytes} bytes)"
                )
            with Walker(self.workspace, raw) as walker:
                name = walker.walk(walker.split(raw), create=True, before_change=guard.check)
                if name is None:
                    raise ToolError(f"Path is a directory, not a file: {raw}")
                key = walker.display(name)
                basis = self._basis(walker, name, raw, key)
                replaced = replace_file(walker, name, data, guard, basis)
                self.read_state.record(key, replaced.status, data)
                verb = "Updated" if basis.like is not None else "Created"
                return ToolOutput(content=f"{verb} {key} ({len(data)} bytes){_kept_note(replaced)}")

        return await guarded(work)

    def _basis(self, walker: Walker, name: str, raw: str, key: str) -> Basis:
        """The file about to be replaced (Basis(None) for a new one), after the checks."""
        try:
            st = os.stat(name, dir_fd=walker.top, follow_symlinks=False)
        except FileNotFoundError:
            return Basis(None)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"Path is a directory, not a file: {raw}")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"Not a regular file: {raw}")
        check_links(st, raw, self.allow_hard_links)
        current: bytes | None = None
        if st.st_size <= self.max_file_bytes:
            current, st = open_regular(walker, name, raw, self.max_file_bytes, True)
        problem = self.read_state.problem(key, st, current, require_read=self.require_read)
        if problem is not None:
            raise ToolError(problem)
        return Basis(st, current)


@attrs.frozen(kw_only=True)
class Edit(WorkspaceTool):
    """Replace an exact string in a file: once (it must be unique) or everywhere."""

    name: ClassVar[str] = "Edit"
    description: ClassVar[str] = (
        "Replace old_string with new_string in a file of the workspace. old_string must occur "
        "exactly once unless replace_all is true, in which case every occurrence is replaced. "
        "The file must have been read first and not changed since."
    )
    input_schema: ClassVar[Mapping[str, Any]] = schema(
        {
            "file_path": {"type": "string", "description": "The file to edit"},
            "old_string": {"type": "string", "description": "The exact text to replace"},
            "new_string": {"type": "string", "description": "The replacement text"},
            "replace_all": {
                "type": "boolean",
                "default": False,
                "description": "Replace every occurrence",
            },
        },
        ("file_path", "old_string", "new_string"),
    )
    max_result_chars: ClassVar[int | None] = 10_000
    interrupt: ClassVar[InterruptBehavior] = "block"
    cancels_siblings_on_error: ClassVar[bool] = False

    #: Refuse to edit a file the model has not read (Claude Code's rule).
    require_read: bool = True

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return False

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str(input["file_path"])
        old = str(input["old_string"])
        new = str(input["new_string"])
        replace_all = bool(input.get("replace_all", False))

        def work(guard: Guard) -> ToolOutput:
            if not old:
                raise ToolError("old_string must not be empty")
            if old == new:
                raise ToolError("old_string and new_string are the same; nothing to change")
            with Walker(self.workspace, raw) as walker:
                name = walker.walk(walker.split(raw))
                if name is None:
                    raise ToolError(f"Path is a directory, not a file: {raw}")
                data, st = open_regular(
                    walker, name, raw, self.max_file_bytes, self.allow_hard_links
                )
                key = walker.display(name)
                problem = self.read_state.problem(key, st, data, require_read=self.require_read)
                if problem is not None:
                    raise ToolError(problem)
                text = decode(data, raw)
                count = text.count(old)
                if count == 0:
                    raise ToolError(f"String to replace not found in file: {raw}")
                if count > 1 and not replace_all:
                    raise ToolError(
                        f"Found {count} matches of old_string in {raw}, but replace_all is "
                        "false. Give more context to make it unique, or set replace_all to true."
                    )
                updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
                encoded = updated.encode("utf-8")
                if len(encoded) > self.max_file_bytes:
                    raise ToolError(
                        f"The edited file would be too large ({len(encoded)} bytes; the limit "
                        f"is {self.max_file_bytes} bytes): {raw}"
                    )
                # The file read through the descriptor is the one replaced, by its name in the
                # directory the walk holds open, if it is still what was read.
                replaced = replace_file(walker, name, encoded, guard, Basis(st, data))
                self.read_state.record(key, replaced.status, encoded)
                count = count if replace_all else 1
                noun = "occurrence" if count == 1 else "occurrences"
                return ToolOutput(content=f"Replaced {count} {noun} in {key}{_kept_note(replaced)}")

        return await guarded(work)
