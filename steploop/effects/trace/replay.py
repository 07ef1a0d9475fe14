"""Exact replay: feed the recorded events to ``step()`` and check every effect and state digest
(or the digests only at checkpoints).
"""

from __future__ import annotations

import json
import os
import time
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from steploop.effects.trace.format import (
    FORMER,
    EndRecord,
    Record,
    ResumeRecord,
    StepRecord,
    TraceHeader,
    describe_effect,
)
from steploop.effects.trace.read import TraceReader
from steploop.reducer import IllegalEvent, LoopState, collector
from steploop.reducer.canonical import to_data
from steploop.reducer.digest import STATE_FIELDS, Former, StateDigester, digest_with, field_digests
from steploop.reducer.drive import Loop
from steploop.reducer.effects import Effect, Finish
from steploop.reducer.events import Event
from steploop.reducer.machine import advance
from steploop.reducer.transitions import Terminal, Transition

__all__ = [
    "DEFAULT_CHECKPOINT_EVERY",
    "VERIFY_POLICIES",
    "Mismatch",
    "ReplayProgress",
    "ReplayReport",
    "Verify",
    "Walk",
    "check_step",
    "digest_mismatch",
    "effects_mismatch",
    "replay_exact",
]


@attrs.frozen(kw_only=True)
class Mismatch:
    """The first place a replay disagrees with the recording."""

    step: int
    line: int
    what: Literal["effects", "digest", "terminal"]
    effect_index: int | None
    expected: Any  # the recorded effect / digest / terminal (None: nothing recorded there)
    actual: Any
    fields: tuple[str, ...]  # state fields whose digests differ ("unknown" if not recorded)

    def describe(self) -> str:
        lines = [f"mismatch at step {self.step} (line {self.line}): "]
        if self.what == "effects":
            lines[0] += f"effect {self.effect_index} differs"
            lines.append(f"  expected: {describe_effect(self.expected)}")
            lines.append(f"  actual:   {describe_effect(self.actual)}")
        elif self.what == "digest":
            lines[0] += "the state digest differs"
            lines.append(f"  expected: {self.expected}")
            lines.append(f"  actual:   {self.actual}")
        else:
            lines[0] += "the end record's terminal differs from the Finish effect"
            lines.append(f"  expected: {json.dumps(to_data(self.expected))}")
            lines.append(f"  actual:   {json.dumps(to_data(self.actual))}")
        if self.fields:
            lines.append(f"  state fields that differ: {', '.join(self.fields)}")
        return "\n".join(lines)


@attrs.frozen(kw_only=True)
class ReplayReport:
    path: str
    ok: bool
    steps: int
    effects: int
    messages: int
    elapsed_s: float
    complete: bool  # the trace has its end record
    terminal: Terminal | None
    resumes: int
    mismatch: Mismatch | None

    @property
    def events_per_s(self) -> float:
        return self.steps / self.elapsed_s if self.elapsed_s > 0 else float("inf")

    def describe(self) -> str:
        if self.mismatch is not None:
            return f"{self.path}: {self.mismatch.describe()}"
        end = (
            f"terminal {self.terminal.TAG}"
            if self.terminal is not None
            else "no end record (the run was cut off)"
        )
        resumed = f", resumed {self.resumes}x" if self.resumes else ""
        return (
            f"{self.path}: replayed exactly: {self.steps} steps, {self.effects} effects, "
            f"{self.messages} messages in {self.elapsed_s:.2f} s "
            f"({self.events_per_s:,.0f} events/s); {end}{resumed}"
        )


def _differing_fields(
    state: LoopState, recorded: Mapping[str, str], former: Former | None = None
) -> tuple[str, ...]:
    actual = StateDigester(former).field_digests(state) if former else field_digests(state)
    out = [n for n in STATE_FIELDS if n in recorded and recorded[n] != actual[n]]
    return tuple(out)


def _recorded(effect: Effect, state: LoopState) -> None:
    """The world of an exact replay performs nothing: the recording answers, in its order."""


class Walk:
    """A recording pushed into the driver loop (:class:`steploop.reducer.drive.Loop`, W-DRIVE-4): the
    recorded events, fed one by one, are the world's answers, whatever the effects ask for.
    Exposes the state, the effects and the transitions after each step record."""

    def __init__(self, reader: TraceReader) -> None:
        self.reader = reader
        self.header: TraceHeader | None = None
        self.state: LoopState | None = None
        self.effects: tuple[Effect, ...] = ()
        self.transitions: tuple[Transition, ...] = ()
        self.fields: dict[str, str] = {}
        self.steps = 0
        self.effect_count = 0
        self.resumes = 0
        self.digest: Callable[[LoopState], str] = StateDigester()
        self.former: Former = {}  # the recorded version's former state fields
        self._loop: Loop | None = None

    def _seen(
        self,
        event: Event | None,
        state: LoopState,
        effects: tuple[Effect, ...],
        transitions: tuple[Transition, ...],
    ) -> None:
        self.state, self.effects, self.transitions = state, effects, transitions

    def __iter__(self) -> Iterator[Record]:
        for rec in self.reader:
            if isinstance(rec, TraceHeader):
                self.header = rec
                self.former = FORMER[rec.version]
                self.digest = StateDigester(self.former)
                self._loop = Loop(rec.config, _recorded, observe=self._seen, keep_transitions=False)
            elif isinstance(rec, StepRecord):
                collector.sweep()
                header, loop = self.header, self._loop
                assert header is not None and loop is not None
                if rec.event is None:
                    loop.begin(header.request, header.session)
                else:
                    try:
                        if loop.terminal is not None:  # the loop is over: step() says why
                            assert self.state is not None
                            advance(self.state, rec.event, header.config)
                        loop.feed(rec.event)
                    except IllegalEvent as e:
                        raise self.reader.error(
                            rec.line, f"step {rec.i}: step() rejects the event: {e}"
                        ) from None
                self.fields.update(rec.fields)
                self.steps += 1
                self.effect_count += len(self.effects)
            elif isinstance(rec, ResumeRecord):
                self.resumes += 1
            yield rec


def check_step(walk: Walk, rec: StepRecord) -> Mismatch | None:
    """The step record ``rec`` the walk just replayed, checked: its effects, then its state
    digest (None when both agree)."""
    state = walk.state
    assert state is not None
    return effects_mismatch(walk, rec, state, walk.fields) or digest_mismatch(
        walk, rec, state, walk.fields
    )


def effects_mismatch(
    walk: Walk, rec: StepRecord, state: LoopState, fields: Mapping[str, str]
) -> Mismatch | None:
    """The first effect of ``rec`` that the walk's step computed differently (None: all
    equal); ``state`` and ``fields`` name the state fields that differ."""
    actual = walk.effects
    if rec.effects == actual:
        return None
    k = next(
        (k for k, (a, b) in enumerate(zip(rec.effects, actual, strict=False)) if a != b),
        min(len(rec.effects), len(actual)),
    )
    return Mismatch(
        step=rec.i,
        line=rec.line,
        what="effects",
        effect_index=k,
        expected=rec.effects[k] if k < len(rec.effects) else None,
        actual=actual[k] if k < len(actual) else None,
        fields=_differing_fields(state, fields, walk.former),
    )


def digest_mismatch(
    walk: Walk, rec: StepRecord, state: LoopState, fields: Mapping[str, str]
) -> Mismatch | None:
    """``state``'s digest against the one ``rec`` recorded (None when equal)."""
    digest = walk.digest(state)
    if digest == rec.digest:
        return None
    official = digest_with(state, walk.former)
    if official != digest:  # pragma: no cover - the composed digest is checked by tests
        former = walk.former
        walk.digest = lambda s: digest_with(s, former)  # never trust the composition again
        if official == rec.digest:
            return None
    return Mismatch(
        step=rec.i,
        line=rec.line,
        what="digest",
        effect_index=None,
        expected=rec.digest,
        actual=official,
        fields=_differing_fields(state, fields, walk.former) or ("unknown",),
    )


Verify: TypeAlias = Literal["every", "checkpoint"]
VERIFY_POLICIES: tuple[str, ...] = ("every", "checkpoint")
DEFAULT_CHECKPOINT_EVERY = 64


class _Pending(typing.NamedTuple):
    """A step whose effects matched and whose state digest is not checked yet (checkpoint
    policy), with what a report at that step would say."""

    rec: StepRecord
    state: LoopState
    steps: int
    effects: int
    messages: int
    resumes: int


@attrs.frozen
class ReplayProgress:
    """How far a replay is, for a progress display.

    ``phase``: ``"reading"`` (a recording being read and replayed) or ``"running"`` (a
    counterfactual run following the recording, which it reads as far as it needs). In both
    ``done`` and ``total`` are bytes of the recording (read so far, and its size), so one bar
    serves both phases. ``steps``: the steps replayed so far in that phase.
    """

    phase: Literal["reading", "running"]
    done: int
    total: int
    steps: int

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total > 0 else 0.0


@collector.paused()  # R-COST-4: a long replay keeps a long history alive
def replay_exact(
    path: str | os.PathLike[str],
    *,
    on_step: Callable[[StepRecord], None] | None = None,
    verify: Verify = "every",
    checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY,
    progress: Callable[[ReplayProgress], None] | None = None,
    progress_every: int = 256,
) -> ReplayReport:
    """Feed the recorded events to ``step()`` from the recorded start; check every effect and
    every state digest. Streams the file: memory does not grow with the trace.

    Args:
        path: the trace.
        on_step: called after each step record is checked (progress display, sampling).
        verify: ``"every"`` (default) checks the state digest after every step.
            ``"checkpoint"`` checks the effects of every step but the state digest only at
            checkpoints: every ``checkpoint_every`` steps, the last step, and before any other
            finding is reported (a differing effect or terminal, an unreadable line, an event
            ``step()`` rejects). When a checkpoint differs, the steps since the last checkpoint
            are checked one by one, so the report is the one ``"every"`` gives. What it does not
            see: a recorded digest that is wrong only between checkpoints (an edited digest, or
            a state that differs for a few steps and then agrees again); ``"every"`` reports it.
            ``on_step`` is then called for each step once its checkpoint passed.
        checkpoint_every: steps between checkpoints (``"checkpoint"`` only); memory grows with
            it (the states since the last checkpoint are kept).
        progress: called every ``progress_every`` step records (and once at the end) with a
            :class:`ReplayProgress` in bytes of the file read so far.

    Returns:
        A report with counts, or the first :class:`Mismatch`.

    Raises:
        TraceError: the file is not a readable trace, or ``step()`` rejects a recorded event.
        ValueError: an unknown ``verify`` or a ``checkpoint_every`` below 1.
    """
    if verify not in VERIFY_POLICIES:
        raise ValueError(f"verify must be one of {', '.join(VERIFY_POLICIES)}, got {verify!r}")
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
    reader = TraceReader(path)
    walk = Walk(reader)
    t0 = time.perf_counter()
    mismatch: Mismatch | None = None
    terminal: Terminal | None = None
    if progress is not None:
        total = os.stat(path).st_size if os.path.isfile(path) else 0

        user_on_step, seen = on_step, [0]

        def shown(rec: StepRecord) -> None:
            if user_on_step is not None:
                user_on_step(rec)
            seen[0] += 1
            if seen[0] % progress_every == 0:
                progress(ReplayProgress("reading", reader.valid_bytes, total, seen[0]))

        on_step = shown
    lazy = verify == "checkpoint"
    pending: list[_Pending] = []
    settled_fields: dict[str, str] = {}  # the recorded field digests before the pending steps
    at: _Pending | None = None  # the pending step a mismatch was found at

    def settle() -> Mismatch | None:
        """Check the pending steps' digests: the last one, and if it differs each in order.
        The pending steps are done with before ``on_step`` hears of them (once each)."""
        nonlocal at
        if not pending:
            return None
        steps = pending[:]
        pending.clear()
        found: Mismatch | None = None
        last = steps[-1]
        if digest_mismatch(walk, last.rec, last.state, walk.fields) is not None:
            fields = dict(settled_fields)
            for n, p in enumerate(steps):
                fields.update(p.rec.fields)
                found = digest_mismatch(walk, p.rec, p.state, fields)
                if found is not None:
                    at, steps = p, steps[:n]
                    break
            else:
                raise AssertionError("the last pending digest differs, but no pending step does")
        settled_fields.update(walk.fields)
        if on_step is not None:
            for p in steps:
                on_step(p.rec)
        return found

    try:
        for rec in walk:
            if isinstance(rec, StepRecord):
                if not lazy:
                    mismatch = check_step(walk, rec)
                    if mismatch is not None:
                        break
                    if on_step is not None:
                        on_step(rec)
                    continue
                assert walk.state is not None
                mismatch = effects_mismatch(walk, rec, walk.state, walk.fields)
                if mismatch is not None:
                    mismatch = settle() or mismatch
                    break
                pending.append(
                    _Pending(
                        rec,
                        walk.state,
                        walk.steps,
                        walk.effect_count,
                        reader.messages,
                        walk.resumes,
                    )
                )
                if len(pending) >= checkpoint_every:
                    mismatch = settle()
                    if mismatch is not None:
                        break
            elif isinstance(rec, EndRecord):
                if lazy:
                    mismatch = settle()
                    if mismatch is not None:
                        break
                fx = walk.effects
                finish = fx[-1] if fx and isinstance(fx[-1], Finish) else None
                if finish is None or finish.terminal != rec.terminal:
                    mismatch = Mismatch(
                        step=rec.i,
                        line=rec.line,
                        what="terminal",
                        effect_index=None,
                        expected=rec.terminal,
                        actual=finish.terminal if finish is not None else None,
                        fields=(),
                    )
                    break
                terminal = rec.terminal
        else:
            if lazy:
                mismatch = settle()
    except Exception:
        # "every" would have stopped at a differing digest before reaching this line
        found = settle() if lazy else None
        if found is None:
            raise
        mismatch = found
    if walk.header is None:  # pragma: no cover - the reader raises first
        raise reader.error(1, "no header record")
    if at is not None:  # found while settling: report what "every" would have reported there
        return ReplayReport(
            path=reader.name,
            ok=False,
            steps=at.steps,
            effects=at.effects,
            messages=at.messages,
            elapsed_s=time.perf_counter() - t0,
            complete=False,
            terminal=None,
            resumes=at.resumes,
            mismatch=mismatch,
        )
    if progress is not None:
        progress(ReplayProgress("reading", reader.valid_bytes, total, walk.steps))
    return ReplayReport(
        path=reader.name,
        ok=mismatch is None,
        steps=walk.steps,
        effects=walk.effect_count,
        messages=reader.messages,
        elapsed_s=time.perf_counter() - t0,
        complete=reader.end is not None,
        terminal=terminal,
        resumes=walk.resumes,
        mismatch=mismatch,
    )
