"""Recording: :class:`TraceRecorder` (an ``observer=`` of :func:`steploop.effects.run.run`),
:func:`record_sequence` and :func:`record_driver` (record without the interpreter).
"""

from __future__ import annotations

import json
import os
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, TypeAlias

import attrs

from steploop.effects.trace.format import (
    DEFAULT_MESSAGE_WINDOW,
    FORMAT,
    FORMER,
    MAX_MESSAGE_WINDOW,
    VERSION,
    RefFn,
    dumps_line,
    encode_effect,
    encode_event,
)
from steploop.effects.trace.provenance import (
    check_provenance,
    client_secrets,
    make_provenance,
    redaction_marker,
    steploop_version,
    trace_secrets,
)
from steploop.reducer import LoopConfig, LoopState, Request, Session
from steploop.reducer.canonical import canonical_bytes, digest_bytes
from steploop.reducer.conversation import Conversation
from steploop.reducer.digest import STATE_FIELDS, StateDigester
from steploop.reducer.drive import drive
from steploop.reducer.effects import (
    Effect,
    Finish,
)
from steploop.reducer.events import Event
from steploop.reducer.machine import advance, begin
from steploop.reducer.messages import Message
from steploop.reducer.protocol import opens
from steploop.reducer.serialize import unstructure
from steploop.reducer.transitions import Transition

if TYPE_CHECKING:
    from steploop.effects.run import Run


def _message_digest(m: Message) -> bytes:
    return digest_bytes(canonical_bytes(m))


class _WriterBindings:
    """Which message ids a reader of this file currently has bound (the message window)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.seq = 0
        self.by_id: dict[str, tuple[int, bytes]] = {}
        self.order: deque[tuple[int, str]] = deque()
        self.journal = []

    def bound(self, mid: str, digest: bytes) -> bool:
        got = self.by_id.get(mid)
        return got is not None and got[1] == digest

    def bind(self, mid: str, digest: bytes) -> None:
        self.journal.append((mid, self.by_id.get(mid)))
        self.seq += 1
        self.by_id[mid] = (self.seq, digest)
        self.order.append((self.seq, mid))

    journal: list[tuple[str, tuple[int, bytes] | None]]
    """The binds since :meth:`mark`, so that :meth:`undo` can take them back."""

    def mark(self) -> None:
        self.journal = []

    def undo(self) -> None:
        """Forget the binds since :meth:`mark` (the lines that made them are not written)."""
        for mid, prev in reversed(self.journal):
            self.order.pop()
            self.seq -= 1
            if prev is None:
                del self.by_id[mid]
            else:
                self.by_id[mid] = prev
        self.journal = []

    def evict(self) -> None:
        """After a step record: keep the newest ``window`` message records bound."""
        while len(self.order) > self.window:
            seq, old = self.order.popleft()
            if self.by_id.get(old, (0, b""))[0] == seq:
                del self.by_id[old]

    def reset(self) -> None:
        self.by_id.clear()
        self.order.clear()


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` with ``fn`` applied to every str in it (dict keys too), through attrs
    instances, tuples, lists, dicts and conversations; the same object when nothing changed."""
    cls = value.__class__
    if cls is str:
        return fn(value)
    if value is None or cls in (int, bool, float):
        return value
    if cls is tuple or cls is list:
        items = [_map_strings(v, fn) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return cls(items)
    if cls is dict:
        out = {_map_strings(k, fn): _map_strings(v, fn) for k, v in value.items()}
        same = len(out) == len(value) and all(
            k1 is k2 and v1 is v2
            for (k1, v1), (k2, v2) in zip(out.items(), value.items(), strict=True)
        )
        return value if same else out
    if cls is Conversation:
        messages = value.messages()
        new = _map_strings(messages, fn)
        return value if new is messages else Conversation.of(new)
    if attrs.has(cls):
        changes = {}
        for f in attrs.fields(cls):
            if not f.init:
                continue
            old = getattr(value, f.name)
            got = _map_strings(old, fn)
            if got is not old:
                changes[f.alias or f.name] = got
        return attrs.evolve(value, **changes) if changes else value
    return value


class TraceRecorder:
    """Writes a trace, one flushed write per step; usable as ``observer=`` of ``run()``.

    Args:
        target: a path (created or truncated) or an open text file (not closed here).
        config: the turn's config; when it and ``request`` are given here, the header is
            written at once (with ``session``), otherwise call :meth:`header` before the
            first step.
        session: the turn's session (see ``config``).
        request: the turn's request (see ``config``).
        provenance: see :func:`make_provenance` (default: made here, without a client).
        message_window: how many message records a reader keeps bound.
        secrets: strings that must never reach the file (the values of ANTHROPIC_API_KEY and
            ANTHROPIC_AUTH_TOKEN are added, and :meth:`attach` adds the credentials the run's
            model client holds); each is replaced by a marker of its length
            (:func:`~steploop.effects.trace.provenance.redaction_marker`).

    Redaction is made on values, before encoding (specs/trace-format.md §2): once an input
    (the request, an event) holds a secret, the recorder steps a shadow of the machine on the
    redacted inputs and writes what the shadow did (its effects, its state digests), which is
    exactly what a replay of the file does. A redacted trace therefore replays exactly and can
    be resumed; the run it describes is the run with each secret replaced by its marker.

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
        check_provenance(self._provenance)
        if (config is None) != (request is None):
            raise ValueError("give both config and request (and optionally session), or neither")
        self.path: str | None = None
        """The file written, when given by name (a sub-agent's trace goes beside it)."""
        if isinstance(target, (str, os.PathLike)):
            self.path = os.fspath(target)
            self._file: IO[str] = open(target, "w", encoding="utf-8", newline="\n")
            self._owns = True
        else:
            self._file = target
            self._owns = False
        self._window = message_window
        self._bindings = _WriterBindings(message_window)
        self.trace_secrets: tuple[str, ...] = ()
        self._masks: tuple[tuple[str, str], ...] = ()
        self._escaped: tuple[tuple[str, str], ...] = ()  # (secret as JSON writes it, marker)
        self.add_secrets(trace_secrets(secrets))
        # the redacted turn: its config, request and session as written; the shadow state,
        # stepped on redacted events, once an input held a secret (None: the run's own state
        # is what is written); False once the shadow could not follow the run
        self._config: LoopConfig | None = None
        self._request: Request | None = None
        self._session: Session | None = None
        self._shadow: LoopState | None = None
        self._shadowing = False
        self._shadow_ok = True
        self._ended_now = False
        self._new_fields: dict[str, str] = {}
        self._next = 0
        self._has_header = False
        self._ended = False
        self._closed = False
        self._prev: LoopState | None = None
        self._fields: dict[str, str] = {}
        self._digester = StateDigester()  # state and field digests at the cost of the change
        self.redactions = 0
        """How many times a secret was replaced in this file."""
        self.diverged_at: int | None = None
        """The step from which the redacted run could not be followed (its effects differed
        from the run's); from there the file holds the run's digests, so replay reports a
        mismatch there. None in every case seen so far (markers keep every length)."""
        if config is not None and request is not None:
            self.header(config, session, request)

    def add_secrets(self, secrets: Iterable[str]) -> None:
        """Keep these strings out of the file too (at least 8 characters each)."""
        merged = trace_secrets([*self.trace_secrets, *secrets])
        self.trace_secrets = merged
        self._masks = tuple((s, redaction_marker(len(s))) for s in merged)
        self._escaped = tuple((json.dumps(s)[1:-1], json.dumps(m)[1:-1]) for s, m in self._masks)

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
        wconfig, wsession, wrequest = self._redact((config, session, request))
        self._config, self._session, self._request = wconfig, wsession, wrequest
        # a secret in the turn's own input: the written run starts from the redacted one
        self._shadowing = (
            wconfig is not config or wsession is not session or wrequest is not request
        )
        rec = {
            "record": "header",
            "format": FORMAT,
            "version": VERSION,
            "steploop": steploop_version(),
            "provenance": self._provenance,
            "message_window": self._window,
            "config": unstructure(wconfig),
            "session": None if wsession is None else unstructure(wsession),
            "request": unstructure(wrequest),
        }
        self._write([dumps_line(rec)])
        self._has_header = True

    def attach(self, run: Run) -> Run:
        """Write the header from a :class:`steploop.effects.run.Run` (its request, config and session)
        and return it. The run must have been made with ``observer=`` this recorder::

            rec = TraceRecorder(path, provenance=make_provenance(model=model))
            r = rec.attach(run("Fix the bug", model=model, observer=rec))
        """
        self.add_secrets(client_secrets(getattr(run, "_model", None)))
        self.header(run.config, getattr(run, "_session", None), run.request)
        return run

    def __call__(self, event: Event | None, state: LoopState, effects: Sequence[Effect]) -> None:
        """Record one step when the caller cannot say which transitions it passed through (a
        three-argument ``observer=``): the state's transition is recorded when it is a new one.
        Every driver of steploop (:func:`steploop.effects.run.run`, :func:`steploop.reducer.drive.drive`, the
        replays) calls :meth:`observe` with the transitions instead."""
        prev = self._prev
        new = state.transition
        fresh = new is not None and (prev is None or new is not prev.transition)
        self.observe(event, state, effects, (new,) if fresh and new is not None else ())

    def observe(
        self,
        event: Event | None,
        state: LoopState,
        effects: Sequence[Effect],
        transitions: Sequence[Transition],
    ) -> None:
        """Record one step: the event (None for start()), the new state, its effects and the
        transitions it passed through (the observer protocol of :mod:`steploop.reducer.drive` and
        ``steploop.effects.run``)."""
        if not self._has_header:
            raise RuntimeError("TraceRecorder.header(config, session, request) comes first")
        if self._ended:
            raise RuntimeError("the turn has ended; nothing may follow the end record")
        if (event is None) != (self._next == 0):
            raise ValueError("step 0 is start() (event None); every later step has an event")
        if not self._shadowing:
            self._bindings.mark()
            lines = self._lines(event, state, effects, transitions)
            if not self._leaks(lines):  # the common case: the run's own step is written
                self._write(lines)
                self._after(state)
                return
            self._bindings.undo()  # an input holds a secret: from here the redacted run
            self._shadowing = True
            self._shadow = self._prev
        if self._shadow_ok:
            written = self._shadow_step(event, effects)
            if written is not None:
                w_event, state, effects, transitions = written
                self._write(self._lines(w_event, state, effects, transitions))
                self._after(state)
                return
        self._write(self._lines(event, state, effects, transitions))  # the text-level net
        self._after(state)

    def _shadow_step(
        self, event: Event | None, effects: Sequence[Effect]
    ) -> tuple[Event | None, LoopState, tuple[Effect, ...], tuple[Transition, ...]] | None:
        """Step the redacted run on the redacted event; None (and no more shadowing) when its
        effects are not the run's, kind for kind."""
        if self._config is None or self._request is None:  # a resumed file, turn unknown
            self._shadow_ok = False
            self.diverged_at = self._next
            return None
        w_event = self._redact(event)
        if w_event is None:
            state, fx, passed = begin(self._request, self._config, self._session)
        else:
            assert self._shadow is not None
            state, fx, passed = advance(self._shadow, w_event, self._config)
        if len(fx) != len(effects) or any(
            type(a) is not type(b) for a, b in zip(fx, effects, strict=True)
        ):
            self._shadow_ok = False
            self.diverged_at = self._next
            return None
        self._shadow = state
        return w_event, state, fx, passed

    def _after(self, state: LoopState) -> None:
        self._fields.update(self._new_fields)
        self._bindings.evict()
        if self._ended_now:
            self._ended = True
        self._next += 1
        self._prev = state

    def _leaks(self, lines: list[str]) -> bool:
        escaped = self._escaped
        if not escaped:
            return False
        for line in lines:
            for secret, _ in escaped:
                if secret in line:
                    return True
        return False

    def _redact(self, value: Any) -> Any:
        """``value`` with every secret in every string replaced by its marker (through attrs
        instances, tuples, lists, dicts and conversations); the same object when none is."""
        if not self._masks:
            return value
        return _map_strings(value, self._mask)

    def _mask(self, text: str) -> str:
        for secret, marker in self._masks:
            if secret in text:
                self.redactions += text.count(secret)
                text = text.replace(secret, marker)
        return text

    def _lines(
        self,
        event: Event | None,
        state: LoopState,
        effects: Sequence[Effect],
        transitions: Sequence[Transition],
    ) -> list[str]:
        """The lines of one step: new message records, the step record, the end record."""
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
        if transitions:  # format version 1 holds the last one (the state's new transition)
            rec["transition"] = unstructure(transitions[-1])
        rec["fields"] = self._changed_fields(state)
        lines.append(dumps_line(rec))
        self._ended_now = False
        if effects and isinstance(effects[-1], Finish):
            end = {"record": "end", "i": self._next, "terminal": unstructure(effects[-1].terminal)}
            lines.append(dumps_line(end))
            self._ended_now = True
        return lines

    def _ref(self, lines: list[str]) -> RefFn:
        def ref(m: Message) -> dict[str, str]:
            digest = _message_digest(m)
            if not self._bindings.bound(m.id, digest):
                lines.append(dumps_line({"record": "message", "id": m.id, "message": unstructure(m)}))
                self._bindings.bind(m.id, digest)
            return {"ref": m.id}

        return ref

    def _changed_fields(self, state: LoopState) -> dict[str, str]:
        """Digests of the fields whose value differs from what was last recorded for them
        (kept as recorded by :meth:`_after`, once the lines are written)."""
        out: dict[str, str] = {}
        prev = self._prev
        for name in STATE_FIELDS:
            value = getattr(state, name)
            if prev is not None and getattr(prev, name) is value:
                continue  # unchanged fields are shared between states
            d = self._digester.field_digest(state, name)
            if self._fields.get(name) != d:
                out[name] = d
        self._new_fields = out
        return out

    def _write(self, lines: list[str]) -> None:
        if self._closed:
            raise RuntimeError("the trace recorder is closed")
        text = "\n".join(lines) + "\n"
        for secret, marker in self._escaped:  # the safety net: anything still holding one
            if secret in text:
                self.redactions += text.count(secret)
                text = text.replace(secret, marker)
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
        turn: tuple[LoopConfig, Session | None, Request] | None = None,
        version: int = VERSION,
    ) -> TraceRecorder:
        """A recorder appending to a resumed trace; ``turn``: the header's config, session
        and request (what a redacted run steps with, should a secret appear); ``version``: the
        file's, whose digests the appended steps carry."""
        rec = cls(file, provenance=provenance, message_window=window, secrets=secrets)
        rec._digester = StateDigester(FORMER[version])
        if turn is not None:
            rec._config, rec._session, rec._request = turn
        rec._owns = True
        rec._has_header = True
        rec._next = next_index
        rec._prev = last
        rec._fields = rec._digester.field_digests(last) if last is not None else {}
        return rec

    def _resume_record(self, after: int, reissued: Sequence[Effect]) -> None:
        self._bindings.reset()  # a resume record starts a new message scope
        rec = {
            "record": "resume",
            "after": after,
            "provenance": self._provenance,
            "reissued": [encode_effect(e) for e in reissued],
        }
        self._write([dumps_line(rec)])

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
    """Record ``start()`` and then ``step()`` for each of ``events``, as they are, without a
    world (the golden scenarios are written so, late answers included).

    Returns:
        The last state and effects. An event ``step()`` rejects raises ``IllegalEvent``; the
        file then holds the valid prefix.
    """
    with TraceRecorder(
        path, config=config, session=session, request=request, provenance=provenance
    ) as rec:
        state, fx, passed = begin(request, config, session)
        rec.observe(None, state, fx, passed)
        for event in events:
            state, fx, passed = advance(state, event, config)
            rec.observe(event, state, fx, passed)
    return state, fx


Answer: TypeAlias = Callable[[Effect, LoopState], Iterable[Event]]
"""Answers one effect that waits for the world, given the state that asked for it."""


class _Answering:
    """A world made of an :data:`Answer`: every effect that opens a request is answered at
    once; nothing comes unasked."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        return self.answer(effect, state) if opens(effect) is not None else None

    def next_event(self, state: LoopState) -> Event | None:
        return None


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
    """Drive the machine synchronously with :func:`steploop.reducer.drive.drive` and record it:
    ``answer`` is asked for every effect that waits for the world (model calls, permissions,
    tools, waits, compactions, stop hooks, summaries), and its events are queued and stepped in
    order (W-DRIVE-1).

    Stops at ``Finish`` or after ``max_events`` events (the trace then has no end record).
    """
    with TraceRecorder(
        path, config=config, session=session, request=request, provenance=provenance
    ) as rec:
        out = drive(
            _Answering(answer),
            request,
            config,
            session,
            observer=rec.observe,
            max_events=max_events,
        )
    return out.state
