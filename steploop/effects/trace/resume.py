"""Resume: continue a cut-off trace, appending to it (specs/trace-format.md, "Resume")."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from steploop.effects import answer
from steploop.effects.trace.format import StepRecord, TraceError, TraceHeader
from steploop.effects.trace.provenance import client_secrets, make_provenance
from steploop.effects.trace.read import TraceReader
from steploop.effects.trace.record import TraceRecorder
from steploop.effects.trace.replay import Walk, check_step
from steploop.reducer import LoopState
from steploop.reducer.effects import (
    CallModel,
    Effect,
    StartTool,
)
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
)
from steploop.reducer.machine import advance
from steploop.reducer.messages import Message
from steploop.reducer.protocol import Ledger, answers, awaiting, opens
from steploop.reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES, Terminal, Transition

if TYPE_CHECKING:
    from steploop.effects.run import Run

INTERRUPTED_TOOL_RESULT = "the run was interrupted before this tool finished; its result is unknown"


@attrs.frozen(kw_only=True)
class ResumePoint:
    """Where a cut-off trace stands, and what continuing it takes."""

    path: str
    header: TraceHeader
    state: LoopState | None  # None: not even start() was recorded
    last_step: int  # -1 when no step was recorded
    valid_bytes: int
    missing_newline: bool
    truncated_tail: bool
    reissue: tuple[Effect, ...]  # recorded effects whose answers are not recorded
    partial_calls: frozenset[int]  # model calls that had streamed part of their answer
    finished: Terminal | None  # the turn already ended
    model_answers: int = 0
    """The model calls the prefix recorded an answer to, in whole or in part: a script that
    answered the killed run used this many entries (``ScriptedModel.skip``)."""
    rounds: int = 1
    """The round the prefix ended in: 1 + the Continues it passed (as ``steploop show``
    counts them)."""

    def messages(self) -> list[Message]:
        """The messages of the prefix: the conversation, then the round in flight (its
        answers, its tool results already emitted)."""
        if self.state is None:
            return []
        r = self.state.round
        return [
            *self.state.conversation,
            *r.blocks,
            *(sl.message for sl in r.slots if sl.message is not None),
        ]


def prepare_resume(path: str | os.PathLike[str]) -> ResumePoint:
    """Replay a (possibly cut-off) trace exactly to its last state and list what is outstanding.

    Raises:
        TraceError: the trace is unreadable, or does not replay exactly (resuming an
            inconsistent trace would record a lie).
    """
    reader = TraceReader(path, tolerate_truncated_tail=True)
    walk = Walk(reader)
    ledger = Ledger()  # the requests of the prefix: opened, answered, withdrawn
    last = -1
    answered: set[int] = set()  # model calls with a recorded answer event
    rounds = 1
    for rec in walk:
        if not isinstance(rec, StepRecord):
            continue
        if isinstance(rec.event, (ModelBlockReceived, ModelResponseEnded, ModelCallFailed)):
            answered.add(rec.event.call_id)
        if isinstance(rec.transition, CONTINUE_TYPES):
            rounds += 1
        mm = check_step(walk, rec)
        if mm is not None:
            raise reader.error(
                mm.line,
                f"cannot resume: the trace does not replay exactly at step {mm.step} "
                f"({mm.what} differ)",
            )
        last = rec.i
        if rec.event is not None:
            ledger.deliver(rec.event)
        ledger.issue(walk.effects)
    assert walk.header is not None
    state = walk.state
    finished: Terminal | None = None
    if state is not None and isinstance(state.transition, TERMINAL_TYPES):
        finished = state.transition
    reissue: tuple[Effect, ...] = ()
    streamed: frozenset[int] = frozenset()
    if state is not None:
        owed = set(awaiting(state))  # what the last state waits for, as the prefix opened it
        reissue = tuple(e for key, e in ledger.open.items() if key in owed)
        streamed = frozenset(
            e.call_id for e in reissue if isinstance(e, CallModel) and opens(e) in ledger.partial
        )
    return ResumePoint(
        path=reader.name,
        header=walk.header,
        state=state,
        last_step=last,
        valid_bytes=reader.valid_bytes,
        missing_newline=reader.missing_newline,
        truncated_tail=reader.truncated_tail,
        reissue=reissue,
        partial_calls=streamed,
        finished=finished,
        model_answers=len(answered),
        rounds=rounds,
    )


def _settling_events(point: ResumePoint, now: int) -> list[Event]:
    """A half-streamed model call fails as a broken stream; a running tool ends in an error:
    the answering layer's answers for a handler that gave none (steploop/effects/answer.py)."""
    out: list[Event] = []
    for e in point.reissue:
        if isinstance(e, CallModel) and e.call_id in point.partial_calls:
            out.append(answer.gave_up(e, "the run was interrupted while this call streamed", now))
    for e in point.reissue:
        if isinstance(e, StartTool):
            out.append(answer.gave_up(e, INTERRUPTED_TOOL_RESULT, now))
    return out


def _wall_ms() -> int:
    return int(time.time() * 1000)


class Resumption:
    """A cut-off trace opened for appending, with the state and effects to continue from.

    Made by :func:`resume_trace`. On opening, the truncated last line (if any) is dropped, a
    ``resume`` record is written, and the outstanding work is settled (specs/trace-format.md,
    "Resume"): a model call that had streamed part of its answer is reported as
    ``ModelCallFailed(kind="stream_broken")``, a running tool as an interrupted error result;
    both go through ``step()`` and are recorded. Everything else still outstanding (model calls
    with nothing streamed, permission requests, waits, compactions, stop hooks, summaries) is
    issued again, together with the effects of those synthesized steps.

    Use :meth:`run` (same keywords as :func:`steploop.effects.run.run`, minus request, config, session,
    observer and resume), and close the Resumption (``with``) when the run is over.
    """

    def __init__(
        self,
        point: ResumePoint,
        *,
        clock_ms: Callable[[], int],
        provenance: Mapping[str, Any] | None,
        secrets: Iterable[str] | None,
    ) -> None:
        self.point = point
        header = point.header
        with open(point.path, "r+b") as f:
            f.truncate(point.valid_bytes)
            if point.missing_newline:
                f.seek(0, os.SEEK_END)
                f.write(b"\n")
        file = open(point.path, "a", encoding="utf-8", newline="\n")
        prov = dict(provenance) if provenance is not None else make_provenance()
        self.recorder = TraceRecorder._appending(
            file,
            next_index=point.last_step + 1,
            last=point.state,
            window=header.message_window,
            provenance=prov,
            secrets=secrets,
            turn=(header.config, header.session, header.request),
            version=header.version,
        )
        self.synthesized: list[Event] = []
        """Events resume made up for work cut off mid-way, already stepped and recorded."""
        self.reissued: tuple[Effect, ...] = ()
        """Recorded effects still waiting for an answer, issued again as they were."""
        self.requested: tuple[Effect, ...] = ()
        """New requests from the synthesized steps (e.g. the non-streaming retry)."""
        state = point.state
        effects: list[Effect] = []
        settled: list[tuple[Event, LoopState, tuple[Effect, ...], tuple[Transition, ...]]] = []
        if state is not None:
            cfg = header.config
            for ev in _settling_events(point, clock_ms()):
                # e.g. a running tool of an attempt the broken stream discarded: answered already
                if answers(ev) not in awaiting(state):
                    continue
                state, fx, passed = advance(state, ev, cfg)
                settled.append((ev, state, fx, passed))
                effects.extend(fx)
            owed = set(awaiting(state))
            self.reissued = tuple(e for e in point.reissue if opens(e) in owed)
            self.requested = tuple(e for e in effects if opens(e) is not None)
            effects = [*self.reissued, *effects]
        self.recorder._resume_record(point.last_step, self.reissued)
        for ev, st, fx, passed in settled:
            self.recorder.observe(ev, st, fx, passed)
            self.synthesized.append(ev)
        self.state = state
        self.effects: tuple[Effect, ...] = tuple(effects)

    def run(self, **kwargs: Any) -> Run:
        """Continue the turn with the interpreter, recording into the trace."""
        from steploop.effects.run import run

        header = self.point.header
        resume = (self.state, self.effects) if self.state is not None else None
        self.recorder.add_secrets(client_secrets(kwargs.get("model")))
        return run(
            header.request,
            config=header.config,
            session=header.session,
            observer=self.recorder,
            resume=resume,
            **kwargs,
        )

    def close(self) -> None:
        self.recorder.close()

    def __enter__(self) -> Resumption:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_resumable(point: ResumePoint) -> None:
    """Raise unless there is something to resume at ``point``.

    Raises:
        TraceError: the turn already ended.
    """
    if point.finished is not None:
        raise TraceError(
            point.path,
            None,
            f"the run already ended ({point.finished.TAG}) at step {point.last_step}; "
            "nothing to resume",
        )


def resume_trace(
    path: str | os.PathLike[str] | ResumePoint,
    *,
    clock_ms: Callable[[], int] | None = None,
    provenance: Mapping[str, Any] | None = None,
    secrets: Iterable[str] | None = None,
) -> Resumption:
    """Open a cut-off trace to continue its run, appending to it (see :class:`Resumption`).

    ``path``: the trace, or the :class:`ResumePoint` :func:`prepare_resume` made of it (to
    look at it before anything is written).

    Raises:
        TraceError: the trace is unreadable, inconsistent, or its turn already ended.
    """
    point = path if isinstance(path, ResumePoint) else prepare_resume(path)
    check_resumable(point)
    return Resumption(point, clock_ms=clock_ms or _wall_ms, provenance=provenance, secrets=secrets)
