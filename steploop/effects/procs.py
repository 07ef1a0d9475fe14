"""Processes that never outlive their call: the Bash tool's commands and command stop hooks.

:func:`open_process_tree` starts a command so that closing it (:meth:`ProcessTree.aclose`,
always called when the call ends, however it ends) kills the command and every process it
started, and so that a steploop killed with ``kill -9`` leaves none of them running.

On Linux the command runs under a small supervisor process (``steploop/effects/_supervisor.py``, run
by the same interpreter with ``-I -S``) that is a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``): whatever the command starts stays in the supervisor's
process tree even after ``setsid``, a double fork or a process group of its own. Closing the
tree, or steploop's death (the end of file on the control socket between the two), makes the
supervisor kill every process of its tree, its session and the command's group, then exit.
The command itself carries ``PR_SET_PDEATHSIG = SIGKILL``, so it dies with the supervisor.

Elsewhere (no ``/proc``, no ``prctl``, no interpreter to run the supervisor with) the command
runs in a new session and closing kills its process group: a descendant that leaves the group
(``setsid``, job control) escapes, and so do all of them if steploop is killed with
``kill -9``. :data:`MECHANISM` says which one this process uses.

cgroups are not used: creating one needs a delegated cgroup subtree, which an unprivileged
process rarely has. Nothing here contains a process started through another service (a
``systemd-run``, an ``at`` job, an ``ssh`` to this host): it is no descendant.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Final, Literal

import anyio
import anyio.abc

__all__ = ["MECHANISM", "ProcessTree", "open_process_tree"]

_SUPERVISOR: Final = str(Path(__file__).with_name("_supervisor.py"))
#: Imported rather than run as a script, so that its compiled form is cached.
_LAUNCH: Final = (
    "import sys; sys.path.append(sys.argv.pop(1)); import _supervisor, os; "
    "os._exit(_supervisor.main(sys.argv))"
)
#: How long closing waits for the supervisor to kill and reap before it kills what it can
#: reach itself (the supervisor's session and the command's group).
_CLOSE_GRACE_S: Final = 10.0
#: How long a supervisor may take to start the command and say so.
_START_TIMEOUT_S: Final = 60.0


def _mechanism() -> Literal["subreaper", "process-group"]:
    if (
        sys.platform.startswith("linux")
        and os.path.isdir("/proc")
        and sys.executable
        and os.path.exists(_SUPERVISOR)
        and hasattr(os, "pidfd_open")
    ):
        return "subreaper"
    return "process-group"


#: ``"subreaper"`` (Linux: the supervisor) or ``"process-group"`` (the fallback).
MECHANISM: Final = _mechanism()


class ProcessTree(anyio.abc.Process):
    """A running command and everything it starts; :meth:`aclose` kills all of it.

    ``pid`` and ``returncode`` are the command's; ``stdin``, ``stdout`` and ``stderr`` are
    the streams asked for. :meth:`wait` waits for the command itself (what it started may
    run on until :meth:`aclose`).
    """

    def __init__(
        self,
        process: anyio.abc.Process,
        ctl: socket.socket | None,
        pid: int,
        mechanism: Literal["subreaper", "process-group"],
    ) -> None:
        self._process = process
        self._ctl = ctl
        self._pid = pid
        self._returncode: int | None = None
        self._buffer = b""
        self._closed = False
        self.mechanism = mechanism

    # -- anyio.abc.Process -------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self._pid

    @property
    def returncode(self) -> int | None:
        if self._ctl is None:
            return self._process.returncode
        return self._returncode

    @property
    def stdin(self) -> anyio.abc.ByteSendStream | None:
        return self._process.stdin

    @property
    def stdout(self) -> anyio.abc.ByteReceiveStream | None:
        return self._process.stdout

    @property
    def stderr(self) -> anyio.abc.ByteReceiveStream | None:
        return self._process.stderr

    async def wait(self) -> int:
        if self._ctl is None:
            return await self._process.wait()
        while self._returncode is None:
            words = await self._message()
            if words is None:  # the supervisor ended without a word about the command
                code = await self._process.wait()
                self._returncode = code if code else -signal.SIGKILL
        return self._returncode

    def send_signal(self, sig: int) -> None:
        if self._ctl is None:
            with contextlib.suppress(OSError):
                os.killpg(self._pid, sig)
            return
        with contextlib.suppress(OSError):
            self._ctl.send(f"signal {int(sig)}\n".encode("ascii"))

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def aclose(self) -> None:
        """Kill the command and everything it started, reap the supervisor, close the
        streams. Safe to call more than once; runs to the end even when cancelled."""
        with anyio.CancelScope(shield=True):
            if not self._closed:
                self._closed = True
                await self._kill_all()
            await self._process.aclose()

    async def _kill_all(self) -> None:
        ctl = self._ctl
        if ctl is None:
            with contextlib.suppress(OSError):
                os.killpg(self._pid, signal.SIGKILL)
            return
        with contextlib.suppress(OSError):
            ctl.send(b"kill\n")
        with anyio.move_on_after(_CLOSE_GRACE_S):
            await self._process.wait()
        if self._process.returncode is None:
            # The supervisor is stuck (or was stopped): kill what can still be reached.
            for group in (self._process.pid, self._pid):
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            self._process.kill()
            await self._process.wait()
        # What it still had to say (the command's status) is read, then the socket closed.
        while self._returncode is None and await self._message(block=False) is not None:
            pass
        ctl.close()

    # -- the control socket -----------------------------------------------------------

    async def _message(self, block: bool = True) -> list[str] | None:
        """The next message from the supervisor as words; None at the end of file."""
        ctl = self._ctl
        assert ctl is not None
        while b"\n" not in self._buffer:
            if ctl.fileno() < 0:
                return None
            if block:
                await anyio.wait_readable(ctl)
            try:
                data = ctl.recv(4096)
            except BlockingIOError:
                if not block:
                    return None
                continue
            except OSError:
                return None
            if not data:
                return None
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        words = line.decode("ascii", "replace").split()
        if words[:1] == ["exit"] and len(words) == 2:
            self._returncode = int(words[1])
        elif words[:1] == ["signal"] and len(words) == 2:
            self._returncode = -int(words[1])
        return words


async def open_process_tree(
    command: str | Sequence[str],
    *,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> ProcessTree:
    """Start ``command`` (a shell command line for ``/bin/sh -c``, or an argv list) as a
    :class:`ProcessTree`. Raises OSError when it cannot be started, as
    :func:`anyio.open_process` does (the same errno and message for a missing program).

    The caller must :meth:`~ProcessTree.aclose` it (``async with`` does) when done; call it
    shielded from cancellation, or at least in a ``finally``.
    """
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty command")
    if MECHANISM != "subreaper":
        process = await anyio.open_process(
            argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        return ProcessTree(process, None, process.pid, "process-group")
    ours, theirs = socket.socketpair()
    try:
        process = await anyio.open_process(
            [
                sys.executable,
                "-I",
                "-S",
                "-c",
                _LAUNCH,
                str(Path(_SUPERVISOR).parent),
                str(theirs.fileno()),
                *argv,
            ],
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=cwd,
            env=env,
            start_new_session=True,
            pass_fds=(theirs.fileno(),),
        )
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    ours.setblocking(False)
    tree = ProcessTree(process, ours, process.pid, "subreaper")
    try:
        with anyio.fail_after(_START_TIMEOUT_S):
            while True:
                words = await tree._message()
                if words is None:
                    raise OSError(
                        errno.ECHILD, "the process supervisor ended before the command started"
                    )
                if words[:1] == ["pid"] and len(words) == 2:
                    tree._pid = int(words[1])
                    return tree
                if words[:1] == ["error"] and len(words) == 2:
                    code = int(words[1]) if words[1].isdigit() else 0
                    raise OSError(code, os.strerror(code) if code else "exec failed", argv[0])
                if words[:1] == ["mode"]:
                    tree.mechanism = "process-group"
    except BaseException:
        await tree.aclose()
        raise
