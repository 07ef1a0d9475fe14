"""Built-in tools, each confined to one workspace directory.

Every path a tool is given may be relative (to the workspace) or absolute; it is resolved,
symlinks included, and refused unless the result lies inside the workspace. A path to a file
that does not exist yet (Write) is judged by its real parent directory. A tool is bound to its
workspace when it is built; ``ToolContext.workspace`` is not consulted, so a context can never
widen what a tool may touch.

Problems the model can fix (a missing file, an ambiguous edit, a path outside the workspace)
come back from ``call`` as ``<tool_use_error>`` outputs, never as exceptions.

``Bash`` is not confined: it runs in the workspace as its working directory, nothing more, and
is therefore left out of :func:`builtin_tools` unless asked for.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import shlex
import signal
import stat
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any, ClassVar

import anyio
import anyio.abc
import attrs

from effects.tools.base import Tool, ToolContext, ToolOutput, tool_use_error
from reducer.events import InterruptBehavior

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


def _display(root: Path, path: Path) -> str:
    """``path`` relative to the workspace when it lies inside, else as given."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        return str(path)
    return rel.as_posix() if rel.parts else "."


def _candidate(root: Path, raw: str) -> Path:
    """``raw`` taken relative to the workspace (an absolute path stays as it is)."""
    path = Path(raw)
    if raw == "~" or raw.startswith("~/"):  # "~user" forms are taken as plain names
        path = path.expanduser()
    return root / path


def _loose_resolve(root: Path, raw: str) -> Path:
    """Resolve ``raw`` against ``root`` as far as it exists and refuse anything outside."""
    if not raw:
        raise _ToolError("Path must not be empty")
    if "\x00" in raw:
        raise _ToolError("Path must not contain NUL characters")
    try:
        resolved = _candidate(root, raw).resolve(strict=False)
    except (OSError, RuntimeError) as exc:  # RuntimeError: symlink loop (Python < 3.13)
        raise _ToolError(f"Cannot resolve path {raw}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise _ToolError(f"Path is outside the workspace {root}: {raw}")
    return resolved


def _existing_path(root: Path, raw: str) -> Path:
    """The real path of an existing entry inside the workspace."""
    _loose_resolve(root, raw)
    try:
        resolved = _candidate(root, raw).resolve(strict=True)
    except FileNotFoundError as exc:
        raise _ToolError(f"File does not exist: {raw}") from exc
    except (OSError, RuntimeError) as exc:
        raise _ToolError(f"Cannot resolve path {raw}: {exc}") from exc
    if not resolved.is_relative_to(root):
        raise _ToolError(f"Path is outside the workspace {root}: {raw}")
    return resolved


def _writable_path(root: Path, raw: str) -> Path:
    """The real path a write to ``raw`` lands on: an existing file, or a new entry whose
    nearest existing ancestor is a real directory inside the workspace."""
    loose = _loose_resolve(root, raw)
    if os.path.lexists(loose):
        return _existing_path(root, raw)
    ancestor = loose.parent
    while not os.path.lexists(ancestor):
        ancestor = ancestor.parent
    try:
        real_ancestor = ancestor.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        raise _ToolError(f"Cannot resolve path {raw}: {exc}") from exc
    if not real_ancestor.is_relative_to(root):
        raise _ToolError(f"Path is outside the workspace {root}: {raw}")
    if not real_ancestor.is_dir():
        raise _ToolError(f"Not a directory: {_display(root, real_ancestor)}")
    return real_ancestor / loose.relative_to(ancestor)


def _directory(root: Path, raw: str | None) -> Path:
    if raw is None:
        return root
    path = _existing_path(root, raw)
    if not path.is_dir():
        raise _ToolError(f"Not a directory: {raw}")
    return path


def _read_bytes(path: Path, raw: str, max_bytes: int) -> bytes:
    """Read a regular file without following a symlink swapped in after resolution."""
    try:
        # O_NONBLOCK: opening a FIFO must not hang; it is refused below like any non-file.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise _ToolError(_os_message(exc, raw)) from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise _ToolError(f"Path is a directory, not a file: {raw}")
        if not stat.S_ISREG(st.st_mode):
            raise _ToolError(f"Not a regular file: {raw}")
        if st.st_size > max_bytes:
            raise _ToolError(
                f"File is too large ({st.st_size} bytes; the limit is {max_bytes} bytes): {raw}"
            )
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise _ToolError(f"File is too large (over the limit of {max_bytes} bytes): {raw}")
    return data


def _write_bytes(path: Path, raw: str, data: bytes) -> None:
    """Write a regular file (created if missing), never through a late-swapped symlink."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISREG(st.st_mode):
            raise _ToolError(f"Not a regular file: {raw}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        raise _ToolError(_os_message(exc, raw)) from exc
    with os.fdopen(fd, "wb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise _ToolError(f"Not a regular file: {raw}")
        handle.truncate(0)
        handle.write(data)


def _decode(data: bytes, raw: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _ToolError(f"File is not UTF-8 text: {raw}") from exc


def _os_message(exc: OSError, raw: str) -> str:
    if exc.errno == errno.ELOOP:
        return f"Path changed to a symlink while in use: {raw}"
    if exc.errno == errno.EISDIR:
        return f"Path is a directory, not a file: {raw}"
    reason = exc.strerror or type(exc).__name__
    return f"{reason}: {raw}"


async def _guarded(
    func: Callable[[], ToolOutput], *, abandon_on_cancel: bool = False
) -> ToolOutput:
    """Run blocking ``func`` in a worker thread; a _ToolError or OSError becomes an error output."""
    try:
        return await anyio.to_thread.run_sync(func, abandon_on_cancel=abandon_on_cancel)
    except _ToolError as exc:
        return tool_use_error(str(exc))
    except OSError as exc:
        return tool_use_error(f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}")


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

        def work() -> ToolOutput:
            path = _existing_path(self.workspace, raw)
            if path.is_dir():
                raise _ToolError(f"Path is a directory, not a file: {raw}")
            text = _decode(_read_bytes(path, raw, self.max_file_bytes), raw)
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

        def work() -> ToolOutput:
            if len(data) > self.max_file_bytes:
                raise _ToolError(
                    f"Content is too large ({len(data)} bytes; the limit is "
                    f"{self.max_file_bytes} bytes)"
                )
            path = _writable_path(self.workspace, raw)
            if path.is_dir():
                raise _ToolError(f"Path is a directory, not a file: {raw}")
            existed = path.exists()
            path.parent.mkdir(parents=True, exist_ok=True)
            # The directories just made are plain ones, but check the landing spot once more.
            if not path.parent.resolve(strict=True).is_relative_to(self.workspace):
                raise _ToolError(f"Path is outside the workspace {self.workspace}: {raw}")
            _write_bytes(path, raw, data)
            verb = "Updated" if existed else "Created"
            return ToolOutput(
                content=f"{verb} {_display(self.workspace, path)} ({len(data)} bytes)"
            )

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

        def work() -> ToolOutput:
            if not old:
                raise _ToolError("old_string must not be empty")
            if old == new:
                raise _ToolError("old_string and new_string are the same; nothing to change")
            path = _existing_path(self.workspace, raw)
            if path.is_dir():
                raise _ToolError(f"Path is a directory, not a file: {raw}")
            text = _decode(_read_bytes(path, raw, self.max_file_bytes), raw)
            count = text.count(old)
            if count == 0:
                raise _ToolError(f"String to replace not found in file: {raw}")
            if count > 1 and not replace_all:
                raise _ToolError(
                    f"Found {count} matches of old_string in {raw}, but replace_all is false. "
                    "Give more context to make it unique, or set replace_all to true."
                )
            updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            data = updated.encode("utf-8")
            if len(data) > self.max_file_bytes:
                raise _ToolError(
                    f"The edited file would be too large ({len(data)} bytes; the limit is "
                    f"{self.max_file_bytes} bytes): {raw}"
                )
            _write_bytes(path, raw, data)
            replaced = count if replace_all else 1
            noun = "occurrence" if replaced == 1 else "occurrences"
            return ToolOutput(
                content=f"Replaced {replaced} {noun} in {_display(self.workspace, path)}"
            )

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

        def work() -> ToolOutput:
            _check_glob_pattern(pattern)
            base = _directory(self.workspace, None if raw_dir is None else str(raw_dir))
            found: set[str] = set()
            try:
                for match in base.glob(pattern):
                    try:
                        real = match.resolve(strict=True)
                    except (OSError, RuntimeError):
                        continue
                    if real.is_relative_to(self.workspace) and real.is_file():
                        found.add(_display(self.workspace, match))
            except ValueError as exc:  # e.g. "**" that is not a whole path component
                raise _ToolError(f"Invalid glob pattern {pattern!r}: {exc}") from exc
            if not found:
                return ToolOutput(content="No files found")
            return ToolOutput(content=_capped(sorted(found), self.max_results, "files"))

        return await _guarded(work, abandon_on_cancel=True)


def _walk_files(base: Path) -> list[Path]:
    """Files under ``base`` (or ``base`` itself), sorted by path; symlinked directories are
    not descended into, and version-control directories are skipped."""
    if not base.is_dir():
        return [base]
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in _SKIPPED_DIRS]
        found.extend(Path(dirpath) / filename for filename in filenames)
    return sorted(found, key=lambda path: path.as_posix())


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

        def work() -> ToolOutput:
            try:
                regex = re.compile(pattern)
            except re.error as exc:
                raise _ToolError(f"Invalid regular expression {pattern!r}: {exc}") from exc
            root = self.workspace
            base = root if raw_path is None else _existing_path(root, str(raw_path))
            matches: list[str] = []
            limit = self.max_results + 1  # one more than shown, to know we truncated
            for path in _walk_files(base):
                rel = _display(root, path)
                if not wanted(rel):
                    continue
                try:
                    real = path.resolve(strict=True)
                    if not real.is_relative_to(root) or not real.is_file():
                        continue
                    if real.stat().st_size > self.max_file_bytes:
                        continue
                    text = real.read_bytes().decode("utf-8")
                except (OSError, RuntimeError, UnicodeDecodeError):
                    continue
                for number, line in enumerate(_split_lines(text), start=1):
                    if regex.search(line):
                        matches.append(f"{rel}:{number}:{line[:_MAX_GREP_LINE_CHARS]}")
                        if len(matches) >= limit:
                            break
                if len(matches) >= limit:
                    break
            if not matches:
                return ToolOutput(content="No matches found")
            if len(matches) > self.max_results:
                shown = "\n".join(matches[: self.max_results])
                return ToolOutput(
                    content=f"{shown}\n(results truncated at {self.max_results} matches)"
                )
            return ToolOutput(content="\n".join(matches))

        return await _guarded(work, abandon_on_cancel=True)


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


def _kill_group(process: anyio.abc.Process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


@attrs.frozen(kw_only=True)
class Bash:
    """Run a shell command with the workspace as working directory (not sandboxed).

    The command runs in its own process group; the whole group is killed when the call is
    cancelled, times out or ends, so no child outlives the call. Output (stdout and stderr
    together) is kept up to ``max_output_chars`` characters.
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
        process = await anyio.open_process(
            [self.shell, "-c", command],
            cwd=self.workspace,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
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
            with anyio.CancelScope(shield=True):
                _kill_group(process)
                await process.aclose()

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
        if code:
            return ToolOutput(content=f"{output}\n(exit code {code})".lstrip("\n"), is_error=True)
        return ToolOutput(content=output)


# -- the default set -------------------------------------------------------------------------


def builtin_tools(
    workspace: Path | str,
    *,
    enable_bash: bool = False,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    max_results: int = DEFAULT_MAX_RESULTS,
    bash_timeout_s: float = 120.0,
) -> list[Tool]:
    """Read, Write, Edit, Glob and Grep confined to ``workspace``; Bash too if enabled."""
    root = _resolve_workspace(workspace)
    tools: list[Tool] = [
        cls(workspace=root, max_file_bytes=max_file_bytes, max_results=max_results)
        for cls in (Read, Write, Edit, Glob, Grep)
    ]
    if enable_bash:
        tools.append(Bash(workspace=root, timeout_s=bash_timeout_s))
    return tools
