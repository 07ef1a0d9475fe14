"""Built-in tools, each confined to one workspace directory.

Every path a tool is given may be relative (to the workspace) or absolute. It is walked from a
descriptor of the workspace by :mod:`steploop.effects.tools.confine`, without the kernel ever following
a link, and refused if it leads outside; what the walk checked (a descriptor) is what the tool
then reads, writes or lists. A tool is bound to its workspace when it is built;
``ToolContext.workspace`` is not consulted, so a context can never widen what a tool may touch.

Problems the model can fix (a missing file, an ambiguous edit, a path outside the workspace)
come back from ``call`` as ``<tool_use_error>`` outputs, never as exceptions. The file tools
work in worker threads that a cancellation always gives up at once (see :func:`_guarded`).

``Bash`` is not confined: it runs in the workspace as its working directory, nothing more, and
is therefore left out of :func:`builtin_tools` unless asked for. Its command and everything the
command starts are killed when the call ends (:mod:`steploop.effects.procs`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import secrets
import shlex
import stat
import subprocess
import threading
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, ClassVar

import anyio
import anyio.abc
import attrs

from steploop.effects.procs import open_process_tree, tool_environment
from steploop.effects.tools.base import Tool, ToolContext, ToolOutput, tool_use_error
from steploop.effects.tools.confine import Refused, Walker, check_links, os_message, show_name
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

DEFAULT_MAX_FILE_BYTES = 2 * 1024 * 1024
DEFAULT_MAX_RESULTS = 500
_MAX_GREP_LINE_CHARS = 500
_SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class _ToolError(Exception):
    """A problem to report to the model; ``call`` turns it into a tool_use_error output."""


def _schema(properties: Mapping[str, Any], required: tuple[str, ...]) -> Mapping[str, Any]:
    return MappingProxyType(
        {
            "type": "object",
            "properties": dict(properties),
            "required": list(required),
            "additionalProperties": False,
        }
    )


def _resolve_workspace(workspace: Path | str) -> Path:
    root = Path(workspace).resolve(strict=True)
    if not root.is_dir():
        raise ValueError(f"workspace {root} is not a directory")
    return root


# -- confinement -----------------------------------------------------------------------------
#
# The walk itself is steploop.effects.tools.confine: every path is walked from a descriptor of the
# workspace without letting the kernel follow a link, and what was checked is what is used.


class _Abandoned(BaseException):
    """Raised in a worker thread whose call was given up: it must not commit anything."""


class _Guard:
    """Shared by a call and its worker thread: the call sets ``cancelled`` when it gives up
    waiting (a timeout, an interrupt, the end of the run), the worker polls it between units
    of work and asks :meth:`commit` before the one step that changes the workspace."""

    __slots__ = ("_committed", "_lock", "cancelled")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._committed = False
        self.cancelled = False

    def cancel(self) -> None:
        with self._lock:
            if not self._committed:
                self.cancelled = True

    def check(self) -> None:
        if self.cancelled:
            raise _Abandoned

    def commit(self) -> None:
        """Claim the right to make the change; _Abandoned if the call was given up first.
        The lock is never held across I/O, so the call never waits on the worker."""
        with self._lock:
            if self.cancelled:
                raise _Abandoned
            self._committed = True


def _decode(data: bytes, raw: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _ToolError(f"File is not UTF-8 text: {raw}") from exc


def _read_fd(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd`` (stops early at end of file)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _open_regular(
    walker: Walker, name: str, raw: str, max_bytes: int, allow_hard_links: bool
) -> tuple[bytes, os.stat_result]:
    """Open ``name`` in the walker's directory without following a link, check what was
    opened (a regular file, one link unless allowed, within the size cap) and read it from
    that descriptor."""
    fd = walker.open_file(name)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise _ToolError(f"Path is a directory, not a file: {raw}")
        if not stat.S_ISREG(st.st_mode):
            raise _ToolError(f"Not a regular file: {raw}")
        check_links(st, raw, allow_hard_links)
        if st.st_size > max_bytes:
            raise _ToolError(
                f"File is too large ({st.st_size} bytes; the limit is {max_bytes} bytes): {raw}"
            )
        data = _read_fd(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise _ToolError(f"File is too large (over the limit of {max_bytes} bytes): {raw}")
    return data, st


def _replace(
    walker: Walker, name: str, data: bytes, guard: _Guard, like: os.stat_result | None
) -> None:
    """Replace (or create) ``name`` in the walker's directory with ``data``, atomically: a
    new file made with O_CREAT | O_EXCL | O_NOFOLLOW next to it, renamed over it, both
    relative to the directory's descriptor. ``like``: the file it replaces (its permission
    bits, and its owner where allowed, are kept)."""
    top = walker.top
    mode = 0o666 if like is None else stat.S_IMODE(like.st_mode) & 0o777
    for _ in range(8):
        tmp = f".steploop-{secrets.token_hex(6)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                mode,
                dir_fd=top,
            )
        except FileExistsError:
            continue
        except OSError as exc:
            raise _ToolError(os_message(exc, walker.raw)) from exc
        break
    else:
        raise _ToolError(f"Could not create a temporary file next to {walker.raw}")
    try:
        try:
            if like is not None:
                os.fchmod(fd, mode)  # the umask may have narrowed it
                with contextlib.suppress(OSError):
                    os.fchown(fd, like.st_uid, like.st_gid)
            view = memoryview(data)
            while view:
                guard.check()
                view = view[os.write(fd, view[: 1 << 20]) :]
        finally:
            os.close(fd)
        guard.commit()
        os.replace(tmp, name, src_dir_fd=top, dst_dir_fd=top)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=top)
        raise


async def _guarded(func: Callable[[_Guard], ToolOutput]) -> ToolOutput:
    """Run blocking ``func`` in a worker thread; a _ToolError, Refused or OSError becomes an
    error output.

    The call can always be given up: on cancellation (a deadline, an interrupt, the end of
    the run) it returns at once and the worker is abandoned. The worker sees the guard
    cancelled at its next check and stops; a Write or Edit given up before its final rename
    never changes the workspace.
    """
    guard = _Guard()
    try:
        return await anyio.to_thread.run_sync(func, guard, abandon_on_cancel=True)
    except (_ToolError, Refused) as exc:
        return tool_use_error(str(exc))
    except OSError as exc:
        return tool_use_error(f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}")
    finally:
        guard.cancel()


def _split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


# -- file tools ------------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _WorkspaceTool:
    """Shared fields of the confined tools: the workspace and the size caps."""

    workspace: Path = attrs.field(converter=_resolve_workspace)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_results: int = DEFAULT_MAX_RESULTS
    #: Use regular files that have more than one hard link (refused by default: a hard link
    #: can make a file from outside the workspace appear inside).
    allow_hard_links: bool = False


@attrs.frozen(kw_only=True)
class Read(_WorkspaceTool):
    """Read a text file, with 1-based line numbers; optionally a window of lines."""

    name: ClassVar[str] = "Read"
    description: ClassVar[str] = (
        "Read a UTF-8 text file in the workspace. file_path is relative to the workspace or "
        "absolute. Lines come back numbered from 1 as '<number>\\t<text>'. Use offset (first "
        "line, 1-based) and limit (number of lines) to read part of a long file."
    )
    input_schema: ClassVar[Mapping[str, Any]] = _schema(
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
        raw = str(input["file_path"])
        offset = int(input.get("offset", 1))
        limit = input.get("limit")

        def work(guard: _Guard) -> ToolOutput:
            with Walker(self.workspace, raw) as walker:
                name = walker.walk(walker.split(raw))
                if name is None:
                    raise _ToolError(f"Path is a directory, not a file: {raw}")
                data, _ = _open_regular(
                    walker, name, raw, self.max_file_bytes, self.allow_hard_links
                )
            text = _decode(data, raw)
            lines = _split_lines(text)
            if not lines:
                return ToolOutput(content=f"(file is empty: {raw})")
            if offset > len(lines):
                raise _ToolError(
                    f"offset {offset} is past the end of the file ({len(lines)} lines): {raw}"
                )
            end = len(lines) if limit is None else min(len(lines), offset - 1 + int(limit))
            numbered = (f"{n:>6}\t{lines[n - 1]}" for n in range(offset, end + 1))
            return ToolOutput(content="\n".join(numbered))

        return await _guarded(work)


@attrs.frozen(kw_only=True)
class Write(_WorkspaceTool):
    """Create or overwrite a file (parent directories are created inside the workspace)."""

    name: ClassVar[str] = "Write"
    description: ClassVar[str] = (
        "Write a UTF-8 text file in the workspace, replacing it if it exists. file_path is "
        "relative to the workspace or absolute; missing parent directories are created."
    )
    input_schema: ClassVar[Mapping[str, Any]] = _schema(
        {
            "file_path": {"type": "string", "description": "The file to write"},
            "content": {"type": "string", "description": "The whole new content"},
        },
        ("file_path", "content"),
    )
    max_result_chars: ClassVar[int | None] = 10_000
    interrupt: ClassVar[InterruptBehavior] = "block"
    cancels_siblings_on_error: ClassVar[bool] = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return False

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str(input["file_path"])
        data = str(input["content"]).encode("utf-8")

        def work(guard: _Guard) -> ToolOutput:
            if len(data) > self.max_file_bytes:
                raise _ToolError(
                    f"Content is too large ({len(data)} bytes; the limit is "
                    f"{self.max_file_bytes} bytes)"
                )
            with Walker(self.workspace, raw) as walker:
                name = walker.walk(walker.split(raw), create=True, before_change=guard.check)
                if name is None:
                    raise _ToolError(f"Path is a directory, not a file: {raw}")
                try:
                    st: os.stat_result | None = os.stat(
                        name, dir_fd=walker.top, follow_symlinks=False
                    )
                except FileNotFoundError:
                    st = None
                if st is not None:
                    if stat.S_ISDIR(st.st_mode):
                        raise _ToolError(f"Path is a directory, not a file: {raw}")
                    if not stat.S_ISREG(st.st_mode):
                        raise _ToolError(f"Not a regular file: {raw}")
                    check_links(st, raw, self.allow_hard_links)
                _replace(walker, name, data, guard, st)
                verb = "Updated" if st is not None else "Created"
                return ToolOutput(content=f"{verb} {walker.display(name)} ({len(data)} bytes)")

        return await _guarded(work)


@attrs.frozen(kw_only=True)
class Edit(_WorkspaceTool):
    """Replace an exact string in a file: once (it must be unique) or everywhere."""

    name: ClassVar[str] = "Edit"
    description: ClassVar[str] = (
        "Replace old_string with new_string in a file of the workspace. old_string must occur "
        "exactly once unless replace_all is true, in which case every occurrence is replaced."
    )
    input_schema: ClassVar[Mapping[str, Any]] = _schema(
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

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return False

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        raw = str(input["file_path"])
        old = str(input["old_string"])
        new = str(input["new_string"])
        replace_all = bool(input.get("replace_all", False))

        def work(guard: _Guard) -> ToolOutput:
            if not old:
                raise _ToolError("old_string must not be empty")
            if old == new:
                raise _ToolError("old_string and new_string are the same; nothing to change")
            with Walker(self.workspace, raw) as walker:
                name = walker.walk(walker.split(raw))
                if name is None:
                    raise _ToolError(f"Path is a directory, not a file: {raw}")
                data, st = _open_regular(
                    walker, name, raw, self.max_file_bytes, self.allow_hard_links
                )
                text = _decode(data, raw)
                count = text.count(old)
                if count == 0:
                    raise _ToolError(f"String to replace not found in file: {raw}")
                if count > 1 and not replace_all:
                    raise _ToolError(
                        f"Found {count} matches of old_string in {raw}, but replace_all is "
                        "false. Give more context to make it unique, or set replace_all to true."
                    )
                updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
                encoded = updated.encode("utf-8")
                if len(encoded) > self.max_file_bytes:
                    raise _ToolError(
                        f"The edited file would be too large ({len(encoded)} bytes; the limit "
                        f"is {self.max_file_bytes} bytes): {raw}"
                    )
                # The file read through the descriptor is the one replaced, by its name in the
                # directory the walk holds open.
                _replace(walker, name, encoded, guard, st)
                replaced = count if replace_all else 1
                noun = "occurrence" if replaced == 1 else "occurrences"
                return ToolOutput(content=f"Replaced {replaced} {noun} in {walker.display(name)}")

        return await _guarded(work)


def _check_glob_pattern(pattern: str) -> None:
    if not pattern:
        raise _ToolError("pattern must not be empty")
    if pattern.startswith(("/", "~")) or "\x00" in pattern:
        raise _ToolError(f"pattern must be relative to the search directory: {pattern}")
    if ".." in PurePosixPath(pattern).parts:
        raise _ToolError(f"pattern must not contain '..': {pattern}")


def _capped(lines: list[str], cap: int, what: str) -> str:
    if len(lines) <= cap:
        return "\n".join(lines)
    shown = "\n".join(lines[:cap])
    return f"{shown}\n(results truncated: showing {cap} of {len(lines)} {what})"


_GlobState = frozenset[int]


class _GlobPattern:
    """A glob pattern as a matcher over path components, walked along a tree: a state is
    the set of pattern positions a directory has reached. ``**`` matches any number of
    directories (0 included), ``*``, ``?`` and ``[...]`` match within one name (names
    starting with a dot included, case-sensitively), as pathlib does on POSIX."""

    def __init__(self, pattern: str) -> None:
        parts = PurePosixPath(pattern).parts
        if not parts:
            raise _ToolError(f"Invalid glob pattern {pattern!r}: it names no file")
        for part in parts:
            if "**" in part and part != "**":
                raise _ToolError(
                    f"Invalid glob pattern {pattern!r}: Invalid pattern: '**' can only be an "
                    "entire path component"
                )
        self.parts = parts
        self._match = [
            None if part == "**" else re.compile(fnmatch.translate(part)).match for part in parts
        ]
        self.start: _GlobState = self._closure(frozenset({0}))

    def _closure(self, state: frozenset[int]) -> _GlobState:
        out = set(state)
        todo = list(state)
        while todo:
            i = todo.pop()
            if i < len(self.parts) and self._match[i] is None and i + 1 not in out:
                out.add(i + 1)
                todo.append(i + 1)
        return frozenset(out)

    def visit(self, state: _GlobState, name: str, is_dir: bool) -> tuple[_GlobState | None, bool]:
        name = show_name(name)  # a pattern matches a name as the tools show it
        last = len(self.parts) - 1
        if not is_dir:
            return None, any(
                i == last and (m := self._match[i]) is not None and m(name) is not None
                for i in state
            )
        nxt: set[int] = set()
        for i in state:
            m = self._match[i] if i <= last else None
            if i <= last and m is None:
                nxt.add(i)  # "**" takes this directory and stays
            elif m is not None and i < last and m(name) is not None:
                nxt.add(i + 1)
        return (self._closure(frozenset(nxt)) if nxt else None), False


def _link_target_file(walker: Walker, name: str) -> tuple[Walker, str] | None:
    """The regular file inside the workspace that the symlink ``name`` (met in a tree walk)
    leads to, followed by the confined walk: a walker standing in its directory, and its
    name; None if it leads nowhere, outside, or to anything but a regular file."""
    link = Walker(walker.root, walker.display(name), parent=walker)
    try:
        final = link.resolve_link(name)
        if final is not None and stat.S_ISREG(
            os.stat(final, dir_fd=link.top, follow_symlinks=False).st_mode
        ):
            return link, final
    except (Refused, OSError):
        pass
    link.close()
    return None


@attrs.frozen(kw_only=True)
class Glob(_WorkspaceTool):
    """List files matching a glob pattern, as sorted workspace-relative paths."""

    name: ClassVar[str] = "Glob"
    description: ClassVar[str] = (
        "Find files by glob pattern (like '**/*.py' or 'src/*.ts') under path (default: the "
        "workspace). Returns matching file paths relative to the workspace, sorted."
    )
    input_schema: ClassVar[Mapping[str, Any]] = _schema(
        {
            "pattern": {"type": "string", "description": "The glob pattern"},
            "path": {"type": "string", "description": "Directory to search in"},
        },
        ("pattern",),
    )
    max_result_chars: ClassVar[int | None] = 50_000
    interrupt: ClassVar[InterruptBehavior] = "cancel"
    cancels_siblings_on_error: ClassVar[bool] = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern = str(input["pattern"])
        raw_dir = input.get("path")

        def work(guard: _Guard) -> ToolOutput:
            _check_glob_pattern(pattern)
            matcher = _GlobPattern(pattern)
            found: set[str] = set()
            with Walker(self.workspace, "" if raw_dir is None else str(raw_dir)) as walker:
                if raw_dir is not None:
                    name = walker.walk(walker.split(str(raw_dir)))
                    if name is not None:
                        walker.enter(name)
                for name, is_link in walker.tree(
                    matcher.start, matcher.visit, stop=lambda: guard.cancelled
                ):
                    if is_link:
                        target = _link_target_file(walker, name)
                        if target is None:
                            continue
                        target[0].close()
                    found.add(walker.display(name))
            guard.check()
            if not found:
                return ToolOutput(content="No files found")
            return ToolOutput(content=_capped(sorted(found), self.max_results, "files"))

        return await _guarded(work)


def _grep_visit(state: bool, name: str, is_dir: bool) -> tuple[bool | None, bool]:
    """Grep's tree walk: every file, every directory but version-control ones."""
    if is_dir:
        return (None if name in _SKIPPED_DIRS else True), False
    return None, True


@attrs.frozen(kw_only=True)
class Grep(_WorkspaceTool):
    """Search file contents with a regular expression; ``path:line:text`` per match."""

    name: ClassVar[str] = "Grep"
    description: ClassVar[str] = (
        "Search the contents of text files for a Python regular expression. path is a file or "
        "directory (default: the workspace); glob filters file names (like '*.py'; a pattern "
        "with '/' is matched against the workspace-relative path). Each match comes back as "
        "'path:line:text'."
    )
    input_schema: ClassVar[Mapping[str, Any]] = _schema(
        {
            "pattern": {"type": "string", "description": "The regular expression"},
            "path": {"type": "string", "description": "File or directory to search"},
            "glob": {"type": "string", "description": "Only files whose name matches this"},
        },
        ("pattern",),
    )
    max_result_chars: ClassVar[int | None] = 50_000
    interrupt: ClassVar[InterruptBehavior] = "cancel"
    cancels_siblings_on_error: ClassVar[bool] = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        pattern = str(input["pattern"])
        raw_path = input.get("path")
        file_glob = input.get("glob")

        def wanted(rel: str) -> bool:
            if file_glob is None:
                return True
            target = rel if "/" in str(file_glob) else rel.rsplit("/", 1)[-1]
            return fnmatch.fnmatchcase(target, str(file_glob))

        def work(guard: _Guard) -> ToolOutput:
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                raise _ToolError(f"Invalid regular expression {pattern!r}: {exc}") from exc
            matches: list[str] = []
            limit = self.max_results + 1  # one more than shown, to know we truncated

            def search(walker: Walker, name: str, rel: str, explicit: bool) -> None:
                label = raw if explicit else rel
                try:
                    data, _ = _open_regular(
                        walker, name, label, self.max_file_bytes, self.allow_hard_links
                    )
                    text = data.decode("utf-8")
                except Refused as exc:
                    if explicit and "hard links" in str(exc):
                        raise
                    return
                except (_ToolError, OSError, UnicodeDecodeError):
                    return
                for number, line in enumerate(_split_lines(text), start=1):
                    if regex.search(line):
                        matches.append(f"{rel}:{number}:{line[:_MAX_GREP_LINE_CHARS]}")
                        if len(matches) >= limit:
                            return

            raw = "" if raw_path is None else str(raw_path)
            with Walker(self.workspace, raw) as walker:
                single: str | None = None
                if raw_path is not None:
                    name = walker.walk(walker.split(raw))
                    if name is not None:
                        try:
                            st = os.stat(name, dir_fd=walker.top, follow_symlinks=False)
                        except OSError as exc:
                            raise _ToolError(os_message(exc, raw)) from exc
                        if stat.S_ISDIR(st.st_mode):
                            walker.enter(name)
                        else:
                            single = name
                if single is not None:
                    rel = walker.display(single)
                    if wanted(rel):
                        search(walker, single, rel, explicit=True)
                else:
                    for name, is_link in walker.tree(
                        True, _grep_visit, stop=lambda: guard.cancelled or len(matches) >= limit
                    ):
                        rel = walker.display(name)
                        if not wanted(rel):
                            continue
                        if not is_link:
                            search(walker, name, rel, explicit=False)
                            continue
                        target = _link_target_file(walker, name)
                        if target is not None:
                            with target[0] as link:
                                search(link, target[1], rel, explicit=False)
            guard.check()
            if not matches:
                return ToolOutput(content="No matches found")
            if len(matches) > self.max_results:
                shown = "\n".join(matches[: self.max_results])
                return ToolOutput(
                    content=f"{shown}\n(results truncated at {self.max_results} matches)"
                )
            return ToolOutput(content="\n".join(matches))

        return await _guarded(work)


# -- Bash ------------------------------------------------------------------------------------

# First words of commands that only read. Commands with options that write or run other
# programs (find -exec/-delete, sort -o, tree -o, rg --pre, file -C, date -s, ...) stay out.
_READ_ONLY_COMMANDS = frozenset(
    {
        "basename",
        "cat",
        "dirname",
        "du",
        "echo",
        "false",
        "grep",
        "head",
        "ls",
        "pwd",
        "realpath",
        "stat",
        "tail",
        "true",
        "wc",
        "which",
        "whoami",
    }
)
# Anything that chains, pipes, redirects, substitutes or expands makes a command unsafe.
_SHELL_METACHARACTERS = re.compile(r"[;|&<>`$()\n\r]")


def is_read_only_command(command: str) -> bool:
    """True only for a single simple command whose first word is on the read-only list."""
    if _SHELL_METACHARACTERS.search(command):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return bool(words) and words[0] in _READ_ONLY_COMMANDS


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
) -> list[Tool]:
    """Read, Write, Edit, Glob and Grep confined to ``workspace``; Bash too if enabled.

    ``allow_hard_links`` lets the file tools use regular files with more than one hard link
    (refused by default, see :mod:`steploop.effects.tools.confine`)."""
    root = _resolve_workspace(workspace)
    tools: list[Tool] = [
        cls(
            workspace=root,
            max_file_bytes=max_file_bytes,
            max_results=max_results,
            allow_hard_links=allow_hard_links,
        )
        for cls in (Read, Write, Edit, Glob, Grep)
    ]
    if enable_bash:
        tools.append(Bash(workspace=root, timeout_s=bash_timeout_s))
    return tools
