"""The supervisor steploop puts between itself and a command it runs (Linux).

Run by :mod:`steploop.effects.procs` as ``python -I -S -c "...import _supervisor..." CTL_FD ARGV...``
(imported, not run as a script, so its compiled form is cached), in a new session, with the
command's stdin, stdout and stderr as its own. It imports nothing outside the standard
library, so it starts without the package or its dependencies.

It makes itself a child subreaper (``prctl(PR_SET_CHILD_SUBREAPER)``): every process the
command starts, however it detaches (``setsid``, a double fork, its own process group), stays
in its tree, because an orphan is reparented to the nearest subreaper instead of to init.

It does not start the command itself: it forks a *shim* (a copy of itself, no exec) that
forks the command and waits for it, so that the command's parent (``$PPID``) is the shim,
not the supervisor. The shim dies with the supervisor and the command with the shim (both
carry ``PR_SET_PDEATHSIG = SIGKILL``); the command runs in its own process group. A command
that kills its parent (``kill -9 $PPID``) thus kills the shim and itself, and leaves the
supervisor standing with everything the command started reparented to it: the supervisor
sees the shim end without the command's status, says so to steploop (``shim PID CODE``) and
kills the tree.

The supervisor passes the command's status to steploop over the control socket and waits for
the word to end: ``kill`` on the socket, or the socket's end of file, which is also what it
sees when steploop dies, even by ``kill -9``. Either way it kills every process of its tree,
its session and the command's process group (found in ``/proc``, each checked again through
a pidfd before the signal, so a reused pid is never hit), reaps them and exits with status 0;
any other end of the supervisor (a signal) tells steploop that it was killed.

Messages, one per line, ASCII: to steploop ``pid N``, ``exit N``, ``signal N``, ``error
ERRNO`` (the command could not be started), ``shim PID CODE`` (the shim ended without the
command's status: ``CODE`` is its exit code, minus the signal that killed it), ``mode group``
(no subreaper: only the session and the group are covered); from steploop ``kill`` and
``signal N`` (forwarded to the command).
"""

from __future__ import annotations

import errno
import os
import select
import sys
import time
from typing import Any

# The C module under ``signal``: the same functions and numbers, without the enum machinery
# ``signal`` imports (a third of this process's start-up time).
signal: Any = __import__("_signal")

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
#: How long the supervisor keeps killing before it gives up on a process it cannot kill
#: (one in uninterruptible sleep, say) and exits anyway.
KILL_FOR_S = 5.0


def _prctl() -> object:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl
    except (ImportError, OSError, AttributeError):
        return None


def _send(ctl: int, line: str) -> None:
    try:
        os.write(ctl, line.encode("ascii") + b"\n")
    except OSError:
        pass  # steploop is gone; the end of file on the socket says so too


def _proc_table() -> dict[int, tuple[str, int, int, int]]:
    """pid -> (state, ppid, pgrp, session) for every process /proc shows."""
    table: dict[int, tuple[str, int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        info = _stat(int(entry))
        if info is not None:
            table[int(entry)] = info
    return table


def _stat(pid: int) -> tuple[str, int, int, int] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    try:
        return fields[0].decode(), int(fields[1]), int(fields[2]), int(fields[3])
    except (IndexError, ValueError):
        return None


def _ours(info: tuple[str, int, int, int] | None, tree: set[int], me: int, group: int) -> bool:
    """A live process whose parent is in ``tree``, or of our session, or of the group."""
    if info is None or info[0] in ("Z", "X"):
        return False
    _, ppid, pgrp, session = info
    return ppid in tree or session == me or pgrp == group


def _children(pid: int) -> list[int] | None:
    """The children of ``pid`` (zombies included) from /proc/PID/task/*/children; None
    where the kernel does not provide that file."""
    out: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as fh:
                out.extend(int(p) for p in fh.read().split())
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue  # the thread just ended
            return None
        except OSError:
            continue
    return out


def _victims(me: int, group: int, subreaper: bool) -> tuple[list[int], set[int]]:
    """The processes to kill, and the tree (us and every descendant, zombies included).

    As a subreaper, our tree holds everything the command started: it is walked through
    the children files, which is cheap. Without one (or without those files) every process
    in /proc is looked at, and those of our session or the command's group are taken too."""
    if subreaper:
        tree = {me}
        todo = [me]
        while todo:
            kids = _children(todo.pop())
            if kids is None:
                break
            for kid in kids:
                if kid not in tree:
                    tree.add(kid)
                    todo.append(kid)
        else:
            return sorted(tree - {me}), tree
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    tree = {me}
    todo = [me]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    out = [
        pid
        for pid, info in table.items()
        if pid != me and (pid in tree or _ours(info, tree, me, group)) and info[0] not in "ZX"
    ]
    return out, tree


def _kill(pid: int, tree: set[int], me: int, group: int) -> bool:
    """SIGKILL ``pid`` if it is a live process of ours; True if it was signalled."""
    pidfd_open = getattr(os, "pidfd_open", None)
    send = getattr(signal, "pidfd_send_signal", None)
    if pidfd_open is None or send is None:
        if not _ours(_stat(pid), tree, me, group):
            return False
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            return False
        return True
    try:
        fd = pidfd_open(pid)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EPERM):  # an old kernel, or a seccomp filter
            if not _ours(_stat(pid), tree, me, group):
                return False
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                return False
            return True
        return False  # ESRCH: it is gone
    try:
        # The pidfd pins the process: check it is still one of ours, then signal it.
        if _ours(_stat(pid), tree, me, group):
            send(fd, signal.SIGKILL)
            return True
    except OSError:
        pass
    finally:
        os.close(fd)
    return False


class _Watch:
    """What the supervisor knows of its command: the command's pid and the shim's, and what
    was said to steploop about them."""

    def __init__(self, ctl: int, shim: int, status_r: int) -> None:
        self.ctl = ctl
        self.shim = shim
        self.status_r = status_r
        self.command = -1
        self.reported = False  # the command's status was sent
        self.lost = False  # the shim ended before it could say how the command ended
        self.closing = False  # the supervisor is killing the tree itself (the shim too)

    def report(self, status: int) -> None:
        if self.reported:
            return
        self.reported = True
        if os.WIFSIGNALED(status):
            _send(self.ctl, f"signal {os.WTERMSIG(status)}")
        else:
            _send(self.ctl, f"exit {os.waitstatus_to_exitcode(status)}")

    def shim_ended(self, status: int) -> None:
        """The shim is reaped: what it wrote (the command's wait status) is read; nothing
        written and an abnormal end (a signal, a non-zero exit) means it was killed, most
        likely by the command itself (``kill $PPID``)."""
        data = b""
        while self.status_r >= 0:
            try:
                chunk = os.read(self.status_r, 64)
            except InterruptedError:
                continue
            except OSError:
                chunk = b""
            if not chunk:  # every writer is gone: the shim ended, the command closed its copy
                os.close(self.status_r)
                self.status_r = -1
                break
            data += chunk
        words = data.split()
        if words and words[0].lstrip(b"-").isdigit():
            self.report(int(words[0]))
        elif status != 0 and not self.reported and not self.closing:
            self.lost = True
            _send(self.ctl, f"shim {self.shim} {os.waitstatus_to_exitcode(status)}")


def _reap(watch: _Watch) -> bool:
    """Reap every child that has ended; report the command's status. False when no child
    is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        except InterruptedError:
            continue
        if pid == 0:
            return True
        if pid == watch.shim:
            watch.shim_ended(status)
        elif pid == watch.command:  # the shim died first, so its orphan came to us
            watch.report(status)


def _kill_all(me: int, group: int, watch: _Watch, subreaper: bool) -> None:
    deadline = time.monotonic() + KILL_FOR_S
    while True:
        victims, tree = _victims(me, group, subreaper)
        if not victims:
            if not _reap(watch):
                return
            # Only zombies left that are not ours to reap yet: their parents are dying.
            if time.monotonic() > deadline:
                return
            time.sleep(0.002)
            continue
        signalled = [_kill(pid, tree, me, group) for pid in victims]
        if not _reap(watch) and not any(signalled):
            return
        if time.monotonic() > deadline:
            return
        if not any(signalled):
            time.sleep(0.002)  # zombies whose parents are still dying


def _command(shim: int, prctl: Any, command: list[str], report: int) -> None:
    """In the command's process (the shim's child): its own process group, death with the
    shim, the signals Python ignores given back (as ``subprocess`` does), its pid said, exec."""
    try:
        os.setpgid(0, 0)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != shim:
            os._exit(127)
        for sig in ("SIGPIPE", "SIGXFSZ"):
            if hasattr(signal, sig):
                signal.signal(getattr(signal, sig), signal.SIG_DFL)
        os.write(report, f"pid {os.getpid()}\n".encode("ascii"))
        os.execvp(command[0], command)
    except OSError as exc:
        os.write(report, f"error {exc.errno or 0}\n".encode("ascii"))
    except BaseException:
        os.write(report, b"error 0\n")
    os._exit(127)


def _shim(
    supervisor: int, prctl: Any, command: list[str], report: int, status_w: int, drop: list[int]
) -> None:
    """In the shim (the supervisor's child, the command's parent): start the command, let go
    of its streams, wait for it and write its wait status to the supervisor. ``$PPID`` in
    the command is this process: killing it kills the command (its parent-death signal) and
    leaves the supervisor, and all it reaps, standing."""
    try:
        for fd in drop:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, signal.SIG_DFL)
        if prctl is not None:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != supervisor:
            os._exit(1)
        me = os.getpid()
        try:
            child = os.fork()
        except OSError as exc:
            os.write(report, f"error {exc.errno or 0}\n".encode("ascii"))
            os._exit(0)
        if child == 0:
            os.close(status_w)
            _command(me, prctl, command, report)
        os.close(report)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.close(null)
        while True:
            try:
                _, status = os.waitpid(child, 0)
                break
            except InterruptedError:
                continue
        os.write(status_w, f"{status}\n".encode("ascii"))
    except BaseException:
        os._exit(1)
    os._exit(0)


def _read_to_end(fd: int) -> bytes:
    data = b""
    while True:
        try:
            chunk = os.read(fd, 256)
        except InterruptedError:
            continue
        if not chunk:
            return data
        data += chunk


def main(argv: list[str]) -> int:
    ctl = int(argv[1])
    command = argv[2:]
    os.set_inheritable(ctl, False)
    me = os.getpid()
    prctl = _prctl()
    subreaper = False
    if prctl is not None and os.path.isdir("/proc"):
        subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0  # type: ignore[operator]
    if not subreaper:
        _send(ctl, "mode group")

    ending = {"term": False}

    def on_term(signum: int, frame: object) -> None:
        ending["term"] = True

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_term)

    # The command says its pid (or why it could not start) here; its exec closes it.
    report_r, report_w = os.pipe()
    # The shim writes the command's wait status here, then exits.
    status_r, status_w = os.pipe()
    shim = os.fork()
    if shim == 0:
        _shim(me, prctl, command, report_w, status_w, [ctl, wake_r, wake_w, report_r, status_r])
    os.close(report_w)
    os.close(status_w)
    words = _read_to_end(report_r).decode("ascii", "replace").split()
    os.close(report_r)
    watch = _Watch(ctl, shim, status_r)
    if words[:1] == ["pid"] and len(words) >= 2 and words[1].isdigit():
        watch.command = int(words[1])
    group = watch.command if watch.command > 0 else shim
    if "error" in words or watch.command < 0:
        at = words.index("error") if "error" in words else -1
        code = words[at + 1] if 0 <= at < len(words) - 1 else "0"
        watch.reported = True  # no status follows an error
        _send(ctl, f"error {code}")
        _kill_all(me, group, watch, subreaper)
        return 0
    # The command holds the streams now; steploop must see their end when it lets go.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    _send(ctl, f"pid {watch.command}")

    buffer = b""
    while not ending["term"] and not watch.lost:
        try:
            ready, _, _ = select.select([ctl, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in ready:
            try:
                os.read(wake_r, 512)
            except OSError:
                pass
        _reap(watch)
        if ctl in ready:
            try:
                data = os.read(ctl, 4096)
            except InterruptedError:
                continue
            except OSError:
                data = b""
            if not data:
                break  # steploop closed the socket, or died
            buffer += data
            stop = False
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                words = line.decode("ascii", "replace").split()
                if words[:1] == ["kill"]:
                    stop = True
                elif words[:1] == ["signal"] and len(words) == 2 and words[1].isdigit():
                    if not watch.reported:
                        try:
                            os.kill(watch.command, int(words[1]))
                        except OSError:
                            pass
            if stop:
                break
    # Done, asked to stop, steploop gone, or the shim killed: nothing of the tree may stay.
    watch.closing = True
    _kill_all(me, group, watch, subreaper)
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    os._exit(code)  # no interpreter teardown: nothing is left to clean up
