"""Recording: :class:`TraceRecorder` (an ``observer=`` of :func:`effects.run.run`),
:func:`record_sequence` and :func:`record_driver` (record without the interpreter).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, TypeAlias

from effects.trace.format import (
    DEFAULT_MESSAGE_WINDOW,
    FORMAT,
    MAX_MESSAGE_WINDOW,
    VERSION,
    RefFn,
    _dumps,
    encode_effect,
    encode_event,
)
from effects.trace.provenance import (
    REDACTED,
    _check_provenance,
    _secrets,
    _steploop_version,
    make_provenance,
)
from reducer import LoopConfig, LoopState, Request, Session, start, step
from reducer.canonical import canonical_bytes, digest_bytes
from reducer.digest import STATE_FIELDS, StateDigester, field_digests
from reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    Finish,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from reducer.events import Event
from reducer.messages import Message
from reducer.serialize import unstructure

if TYPE_CHECKING:
    from effects.run import Run


def _message_digest(m: Message) -> bytes:
    return digest_bytes(canonical_bytes(m))


class _WriterBindings:
    """Which message ids a reader of this file currently has bound (the message window)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.seq = 0
        self.by_id: dict[str, tuple[int, bytes]] = {}
        self.order: deque[tuple[int, str]] = deque()

    def bound(self, mid: str, digest: bytes) -> bool:
        got = self.by_id.get(mid)
        return got is not None and got[1] == digest

    def bind(self, mid: str, digest: bytes) -> None:
        self.seq += 1
        self.by_id[mid] = (self.seq, digest)
        self.order.append((self.seq, mid))

    def evict(self) -> None:
        """After a step record: keep the newest ``window`` message records bound."""
        while len(self.order) > self.window:
            seq, old = self.order.popleft()
            if self.by_id.get(old, (0, b""))[0] == seq:
                del self.by_id[old]

    def reset(self) -> None:
        self.by_id.clear()
        self.order.clear()


class TraceRecorder:
    """Writes a trace, one flushed write per step; usable as ``observer=`` of ``run()``.

    Args:
        target: a path (created or truncated) or an open text file (not closed here).
        config, session, request: the turn; given here, the header is written at once,
            otherwise call :meth:`header` before the first step.
        provenance: see :func:`make_provenance` (default: made here, without a client).
        message_window: how many message records a reader keeps bound.
        secrets: strings that must never reach the file (the values of ANTHROPIC_API_KEY and
            ANTHROPIC_AUTH_TOKEN are added); each is replaced by ``[REDACTED]``.

    Use ``with TraceRecorder(...) as rec:`` or call :meth:`close`.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[str],
        *,
        config: LoopConfig | None = None,
        session: Session | None = None,
        request: Request | None = None,
        provenance: Mapping[str, Any] | None = None,
        message_window: int = DEFAULT_MESSAGE_WINDOW,
        secrets: Iterable[str] | None = None,
    ) -> None:
        if not 1 <= message_window <= MAX_MESSAGE_WINDOW:
            raise ValueError(f"message_window must be in 1..{MAX_MESSAGE_WINDOW}")
        self._provenance = dict(provenance) if provenance is not None else make_provenance()
        _check_provenance(self._provenance)
        if (config is None) != (request is None):
            raise ValueError("give both config and request (and optionally session), or neither")
        if isinstance(target, (str, os.PathLike)):
            self._file: IO[str] = open(target, "w", encoding="utf-8", newline="\n")
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._window = message_window
        self._bindings = _WriterBindings(message_window)
        self._secrets = _secrets(secrets)
        self._next = 0
        self._has_header = False
        self._ended = False
        self._closed = False
        self._prev: LoopState | None = None
        self._fields: dict[str, str] = {}
        self._digester = StateDigester()  # state and field digests at the cost of the change
        self.redactions = 0
        """How many times a secret was replaced in this file."""
        if config is not None and request is not None:
            self.header(config, session, request)

    # -- writing -----------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Step records written so far (the next step index)."""
        return self._next

    @property
    def ended(self) -> bool:
        return self._ended

    def header(self, config: LoopConfig, session: Session | None, request: Request) -> None:
        """Write the header record (once, first)."""
        if self._has_header:
            raise RuntimeError("the header was already written")
        rec = {
            "record": "header",
            "format": FORMAT,
            "version": VERSION,
            "steploop": _steploop_version(),
            "provenance": self._provenance,
            "message_window": self._window,
            "config": unstructure(config),
            "session": None if session is None else unstructure(session),
            "request": unstructure(request),
        }
        self._write([_dumps(rec)])
        self._has_header = True

    def attach(self, run: Run) -> Run:
        """Write the header from a :class:`effects.run.Run` (its request, config and session)
        and return it. The run must have been made with ``observer=`` this recorder::

            rec = TraceRecorder(path, provenance=make_provenance(model=model))
            r = rec.attach(run("Fix the bug", model=model, observer=rec))
        """
        self.header(run.config, getattr(run, "_session", None), run.request)
        return run

    def __call__(self, event: Event | None, state: LoopState, effects: Sequence[Effect]) -> None:
        """Record one step (the observer protocol of ``effects.run``)."""
        if not self._has_header:
            raise RuntimeError("TraceRecorder.header(config, session, request) comes first")
        if self._ended:
            raise RuntimeError("the turn has ended; nothing may follow the end record")
        if (event is None) != (self._next == 0):
            raise ValueError("step 0 is start() (event None); every later step has an event")
        lines: list[str] = []
        ref = self._ref(lines)
        rec: dict[str, Any] = {
            "record": "step",
            "i": self._next,
            "event": None if event is None else encode_event(event, ref),
            "effects": [encode_effect(e, ref) for e in effects],
            "digest": self._digester(state),
            "phase": state.phase,
            "turn_count": state.turn_count,
        }
        prev = self._prev
        if state.transition is not None and (
            prev is None or state.transition is not prev.transition
        ):
            rec["transition"] = unstructure(state.transition)
        rec["fields"] = self._changed_fields(state)
        lines.append(_dumps(rec))
        if effects and isinstance(effects[-1], Finish):
            end = {"record": "end", "i": self._next, "terminal": unstructure(effects[-1].terminal)}
            lines.append(_dumps(end))
            self._ended = True
        self._write(lines)
        self._bindings.evict()
        self._next += 1
        self._prev = state

    def _ref(self, lines: list[str]) -> RefFn:
        def ref(m: Message) -> dict[str, str]:
            digest = _message_digest(m)
            if not self._bindings.bound(m.id, digest):
                lines.append(_dumps({"record": "message", "id": m.id, "message": unstructure(m)}))
                self._bindings.bind(m.id, digest)
            return {"ref": m.id}

        return ref

    def _changed_fields(self, state: LoopState) -> dict[str, str]:
        """Digests of the fields whose value differs from what was last recorded for them."""
        out: dict[str, str] = {}
        prev = self._prev
        for name in STATE_FIELDS:
            value = getattr(state, name)
            if prev is not None and getattr(prev, name) is value:
                continue  # unchanged fields are shared between states
            d = self._digester.field_digest(state, name)
            if self._fields.get(name) != d:
                self._fields[name] = d
                out[name] = d
        return out

    def _write(self, lines: list[str]) -> None:
        if self._closed:
            raise RuntimeError("the trace recorder is closed")
        text = "\n".join(lines) + "\n"
        for secret in self._secrets:
            if secret in text:
                self.redactions += text.count(secret)
                text = text.replace(secret, REDACTED)
        self._file.write(text)
        self._file.flush()

    # -- resume ------------------------------------------------------------------------------

    @classmethod
    def _appending(
        cls,
        file: IO[str],
        *,
        next_index: int,
        last: LoopState | None,
        window: int,
        provenance: Mapping[str, Any],
        secrets: Iterable[str] | None,
    ) -> TraceRecorder:
        rec = cls(file, provenance=provenance, message_window=window, secrets=secrets)
        rec._owns = True
        rec._has_header = True
        rec._next = next_index
        rec._prev = last
        rec._fields = field_digests(last) if last is not None else {}
        return rec

    def _resume_record(self, after: int, reissued: Sequence[Effect]) -> None:
        self._bindings.reset()  # a resume record starts a new message scope
        rec = {
            "record": "resume",
            "after": after,
            "provenance": self._provenance,
            "reissued": [encode_effect(e) for e in reissued],
        }
        self._write([_dumps(rec)])

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._owns:
            self._file.close()
        else:
            self._file.flush()

    def __enter__(self) -> TraceRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def record_sequence(
    path: str | os.PathLike[str] | IO[str],
    config: LoopConfig,
    request: Request,
    events: Iterable[Event],
    session: Session | None = None,
    *,
    provenance: Mapping[str, Any] | None = None,
) -> tuple[LoopState, tuple[Effect, ...]]:
    """Record ``start()`` and then ``step()`` for each event, without the interpreter.

    Returns:
        The last state and effects. An event ``step()`` rejects raises ``IllegalEvent``; the
        file then holds the valid prefix.
    """
    with TraceRecorder(
        path, config=config, session=session, request=request, provenance=provenance
    ) as rec:
        state, fx = start(request, config, session)
        rec(None, state, fx)
        for event in events:
            state, fx = step(state, event, config)
            rec(event, state, fx)
    return state, fx


Answer: TypeAlias = Callable[[Effect, LoopState], Iterable[Event]]
"""Answers one effect that waits for the world, given the state that asked for it."""

_ANSWERED = (CallModel, AskPermission, StartTool, Wait, Compact, RunStopHooks, SummarizeToolUse)


def record_driver(
    path: str | os.PathLike[str] | IO[str],
    config: LoopConfig,
    request: Request,
    answer: Answer,
    session: Session | None = None,
    *,
    max_events: int | None = None,
    provenance: Mapping[str, Any] | None = None,
) -> LoopState:
    """Drive the machine synchronously and record it: effects are handled first in, first out;
    ``answer`` is asked for every effect that waits for the world (model calls, permissions,
    tools, waits, compactions, stop hooks, summaries) and its events are fed in order.

    Stops at ``Finish`` or after ``max_events`` events (the trace then has no end record).
    """
    with TraceRecorder(
        path, config=config, session=session, request=request, provenance=provenance
    ) as rec:
        state, fx = start(request, config, session)
        rec(None, state, fx)
        queue: deque[Effect] = deque(fx)
        fed = 0
        while queue:
            effect = queue.popleft()
            if isinstance(effect, Finish):
                break
            if not isinstance(effect, _ANSWERED):
                continue
            for event in answer(effect, state):
                if max_events is not None and fed >= max_events:
                    return state
                state, fx = step(state, event, config)
                rec(event, state, fx)
                fed += 1
                queue.extend(fx)
    return state
