"""What the confined file tools share: the worker-thread guard, reading a regular file from the
descriptor the walk opened, and the atomic replace that Write and Edit end with.

Every blocking step runs in a worker thread that the call can always give up (:func:`guarded`):
a cancelled call returns at once, its worker stops at its next :meth:`Guard.check`, and a change
given up before its final rename never reaches the workspace (specs/ E-CONFINE-3).

:func:`replace_file` also carries the last part of the read-before-write rule (specs/
E-STALE-1): right before its rename it reads the file again and refuses when it is not the file
the change was based on, and bytes another process appended between that look and the rename
are kept at the end of the new file instead of being lost with the old one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

import anyio
import attrs

from steploop.effects.tools.base import ToolOutput, tool_use_error
from steploop.effects.tools.confine import Refused, Walker, check_links, os_message
from steploop.effects.tools.readstate import UNEXPECTEDLY_MODIFIED, FileReadState

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_RESULTS",
    "Abandoned",
    "Basis",
    "Guard",
    "Replaced",
    "ToolError",
    "WorkspaceTool",
    "decode",
    "guarded",
    "open_regular",
    "read_fd",
    "replace_file",
    "resolve_workspace",
    "schema",
    "split_lines",
]

DEFAULT_MAX_FILE_BYTES: Final = 2 * 1024 * 1024
DEFAULT_MAX_RESULTS: Final = 500
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)


class ToolError(Exception):
    """A problem to report to the model; :func:`guarded` turns it into a tool_use_error."""


class Abandoned(BaseException):
    """Raised in a worker thread whose call was given up: it must not commit anything."""


class Guard:
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
            raise Abandoned

    def commit(self) -> None:
        """Claim the right to make the change; Abandoned if the call was given up first.
        The lock is never held across I/O, so the call never waits on the worker."""
        with self._lock:
            if self.cancelled:
                raise Abandoned
            self._committed = True


def schema(properties: Mapping[str, Any], required: tuple[str, ...]) -> Mapping[str, Any]:
    """A closed object schema (no other properties) with these properties."""
    return MappingProxyType(
        {
            "type": "object",
            "properties": dict(properties),
            "required": list(required),
            "additionalProperties": False,
        }
    )


def resolve_workspace(workspace: Path | str) -> Path:
    root = Path(workspace).resolve(strict=True)
    if not root.is_dir():
        raise ValueError(f"workspace {root} is not a directory")
    return root


def decode(data: bytes, raw: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"File is not UTF-8 text: {raw}") from exc


def read_fd(fd: int, limit: int, offset: int | None = None) -> bytes:
    """Up to ``limit`` bytes from ``fd`` (stops early at end of file); from ``offset`` without
    moving the file position when given."""
    chunks: list[bytes] = []
    left = limit
    at = offset
    while left > 0:
        size = min(left, 1 << 20)
        chunk = os.read(fd, size) if at is None else os.pread(fd, size, at)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
        if at is not None:
            at += len(chunk)
    return b"".join(chunks)


def split_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def open_regular(
    walker: Walker, name: str, raw: str, max_bytes: int, allow_hard_links: bool
) -> tuple[bytes, os.stat_result]:
    """Open ``name`` in the walker's directory without following a link, check what was
    opened (a regular file, one link unless allowed, within the size cap) and read it from
    that descriptor."""
    fd = walker.open_file(name)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"Path is a directory, not a file: {raw}")
        if not stat.S_ISREG(st.st_mode):
            raise ToolError(f"Not a regular file: {raw}")
        check_links(st, raw, allow_hard_links)
        if st.st_size > max_bytes:
            raise ToolError(
                f"File is too large ({st.st_size} bytes; the limit is {max_bytes} bytes): {raw}"
            )
        data = read_fd(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ToolError(f"File is too large (over the limit of {max_bytes} bytes): {raw}")
    return data, st


@attrs.frozen
class Basis:
    """The file a change was based on: ``like`` its status when looked at (None: there was no
    file of that name), ``data`` its bytes (None: too large to have been read; then size,
    modification time and inode stand for them)."""

    like: os.stat_result | None
    data: bytes | None = None


@attrs.frozen
class Replaced:
    """What :func:`replace_file` did: the new file's status after the rename and how many
    bytes another process appended to the old file in the last moment (kept at the end)."""

    status: os.stat_result
    kept_bytes: int = 0


def _same_file(fd: int, basis: Basis) -> bool:
    """True when the open file ``fd`` is still the file ``basis`` describes."""
    like = basis.like
    assert like is not None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (like.st_dev, like.st_ino):
        return False
    if basis.data is None:
        return (st.st_size, st.st_mtime_ns) == (like.st_size, like.st_mtime_ns)
    if st.st_size != len(basis.data):
        return False
    return read_fd(fd, len(basis.data) + 1, 0) == basis.data


def _reopen_unchanged(walker: Walker, name: str, basis: Basis) -> int | None:
    """The last look before the rename: the descriptor of the file ``name`` when it is still
    the file of ``basis`` (None when there was and is no such file); ToolError otherwise."""
    try:
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=walker.top)
    except FileNotFoundError:
        if basis.like is None:
            return None
        raise ToolError(UNEXPECTEDLY_MODIFIED) from None
    except OSError as exc:
        if basis.like is None:  # something appeared that cannot even be opened
            raise ToolError(UNEXPECTEDLY_MODIFIED) from exc
        raise ToolError(os_message(exc, walker.raw)) from exc
    try:
        if basis.like is None or not _same_file(fd, basis):
            raise ToolError(UNEXPECTEDLY_MODIFIED)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _keep_appended(walker: Walker, name: str, old_fd: int, basis: Basis) -> int:
    """After the rename: bytes written to the end of the old file since its last look (an
    appender that opened it in time) are appended to the new file; how many. Only a pure
    append is kept: the old file must still begin with what was looked at."""
    if basis.data is None:
        return 0
    size = len(basis.data)
    with contextlib.suppress(OSError):
        grown = os.fstat(old_fd).st_size - size
        if grown <= 0 or read_fd(old_fd, size, 0) != basis.data:
            return 0
        tail = read_fd(old_fd, grown, size)
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=walker.top)
        try:
            view = memoryview(tail)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        return len(tail)
    return 0


def replace_file(walker: Walker, name: str, data: bytes, guard: Guard, basis: Basis) -> Replaced:
    """Replace (or create) ``name`` in the walker's directory with ``data``, atomically: a
    new file made with O_CREAT | O_EXCL | O_NOFOLLOW next to it, renamed over it, both
    relative to the directory's descriptor. The old file's permission bits (and owner where
    allowed) are kept.

    Right before the rename the file is looked at again: if it is no longer the file of
    ``basis`` (changed, replaced, created or removed meanwhile), nothing is changed and the
    call fails with Claude Code's "File has been unexpectedly modified" text."""
    top = walker.top
    like = basis.like
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
            raise ToolError(os_message(exc, walker.raw)) from exc
        break
    else:
        raise ToolError(f"Could not create a temporary file next to {walker.raw}")
    old_fd: int | None = None
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
            written = os.fstat(fd)
        finally:
            os.close(fd)
        guard.check()
        old_fd = _reopen_unchanged(walker, name, basis)
        guard.commit()
        os.replace(tmp, name, src_dir_fd=top, dst_dir_fd=top)
    except BaseException:
        if old_fd is not None:
            os.close(old_fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=top)
        raise
    if old_fd is None:
        return Replaced(status=written)
    try:
        return Replaced(status=written, kept_bytes=_keep_appended(walker, name, old_fd, basis))
    finally:
        os.close(old_fd)


async def guarded(func: Callable[[Guard], ToolOutput]) -> ToolOutput:
    """Run blocking ``func`` in a worker thread; a ToolError, Refused or OSError becomes an
    error output.

    The call can always be given up: on cancellation (a deadline, an interrupt, the end of
    the run) it returns at once and the worker is abandoned. The worker sees the guard
    cancelled at its next check and stops; a Write or Edit given up before its final rename
    never changes the workspace.
    """
    guard = Guard()
    try:
        return await anyio.to_thread.run_sync(func, guard, abandon_on_cancel=True)
    except (ToolError, Refused) as exc:
        return tool_use_error(str(exc))
    except OSError as exc:
        return tool_use_error(f"{exc.strerror or type(exc).__name__}: {exc.filename or ''}")
    finally:
        guard.cancel()


@attrs.frozen(kw_only=True)
class WorkspaceTool:
    """Shared fields of the confined tools: the workspace, the size caps and what the model
    has read (shared by the tools :func:`steploop.effects.tools.builtin_tools` builds)."""

    workspace: Path = attrs.field(converter=resolve_workspace)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_results: int = DEFAULT_MAX_RESULTS
    #: Use regular files that have more than one hard link (refused by default: a hard link
    #: can make a file from outside the workspace appear inside).
    allow_hard_links: bool = False
    #: What the model has read or written, per file (E-STALE-1); tools that must agree on it
    #: share one.
    read_state: FileReadState = attrs.field(factory=FileReadState, eq=False, repr=False)
