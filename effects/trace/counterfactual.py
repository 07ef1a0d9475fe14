"""Counterfactual replay: re-run a recorded turn under another config, answering each effect
from the recording when it matches a recorded one, otherwise by policy (stop, scripted, live).
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import typing
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs

from effects.trace.format import EndRecord, ReplayError, StepRecord, describe_effect
from effects.trace.read import TraceReader
from effects.trace.replay import Mismatch, _check_step, _Walk
from reducer import ConfigError, IllegalEvent, LoopConfig, LoopState, SteploopError, start, step
from reducer.canonical import canonical_bytes, to_data
from reducer.effects import (
    AskPermission,
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Effect,
    Finish,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from reducer.messages import Message
from reducer.transitions import Terminal

Key: TypeAlias = tuple[Any, ...]
Policy: TypeAlias = Literal["stop", "scripted", "live"]
POLICIES: tuple[str, ...] = ("stop", "scripted", "live")


def _effect_key(e: Effect) -> Key | None:
    """The identity of an effect that waits for an answer (None: fire and forget)."""
    match e:
        case CallModel(call_id=c):
            return ("call_model", c)
        case AskPermission(generation=g, tool_use_id=t):
            return ("ask_permission", g, t)
        case StartTool(generation=g, tool_use_id=t):
            return ("start_tool", g, t)
        case Wait(wait_id=w):
            return ("wait", w)
        case Compact(compact_id=c):
            return ("compact", c)
        case RunStopHooks(hooks_id=h):
            return ("run_stop_hooks", h)
        case SummarizeToolUse(summary_id=s):
            return ("summarize_tool_use", s)
    return None


def _event_key(e: Event) -> Key | None:
    """The effect an event answers (None: the world spoke unasked: interrupts, commands)."""
    match e:
        case (
            ModelBlockReceived(call_id=c)
            | ModelResponseEnded(call_id=c)
            | ModelCallFailed(call_id=c)
        ):
            return ("call_model", c)
        case PermissionAnswered(generation=g, tool_use_id=t):
            return ("ask_permission", g, t)
        case ToolFinished(generation=g, tool_use_id=t):
            return ("start_tool", g, t)
        case WaitElapsed(wait_id=w):
            return ("wait", w)
        case CompactionFinished(compact_id=c) | CompactionFailed(compact_id=c):
            return ("compact", c)
        case StopHooksFinished(hooks_id=h):
            return ("run_stop_hooks", h)
        case ToolUseSummaryReady(summary_id=s):
            return ("summarize_tool_use", s)
    return None


def _cancelled_keys(e: Effect) -> list[Key]:
    match e:
        case CancelModelCall(call_id=c):
            return [("call_model", c)]
        case CancelTools(generation=g, tool_use_ids=ids):
            return [k for t in ids for k in (("ask_permission", g, t), ("start_tool", g, t))]
        case CancelWait(wait_id=w):
            return [("wait", w)]
        case CancelCompaction(compact_id=c):
            return [("compact", c)]
        case CancelStopHooks(hooks_id=h):
            return [("run_stop_hooks", h)]
    return []


def _readdress(event: Event, **ids: Any) -> Event:
    return typing.cast(Event, attrs.evolve(typing.cast(Any, event), **ids))


def _retarget(event: Event, effect: Effect) -> Event:
    """A recorded answer, re-addressed to the new run's ids (tool_use ids stay)."""
    match effect:
        case CallModel(call_id=c):
            return _readdress(event, call_id=c)
        case AskPermission(generation=g) | StartTool(generation=g):
            return _readdress(event, generation=g)
        case Wait(wait_id=w):
            return _readdress(event, wait_id=w)
        case Compact(compact_id=c):
            return _readdress(event, compact_id=c)
        case RunStopHooks(hooks_id=h):
            return _readdress(event, hooks_id=h)
        case SummarizeToolUse(summary_id=s):
            return _readdress(event, summary_id=s)
    raise AssertionError(f"no answer can be re-addressed to {type(effect).__name__}")


def _content(m: Message) -> Any:
    data = to_data(m)
    data.pop("id", None)
    data.pop("response_id", None)
    return data


def fingerprint(effect: Effect) -> bytes:
    """The request an effect makes, without ids (specs/trace-format.md, "Counterfactual")."""
    h = hashlib.blake2b(digest_size=16)
    match effect:
        case CallModel():
            h.update(canonical_bytes(["call_model", effect.model, effect.streaming]))
            for m in effect.conversation.messages():
                h.update(canonical_bytes(_content(m)))
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
        case _:
            raise ValueError(f"{type(effect).__name__} makes no request")
    return h.digest()


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
    return type(effect).__name__


@attrs.frozen(kw_only=True)
class _Recorded:
    kind: str
    ordinal: int
    key: Key
    fingerprint: bytes
    brief: str
    step: int
    max_tokens: int | None


class _Index:
    """What a recording asked for and how the world answered, built by replaying it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        reader = TraceReader(path)
        walk = _Walk(reader)
        self.by_kind: dict[str, list[_Recorded]] = {}
        self.by_fp: dict[tuple[str, bytes], deque[_Recorded]] = {}
        self.answers: dict[Key, list[tuple[int, Event]]] = {}
        self.world: dict[int, list[tuple[int, Event]]] = {}
        self.traits: dict[str, ToolTraits] = {}
        self.transitions: list[str] = []
        self.terminal: Terminal | None = None
        self.first_mismatch: Mismatch | None = None
        self.steps = 0
        for rec in walk:
            if not isinstance(rec, StepRecord):
                if isinstance(rec, EndRecord):
                    self.terminal = rec.terminal
                continue
            self.steps += 1
            if self.first_mismatch is None:
                self.first_mismatch = _check_step(walk, rec)
            if rec.transition is not None:
                self.transitions.append(rec.transition.TAG)
            event = rec.event
            if event is not None:
                key = _event_key(event)
                if key is None:
                    self.world.setdefault(rec.i - 1, []).append((rec.i, event))
                else:
                    self.answers.setdefault(key, []).append((rec.i, event))
                if isinstance(event, ModelBlockReceived) and event.tool is not None:
                    name = getattr(event.block, "name", None)
                    if isinstance(name, str):
                        self.traits.setdefault(name, event.tool)
            for e in walk.effects:  # the effects step() computes, with real conversations
                key = _effect_key(e)
                if key is None:
                    continue
                kind = e.TAG
                lst = self.by_kind.setdefault(kind, [])
                r = _Recorded(
                    kind=kind,
                    ordinal=len(lst) + 1,
                    key=key,
                    fingerprint=fingerprint(e),
                    brief=describe_request(e),
                    step=rec.i,
                    max_tokens=e.max_tokens if isinstance(e, CallModel) else None,
                )
                lst.append(r)
                self.by_fp.setdefault((kind, r.fingerprint), deque()).append(r)
        assert walk.header is not None
        self.header = walk.header
        self.reader = reader

    def traits_for(self, name: str, _input: dict[str, Any]) -> ToolTraits:
        return self.traits.get(name, ToolTraits())

    def compatible(self, new: Effect, rec: _Recorded) -> bool:
        """max_tokens only matters when the recorded answer was (or would now be) cut off."""
        if not isinstance(new, CallModel) or rec.max_tokens == new.max_tokens:
            return True
        for _, ev in self.answers.get(rec.key, ()):
            if isinstance(ev, ModelResponseEnded):
                return ev.stop_reason != "max_tokens" and ev.usage.output_tokens <= new.max_tokens
        return True  # a failed or unanswered call does not depend on max_tokens


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
        from effects.scripted import ScriptedModel

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


async def replay_counterfactual_async(
    path: str | os.PathLike[str],
    overrides: Mapping[str, Any] | None = None,
    policy: Policy = "stop",
    script: Any = None,
    *,
    base: LoopConfig | None = None,
    model: Any = None,
    max_steps: int = 1_000_000,
) -> CounterfactualReport:
    """The async form of :func:`replay_counterfactual` (a live or scripted model is awaited)."""
    index = _Index(path)
    header = index.header
    try:
        cfg = (base or header.config).with_overrides(dict(overrides or {}))
    except ConfigError:
        raise
    policy_model = _policy_model(policy, script, model, index)

    state, fx = start(header.request, cfg, header.session)
    steps = 1
    transitions: list[str] = []
    last_transition = state.transition
    matched: Counter[str] = Counter()
    by_policy: Counter[str] = Counter()
    ordinals: Counter[str] = Counter()
    used: set[Key] = set()
    out_of_order = 0
    heap: list[tuple[float, int, Event, Key | None, int | None]] = []
    cancelled: set[Key] = set()
    seq = 0
    clock = 0.0  # the recorded index of the last delivered event

    def push(order: float, event: Event, key: Key | None, rec_idx: int | None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(heap, (order, seq, event, key, rec_idx))

    for idx, ev in index.world.get(0, ()):
        push(idx, ev, None, idx)

    def report(
        status: Literal["finished", "diverged", "stalled"],
        divergence: Divergence | None = None,
        terminal: Terminal | None = None,
    ) -> CounterfactualReport:
        return CounterfactualReport(
            path=index.reader.name,
            status=status,
            terminal=terminal,
            steps=steps,
            transitions=tuple(transitions),
            matched=dict(matched),
            out_of_order=out_of_order,
            by_policy=dict(by_policy),
            divergence=divergence,
            stalled_phase=state.phase if status == "stalled" else None,
            recorded_terminal=index.terminal,
            recorded_steps=index.steps,
            recorded_transitions=tuple(index.transitions),
            recording_mismatch=index.first_mismatch,
            state=state,
        )

    def diverge(e: Effect, kind: str, ordinal: int, reason: str) -> CounterfactualReport:
        recs = index.by_kind.get(kind, [])
        had = recs[ordinal - 1].brief if ordinal <= len(recs) else None
        return report(
            "diverged",
            Divergence(
                step=steps - 1,
                kind=kind,
                ordinal=ordinal,
                effect=describe_request(e),
                recorded=had,
                reason=reason,
            ),
        )

    def match(e: Effect, kind: str, ordinal: int) -> _Recorded | None:
        nonlocal out_of_order
        fp = fingerprint(e)
        recs = index.by_kind.get(kind, [])
        if ordinal <= len(recs):
            r = recs[ordinal - 1]
            if r.key not in used and r.fingerprint == fp and index.compatible(e, r):
                return r
        for r in index.by_fp.get((kind, fp), ()):
            if r.key not in used and index.compatible(e, r):
                out_of_order += 1
                return r
        return None

    async def answer_by_policy(e: Effect) -> list[Event] | None:
        if isinstance(e, Wait):
            return [WaitElapsed(wait_id=e.wait_id)]
        if isinstance(e, SummarizeToolUse):
            return [ToolUseSummaryReady(summary_id=e.summary_id, summary=None)]
        if isinstance(e, CallModel):
            events: list[Event] = []
            stream = policy_model.stream(e)
            try:
                async for ev in stream:
                    events.append(ev)
            finally:
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
            return events
        if isinstance(e, Compact):
            from effects.compaction import ModelCompactor

            return [await ModelCompactor(policy_model).compact(e)]
        return None

    while True:
        finished: Terminal | None = None
        for e in fx:
            if isinstance(e, Finish):
                finished = e.terminal
                break
            for k in _cancelled_keys(e):
                cancelled.add(k)
            new_key = _effect_key(e)
            if new_key is None:
                continue
            kind = e.TAG
            ordinals[kind] += 1
            r = match(e, kind, ordinals[kind])
            if r is not None:
                used.add(r.key)
                matched[kind] += 1
                for idx, ev in index.answers.get(r.key, ()):
                    push(idx, _retarget(ev, e), new_key, idx)
                continue
            if policy_model is None:
                return diverge(e, kind, ordinals[kind], "no recorded effect matches it")
            try:
                answers = await answer_by_policy(e)
            except SteploopError as err:
                return diverge(e, kind, ordinals[kind], f"the {policy} model failed: {err}")
            if answers is None:
                return diverge(
                    e,
                    kind,
                    ordinals[kind],
                    f"no recorded effect matches it, and policy {policy!r} answers model calls, "
                    "compactions, waits and summaries only",
                )
            by_policy[kind] += 1
            for ev in answers:
                push(clock + 0.5, ev, new_key, None)
        if finished is not None:
            return report("finished", terminal=finished)
        while heap and heap[0][3] is not None and heap[0][3] in cancelled:
            heapq.heappop(heap)
        if not heap:
            return report("stalled")
        if steps >= max_steps:
            raise ReplayError(f"the counterfactual run passed {max_steps} steps; stopped")
        order, _, event, _, rec_idx = heapq.heappop(heap)
        clock = max(clock, order)
        try:
            state, fx = step(state, event, cfg)
        except IllegalEvent as err:
            kind = type(event).__name__
            return report(
                "diverged",
                Divergence(
                    step=steps,
                    kind=kind,
                    ordinal=0,
                    effect=describe_effect(event, 160),
                    recorded=f"step {rec_idx}" if rec_idx is not None else None,
                    reason=f"the new run rejects this answer: {err}",
                ),
            )
        steps += 1
        if state.transition is not None and state.transition is not last_transition:
            transitions.append(state.transition.TAG)
        last_transition = state.transition
        if rec_idx is not None:
            for idx, ev in index.world.get(rec_idx, ()):
                push(idx, ev, None, idx)


def replay_counterfactual(
    path: str | os.PathLike[str],
    overrides: Mapping[str, Any] | None = None,
    policy: Policy = "stop",
    script: Any = None,
    *,
    base: LoopConfig | None = None,
    model: Any = None,
    max_steps: int = 1_000_000,
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

    Returns:
        A :class:`CounterfactualReport` (finished, diverged or stalled).

    Raises:
        TraceError: the recording is unreadable or does not replay. ConfigError: a bad override.
        ReplayError: the policy lacks its script or model.
    """
    import anyio

    async def main() -> CounterfactualReport:
        return await replay_counterfactual_async(
            path, overrides, policy, script, base=base, model=model, max_steps=max_steps
        )

    return anyio.run(main)
