"""Counterfactual replay: re-run a recorded turn under another config, answering each effect
from the recording when it matches a recorded one, otherwise by policy (stop, scripted, live).

The recording becomes a *recorded world* (:class:`_RecordedWorld`) that the driver loop
(:func:`steploop.reducer.drive.drive_async`) runs like any other world: it matches each request the new
run opens (:func:`steploop.reducer.protocol.opens`) to a recorded one, queues the recorded answers
re-addressed to the new ids (:func:`steploop.reducer.protocol.readdress`) in their recorded order, drops
what a cancel withdraws, and falls back to the policy for the rest.

Requests are matched by their fingerprint (:mod:`steploop.effects.trace.fingerprints`); when
none matches a model call, the divergence names what changed the request: its messages, and
which context layer made the difference (:mod:`steploop.effects.trace.layers`). A request that
can be shown the recorded one of its kind and ordinal by comparing objects (the new run shares
the recorded answers' blocks) is matched without fingerprinting either
(:class:`~steploop.effects.trace.fingerprints.SameRequests`); the fingerprints decide the rest.
"""

from __future__ import annotations

import heapq
import os
import typing
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from steploop.effects import answer
from steploop.effects.boundary import ToolUseIds
from steploop.effects.trace.counterfactual_report import CounterfactualReport, Divergence
from steploop.effects.trace.fingerprints import Fingerprints, SameRequests, describe_request
from steploop.effects.trace.format import EndRecord, ReplayError, StepRecord, describe_effect
from steploop.effects.trace.layers import compare_requests
from steploop.effects.trace.provenance import make_provenance
from steploop.effects.trace.read import TraceReader
from steploop.effects.trace.record import TraceRecorder
from steploop.effects.trace.replay import (
    Mismatch,
    ReplayProgress,
    Walk,
    digest_mismatch,
    effects_mismatch,
)
from steploop.reducer import (
    ConfigError,
    IllegalEvent,
    LoopConfig,
    LoopState,
    SteploopError,
    collector,
    fastpaths,
)
from steploop.reducer.drive import drive_async
from steploop.reducer.effects import (
    CallModel,
    Compact,
    Effect,
    RefreshTools,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.protocol import (
    Key,
    RequestKind,
    answers,
    closes,
    kind_of,
    opens,
    readdress,
    withdraws,
)
from steploop.reducer.transitions import Terminal, Transition

Policy: TypeAlias = Literal["stop", "scripted", "live"]
POLICIES: tuple[str, ...] = ("stop", "scripted", "live")

__all__ = [
    "POLICIES",
    "CounterfactualReport",
    "Divergence",
    "Policy",
    "replay_counterfactual",
    "replay_counterfactual_async",
]


class _Recorded(typing.NamedTuple):
    """A request of the recording (all atomic values: the collector never walks it). Its
    fingerprint is taken when a match needs it (:meth:`_Index.fingerprint`)."""

    kind: str
    ordinal: int
    key: Key
    step: int
    max_tokens: int | None


_CHECK_EVERY = 64  # the index checks state digests at checkpoints (trace-format.md section 7)
_RECENT = 1024  # used recorded effects kept for a divergence report


class _Index:
    """What a recording asked for and how the world answered, read as far as the new run
    needs it.

    The recording is replayed (:class:`Walk`) step by step on demand: a request of the new
    run reads the recording until it holds the recorded request of the same kind and ordinal
    (or the file ends), and a matched request until its answers are complete. What was read and
    used is let go, so a new run that follows the recording keeps only a few steps of it in
    memory, and the work stays linear in the trace (the garbage collector never walks a whole
    recording). A request matched out of order, a request nothing matches, or the report's
    totals read on to the end; the matching is the one a complete index gives (trace-format.md
    section 7).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        fingerprints: Fingerprints,
        progress: Callable[[ReplayProgress], None] | None = None,
        every: int = 256,
    ) -> None:
        self.reader = reader = TraceReader(path)
        self._walk = Walk(reader)
        self._records = iter(self._walk)
        self._fingerprints = fingerprints
        self._progress = progress
        self._every = every
        self._total = _size(path) if progress is not None else 0
        self._pending: list[tuple[StepRecord, LoopState]] = []  # digests not checked yet
        self.by_kind: dict[str, list[_Recorded]] = {}
        # by fingerprint, filled when a match out of order needs it (:meth:`with_fingerprint`)
        self.by_fp: dict[tuple[str, bytes], deque[_Recorded]] = {}
        # read, not used, not in by_fp yet, in recorded order (what is used is let go)
        self._unindexed: dict[Key, _Recorded] = {}
        self._fps: dict[Key, bytes] = {}  # fingerprints taken, of requests not used yet
        self.answers: dict[Key, list[tuple[int, Event]]] = {}
        self.closed: set[Key] = set()  # recorded requests whose last answer was read
        self.effects: dict[Key, Effect] = {}  # recorded requests not used yet
        self.used_effects: OrderedDict[Key, Effect] = OrderedDict()  # the recent used ones
        self.world: dict[int, list[tuple[int, Event]]] = {}
        self.traits: dict[str, ToolTraits] = {}
        self.transitions: list[str] = []
        self.terminal: Terminal | None = None
        self.first_mismatch: Mismatch | None = None
        self.steps = 0  # step records read
        self.eof = False
        while self._walk.header is None and self.advance():
            pass
        header = self._walk.header
        if header is None:  # pragma: no cover - the reader raises first
            raise reader.error(1, "no header record")
        self.header = header

    # -- reading on demand ------------------------------------------------------------------

    def advance(self) -> bool:
        """Read and replay the next record; False at the end of the recording."""
        if self.eof:
            return False
        walk = self._walk
        for rec in self._records:
            if isinstance(rec, EndRecord):
                self.terminal = rec.terminal
            if not isinstance(rec, StepRecord):
                if walk.header is not None and rec is walk.header:
                    return True
                continue
            self._index(walk, rec)
            return True
        self.eof = True
        if self.first_mismatch is None:
            self.first_mismatch = _settle(walk, self._pending)
        self._show()
        return False

    def _index(self, walk: Walk, rec: StepRecord) -> None:
        self.steps += 1
        if self._progress is not None and self.steps % self._every == 0:
            self._show()
        if self.first_mismatch is None:
            self.first_mismatch = self._check(walk, rec, self._pending)
        if walk.transitions:
            self.transitions.extend([t.TAG for t in walk.transitions])
        event = rec.event
        if event is not None:
            key = answers(event)
            if key is None:
                self.world.setdefault(rec.i - 1, []).append((rec.i, event))
            else:
                self.answers.setdefault(key, []).append((rec.i, event))
                if closes(event):
                    self.closed.add(key)
            if isinstance(event, ModelBlockReceived) and event.tool is not None:
                name = getattr(event.block, "name", None)
                if isinstance(name, str):
                    self.traits.setdefault(name, event.tool)
        for e in walk.effects:  # the effects step() computes, with real conversations
            key = opens(e)
            if key is None:
                continue
            kind = key[0]
            lst = self.by_kind.setdefault(kind, [])
            r = _Recorded(
                kind, len(lst) + 1, key, rec.i, e.max_tokens if isinstance(e, CallModel) else None
            )
            lst.append(r)
            self._unindexed[key] = r
            self.effects[key] = e

    def _show(self) -> None:
        if self._progress is not None:
            done = self.reader.valid_bytes
            self._progress(ReplayProgress("reading", done, self._total, self.steps))

    def finish(self) -> None:
        """Read the rest of the recording (its totals, its first mismatch)."""
        while self.advance():
            pass

    def ordinal(self, kind: str, ordinal: int) -> _Recorded | None:
        """The recording's request of ``kind`` with this ordinal (None: it has fewer)."""
        recs = self.by_kind.get(kind)
        while (recs is None or len(recs) < ordinal) and self.advance():
            recs = self.by_kind.get(kind)
        return recs[ordinal - 1] if recs is not None and len(recs) >= ordinal else None

    def answered(self, key: Key) -> list[tuple[int, Event]]:
        """The recorded answers of a recorded request (read until its last one, or the end)."""
        while key not in self.closed and self.advance():
            pass
        return self.answers.get(key, [])

    def follows(self, idx: int) -> Sequence[tuple[int, Event]]:
        """The events the world sent unasked right after recorded step ``idx``."""
        while self.steps <= idx + 1 and self.advance():
            pass
        return self.world.pop(idx, ())

    def fingerprint(self, r: _Recorded) -> bytes:
        """The fingerprint of recorded request ``r``, not used yet."""
        fp = self._fps.get(r.key)
        if fp is None:
            fp = self._fps[r.key] = self._fingerprints(self.effects[r.key])
        return fp

    def with_fingerprint(self, kind: str, fp: bytes) -> Sequence[_Recorded]:
        """The recorded requests read so far of ``kind`` with fingerprint ``fp``, earliest
        first, the used ones among them or not (the used ones' fingerprints are never taken:
        no match can take them again)."""
        todo, by_fp = self._unindexed, self.by_fp
        for r in todo.values():
            by_fp.setdefault((r.kind, self.fingerprint(r)), deque()).append(r)
        todo.clear()
        return by_fp.get((kind, fp), ())

    def use(self, r: _Recorded) -> list[tuple[int, Event]]:
        """Take a recorded request's answers; its memory is let go (the effect is kept among
        the most recently used, for a divergence report)."""
        got = self.answered(r.key)
        self.answers.pop(r.key, None)
        self.closed.discard(r.key)
        self._fps.pop(r.key, None)
        self._unindexed.pop(r.key, None)
        e = self.effects.pop(r.key, None)
        if e is not None:
            used = self.used_effects
            used[r.key] = e
            if len(used) > _RECENT:
                used.popitem(last=False)
        return got

    def brief(self, r: _Recorded) -> str:
        e = self.effects.get(r.key) or self.used_effects.get(r.key)
        return describe_request(e) if e is not None else f"{r.kind} (recorded at step {r.step})"

    def effect(self, r: _Recorded) -> Effect | None:
        """The recorded request itself, with its real conversation (None once let go)."""
        return self.effects.get(r.key) or self.used_effects.get(r.key)

    @staticmethod
    def _check(
        walk: Walk, rec: StepRecord, pending: list[tuple[StepRecord, LoopState]]
    ) -> Mismatch | None:
        """The first step where the recording does not replay exactly: effects checked at
        every step, state digests at checkpoints (the steps since the last one are kept, and
        checked one by one when a checkpoint differs), as ``replay_exact(verify="checkpoint")``
        does."""
        state = walk.state
        assert state is not None
        found = effects_mismatch(walk, rec, state, walk.fields)
        if found is not None:
            return _settle(walk, pending) or found
        pending.append((rec, state))
        if len(pending) >= _CHECK_EVERY:
            return _settle(walk, pending)
        return None

    def traits_for(self, name: str, _input: dict[str, Any]) -> ToolTraits:
        if name not in self.traits:
            self.finish()
        return self.traits.get(name, ToolTraits())

    def compatible(self, new: Effect, rec: _Recorded) -> bool:
        """max_tokens only matters when the recorded answer was (or would now be) cut off."""
        if not isinstance(new, CallModel) or rec.max_tokens == new.max_tokens:
            return True
        for _, ev in self.answered(rec.key):
            if isinstance(ev, ModelResponseEnded):
                return ev.stop_reason != "max_tokens" and ev.usage.output_tokens <= new.max_tokens
        return True  # a failed or unanswered call does not depend on max_tokens


def _settle(walk: Walk, pending: list[tuple[StepRecord, LoopState]]) -> Mismatch | None:
    """Check the pending digests: the last one, and if it differs each in order."""
    steps = pending[:]
    pending.clear()
    if not steps or digest_mismatch(walk, *steps[-1], walk.fields) is None:
        return None
    for rec, state in steps:
        found = digest_mismatch(walk, rec, state, walk.fields)
        if found is not None:
            return found
    return None  # pragma: no cover - the last one differs


def _readdressed(event: Event, effect: Effect, kind: RequestKind) -> Event:
    """:func:`readdress`, or the recorded event itself when it already carries the ids of the
    request it answers (the new run opened it under the recorded ids): an equal event."""
    if event.__class__ in kind.answered_by and fastpaths.on("same_address"):  # fast path
        for name in kind.readdress:
            mine, theirs = getattr(event, name), getattr(effect, name)
            if mine.__class__ is not theirs.__class__ or mine != theirs:
                break
        else:
            return event
    return readdress(event, effect)


def _size(path: str | os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def _policy_model(policy: str, script: Any, model: Any, index: _Index) -> Any:
    if policy == "stop":
        return None
    if policy == "scripted":
        from steploop.effects.scripted import ScriptedModel

        if script is None:
            raise ReplayError("policy 'scripted' needs a script (a list of responses)")
        if isinstance(script, ScriptedModel):
            return script
        if isinstance(script, list) and all(isinstance(x, dict) for x in script):
            return ScriptedModel.from_json(script, traits_for=index.traits_for)
        return ScriptedModel(script, traits_for=index.traits_for)
    if policy == "live":
        if model is None:
            raise ReplayError(
                "policy 'live' needs a model client (steploop replay makes one from "
                "ANTHROPIC_API_KEY)"
            )
        return model
    raise ReplayError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")


class _Diverged(Exception):
    """The new run asked for what neither the recording nor the policy answers."""

    def __init__(self, divergence: Divergence) -> None:
        self.divergence = divergence


class _RecordedWorld:
    """The recording as a world for the new run (an :class:`steploop.reducer.drive.AsyncWorld`).

    ``perform`` matches each request the new run opens to a recorded one (same kind, same
    per-kind ordinal and fingerprint; else the earliest unused one with the fingerprint) and
    queues its recorded answers, re-addressed, at their recorded places; events the world sent
    unasked follow the event they followed. A cancel drops the undelivered answers of what it
    withdraws. What nothing recorded answers goes to the policy: a wait elapses and a summary is
    none at once, a model call or a compaction is owed to the policy's model (awaited in
    ``next_event``), anything else diverges.
    """

    def __init__(
        self,
        index: _Index,
        fingerprints: Fingerprints,
        policy: str,
        policy_model: Any,
        max_steps: int,
        progress: Callable[[ReplayProgress], None] | None,
        every: int,
    ) -> None:
        self.index = index
        self.fingerprints = fingerprints
        self.same = SameRequests()
        self.policy = policy
        self.policy_model = policy_model
        self.max_steps = max_steps
        self.progress = progress
        self.every = every
        self.state: LoopState | None = None
        self.steps = 0
        self.transitions: list[str] = []
        self.matched: Counter[str] = Counter()
        self.by_policy: Counter[str] = Counter()
        self.ordinals: Counter[str] = Counter()
        self.used: set[Key] = set()
        self.out_of_order = 0
        self.heap: list[tuple[float, int, Event, Key | None, int | None]] = []
        self.cancelled: set[Key] = set()
        self.owed: list[tuple[Effect, Key]] = []
        self.exclusive: dict[str, Key] = {}
        self.seq = 0
        self.clock = 0.0  # the recorded index of the last delivered event
        self.last: tuple[Event, int | None] | None = None
        self.tool_ids = ToolUseIds()  # of the new run's conversations, for the policy's model
        for idx, ev in index.follows(0):
            self.push(idx, ev, None, idx)

    def push(self, order: float, event: Event, key: Key | None, rec_idx: int | None) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (order, self.seq, event, key, rec_idx))

    # -- the loop's observer ----------------------------------------------------------------

    def observe(
        self,
        event: Event | None,
        state: LoopState,
        effects: tuple[Effect, ...],
        transitions: tuple[Transition, ...],
    ) -> None:
        self.state = state
        self.steps += 1
        collector.sweep()
        if transitions:
            self.transitions.extend(t.TAG for t in transitions)
        if self.progress is not None and self.steps % self.every == 0:
            done = self.index.reader.valid_bytes
            self.progress(ReplayProgress("running", done, self.index._total, self.steps))

    # -- the world --------------------------------------------------------------------------

    def diverge(self, e: Effect, kind: str, ordinal: int, reason: str) -> _Diverged:
        self.index.finish()  # the report's totals, and what the recording had there
        recorded = self.index.ordinal(kind, ordinal)
        had = self.index.brief(recorded) if recorded is not None else None
        before = self.index.effect(recorded) if recorded is not None else None
        change = None
        if isinstance(e, CallModel) and isinstance(before, CallModel):
            change = compare_requests(before, e, self.fingerprints)
        return _Diverged(
            Divergence(
                step=self.steps - 1,
                kind=kind,
                ordinal=ordinal,
                effect=describe_request(e),
                recorded=had,
                reason=reason,
                recorded_step=recorded.step if recorded is not None else None,
                change=change.describe() if change is not None else None,
                layers=change.layers if change is not None else (),
            )
        )

    def match(self, e: Effect, kind: str, ordinal: int) -> _Recorded | None:
        index = self.index
        r = index.ordinal(kind, ordinal)
        fp: bytes | None = None
        if r is not None and r.key not in self.used:
            if fastpaths.on("same_request") and self.same.request(e, index.effects[r.key]):
                same = True
            else:
                fp = self.fingerprints(e)
                same = index.fingerprint(r) == fp
            if same and index.compatible(e, r):
                return r
        if fp is None:
            fp = self.fingerprints(e)
        for whole in (False, True):  # what was read (the earliest), then the whole recording
            if whole:
                if index.eof:
                    break
                index.finish()
            for r in index.with_fingerprint(kind, fp):
                if r.key not in self.used and index.compatible(e, r):
                    self.out_of_order += 1
                    return r
        return None

    def perform(self, effect: Effect, state: LoopState) -> None:
        gone = withdraws(effect)
        if gone:
            self.cancelled.update(gone)
        key = opens(effect)
        if key is None:
            return
        kind = key[0]
        if kind_of(key).exclusive:  # the new one supersedes the outstanding one
            before = self.exclusive.get(kind)
            if before is not None:
                self.cancelled.add(before)
            self.exclusive[kind] = key
        self.ordinals[kind] += 1
        ordinal = self.ordinals[kind]
        r = self.match(effect, kind, ordinal)
        if r is not None:
            self.used.add(r.key)
            self.matched[kind] += 1
            kind_row = kind_of(key)
            for idx, ev in self.index.use(r):
                self.push(idx, _readdressed(ev, effect, kind_row), key, idx)
            return
        if isinstance(effect, RefreshTools):  # the world's list, never a divergence [R-REFRESH-1]
            self.answered(kind, key, [answer.tools_refreshed(effect)])
            return
        if self.policy_model is None:
            raise self.diverge(effect, kind, ordinal, "no recorded effect matches it")
        if isinstance(effect, Wait):
            self.answered(kind, key, [WaitElapsed(wait_id=effect.wait_id)])
        elif isinstance(effect, SummarizeToolUse):  # no summarizer: no summary
            self.answered(kind, key, [answer.unhandled(effect)])
        elif isinstance(effect, (CallModel, Compact)):
            self.owed.append((effect, key))
        else:
            raise self.diverge(
                effect,
                kind,
                ordinal,
                f"no recorded effect matches it, and policy {self.policy!r} answers model calls, "
                "compactions, waits and summaries only",
            )

    def answered(self, kind: str, key: Key, events: Sequence[Event]) -> None:
        self.by_policy[kind] += 1
        for ev in events:
            self.push(self.clock + 0.5, ev, key, None)

    async def settle(self) -> None:
        """Ask the policy's model for what is owed, in order."""
        owed, self.owed = self.owed, []
        for effect, key in owed:
            if key in self.cancelled:
                continue
            try:
                events = await self.ask(effect)
            except SteploopError as err:
                ordinal = self.ordinals[key[0]]
                raise self.diverge(
                    effect, key[0], ordinal, f"the {self.policy} model failed: {err}"
                ) from None
            self.answered(key[0], key, events)

    async def ask(self, e: Effect) -> list[Event]:
        """The policy's model's answer, through the answering layer as in every world
        (steploop/effects/answer.py): a malformed response ends the call as a model error,
        text is cleaned, a compaction's result is checked, a client that raises is a model
        error. A ``SteploopError`` (a script run dry) propagates: the replay diverges there."""
        if isinstance(e, CallModel):
            return await answer.response(
                e, self.policy_model, self.tool_ids, passing=(SteploopError,)
            )
        assert isinstance(e, Compact)
        from steploop.effects.compaction import ModelCompactor

        try:
            result = await ModelCompactor(self.policy_model).compact(e)
        except SteploopError:
            raise
        except Exception as exc:  # counted by the breaker, never a crash
            return [answer.raised(e, exc)]
        return [answer.compaction(e, result)]

    async def next_event(self, state: LoopState) -> Event | None:
        if self.owed:
            await self.settle()
        heap, cancelled = self.heap, self.cancelled
        while heap and heap[0][3] is not None and heap[0][3] in cancelled:
            heapq.heappop(heap)
        if not heap:
            return None
        if self.steps >= self.max_steps:
            raise ReplayError(f"the counterfactual run passed {self.max_steps} steps; stopped")
        order, _, event, _, rec_idx = heapq.heappop(heap)
        self.clock = max(self.clock, order)
        self.last = (event, rec_idx)
        if rec_idx is not None:
            for idx, ev in self.index.follows(rec_idx):
                self.push(idx, ev, None, idx)
        return event

    # -- the report -------------------------------------------------------------------------

    def report(
        self,
        status: Literal["finished", "diverged", "stalled"],
        divergence: Divergence | None = None,
        terminal: Terminal | None = None,
    ) -> CounterfactualReport:
        index, state = self.index, self.state
        assert state is not None
        index.finish()
        return CounterfactualReport(
            path=index.reader.name,
            status=status,
            terminal=terminal,
            steps=self.steps,
            transitions=tuple(self.transitions),
            matched=dict(self.matched),
            out_of_order=self.out_of_order,
            by_policy=dict(self.by_policy),
            divergence=divergence,
            stalled_phase=state.phase if status == "stalled" else None,
            recorded_terminal=index.terminal,
            recorded_steps=index.steps,
            recorded_transitions=tuple(index.transitions),
            recording_mismatch=index.first_mismatch,
            state=state,
        )

    def rejected(self, err: IllegalEvent) -> CounterfactualReport:
        assert self.last is not None
        event, rec_idx = self.last
        return self.report(
            "diverged",
            Divergence(
                step=self.steps,
                kind=type(event).__name__,
                ordinal=0,
                effect=describe_effect(event, 160),
                recorded=f"step {rec_idx}" if rec_idx is not None else None,
                reason=f"the new run rejects this answer: {err}",
            ),
        )


async def replay_counterfactual_async(
    path: str | os.PathLike[str],
    overrides: Mapping[str, Any] | None = None,
    policy: Policy = "stop",
    script: Any = None,
    *,
    base: LoopConfig | None = None,
    model: Any = None,
    max_steps: int = 1_000_000,
    progress: Callable[[ReplayProgress], None] | None = None,
    progress_every: int = 256,
    record: str | os.PathLike[str] | None = None,
) -> CounterfactualReport:
    """The async form of :func:`replay_counterfactual` (a live or scripted model is awaited)."""
    fingerprints = Fingerprints()
    index = _Index(path, fingerprints, progress, progress_every)
    header = index.header
    try:
        cfg = (base or header.config).with_overrides(dict(overrides or {}))
    except ConfigError:
        raise
    policy_model = _policy_model(policy, script, model, index)
    world = _RecordedWorld(
        index, fingerprints, policy, policy_model, max_steps, progress, progress_every
    )
    observer = world.observe
    recorder: TraceRecorder | None = None
    if record is not None:  # the new run, as a trace of its own (cut off where it diverges)
        prov = make_provenance(model=policy_model, counterfactual_of=index.reader.name)
        recorder = TraceRecorder(
            record, config=cfg, session=header.session, request=header.request, provenance=prov
        )
        rec = recorder

        def observer(
            event: Event | None,
            state: LoopState,
            effects: tuple[Effect, ...],
            transitions: tuple[Transition, ...],
        ) -> None:
            world.observe(event, state, effects, transitions)
            rec.observe(event, state, effects, transitions)

    try:
        out = await drive_async(world, header.request, cfg, header.session, observer=observer)
    except _Diverged as d:
        return world.report("diverged", d.divergence)
    except IllegalEvent as err:
        return world.rejected(err)
    finally:
        if recorder is not None:
            recorder.close()
    if out.status == "finished":
        return world.report("finished", terminal=out.terminal)
    return world.report("stalled")


@collector.paused()  # R-COST-4: two histories alive, the recording's and the new run's
def replay_counterfactual(
    path: str | os.PathLike[str],
    overrides: Mapping[str, Any] | None = None,
    policy: Policy = "stop",
    script: Any = None,
    *,
    base: LoopConfig | None = None,
    model: Any = None,
    max_steps: int = 1_000_000,
    progress: Callable[[ReplayProgress], None] | None = None,
    progress_every: int = 256,
    record: str | os.PathLike[str] | None = None,
) -> CounterfactualReport:
    """Re-run the recorded turn under another config, answering from the recording.

    Each effect the new run waits on is matched to a recorded one by (kind, per-kind ordinal,
    :func:`fingerprint`), falling back to the earliest unused recorded effect with the same
    kind and fingerprint; the recorded answers are fed back re-addressed to the new ids, in
    recorded order. Interrupts and queued commands are fed after the event they followed.

    Args:
        path: the recorded trace.
        overrides: dotted config keys (``{"stop_hook_block_cap": 8}``).
        policy: what to do with an effect nothing recorded answers: ``"stop"`` reports the
            divergence; ``"scripted"`` answers model calls (and compactions, through the model)
            from ``script``; ``"live"`` from ``model``. Waits and summaries are answered at
            once under both; tools, permissions and stop hooks stop the replay.
        script: for "scripted": a ScriptedModel, a list of entries or their JSON form.
        base: the config to override instead of the recorded one (another profile).
        model: for "live": a model client.
        max_steps: stop (``ReplayError``) past this many steps of the new run.
        progress: called every ``progress_every`` steps with a :class:`ReplayProgress`: while
            the recording is read (bytes of the file) and while the new run runs (its steps
            against the recording's).
        record: write the new run as a trace here (its provenance names the recording; it
            ends where the new run diverged), for ``steploop replay --html`` to compare.

    Returns:
        A :class:`CounterfactualReport` (finished, diverged or stalled).

    Raises:
        TraceError: the recording is unreadable or does not replay. ConfigError: a bad override.
        ReplayError: the policy lacks its script or model.
    """
    import anyio

    async def main() -> CounterfactualReport:
        return await replay_counterfactual_async(
            path,
            overrides,
            policy,
            script,
            base=base,
            model=model,
            max_steps=max_steps,
            progress=progress,
            progress_every=progress_every,
            record=record,
        )

    return anyio.run(main)
