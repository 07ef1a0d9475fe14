"""Confined access to a workspace directory, race-free by construction.

Every path is walked from a descriptor of the workspace directory, one component at a time,
with ``openat``-style calls (``os.open(name, ..., dir_fd=parent)``) that never let the kernel
follow a symbolic link (``O_NOFOLLOW | O_DIRECTORY`` for a directory, ``O_NOFOLLOW`` for the
final file). What a walk checked is what the caller then uses: a file is read from the
descriptor the walk opened, a file is created or replaced relative to the descriptor of its
parent directory, a directory is created with ``os.mkdir(dir_fd=...)`` and entered by opening
it again without following links. A path is never looked up again by name from the root, so a
directory or file swapped for a symlink during a call cannot lead the call outside.

Symbolic links inside the workspace are followed by this module's own walk, never by the
kernel: a link's text is read with ``readlink`` relative to its directory's descriptor and
walked like the rest of the path, so ``..`` is taken from the stack of directories already
opened (never above the workspace) and an absolute target is accepted only when it names a
place inside the workspace. A link that leads outside is refused; so is a chain of more than
40 links. Tree walks (Glob, Grep) descend into real directories only; a symlink entry is
resolved by the same walk and used only when it ends on a regular file inside.

A name that is not UTF-8 (Python holds its undecodable bytes as the lone surrogates
U+DC80..U+DCFF, ``surrogateescape``) is shown by :meth:`Walker.display` with each such byte as
the four characters ``\\xHH`` (:func:`show_name`), text any JSON or API carries; a path
component given back in that form is taken as the bytes it stands for when no entry of that
literal name exists (:func:`unescape_name`), so every name a tool reports can be used again.

A regular file with more than one hard link is refused unless the caller allows hard links:
a hard link is the one way a file from outside can appear inside the workspace without a
symlink, and it cannot be told apart from a file that belongs there.

What this does not guard against is described in the README ("Workspace confinement").
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

__all__ = [
    "MAX_SYMLINKS",
    "RETRIES",
    "SUPPORTED",
    "UNSUPPORTED_REASON",
    "Refused",
    "Walker",
    "check_links",
    "hard_link_message",
    "show_name",
    "unescape_name",
]

#: Links followed in one walk before it gives up, as Linux does.
MAX_SYMLINKS: Final = 40
#: Times one path component is looked at again (it was a symlink a moment ago, or the
#: directory just made for it is gone) before the walk gives up on it.
RETRIES: Final = 3

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK: Final = getattr(os, "O_NONBLOCK", 0)

_DIR_FLAGS: Final = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
#: O_NONBLOCK: opening a FIFO must not hang; it is refused after the open like any non-file.
_READ_FLAGS: Final = os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC
#: A symlink opened with O_NOFOLLOW fails with ELOOP on Linux and macOS, EMLINK on FreeBSD;
#: ENOTDIR comes when O_DIRECTORY meets a non-directory.
_NOT_A_PLAIN_DIR: Final = frozenset({errno.ELOOP, errno.EMLINK, errno.ENOTDIR})


def _unsupported_reason() -> str | None:
    missing = [flag for flag in ("O_NOFOLLOW", "O_DIRECTORY", "O_CLOEXEC") if not hasattr(os, flag)]
    need_dir_fd = {
        "open": os.open,
        "stat": os.stat,
        "mkdir": os.mkdir,
        "readlink": os.readlink,
        "rename": os.rename,  # os.replace takes the same dir_fds, but is not listed
        "unlink": os.unlink,
    }
    missing += [
        f"{name}(dir_fd=...)"
        for name, func in need_dir_fd.items()
        if func not in os.supports_dir_fd
    ]
    if os.scandir not in os.supports_fd:
        missing.append("scandir(fd)")
    if not missing:
        return None
    return (
        "confined file access is not available on this platform: it needs openat-style "
        f"directory descriptors, which it lacks ({', '.join(missing)})"
    )


#: Why the confined tools cannot run here, or None where they can (Linux, macOS, the BSDs).
UNSUPPORTED_REASON: Final = _unsupported_reason()
SUPPORTED: Final = UNSUPPORTED_REASON is None


class Refused(Exception):
    """A path the walk will not take, or a file it will not use; the message is for the model."""


def hard_link_message(nlink: int, raw: str) -> str:
    return (
        f"File has {nlink} hard links; it is refused because a hard link can bring a file from "
        f"outside the workspace inside (allow_hard_links=True allows them): {raw}"
    )


def check_links(st: os.stat_result, raw: str, allow_hard_links: bool) -> None:
    """Refuse a regular file with more than one hard link, unless they are allowed."""
    if not allow_hard_links and stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise Refused(hard_link_message(st.st_nlink, raw))


def os_message(exc: OSError, raw: str) -> str:
    """One line for an OSError met while using ``raw``."""
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return f"Path changed to a symlink while in use: {raw}"
    if exc.errno == errno.EISDIR:
        return f"Path is a directory, not a file: {raw}"
    if exc.errno == errno.ENOTDIR:
        return f"Not a directory: {raw}"
    if exc.errno == errno.ENOENT:
        return f"File does not exist: {raw}"
    reason = exc.strerror or type(exc).__name__
    return f"{reason}: {raw}"


def _climbs_out(parts: list[str], depth: int) -> bool:
    """True if ``parts``, taken as names from ``depth`` levels below the root, climb above it."""
    for part in parts:
        if part == "..":
            depth -= 1
            if depth < 0:
                return True
        elif part not in ("", "."):
            depth += 1
    return False


def _normalise(parts: list[str]) -> tuple[int, list[str]]:
    """Lexically fold ``parts`` (none of which exists yet): how many levels they climb first,
    then the names that remain."""
    ups, names = 0, list[str]()
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if names:
                names.pop()
            else:
                ups += 1
        else:
            names.append(part)
    return ups, names


T = TypeVar("T")

_UNDECODABLE: Final = re.compile("[\udc80-\udcff]")
_ESCAPED: Final = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")


def show_name(name: str) -> str:
    """``name`` with each undecodable byte (a lone surrogate U+DC80..U+DCFF, as ``os`` decodes
    a non-UTF-8 name) written as ``\\xHH``; the same str when it has none."""
    if name.isascii() or _UNDECODABLE.search(name) is None:
        return name
    return _UNDECODABLE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}", name)


def unescape_name(name: str) -> str:
    """The inverse of :func:`show_name`: each ``\\xHH`` with HH from 80 to ff (the bytes
    that are never valid UTF-8 alone) as the byte it stands for; the same str when it has
    none."""
    if "\\x" not in name:
        return name
    return _ESCAPED.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), name)



class Walker:
    """An open walk from the workspace root: a stack of directory descriptors, one per level.

    ``fds[0]`` is the workspace, ``fds[-1]`` the directory the walk stands in, ``names`` the
    real names of the levels below the root (for display: the path as it really is, links
    followed). Descriptors below ``borrowed`` belong to another walker and are never closed
    here. Use as a context manager; every descriptor it opened is closed on exit.
    """

    def __init__(
        self,
        root: Path,
        raw: str = "",
        *,
        parent: Walker | None = None,
    ) -> None:
        self.root = root
        self.raw = raw
        self.hops = 0
        self.fds: list[int]
        self.names: list[str]
        self.borrowed: int
        if parent is not None:
            self.fds = list(parent.fds)
            self.names = list(parent.names)
            self.borrowed = len(self.fds)
            return
        if UNSUPPORTED_REASON is not None:
            raise Refused(UNSUPPORTED_REASON)
        try:
            # The workspace itself is trusted: it was resolved when the tools were built.
            fd = os.open(root, os.O_RDONLY | _O_DIRECTORY | _O_CLOEXEC)
        except OSError as exc:
            raise Refused(f"Cannot open the workspace {root}: {exc.strerror}") from exc
        self.fds = [fd]
        self.names = []
        self.borrowed = 0

    # -- lifetime ------------------------------------------------------------------------

    def __enter__(self) -> Walker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        while len(self.fds) > self.borrowed:
            os.close(self.fds.pop())
        self.fds = []

    @property
    def top(self) -> int:
        fd: int = self.fds[-1]
        return fd

    @property
    def depth(self) -> int:
        return len(self.fds) - 1

    def display(self, name: str | None = None) -> str:
        """The workspace-relative path of ``name`` in the current directory (or of it), with
        undecodable bytes shown as ``\\xHH`` (:func:`show_name`)."""
        parts = self.names if name is None else [*self.names, name]
        return show_name("/".join(parts)) if parts else "."

    def outside(self) -> Refused:
        return Refused(f"Path is outside the workspace {self.root}: {self.raw}")

    def _push(self, fd: int, name: str) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def _pop(self) -> None:
        if len(self.fds) == 1:
            raise self.outside()
        fd = self.fds.pop()
        self.names.pop()
        if len(self.fds) >= self.borrowed:
            os.close(fd)
        else:  # popped below what this walker owns: the fd is the parent walker's
            self.borrowed = len(self.fds)

    def _reset_to_root(self) -> None:
        while len(self.fds) > 1:
            self._pop()

    # -- paths ---------------------------------------------------------------------------

    def split(self, raw: str) -> list[str]:
        """``raw`` (relative to the workspace, or absolute) as components below the root."""
        if not raw:
            raise Refused("Path must not be empty")
        if "\x00" in raw:
            raise Refused("Path must not contain NUL characters")
        if raw == "~" or raw.startswith("~/"):  # "~user" forms are taken as plain names
            raw = os.path.expanduser(raw)
        if raw.startswith("/"):
            return self._below_root(raw)
        return raw.split("/")

    def _below_root(self, absolute: str) -> list[str]:
        """The components of an absolute path below the workspace root; Refused if it does
        not name a place inside. The part naming the root may go through links outside the
        workspace (``/tmp`` on macOS, a symlinked home): only its meaning is taken from the
        kernel, and the rest is walked from the root's descriptor whatever it said."""
        parts = [p for p in absolute.split("/") if p not in ("", ".")]
        root_parts = list(self.root.parts[1:])
        if parts[: len(root_parts)] == root_parts:
            return parts[len(root_parts) :]
        root = str(self.root)
        for i in range(len(parts) + 1):
            if os.path.realpath("/" + "/".join(parts[:i])) == root:
                return parts[i:]
        raise self.outside()

    def _follow(self, name: str, pending: deque[str]) -> deque[str]:
        """Splice the target of the symlink ``name`` (in the current directory) into the
        components still to walk."""
        self.hops += 1
        if self.hops > MAX_SYMLINKS:
            raise Refused(f"Too many levels of symbolic links: {self.raw}")
        try:
            target = os.readlink(name, dir_fd=self.top)
        except OSError as exc:  # EINVAL: no longer a link
            raise Refused(f"Path changed while in use: {self.raw}") from exc
        if target.startswith("/"):
            parts = self._below_root(target)
            self._reset_to_root()
        else:
            parts = target.split("/")
        return deque([*parts, *pending])

    def _named(self, part: str) -> str:
        """``part`` as given when an entry of that name exists (or the bytes it would stand
        for name none), else the entry its ``\\xHH`` escapes name (:func:`unescape_name`).
        Only the name is chosen here; it is then used like any other, without following."""
        raw = unescape_name(part)
        if raw == part:
            return part
        for name in (part, raw):
            try:
                os.stat(name, dir_fd=self.top, follow_symlinks=False)
            except OSError:
                continue
            return name
        return part

    def walk(
        self,
        parts: list[str],
        *,
        create: bool = False,
        before_change: Callable[[], None] = lambda: None,
    ) -> str | None:
        """Walk to the entry ``parts`` names; returns its name in the directory the walk then
        stands in, or None when the path names that directory itself.

        Every component but the last must be a directory (a symlink to one is followed); the
        last is looked at without being opened, and followed if it is a symlink; with a
        trailing ``/`` it must be a directory too. With ``create``, missing directories on
        the way are made, each after ``before_change()`` (which may raise to stop the walk).
        The returned entry may not exist (a file to create); it was no symlink when seen.
        """
        pending = deque(parts)
        retries = 0  # looks again at the component in hand; each component has its own bound
        while pending:
            part = pending.popleft()
            if part in ("", "."):
                continue
            if part == "..":
                self._pop()
                continue
            if "\\x" in part:
                part = self._named(part)
            if not pending:  # the last component, named as a file: look, do not open
                try:
                    st = os.stat(part, dir_fd=self.top, follow_symlinks=False)
                except FileNotFoundError:
                    return part
                except OSError as exc:
                    raise Refused(os_message(exc, self.raw)) from exc
                if stat.S_ISLNK(st.st_mode):
                    pending = self._follow(part, pending)
                    continue
                return part
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=self.top)
            except OSError as exc:
                if exc.errno in _NOT_A_PLAIN_DIR:
                    seen: os.stat_result | None
                    try:
                        seen = os.stat(part, dir_fd=self.top, follow_symlinks=False)
                    except OSError:
                        seen = None
                    if seen is not None and stat.S_ISLNK(seen.st_mode):
                        pending = self._follow(part, pending)
                        continue
                    if seen is not None and stat.S_ISDIR(seen.st_mode) and retries < RETRIES:
                        retries += 1  # it was a symlink a moment ago; look again
                        pending.appendleft(part)
                        continue
                    raise Refused(f"Not a directory: {self.raw}") from exc
                if exc.errno != errno.ENOENT:
                    raise Refused(os_message(exc, self.raw)) from exc
                rest = list(pending)
                if _climbs_out([part, *rest], self.depth):
                    raise self.outside() from exc
                if not create:
                    raise Refused(f"File does not exist: {self.raw}") from exc
                if ".." in rest:  # none of it exists: fold it before making anything
                    ups, names = _normalise([part, *rest])
                    pending = deque([".."] * ups + names)
                    continue
                if retries >= RETRIES:
                    raise Refused(f"Path changed while in use: {self.raw}") from exc
                retries += 1
                before_change()
                try:
                    os.mkdir(part, 0o777, dir_fd=self.top)
                except FileExistsError:
                    pass
                except OSError as mk:
                    raise Refused(os_message(mk, self.raw)) from mk
                pending.appendleft(part)
                continue
            self._push(fd, part)
            retries = 0
        return None

    def enter(self, name: str) -> None:
        """Step into the directory ``name`` of the current one (no link followed)."""
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.top)
        except OSError as exc:
            if exc.errno in _NOT_A_PLAIN_DIR:
                raise Refused(f"Not a directory: {self.raw}") from exc
            raise Refused(os_message(exc, self.raw)) from exc
        self._push(fd, name)

    def open_file(self, name: str, flags: int = _READ_FLAGS) -> int:
        """Open ``name`` of the current directory without following a link."""
        try:
            return os.open(name, flags | _O_NOFOLLOW | _O_CLOEXEC, dir_fd=self.top)
        except OSError as exc:
            raise Refused(os_message(exc, self.raw)) from exc

    def resolve_link(self, name: str) -> str | None:
        """From a tree walk: follow the symlink ``name`` of the current directory by this
        module's walk; the final entry's name (the walker then stands in its directory)."""
        pending = self._follow(name, deque())
        return self.walk(list(pending))

    # -- tree walks ----------------------------------------------------------------------

    def tree(
        self,
        state: T,
        visit: Callable[[T, str, bool], tuple[T | None, bool]],
        *,
        stop: Callable[[], bool] = lambda: False,
    ) -> Iterator[tuple[str, bool]]:
        """Walk the tree under the current directory, depth first, entries of a directory in
        the order of their full paths (a directory sorts as ``name/``).

        ``visit(state, name, is_dir)`` says for each entry what state its subtree is walked
        with (None: not entered) and whether to yield it. Yields ``(name, is_link)`` with the
        walker standing in the entry's directory; directories are entered by descriptor,
        without following links, and a symlink is never entered. ``stop()`` is polled at
        every entry and ends the walk when true.
        """
        base = len(self.fds)
        frames: list[Iterator[tuple[str, bool, bool]]] = []
        states: list[T] = [state]

        def listing() -> Iterator[tuple[str, bool, bool]]:
            entries: list[tuple[str, str, bool, bool]] = []
            try:
                with os.scandir(self.top) as it:
                    for entry in it:
                        try:
                            is_dir = entry.is_dir(follow_symlinks=False)
                            is_link = not is_dir and entry.is_symlink()
                        except OSError:
                            continue
                        key = entry.name + "/" if is_dir else entry.name
                        entries.append((key, entry.name, is_dir, is_link))
            except OSError:
                pass
            entries.sort()
            return iter([(name, is_dir, is_link) for _, name, is_dir, is_link in entries])

        frames.append(listing())
        try:
            while frames:
                if stop():
                    return
                item = next(frames[-1], None)
                if item is None:
                    frames.pop()
                    states.pop()
                    if len(self.fds) > base:
                        self._pop()
                    continue
                name, is_dir, is_link = item
                child, wanted = visit(states[-1], name, is_dir)
                if is_dir:
                    if child is None:
                        continue
                    try:
                        fd = os.open(name, _DIR_FLAGS, dir_fd=self.top)
                    except OSError:
                        continue  # gone, or swapped for a link: not entered
                    self._push(fd, name)
                    states.append(child)
                    frames.append(listing())
                elif wanted:
                    yield name, is_link
        finally:
            while len(self.fds) > base:
                self._pop()
