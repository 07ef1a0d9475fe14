"""The interpreter's concurrency helpers: a zero-buffer hand-over between the stepping code and
the consumer (:class:`Handoff`), a one-shot wake-up, and the running backend's primitives
constructed directly (:func:`primitives`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, Protocol, TypeVar

import anyio
import anyio.lowlevel

__all__ = ["FutureSignal", "Handoff", "Receiver", "Rest", "Sender", "Signal", "primitives"]

T = TypeVar("T")


class Rest(Generic[T]):
    """Await the rest of a coroutine whose first step already ran and yielded ``first``: what
    ``await`` does, from the second step on. Each value the coroutine yields goes to the event
    loop, and what the loop sends or throws back goes to the coroutine."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, T], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, Any, T]:
        coro, value = self._coro, self._first
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:
                try:
                    value = coro.throw(exc)
                except StopIteration as done:
                    result: T = done.value
                    return result
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as done:
                    result = done.value
                    return result


class Sender(Generic[T]):
    """An item offered to the consumer: by a task waiting in ``send`` (woken once it is
    taken), or held for the machine's work (``on_taken`` carries it on)."""

    __slots__ = ("item", "on_taken", "taken", "woken")

    def __init__(
        self, item: T, woken: Signal | None, on_taken: Callable[[], None] | None = None
    ) -> None:
        self.item = item
        self.taken = False
        self.woken = woken
        self.on_taken = on_taken


class Receiver(Generic[T]):
    __slots__ = ("filled", "item", "woken")

    def __init__(self, woken: Signal) -> None:
        self.filled = False
        self.item: T | None = None
        self.woken = woken


class Handoff(Generic[T]):
    """A zero-buffer channel: an item is handed over only to a receiver that takes it.

    The semantics of an anyio memory object stream of buffer size 0, with fewer trips
    through the event loop: an item offered to a receiver already waiting costs the sender
    no checkpoint, and the receiver is woken with the item in hand. An item nobody waits for
    is either sent (``send`` waits until it is taken) or held (``hold``: the caller stops its
    work, and the receiver that takes the item calls ``on_taken`` to carry it on before it
    returns). A receive that finds an item ready is a cancellation point but takes the item
    without a trip through the event loop. A receiver cancelled after it was handed an item
    does not lose it: the next receive returns it. Closing the sending side ends the stream (``EndOfStream``) and withdraws
    items still offered; closing the receiving side breaks it (``BrokenResourceError``).
    """

    __slots__ = ("_broken", "_ended", "_receivers", "_returned", "_senders", "new_signal")

    def __init__(self) -> None:
        self.new_signal: Callable[[], Signal] = anyio.Event
        self._receivers: deque[Receiver[T]] = deque()
        self._senders: deque[Sender[T]] = deque()
        self._returned: deque[T] = deque()
        self._ended = False
        self._broken = False

    def offer(self, item: T) -> bool:
        """Hand ``item`` to a receiver already waiting, if there is one; never waits."""
        receivers = self._receivers
        if not receivers or self._returned or self._senders or self._ended or self._broken:
            return False
        r = receivers.popleft()
        r.item = item
        r.filled = True
        r.woken.set()
        return True

    def hold(self, item: T, on_taken: Callable[[], None]) -> None:
        """Keep ``item`` for the next receive, which calls ``on_taken`` once it has it."""
        self._senders.append(Sender(item, None, on_taken))

    async def send(self, item: T) -> None:
        if self._ended:
            raise anyio.ClosedResourceError
        if self._broken:
            raise anyio.BrokenResourceError
        if self.offer(item):
            return
        s = Sender(item, self.new_signal())
        self._senders.append(s)
        try:
            await s.woken.wait()  # type: ignore[union-attr]
        finally:
            if not s.taken:
                with contextlib.suppress(ValueError):
                    self._senders.remove(s)
        if not s.taken:
            raise anyio.BrokenResourceError if self._broken else anyio.ClosedResourceError

    async def receive(self) -> T:
        while True:
            if self._returned or self._senders:
                # An item is ready: a cancellation point, not a trip through the loop (the
                # task taking a held item carries on the work that makes the next one).
                await anyio.lowlevel.checkpoint_if_cancelled()
                if self._returned:
                    return self._returned.popleft()
                s = self._senders.popleft()
                s.taken = True
                if s.woken is not None:
                    s.woken.set()
                if s.on_taken is not None:
                    s.on_taken()
                return s.item
            if self._ended:
                raise anyio.EndOfStream
            if self._broken:
                raise anyio.ClosedResourceError
            r: Receiver[T] = Receiver(self.new_signal())
            self._receivers.append(r)
            try:
                await r.woken.wait()
            except BaseException:
                if r.filled:
                    self._returned.append(r.item)  # type: ignore[arg-type]
                else:
                    with contextlib.suppress(ValueError):
                        self._receivers.remove(r)
                raise
            if r.filled:
                return r.item  # type: ignore[return-value]
            # woken by a close: loop to report it

    def close_sending(self) -> None:
        self._ended = True
        self._wake_all()

    def close_receiving(self) -> None:
        self._broken = True
        self._wake_all()

    def _wake_all(self) -> None:
        while self._receivers:
            self._receivers.popleft().woken.set()
        while self._senders:
            woken = self._senders.popleft().woken
            if woken is not None:
                woken.set()


class Signal(Protocol):
    """A one-shot wake-up: ``set`` once, ``wait`` by one task (an anyio Event is one)."""

    def set(self) -> None: ...

    def wait(self) -> Awaitable[Any]: ...


class FutureSignal:
    """A :class:`Signal` on asyncio: a bare future. anyio's Event wraps an asyncio.Event,
    which keeps a list of waiters and takes a global lock the first time it is waited on;
    a wake-up here costs a future. Cancellation reaches the waiting task as it does through
    an Event (anyio cancels the task, which cancels the future it awaits)."""

    __slots__ = ("_future",)

    def __init__(self, future: asyncio.Future[None]) -> None:
        self._future = future

    def set(self) -> None:
        if not self._future.done():
            self._future.set_result(None)

    def wait(self) -> asyncio.Future[None]:
        return self._future


def primitives() -> tuple[Callable[[], Signal], Callable[..., anyio.CancelScope]]:
    """The running backend's one-shot wake-up and CancelScope class, to construct directly.

    ``anyio.Event()`` and ``anyio.CancelScope()`` look the backend up (sniffio) on every call,
    about half of what they cost; a run makes several per turn. anyio's backend classes are
    constructible directly; should one stop being so, the public constructors are used. On
    asyncio a wake-up is a :class:`FutureSignal`."""
    event: Any = type(anyio.Event())
    scope: Any = type(anyio.CancelScope())
    try:
        direct = isinstance(event(), anyio.Event) and isinstance(
            scope(deadline=math.inf, shield=False), anyio.CancelScope
        )
    except Exception:
        direct = False
    if not direct:
        return anyio.Event, anyio.CancelScope
    if event.__module__ == "anyio._backends._asyncio":
        loop = asyncio.get_running_loop()
        return (lambda: FutureSignal(loop.create_future())), scope
    return event, scope
