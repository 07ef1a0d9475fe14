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

**What the command does to its parent.** The supervisor is not the command's parent: it forks
a *shim* that forks the command and waits for it, so ``$PPID`` is the shim. The shim dies with
the supervisor and the command with the shim (``PR_SET_PDEATHSIG = SIGKILL`` on both). A
command (or any of its processes) that kills its parent, ``kill -9 $PPID``, kills the shim and
itself; everything it started is reparented to the supervisor, still standing, which reports
the shim's death (:attr:`ProcessTree.lost`: the Bash result and the hook error say it) and
kills the whole tree. This design was chosen over the two others that were weighed: steploop's
own process as a child subreaper would adopt every orphan of every child of the host program,
not only ours (zombies it must reap, daemons of other libraries that no longer go to init), and
cannot tell ours from theirs; steploop holding pidfds of the tree cannot learn of a new process
but by polling, which a fork-and-kill outruns.

**What is not covered.** A command can signal any process of its user. One that finds the
supervisor itself (its session leader, its grandparent) and kills it takes the shim and the
command down with it (their parent-death signals), and the supervisor's orphans go to init:
steploop sees the supervisor end otherwise than asked (a supervisor ends with status 0),
reports it (:attr:`ProcessTree.lost`) and kills, through pidfds, every process still in the
supervisor's session or the command's process group (:func:`kill_session_and_groups`); a
process that had left the session (``setsid``, a daemon) survives. A command that stops the
supervisor (``SIGSTOP``) only delays the end to the call's timeout: closing sends it
``SIGCONT`` first (through a pidfd). Containing a
command that means to escape needs a sandbox (a container, a PID namespace): it has other ways
out no supervision can close, starting a process through another service (``systemd-run``,
``at``, ``crontab``, an ``ssh`` to this host), which is no descendant.

Elsewhere (no ``/proc``, no ``prctl``, no interpreter to run the supervisor with) the command
runs in a new session and closing kills its process group: a descendant that leaves the group
(``setsid``, job control) escapes, and so do all of them if steploop is killed with
``kill -9``. :data:`MECHANISM` says which one this process uses.

cgroups are not used: creating one needs a delegated cgroup subtree, which an unprivileged
process rarely has.

**Environment.** A command gets ``env`` when given, else :func:`tool_environment`: this
process's environment without ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_AUTH_TOKEN`` (rule
E-ENV-1; ``Bash(pass_secrets=True)`` passes them). Command stop hooks give the whole
environment, as Claude Code does.
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

__all__ = [
    "MECHANISM",
    "SECRET_ENV",
    "ProcessTree",
    "kill_session_and_groups",
    "open_process_tree",
    "tool_environment",
]

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
#: How often a supervisor that says nothing is woken (SIGCONT: a command may have stopped it).
_WAKE_EVERY_S: Final = 0.2


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


def _how(code: int) -> str:
    """``was killed by SIGKILL (signal 9)`` for a negative status, else ``ended with exit
    code N``."""
    if code >= 0:
        return f"ended with exit code {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f"was killed by signal {-code}"
    return f"was killed by {name} (signal {-code})"


def _session_and_group(pid: int) -> tuple[int, int] | None:
    """(session, process group) of a live process (not a zombie), from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        if fields[0] in (b"Z", b"X"):
            return None
        return int(fields[3]), int(fields[2])
    except (IndexError, ValueError):
        return None


#: How many passes over /proc :func:`kill_session_and_groups` makes at most (a process that
#: forks while it is killed is found in the next one).
_SWEEPS: Final = 50


def kill_session_and_groups(session: int, groups: Sequence[int]) -> int:
    """SIGKILL every live process whose session is ``session`` or whose process group is one
    of ``groups`` (Linux, ``/proc``), each checked again through a pidfd after it is opened,
    so that a pid reused meanwhile is never hit; pass after pass until one finds none (at
    most :data:`_SWEEPS`). Returns how many were signalled. Used when a supervisor is gone:
    its session and the command's group are what can still be found of its tree.

    A session or group id is the pid of its first process, and the kernel does not hand that
    pid out again while any process still belongs to the session or group, so what matches is
    what the tree left (barring a pid that has gone round the whole pid space meanwhile)."""
    if not os.path.isdir("/proc") or not hasattr(os, "pidfd_open"):
        return 0
    send = getattr(signal, "pidfd_send_signal", None)
    wanted = set(groups)
    me = os.getpid()
    signalled = 0
    for _ in range(_SWEEPS):
        found = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            pid = int(entry)
            ids = _session_and_group(pid)
            if ids is None or (ids[0] != session and ids[1] not in wanted):
                continue
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue  # gone
            try:
                ids = _session_and_group(pid)  # the pidfd pins the process: look again
                if ids is not None and (ids[0] == session or ids[1] in wanted):
                    if send is not None:
                        send(fd, signal.SIGKILL)
                    else:
                        os.kill(pid, signal.SIGKILL)
                    found += 1
            except OSError:
                pass
            finally:
                os.close(fd)
        signalled += found
        if not found:
            break
    return signalled


#: The variables that hold the API's credentials: Bash commands and tools' subprocesses do
#: not get them unless asked (:func:`tool_environment`, rule E-ENV-1).
SECRET_ENV: Final = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")


def tool_environment(
    *, pass_secrets: bool = False, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a Bash command or a tool's subprocess: ``base`` (default: this
    process's environment) without the API's credentials (:data:`SECRET_ENV`), unless
    ``pass_secrets``. Command stop hooks get the whole environment instead, as Claude Code
    gives its own to hooks (:class:`steploop.effects.hooks.CommandStopHook`)."""
    env = dict(os.environ if base is None else base)
    if not pass_secrets:
        for name in SECRET_ENV:
            env.pop(name, None)
    return env


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
        self._supervisor_pid_lost: int | None = None
        self._pidfd = -1  # the supervisor's, to signal it without hitting a reused pid
        if ctl is not None:
            with contextlib.suppress(OSError, AttributeError):
                self._pidfd = os.pidfd_open(process.pid)
        self.mechanism = mechanism
        self.lost: str | None = None
        """What broke the supervision, in words (None when nothing did): the command's parent
        (the shim) or the supervisor was killed; see :data:`outcome`."""

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
    def outcome(self) -> str:
        """How the command ended, for a person: ``exit code N`` (minus the signal that
        killed it), and what broke the supervision if something did."""
        code = self.returncode
        said = "still running" if code is None else f"exit code {code}"
        return said if self.lost is None else f"{said}; {self.lost}"

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
            words = await self._heard()
            if words is None:  # the supervisor ended without a word about the command
                code = await self._process.wait()
                if code != 0:  # killed (a supervisor ends with 0): the command died with it
                    self._supervisor_lost(code)
                self._returncode = -signal.SIGKILL
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
            if self._pidfd >= 0:
                os.close(self._pidfd)
                self._pidfd = -1

    async def _kill_all(self) -> None:
        ctl = self._ctl
        if ctl is None:
            with contextlib.suppress(OSError):
                os.killpg(self._pid, signal.SIGKILL)
            return
        supervisor = self._process.pid
        self._wake()
        with contextlib.suppress(OSError):
            ctl.send(b"kill\n")
        with anyio.move_on_after(_CLOSE_GRACE_S):
            await self._process.wait()
        stuck = self._process.returncode is None
        if stuck:
            # The supervisor is stuck: kill what can still be reached.
            kill_session_and_groups(supervisor, (supervisor, self._pid))
            self._process.kill()
            await self._process.wait()
        # What it still had to say (the command's status, a killed shim) is read, then the
        # socket closed.
        while await self._message(block=False) is not None:
            pass
        ctl.close()
        if self._returncode is None:  # killed before its status could be told
            self._returncode = -signal.SIGKILL
        if not stuck and self._process.returncode != 0 and self._supervisor_pid_lost is None:
            self._supervisor_lost(self._process.returncode or 0)

    def _supervisor_lost(self, code: int) -> None:
        """The supervisor ended otherwise than asked (killed, most likely by the command or
        one of its processes, which can find it by pid): its tree went to init or the
        nearest subreaper. Kill what can still be found, the processes of its session and
        of the command's process group; say so."""
        supervisor = self._process.pid
        self._supervisor_pid_lost = supervisor
        kill_session_and_groups(supervisor, (supervisor, self._pid))
        how = _how(code)
        self.lost = (
            f"steploop's process supervisor, pid {supervisor}, {how}; the command died with "
            "it, and the processes of its session and of the command's process group were "
            "killed, but a process that had left the session (setsid, a daemon) may still run"
        )

    def _wake(self) -> None:
        """SIGCONT the supervisor (through its pidfd): the command can find it (its session
        id is the supervisor's pid) and stop it."""
        send = getattr(signal, "pidfd_send_signal", None)
        if self._pidfd >= 0 and send is not None:
            with contextlib.suppress(OSError):
                send(self._pidfd, signal.SIGCONT)

    # -- the control socket -----------------------------------------------------------

    async def _heard(self) -> list[str] | None:
        """The next message (:meth:`_message`), waking the supervisor each
        ``_WAKE_EVERY_S`` it says nothing: the command can stop it (SIGSTOP) before it has
        said the command's pid (a race a loaded machine loses) or before it can say the
        command's status, which would otherwise wait for the call's timeout."""
        while True:
            with anyio.move_on_after(_WAKE_EVERY_S):
                return await self._message()
            self._wake()

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
        elif words[:1] == ["shim"] and len(words) == 3 and self.lost is None:
            code = int(words[2])
            self.lost = (
                f"the command's parent process, pid {words[1]} (steploop's shim), {_how(code)}"
                + (", most likely by the command itself (kill $PPID)" if code < 0 else "")
                + ": the call was ended, and every process the command had started was killed"
            )
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

    ``env`` is the command's whole environment; by default :func:`tool_environment` (this
    process's, without the API's credentials).

    The caller must :meth:`~ProcessTree.aclose` it (``async with`` does) when done; call it
    shielded from cancellation, or at least in a ``finally``.
    """
    argv = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
    if not argv:
        raise ValueError("empty command")
    if env is None:
        env = tool_environment()
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
                words = await tree._heard()
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
