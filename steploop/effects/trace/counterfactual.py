"""Counterfactual replay: re-run a recorded turn under another config, answering each effect
from the recording when it matches a recorded one, otherwise by policy (stop, scripted, live).

The recording becomes a *recorded world* (:class:`_RecordedWorld`) that the driver loop
(:func:`steploop.reducer.drive.drive_async`) runs like any other world: it matches each request the new
run opens (:func:`steploop.reducer.protocol.opens`) to a recorded one, queues the recorded answers
re-addressed to the new ids (:func:`steploop.reducer.protocol.readdress`) in their recorded order, drops
what a cancel withdraws, and falls back to the policy for the rest.

Linear in the trace: the fingerprint of a model call's conversation is chained per
conversation node (:class:`Fingerprints`), so each message is encoded once, never the whole
history per call.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import typing
from collections import Counter, OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from steploop.effects import answer
from steploop.effects.boundary import ToolUseIds
from steploop.effects.trace.format import EndRecord, ReplayError, StepRecord, describe_effect
from steploop.effects.trace.read import TraceReader
from steploop.effects.trace.replay import (
    Mismatch,
    ReplayProgress,
    _digest_mismatch,
    _effects_mismatch,
    _Walk,
)
from steploop.reducer import ConfigError, IllegalEvent, LoopConfig, LoopState, SteploopError
from steploop.reducer.canonical import canonical_bytes
from steploop.reducer.conversation import Conversation
from steploop.reducer.drive import drive_async
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    RefreshTools,
    RunStopHooks,
    StartTool,
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
from steploop.reducer.messages import Message
from steploop.reducer.protocol import Key, answers, closes, kind_of, opens, readdress, withdraws
from steploop.reducer.transitions import Terminal, Transition

Policy: TypeAlias = Literal["stop", "scripted", "live"]
POLICIES: tuple[str, ...] = ("stop", "scripted", "live")

_EMPTY_FP = b"\x00" * 16


_CONTENT: dict[type, tuple[bytes, tuple[str, ...]]] = {}


def _content(m: Message) -> bytes:
    """A message's content: its kind and every field but ``id`` and ``response_id``, each as
    its canonical text (NUL-separated; a canonical text holds no NUL). Blocks are shared
    between the answers the recording holds and the messages the new run builds from them, and
    their canonical texts are memoised (steploop/reducer/canonical.py), so this costs little."""
    cls = m.__class__
    layout = _CONTENT.get(cls)
    if layout is None:
        names = tuple(
            sorted(f.name for f in attrs.fields(cls) if f.name not in ("id", "response_id"))
        )
        layout = _CONTENT[cls] = (str(getattr(cls, "TAG", cls.__name__)).encode(), names)
    tag, names = layout
    return b"\x00".join([tag, *[canonical_bytes(getattr(m, n)) for n in names]])


class Fingerprints:
    """:func:`fingerprint` at the cost of what is new.

    A model call's fingerprint covers its conversation's messages without their ids. The
    fingerprint of a conversation is chained: that of its previous node and the content digest
    of its last message. The fingerprints of the most recent nodes are remembered (each call's
    conversation extends an earlier call's, so the walk back stops at a remembered node after
    the messages added since), and so are the content digests of recent messages (a rebuilt
    conversation shares them). Both memos are bounded, and hold a reference to what they
    remember, so no identity is recycled while remembered.
    """

    NODES = 512
    MESSAGES = 4096

    def __init__(self) -> None:
        # oldest first; OrderedDict evicts in O(1) (a dict's first key is found by a scan
        # over the slots its deletions left at the front)
        self._nodes: OrderedDict[int, tuple[Conversation, bytes]] = OrderedDict()
        self._messages: OrderedDict[int, tuple[Message, bytes]] = OrderedDict()
        self._calls: dict[tuple[str, bool], bytes] = {}

    def _call_text(self, model: str, streaming: bool) -> bytes:
        got = self._calls.get((model, streaming))
        if got is None:
            got = self._calls[(model, streaming)] = canonical_bytes(
                ["call_model", model, streaming]
            )
        return got

    def message(self, m: Message) -> bytes:
        memo = self._messages
        got = memo.get(id(m))
        if got is not None and got[0] is m:
            return got[1]
        d = hashlib.blake2b(_content(m), digest_size=16).digest()
        if len(memo) >= self.MESSAGES:
            memo.popitem(last=False)
        memo[id(m)] = (m, d)
        return d

    def conversation(self, conv: Conversation) -> bytes:
        nodes = self._nodes
        todo: list[Conversation] = []
        node: Conversation | None = conv
        fp = _EMPTY_FP
        while node is not None and node.last is not None:
            got = nodes.get(id(node))
            if got is not None and got[0] is node:
                fp = got[1]
                break
            todo.append(node)
            node = node.prev
        else:
            if node is not None and node.length:
                raise ValueError("a hollow conversation (read from a trace) has no messages")
        for n in reversed(todo):
            assert n.last is not None
            fp = hashlib.blake2b(fp + self.message(n.last), digest_size=16).digest()
        if todo:
            if len(nodes) >= self.NODES:
                nodes.popitem(last=False)
            nodes[id(conv)] = (conv, fp)
        return fp

    def __call__(self, effect: Effect) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        match effect:
            case CallModel():
                h.update(self._call_text(effect.model, effect.streaming))
                h.update(self.conversation(effect.conversation))
            case StartTool() | AskPermission():
                h.update(canonical_bytes([effect.TAG, effect.name, effect.input]))
            case Compact():
                h.update(canonical_bytes(["compact", effect.trigger]))
            case RunStopHooks():
                h.update(canonical_bytes(["run_stop_hooks", effect.stop_hook_active]))
            case Wait():
                h.update(canonical_bytes(["wait", effect.ms]))
            case SummarizeToolUse():
                h.update(canonical_bytes(["summarize_tool_use", list(effect.tool_use_ids)]))
            case RefreshTools():
                h.update(canonical_bytes(["refresh_tools"]))
            case _:
                raise ValueError(f"{type(effect).__name__} makes no request")
        return h.digest()


def fingerprint(effect: Effect) -> bytes:
    """The request an effect makes, without ids (specs/trace-format.md, "Counterfactual").
    For many effects of one run, call one :class:`Fingerprints` (it remembers)."""
    return Fingerprints()(effect)


def describe_request(effect: Effect) -> str:
    """A short human description of an effect that waits for the world."""
    match effect:
        case CallModel():
            mode = "streaming" if effect.streaming else "non-streaming"
            return (
                f"call_model ({effect.model}, max_tokens {effect.max_tokens}, {mode}, "
                f"{effect.conversation.length} messages)"
            )
        case StartTool() | AskPermission():
            args = json.dumps(effect.input, ensure_ascii=False)
            args = args if len(args) <= 80 else args[:79] + "…"
            return f"{effect.TAG} {effect.name} {args}"
        case Compact():
            return f"compact ({effect.trigger}, {effect.pre_tokens} tokens)"
        case RunStopHooks():
            return f"run_stop_hooks (stop_hook_active={str(effect.stop_hook_active).lower()})"
        case Wait():
            return f"wait {effect.ms} ms"
        case SummarizeToolUse():
            return f"summarize_tool_use {list(effect.tool_use_ids)}"
        case RefreshTools():
            return "refresh_tools"
    return type(effect).__name__


class _Recorded(typing.NamedTuple):
    """A request of the recording (all atomic values: the collector never walks it)."""

    kind: str
    ordinal: int
    key: Key
    fingerprint: bytes
    step: int
    max_tokens: int | None


_CHECK_EVERY = 64  # the index checks state digests at checkpoints (trace-format.md section 7)
_RECENT = 1024  # used recorded effects kept for a divergence report


class _Index:
    """What a recording asked for and how the world answered, read as far as the new run
    needs it.

    The recording is replayed (:class:`_Walk`) step by step on demand: a request of the new
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
        self._walk = _Walk(reader)
        self._records = iter(self._walk)
        self._fingerprints = fingerprints
        self._progress = progress
        self._every = every
        self._total = _size(path) if progress is not None else 0
        self._pending: list[tuple[StepRecord, LoopState]] = []  # digests not checked yet
        self.by_kind: dict[str, list[_Recorded]] = {}
        self.by_fp: dict[tuple[str, bytes], deque[_Recorded]] = {}
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

    def _index(self, walk: _Walk, rec: StepRecord) -> None:
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
                kind,
                len(lst) + 1,
                key,
                self._fingerprints(e),
                rec.i,
                e.max_tokens if isinstance(e, CallModel) else None,
            )
            lst.append(r)
            self.by_fp.setdefault((kind, r.fingerprint), deque()).append(r)
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

    def use(self, r: _Recorded) -> list[tuple[int, Event]]:
        """Take a recorded request's answers; its memory is let go (the effect is kept among
        the most recently used, for a divergence report)."""
        got = self.answered(r.key)
        self.answers.pop(r.key, None)
        self.closed.discard(r.key)
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

    @staticmethod
    def _check(
        walk: _Walk, rec: StepRecord, pending: list[tuple[StepRecord, LoopState]]
    ) -> Mismatch | None:
        """The first step where the recording does not replay exactly: effects checked at
        every step, state digests at checkpoints (the steps since the last one are kept, and
        checked one by one when a checkpoint differs), as ``replay_exact(verify="checkpoint")``
        does."""
        state = walk.state
        assert state is not None
        found = _effects_mismatch(walk, rec, state, walk.fields)
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


def _settle(walk: _Walk, pending: list[tuple[StepRecord, LoopState]]) -> Mismatch | None:
    """Check the pending digests: the last one, and if it differs each in order."""
    steps = pending[:]
    pending.clear()
    if not steps or _digest_mismatch(walk, *steps[-1], walk.fields) is None:
        return None
    for rec, state in steps:
        found = _digest_mismatch(walk, rec, state, walk.fields)
        if found is not None:
            return found
    return None  # pragma: no cover - the last one differs


def _size(path: str | os.PathLike[str]) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


@attrs.frozen(kw_only=True)
class Divergence:
    """The first effect of the new run that the recording could not answer."""

    step: int  # the new run's step that asked for it
    kind: str  # the effect's tag: call_model, compact, start_tool, ...
    ordinal: int  # 1-based, among the new run's effects of this kind
    effect: str  # what the new run asked for
    recorded: str | None  # what the recording had at that ordinal (None: nothing)
    reason: str

    def describe(self) -> str:
        had = self.recorded if self.recorded is not None else "none"
        return (
            f"diverged at step {self.step}: the new run asks for {self.kind} #{self.ordinal}: "
            f"{self.effect}; recorded at that ordinal: {had} ({self.reason})"
        )


@attrs.frozen(kw_only=True)
class CounterfactualReport:
    path: str
    status: Literal["finished", "diverged", "stalled"]
    terminal: Terminal | None
    steps: int
    transitions: tuple[str, ...]
    matched: dict[str, int] = attrs.field(eq=False)
    out_of_order: int
    by_policy: dict[str, int] = attrs.field(eq=False)
    divergence: Divergence | None
    stalled_phase: str | None
    recorded_terminal: Terminal | None
    recorded_steps: int
    recorded_transitions: tuple[str, ...]
    recording_mismatch: Mismatch | None
    state: LoopState = attrs.field(eq=False, repr=False)

    @property
    def ok(self) -> bool:
        return self.status == "finished"

    def describe(self) -> str:
        lines = []
        if self.status == "finished":
            assert self.terminal is not None
            lines.append(f"new run: {self.steps} steps, terminal {self.terminal.TAG}")
        elif self.status == "diverged":
            assert self.divergence is not None
            lines.append(self.divergence.describe())
        else:
            lines.append(
                f"stalled after step {self.steps - 1}: the new run waits in phase "
                f"{self.stalled_phase!r} and the recording holds no answer for it"
            )
        lines.append(f"transitions: {_runs(self.transitions)}")
        matched = ", ".join(f"{k} {v}" for k, v in sorted(self.matched.items())) or "nothing"
        lines.append(f"answered from the recording: {matched}")
        if self.out_of_order:
            lines.append(f"  ({self.out_of_order} matched at another ordinal by fingerprint)")
        if self.by_policy:
            lines.append(
                "answered by the policy: "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.by_policy.items()))
            )
        rec_end = self.recorded_terminal.TAG if self.recorded_terminal else "no end record"
        lines.append(
            f"recording: {self.recorded_steps} steps, {rec_end}; "
            f"transitions: {_runs(self.recorded_transitions)}"
        )
        if self.recording_mismatch is not None:
            lines.append(
                f"note: the recording does not replay exactly from step "
                f"{self.recording_mismatch.step}; answers were matched to what this steploop asks"
            )
        return "\n".join(lines)


def _runs(tags: Sequence[str]) -> str:
    """next_turn ×3, completed"""
    out: list[str] = []
    for tag in tags:
        if out and out[-1].split(" ×")[0] == tag:
            n = int(out[-1].split(" ×")[1]) if " ×" in out[-1] else 1
            out[-1] = f"{tag} ×{n + 1}"
        else:
            out.append(tag)
    return ", ".join(out) or "none"


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
        return _Diverged(
            Divergence(
                step=self.steps - 1,
                kind=kind,
                ordinal=ordinal,
                effect=describe_request(e),
                recorded=had,
                reason=reason,
            )
        )

    def match(self, e: Effect, kind: str, ordinal: int) -> _Recorded | None:
        fp = self.fingerprints(e)
        index = self.index
        r = index.ordinal(kind, ordinal)
        if r is not None and r.key not in self.used and r.fingerprint == fp:
            if index.compatible(e, r):
                return r
        for whole in (False, True):  # what was read (the earliest), then the whole recording
            if whole:
                if index.eof:
                    break
                index.finish()
            for r in index.by_fp.get((kind, fp), ()):
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
            for idx, ev in self.index.use(r):
                self.push(idx, readdress(ev, effect), key, idx)
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
    try:
        out = await drive_async(world, header.request, cfg, header.session, observer=world.observe)
    except _Diverged as d:
        return world.report("diverged", d.divergence)
    except IllegalEvent as err:
        return world.rejected(err)
    if out.status == "finished":
        return world.report("finished", terminal=out.terminal)
    return world.report("stalled")


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
        )

    return anyio.run(main)
