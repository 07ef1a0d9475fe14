"""Tool calls that hold the event loop, or that wait on a worker thread, end at their timeout.

Two mechanisms, used by :meth:`steploop.effects.tools.ToolRegistry.call` when the call has a
``ToolContext.timeout_s``:

**A step that holds the event loop.** A coroutine runs in steps, from one ``await`` that
suspends to the next; while a step runs, nothing else on the loop does, and no cancel scope
can stop it. :class:`Guarded` drives the tool's coroutine one step at a time and marks, in a
slot of the loop's thread, which call's step is running and its deadline (two attribute
writes per step). One watchdog thread (started on first use, gone after a few idle seconds)
looks at the slots every :data:`POLL_S` seconds; when a step outlives its call's deadline it
interrupts it. On the main thread, where the loop almost always runs, it sends
:data:`WATCHDOG_SIGNAL` to the thread: the signal cuts short a blocking system call
(``time.sleep``, a read, a lock) and its handler raises :class:`StepOverrun` there, as Ctrl-C
raises KeyboardInterrupt, but only if that very step is still running. The call then returns
the usual timeout result. Code that catches BaseException and carries on, or C code that
neither returns to the interpreter nor checks for signals, is not stopped (the signal is
repeated every :data:`POLL_S`); a loop that runs outside the main thread is not interrupted
either: there the call's result is replaced by the timeout result when its step ends.

**A call that waits on something that ignores cancellation** (a worker thread started with
``anyio.to_thread.run_sync`` without ``abandon_on_cancel``, a shielded scope) cannot be left
behind while its coroutine runs in the caller's task. A tool that does this marks itself
``isolation = "thread"`` (or is wrapped in :class:`steploop.effects.tools.Isolated`): its whole call
then runs on an event loop of its own in a worker thread, and the caller stops waiting at the
deadline; the tool's loop is told to cancel, and if the tool does not stop, its thread is
abandoned and its result dropped. At most :data:`MAX_ISOLATED` such threads run at once,
abandoned ones included; past that a call fails at once. Isolation is opt-in: an isolated
call cannot use objects bound to the caller's loop and costs a thread and a loop per call, so
an unmarked tool that blocks this way holds its call (and an interrupt) until it returns
(README, "Timeouts").
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Final, TypeAlias, TypeVar

import anyio

__all__ = [
    "MAX_ISOLATED",
    "POLL_S",
    "WATCHDOG_SIGNAL",
    "Guarded",
    "StepOverrun",
    "fired",
    "run_isolated",
    "watch",
]

T = TypeVar("T")

#: How often the watchdog looks at running steps (and repeats an interruption).
POLL_S: Final = 0.05
#: Idle polls after which the watchdog thread ends (it starts again on the next call).
_IDLE_POLLS: Final = 100
#: The signal that interrupts the main thread (a real-time signal nothing else uses); None
#: where the platform has none, and then a step is not interrupted, only detected.
WATCHDOG_SIGNAL: Final[int | None] = (
    signal.SIGRTMAX - 3 if hasattr(signal, "SIGRTMAX") and hasattr(signal, "pthread_kill") else None
)
#: Isolated calls' threads alive at once, abandoned ones included.
MAX_ISOLATED: Final = 32


class StepOverrun(BaseException):
    """Raised inside a tool step that held the event loop past its call's deadline.

    A BaseException, so that ``except Exception`` in the tool lets it through."""


#: A call's token: ``[deadline, fired]`` (a list, the cheapest mutable thing to make: one
#: is made per call).
_Token: TypeAlias = list[Any]
_DEADLINE: Final = 0
_FIRED: Final = 1


def fired(token: _Token) -> bool:
    """True once the watchdog found this call's step running past its deadline."""
    return bool(token[_FIRED])


class _Slot:
    """The step running on one thread (None between steps)."""

    __slots__ = ("token",)

    def __init__(self) -> None:
        self.token: _Token | None = None


_slots: dict[int, _Slot] = {}
_monotonic = time.monotonic
_get_ident = threading.get_ident
_lock = threading.Lock()
_watchdog_alive = False
_handler_installed = False
_main_ident = threading.main_thread().ident


def _on_signal(signum: int, frame: object) -> None:
    slot = _slots.get(threading.get_ident())
    token = slot.token if slot is not None else None
    if token is not None and token[_FIRED]:
        raise StepOverrun


def _install_handler() -> None:
    """Install the signal handler, from the main thread, if the signal is free."""
    global _handler_installed
    if WATCHDOG_SIGNAL is None or _handler_installed:
        return
    if threading.get_ident() != _main_ident:
        return
    if signal.getsignal(WATCHDOG_SIGNAL) not in (signal.SIG_DFL, None):
        return  # someone else's: leave it alone (steps are then only detected)
    signal.signal(WATCHDOG_SIGNAL, _on_signal)
    _handler_installed = True


def _fire(ident: int, token: _Token) -> None:
    token[_FIRED] = True
    if ident == _main_ident and _handler_installed and WATCHDOG_SIGNAL is not None:
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_kill(ident, WATCHDOG_SIGNAL)


def _watch() -> None:
    global _watchdog_alive
    idle = 0
    while True:
        now = time.monotonic()
        busy = False
        nearest = now + POLL_S
        for ident, slot in list(_slots.items()):
            token = slot.token
            if token is None:
                continue
            busy = True
            if now >= token[_DEADLINE]:
                _fire(ident, token)  # again every poll while the step runs on
            else:
                nearest = min(nearest, token[_DEADLINE])
        idle = 0 if busy else idle + 1
        if idle >= _IDLE_POLLS:
            with _lock:
                _watchdog_alive = False
                # A step that began just now saw the flag still set: look once more.
                if not any(slot.token is not None for slot in _slots.values()):
                    return
                _watchdog_alive = True
                idle = 0
        time.sleep(max(0.0, min(POLL_S, nearest - now)))


def _start_watchdog() -> None:
    global _watchdog_alive
    with _lock:
        if _watchdog_alive:
            return
        _watchdog_alive = True
        threading.Thread(target=_watch, name="steploop-tool-watchdog", daemon=True).start()


def _slot() -> _Slot:
    ident = threading.get_ident()
    slot = _slots.get(ident)
    if slot is None:
        slot = _slots.setdefault(ident, _Slot())
        _install_handler()
    return slot


def watch(timeout_s: float) -> tuple[_Token, _Slot, _Token | None]:
    """Mark a call's first step as running on this thread, due ``timeout_s`` from now: the
    call's token, the thread's slot and the token to put back in it after each step (that of
    a guarded call this one runs inside, or None). The caller runs the step, puts ``outer``
    back in ``slot.token`` (in a ``finally``), and treats :class:`StepOverrun` and a fired
    token as the call's timeout; later steps go through :class:`Guarded`."""
    token = [_monotonic() + timeout_s, False]
    slot = _slots.get(_get_ident()) or _slot()
    outer = slot.token
    slot.token = token
    if not _watchdog_alive:
        _start_watchdog()
    return token, slot, outer


class Guarded(Awaitable[T | None]):
    """Await the rest of ``coro``, whose first step ran under :func:`watch` and yielded
    ``first``, with each later step watched against the same token.

    Gives the coroutine's result, or None when a step overran the deadline (the coroutine
    was then interrupted and closed, or it finished late and its result is dropped)."""

    __slots__ = ("_coro", "_first", "_outer", "_slot", "_token")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T],
        first: Any,
        token: _Token,
        slot: _Slot,
        outer: _Token | None,
    ) -> None:
        self._coro = coro
        self._first = first
        self._token = token
        self._slot = slot
        self._outer = outer

    def __await__(self) -> Generator[Any, Any, T | None]:
        coro, token, slot, outer = self._coro, self._token, self._slot, self._outer
        yielded = self._first
        try:
            while True:
                if token[_FIRED]:  # overran without being interrupted (not the main thread)
                    coro.close()
                    return None
                try:
                    value, error = (yield yielded), None
                except GeneratorExit:
                    coro.close()
                    raise
                except BaseException as exc:
                    value, error = None, exc
                slot.token = token
                try:
                    if error is None:
                        yielded = coro.send(value)
                    else:
                        yielded = coro.throw(error)
                except StopIteration as done:
                    slot.token = outer
                    result: T = done.value
                    return None if token[_FIRED] else result
                finally:
                    slot.token = outer
        except StepOverrun:
            if not token[_FIRED]:
                raise  # an outer call's
            with contextlib.suppress(RuntimeError, StepOverrun):
                coro.close()
            return None


# -- isolation -------------------------------------------------------------------------------

_isolated_alive = 0
_isolated_lock = threading.Lock()


def _backend() -> str:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return "trio"
    return "asyncio"


async def run_isolated(func: Callable[[], Awaitable[T]]) -> T:
    """Run ``func()`` on an event loop of its own in a worker thread; on cancellation, stop
    waiting at once, tell that loop to cancel, and abandon the thread if it does not stop.

    RuntimeError when :data:`MAX_ISOLATED` threads are still running."""
    global _isolated_alive
    with _isolated_lock:
        if _isolated_alive >= MAX_ISOLATED:
            raise RuntimeError(
                f"{_isolated_alive} isolated tool calls are still running (abandoned ones "
                "included), the most allowed at once"
            )
        _isolated_alive += 1
    wake, listen = socket.socketpair()
    backend = _backend()

    def in_thread() -> T:
        global _isolated_alive
        outcome: list[tuple[bool, Any]] = []

        async def main() -> None:
            async with anyio.create_task_group() as tg:

                async def work() -> None:
                    try:
                        outcome.append((True, await func()))
                    except Exception as exc:
                        outcome.append((False, exc))
                    finally:
                        tg.cancel_scope.cancel()

                async def until_told() -> None:
                    await anyio.wait_readable(listen)
                    tg.cancel_scope.cancel()

                tg.start_soon(work)
                tg.start_soon(until_told)

        try:
            anyio.run(main, backend=backend)
        finally:
            listen.close()
            with _isolated_lock:
                _isolated_alive -= 1
        if not outcome:  # told to cancel, so nobody waits for this any more
            raise RuntimeError("isolated call cancelled")
        ok, value = outcome[0]
        if not ok:
            raise value
        result: T = value
        return result

    try:
        return await anyio.to_thread.run_sync(in_thread, abandon_on_cancel=True)
    finally:
        with contextlib.suppress(OSError):
            wake.send(b"x")
        wake.close()
