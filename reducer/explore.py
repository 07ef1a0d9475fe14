"""The exhaustive explorer: every reachable abstract state, every guard checked (specs/invariants.md).

The explorer plays the world against the machine. From the state that :func:`reducer.start`
returns it tries, in every state, every answer of a small *world alphabet* (:class:`World`): a
model call is answered with a text reply, a safe or an unsafe tool call, a truncated reply,
a truncated tool input, or one of the failures (prompt too long, media, overloaded, ...), each
reply with a usage that puts the context below, between or over the thresholds; compaction
succeeds or fails; stop hooks pass, block or prevent; permissions allow, deny or reject; tools
finish, fail or stop the turn; and the user interrupts (hard or submit) in every phase. Each
such answer is a :class:`Move`: a short sequence of events computed from the state, so every
event is one the machine must accept.

States are merged under the abstraction key of rule ABS-1 (:class:`Abstraction`): the phase,
the flags, the counters saturated just past their bounds, the token class of the context,
the shape of the tool slots (no ids, no text), and the monitors of the invariants. The key
space is finite, so the search ends.

The search is breadth first in (model calls, moves), so the first path found to a state is the
shortest, and the first violation of an invariant comes back as its shortest counterexample:
a :class:`Counterexample` holding the config, the request and the exact events to feed. Two
tiers keep it affordable (ABS-3): the full alphabet within ``rounds`` model calls per path,
then a deep alphabet (:data:`DEEP_WORLD`: the answers that move the round-level counters) to
the end of the graph, deep enough for the stop-hook cap and the breaker.

Every invariant (:data:`CATALOGUE`) is checked on every transition ``(state, event, effects,
next_state)`` through an :class:`Observation`, with a small *monitor* of its own that follows
the observable history (a count of failed auto-compactions, of nudges, ...), so a machine that
forgets to count is still caught. Each invariant also counts how often its guard was
*exercised* (the situation it protects against came up); a guard never exercised proves
nothing and fails the run. After the search, the abstract graph is analysed for cycles with no
progress step (INV-13) and for the longest progress-free path.

The module is pure (specs/ R-PURE-1): no clock, no I/O. Progress is reported through a
callback; the caller measures time.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from functools import cached_property, lru_cache
from typing import Any, ClassVar, Final

import attrs

from reducer.config import QUERY_SOURCES_NO_BLOCKING, LoopConfig
from reducer.context import collapse
from reducer.conversation import Conversation
from reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
)
from reducer.errors import IllegalEvent
from reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from reducer.machine import MOT_NUDGE, start, step
from reducer.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from reducer.state import LoopState, Request, Session
from reducer.transitions import (
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    Continue,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    Terminal,
    TokenBudgetContinuation,
)

__all__ = [
    "CATALOGUE",
    "DEEP_WORLD",
    "DEFAULT_REQUEST",
    "DEFAULT_ROUNDS",
    "RETRY_DEEP_WORLD",
    "Abstraction",
    "AutoCompactBreaker",
    "Counterexample",
    "DrainOnce",
    "EscalateOnce",
    "ExploreProgress",
    "Invariant",
    "InvariantResult",
    "MaxTurnsBound",
    "MotRecoveryLimit",
    "Move",
    "NoHooksAfterApiError",
    "NoProgressFreeCycle",
    "NothingAfterFinish",
    "Observation",
    "ReactiveOnce",
    "Report",
    "StopHookCap",
    "ToolResultPairing",
    "TruncatedInputsNeverRun",
    "Verdict",
    "WithheldErrors",
    "World",
    "apply_move",
    "catalogue",
    "check_step",
    "expected_breaks",
    "explore",
    "initial_monitors",
    "moves",
    "usage_for",
]

DEFAULT_ROUNDS: Final = 3
"""The CI bound: the full alphabet within 3 model calls per path, then the deep tier
(``steploop check`` and the suite use it; specs/ ABS-3)."""

DEFAULT_REQUEST: Final = Request(prompt="Fix the failing test")
"""The explorer's user turn. Pass a request with a ``token_budget`` to explore budget
continuations too (the suite does, at a smaller bound)."""

MOT_REASONS: Final = frozenset({"max_tokens", "model_context_window_exceeded"})
RECOVERABLE: Final = frozenset({"prompt_too_long", "media", "max_output_tokens"})
SAFE_TOOL: Final = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
UNSAFE_TOOL: Final = ToolTraits(
    concurrency_safe=False, interrupt="block", cancels_siblings_on_error=True
)

# =============================================================================================
# The world alphabet
# =============================================================================================


@attrs.frozen(kw_only=True)
class World:
    """The finite alphabet of world answers (specs/ ABS-2).

    Every tuple can be narrowed to make a search cheaper; the defaults are the full alphabet.
    ``output_tokens`` is the output usage of every response (the token budget counts it).
    """

    max_tools: int = 2
    tool_kinds: tuple[str, ...] = ("safe", "unsafe")
    usage_classes: tuple[str, ...] = ("low", "mid", "high")
    failures: tuple[str, ...] = (
        "prompt_too_long",
        "media",
        "image_client",
        "overloaded",
        "rate_limited",
        "stream_broken",
        "auth",
        "unknown",
    )
    tool_outcomes: tuple[str, ...] = ("ok", "error")  # add "hook_stop" for T-HOOK-1
    permissions: tuple[str, ...] = ("allow", "deny_by_rule", "rejected_by_user")
    stop_hooks: tuple[str, ...] = ("pass", "block", "prevent")
    interrupts: tuple[str, ...] = ("hard", "submit")
    truncation: bool = True  # max_tokens replies and truncated tool inputs
    output_tokens: int = 400


@attrs.frozen
class Move:
    """One answer of the world: a label that names it independently of ids (``finish:0:ok``
    is "the first tool slot finishes"), and the events that make it, computed from a state."""

    label: str
    events: tuple[Event, ...]


def usage_for(cfg: LoopConfig, cls: str, output_tokens: int = 400) -> Usage:
    """A usage whose total lands in token class ``cls`` of ``cfg``: ``low`` below every
    threshold, ``mid`` between the auto-compact threshold and the blocking limit, ``high``
    over the blocking limit (specs/ ABS-2)."""
    blocking = cfg.blocking_limit
    if cls == "low":
        positive = [t for t in Abstraction.thresholds_of(cfg) if t > 0]
        total = max(1, min(positive, default=blocking) // 4)
    elif cls == "mid":
        total = (cfg.autocompact_threshold + blocking) // 2
    elif cls == "high":
        total = blocking + max(1, (cfg.context_window - blocking) // 2)
    else:
        raise ValueError(f"unknown usage class {cls!r}; expected low, mid or high")
    out = min(output_tokens, total)
    return Usage(input_tokens=total - out, output_tokens=out)


@lru_cache(maxsize=64)
def _usages(config: LoopConfig, world: World) -> tuple[tuple[str, Usage], ...]:
    """The world's usage classes, one per band of the thresholds that matter in ``config``
    (classes that land in the same band behave alike and are tried once)."""
    ths = Abstraction.thresholds_of(config)
    out: list[tuple[str, Usage]] = []
    seen: set[int] = set()
    for c in world.usage_classes:
        u = usage_for(config, c, world.output_tokens)
        band = bisect_right(ths, u.total)
        if band not in seen:
            seen.add(band)
            out.append((c, u))
    return tuple(out)


def _compacted(compact_id: int) -> tuple[Message, ...]:
    return (
        SystemMessage(
            id=f"c{compact_id}.b", subtype="compact_boundary", text="Conversation compacted"
        ),
        UserMessage(
            id=f"c{compact_id}.s",
            content=(TextBlock(text="Summary of the work so far."),),
            is_meta=True,
            origin="compact_summary",
        ),
    )


def moves(state: LoopState, config: LoopConfig, world: World | None = None) -> tuple[Move, ...]:
    """Every answer of the world alphabet that is legal in ``state`` (none once it is done).

    The events are computed from the state: the current call id, the tool generation, the
    slots waiting for a permission or a result, the outstanding wait, compaction or hooks.
    """
    w = world or World()
    phase = state.phase
    if phase == "done":
        return ()
    r = state.round
    out: list[Move] = []
    usages = _usages(config, w)
    if phase == "streaming" and not r.ended:
        cid = r.call_id
        model = state.model
        k = len(r.blocks) + 1

        def end(reason: str, u: Usage) -> ModelResponseEnded:
            return ModelResponseEnded(call_id=cid, model=model, stop_reason=reason, usage=u)

        def tool(kind: str) -> ModelBlockReceived:
            name, traits = ("Read", SAFE_TOOL) if kind == "safe" else ("Edit", UNSAFE_TOOL)
            block = ToolUseBlock(id=f"t{cid}.{k}", name=name, input={"file_path": "a.py"})
            return ModelBlockReceived(call_id=cid, block=block, tool=traits)

        if not r.blocks:
            text = ModelBlockReceived(call_id=cid, block=TextBlock(text="Done."))
            for c, u in usages:
                out.append(Move(f"reply:{c}", (text, end("end_turn", u))))
            if w.truncation:
                cut = ToolUseBlock(id=f"t{cid}.cut", name="Edit", input={"file_path": "a"})
                cut_ev = ModelBlockReceived(
                    call_id=cid, block=cut, tool=UNSAFE_TOOL, input_complete=False
                )
                for c, u in usages:
                    out.append(Move(f"max_tokens:{c}", (text, end("max_tokens", u))))
                    out.append(Move(f"cut_tool:{c}", (cut_ev, end("max_tokens", u))))
        if len(r.slots) < w.max_tools:
            for kind in w.tool_kinds:
                out.append(Move(f"tool:{kind}", (tool(kind),)))
        if r.slots:
            for c, u in usages:
                out.append(Move(f"end_tools:{c}", (end("tool_use", u),)))
            if w.truncation:
                out.append(Move("end_tools:max_tokens", (end("max_tokens", usages[0][1]),)))
        for kind in w.failures:
            status = {"overloaded": 529, "rate_limited": 429, "prompt_too_long": 400}.get(kind)
            out.append(
                Move(f"fail:{kind}", (ModelCallFailed(call_id=cid, kind=kind, status=status),))
            )
    if phase in ("streaming", "running_tools", "draining"):
        gen = r.generation
        for i, sl in enumerate(r.slots):
            if sl.status == "asking":
                for d in w.permissions:
                    ev: Event = PermissionAnswered(
                        generation=gen,
                        tool_use_id=sl.tool_use_id,
                        decision=d,  # type: ignore[arg-type]
                    )
                    out.append(Move(f"permission:{i}:{d}", (ev,)))
            elif sl.status == "running":
                for o in w.tool_outcomes:
                    ev = ToolFinished(
                        generation=gen,
                        tool_use_id=sl.tool_use_id,
                        content="ok" if o != "error" else "failed",
                        is_error=o == "error",
                        hook_stopped=o == "hook_stop",
                    )
                    out.append(Move(f"finish:{i}:{o}", (ev,)))
    elif phase in ("compacting", "reactive_compacting"):
        pid = r.pending_id
        out.append(
            Move("compact:ok", (CompactionFinished(compact_id=pid, messages=_compacted(pid)),))
        )
        out.append(Move("compact:fail", (CompactionFailed(compact_id=pid, reason="failed"),)))
    elif phase == "waiting_retry":
        out.append(Move("wait:elapsed", (WaitElapsed(wait_id=r.pending_id),)))
    elif phase == "stop_hooks":
        pid = r.pending_id
        answers = {
            "pass": StopHooksFinished(hooks_id=pid, hook_count=1),
            "block": StopHooksFinished(
                hooks_id=pid, blocking_errors=("fix the test",), hook_count=1
            ),
            "prevent": StopHooksFinished(
                hooks_id=pid, prevent=True, stop_reason="halt", hook_count=1
            ),
        }
        for a in w.stop_hooks:
            out.append(Move(f"hooks:{a}", (answers[a],)))
    for kind in w.interrupts:
        out.append(Move(f"interrupt:{kind}", (Interrupted(kind=kind),)))  # type: ignore[arg-type]
    return tuple(out)


def apply_move(
    state: LoopState, move: Move, config: LoopConfig
) -> list[tuple[LoopState, Event, tuple[Effect, ...], LoopState]]:
    """Feed a move's events; returns each transition ``(state, event, effects, next)``."""
    out = []
    s = state
    for ev in move.events:
        nxt, fx = step(s, ev, config)
        out.append((s, ev, fx, nxt))
        s = nxt
    return out


# =============================================================================================
# The abstraction key (ABS-1)
# =============================================================================================


def _sat(value: int, bound: int) -> int:
    """``value`` saturated just past ``bound``: exact up to the bound, one bucket beyond."""
    return value if value <= bound else bound + 1


def _tag(t: object) -> str | None:
    return None if t is None else str(getattr(t, "TAG", type(t).__name__))


class Abstraction:
    """The canonical abstraction key of rule ABS-1 for one config.

    Holds memo tables keyed by conversation digest (segment counts), so build one per run.
    """

    def __init__(self, config: LoopConfig) -> None:
        self.config = config
        self.thresholds = self.thresholds_of(config)
        g = config.gates
        # the collapse drain commits iff two or more responses are in the conversation
        # (S-COLLAPSE-2); nothing else that changes control flow reads the segment count
        self.segment_cap = 2 if g.context_collapse else 0
        cap = config.stop_hook_block_cap
        self.blocks_bound = cap if cap is not None else 0
        self._segments: dict[bytes, int] = {Conversation.empty().digest: 0}

    @staticmethod
    def thresholds_of(config: LoopConfig) -> tuple[int, ...]:
        """The context thresholds whose crossing changes what a round does, ascending:
        the auto-compact threshold (when auto-compact runs) and the blocking limit (when the
        blocking check can apply, T-BLOCKING-1). Snip and collapse thresholds change only
        the conversation's content, which the key does not track (see ABS-1)."""
        ths = []
        if config.auto_compact_enabled:
            ths.append(config.autocompact_threshold)
        g = config.gates
        exempt = config.query_source in QUERY_SOURCES_NO_BLOCKING or (
            config.auto_compact_enabled and (g.reactive_compact or g.context_collapse)
        )
        if not exempt:
            ths.append(config.blocking_limit)
        return tuple(sorted(set(ths)))

    def token_class(self, state: LoopState) -> int:
        """How many thresholds the context count has reached (0 = below all)."""
        count = max(0, state.conversation.token_count() - state.tokens_freed)
        return bisect_right(self.thresholds, count)

    def segments(self, conv: Conversation) -> int:
        """Model responses in the conversation (as ``reducer.context.segments`` counts them)."""
        memo = self._segments
        hit = memo.get(conv.digest)
        if hit is not None:
            return hit
        stack: list[Conversation] = []
        node: Conversation | None = conv
        while node is not None and node.digest not in memo:
            stack.append(node)
            node = node.prev
        n = memo[node.digest] if node is not None else 0
        for c in reversed(stack):
            prev = c.prev
            m = c.last
            if isinstance(m, AssistantMessage) and (
                prev is None or m.response_id != prev.run_response_id
            ):
                n += 1
            memo[c.digest] = n
        return n

    def budget_key(self, s: LoopState) -> tuple[int, ...]:
        cfg = self.config
        b = s.token_budget
        if not cfg.gates.token_budget or b is None or b <= 0 or cfg.is_subagent:
            return ()
        thr = -(-b * cfg.budget_completion_pct // 100)  # the first count that stops
        t = s.budget
        return (
            _sat(t.continuation_count, cfg.budget_min_continuations),
            min(s.turn_output_tokens, thr),
            min(t.last_global_turn_tokens, thr),
            int(t.last_delta_tokens < cfg.budget_diminishing_tokens),
        )

    def key(self, s: LoopState) -> tuple[Hashable, ...]:
        """ABS-1: everything a guard or a later round can depend on, nothing else."""
        cfg = self.config
        if s.phase == "done":  # nothing follows a Terminal: only which one matters
            return ("done", _tag(s.transition))
        r = s.round
        slots = tuple(
            (
                sl.traits.concurrency_safe,
                sl.traits.interrupt,
                sl.traits.cancels_siblings_on_error,
                sl.traits.known,
                sl.status,
                sl.synthetic,
                sl.message is not None,
                sl.hook_stopped,
            )
            for sl in r.slots
        )
        # a withheld error next to complete tool calls is dropped unless Q-6 keeps it
        w = r.withheld if not r.slots or cfg.compat.unyielded_nudges else None
        em = r.error_message
        round_key = (
            _sat(r.retry_attempt, cfg.retry.max_retries),
            _sat(r.consecutive_529, cfg.retry.max_consecutive_529),
            r.streaming,
            r.sticky_fallback,
            r.ended,
            # the usage of an ended response decides the next round's token class
            None if r.usage is None else bisect_right(self.thresholds, r.usage.total),
            bool(r.blocks),
            None if w is None or w.api_error is None else w.api_error.kind,
            None if em is None or em.api_error is None else em.api_error.kind,
            r.sibling_error is not None,
            r.hook_stop,
            _tag(r.pending_terminal),
            r.abort_kind,
            slots,
        )
        seg = min(self.segments(s.conversation), self.segment_cap) if self.segment_cap else 0
        turns = _sat(s.turn_count, cfg.max_turns) if cfg.max_turns is not None else 0
        return (
            s.phase,
            isinstance(s.transition, CollapseDrainRetry),
            s.has_attempted_reactive_compact,
            s.escalated,
            s.max_output_tokens_override is not None,
            s.compacted_this_round,
            _sat(s.mot_recovery_count, cfg.mot_recovery_limit),
            _sat(s.stop_hook_blocks, self.blocks_bound),
            _sat(s.tracking.consecutive_failures, cfg.max_autocompact_failures),
            turns,
            s.model != cfg.model,
            self.token_class(s),
            seg,
            self.budget_key(s),
            s.summary_id != 0,
            s.summary_text is not None,
            len(s.queued_commands),
            round_key,
        )


# =============================================================================================
# Observations: what a transition shows
# =============================================================================================


def _appended(old: Conversation, new: Conversation) -> tuple[Message, ...] | None:
    """The messages ``new`` adds to ``old``; None when ``new`` does not extend ``old``."""
    if new.length < old.length:
        return None
    out: list[Message] = []
    node: Conversation | None = new
    while node is not None and node.length > old.length:
        assert node.last is not None
        out.append(node.last)
        node = node.prev
    if node is None or node != old:
        return None
    out.reverse()
    return tuple(out)


def _is_api_error(m: object) -> bool:
    return isinstance(m, AssistantMessage) and m.api_error is not None


class Observation:
    """One transition ``(state, event, effects, next)`` and what can be read from it.

    ``state`` and ``event`` are None for the transition :func:`reducer.start` makes. The
    common readings are computed once here and shared by every invariant:

    * ``emitted``, ``api_errors`` (API-error assistant messages emitted), ``calls``
      (CallModel effects), ``compacts``, ``hooks`` (RunStopHooks), ``terminal`` (the
      Terminal of a Finish, if any);
    * ``continued``: the Continue transition the step took (see :meth:`_continued`);
    * ``round_began``: a round started in this step (the first one, or after a Continue);
    * ``current_call_event``, ``failure_kind``, ``mot_ladder``: what the model answered;
    * ``progress``: a progress step of INV-13;
    * ``appended`` and ``round_start_count`` on demand.
    """

    def __init__(
        self,
        config: LoopConfig,
        state: LoopState | None,
        event: Event | None,
        effects: tuple[Effect, ...],
        next_state: LoopState,
    ) -> None:
        self.config = config
        self.state = state
        self.event = event
        self.effects = effects
        self.next = next_state
        emitted: list[object] = []
        calls: list[CallModel] = []
        compacts: list[Compact] = []
        hooks: list[RunStopHooks] = []
        terminal: Terminal | None = None
        for eff in effects:
            if isinstance(eff, Emit):
                emitted.append(eff.item)
            elif isinstance(eff, CallModel):
                calls.append(eff)
            elif isinstance(eff, Compact):
                compacts.append(eff)
            elif isinstance(eff, RunStopHooks):
                hooks.append(eff)
            elif isinstance(eff, Finish):
                terminal = eff.terminal
        self.emitted = tuple(emitted)
        self.api_errors = tuple(
            m for m in emitted if isinstance(m, AssistantMessage) and m.api_error is not None
        )
        self.calls = tuple(calls)
        self.compacts = tuple(compacts)
        self.hooks = tuple(hooks)
        self.terminal = terminal
        self.continued = self._continued()
        self.round_began = state is None or self.continued is not None
        e = event
        self.current_call_event = (
            state is not None
            and state.phase == "streaming"
            and isinstance(e, (ModelResponseEnded, ModelCallFailed, ModelBlockReceived))
            and e.call_id == state.round.call_id
        )
        self.failure_kind = (
            e.kind if self.current_call_event and isinstance(e, ModelCallFailed) else None
        )
        self.mot_ladder = (
            self.current_call_event
            and isinstance(e, ModelResponseEnded)
            and e.stop_reason in MOT_REASONS
            and state is not None
            and not state.round.slots
        )
        c = self.continued
        self.progress = isinstance(c, NextTurn) or (
            isinstance(c, TokenBudgetContinuation) and next_state.budget.last_delta_tokens > 0
        )

    def _continued(self) -> Continue | None:
        """The Continue transition this step took, if any.

        Read from ``next.transition`` (a new object each time a round ends). When the next
        round ended at once in ``blocking_limit``, the Continue before it was overwritten; it
        is recovered by taking the same step with the blocking check off (query source
        ``session_memory`` skips it, and nothing before the check reads the source).
        """
        s = self.state
        if s is None:
            return None
        t = self.next.transition
        if t is s.transition:
            return None
        if isinstance(t, _CONTINUES):
            return t
        if isinstance(t, BlockingLimit) and s.phase != "compacting" and self.event is not None:
            cfg = self.config
            keep_subagent = "subagent" if cfg.is_subagent and cfg.agent_id is None else None
            alt = attrs.evolve(
                cfg, query_source="session_memory", agent_id=cfg.agent_id or keep_subagent
            )
            try:
                nxt, _ = step(s, self.event, alt)
            except IllegalEvent:  # pragma: no cover - the same event was legal a moment ago
                return None
            t2 = nxt.transition
            if t2 is not s.transition and isinstance(t2, _CONTINUES):
                return t2
        return None

    @cached_property
    def appended(self) -> tuple[Message, ...] | None:
        """Messages this step appended to the conversation (None: it was replaced)."""
        if self.state is None:
            return None
        return _appended(self.state.conversation, self.next.conversation)

    @cached_property
    def round_start_count(self) -> int:
        """The context count the round-start rules compared (auto-compact, blocking)."""
        for c in self.compacts:
            if c.trigger == "auto":
                return c.pre_tokens
        conv = self.calls[-1].conversation if self.calls else self.next.conversation
        return max(0, conv.token_count() - self.next.tokens_freed)


_CONTINUES: Final = (
    NextTurn,
    ReactiveCompactRetry,
    MaxOutputTokensRecovery,
    MaxOutputTokensEscalate,
    CollapseDrainRetry,
    StopHookBlocking,
    TokenBudgetContinuation,
)


# =============================================================================================
# The invariant catalogue (specs/invariants.md)
# =============================================================================================

Verdict = tuple[Hashable, bool, str | None]
"""What a check returns: (new monitor state, exercised?, violation text or None)."""


class Invariant:
    """One numbered rule of specs/invariants.md, checked on every transition.

    Subclass and override :meth:`check` (and :meth:`initial` for a monitor) to add your own;
    the monitor must be small and hashable (saturate counters) because it is part of the
    explorer's abstraction key.
    """

    id: ClassVar[str] = ""
    title: ClassVar[str] = ""

    def applies(self, config: LoopConfig) -> bool:
        return True

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return None

    def check(self, mon: Any, o: Observation) -> Verdict:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.id} · {self.title}>"


class AutoCompactBreaker(Invariant):
    """INV-1: no Compact(trigger="auto") after max_autocompact_failures consecutive failures."""

    id = "INV-1"
    title = "auto-compact circuit breaker"

    def applies(self, config: LoopConfig) -> bool:
        return config.auto_compact_enabled

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        carried = session.autocompact_failures if session is not None else 0
        n = carried if config.autocompact_breaker_scope == "session" else 0
        return _sat(n, config.max_autocompact_failures)

    def check(self, mon: Any, o: Observation) -> Verdict:
        cfg = o.config
        limit = cfg.max_autocompact_failures
        n: int = mon
        s, e = o.state, o.event
        if s is not None and s.phase == "compacting" and isinstance(e, CompactionFailed):
            n = _sat(n + 1, limit)
        elif (
            s is not None
            and isinstance(e, CompactionFinished)
            and s.phase
            in (
                "compacting",
                "reactive_compacting",
            )
        ):
            n = 0
        bad = None
        if n >= limit and any(c.trigger == "auto" for c in o.compacts):
            bad = f"Compact(trigger='auto') after {n} consecutive failures (limit {limit})"
        ex = (
            o.round_began
            and n >= limit
            and cfg.auto_compact_enabled
            and o.round_start_count >= cfg.autocompact_threshold
        )
        return n, ex, bad


class MotRecoveryLimit(Invariant):
    """INV-2: at most mot_recovery_limit nudges between resets."""

    id = "INV-2"
    title = "max-output-tokens recovery nudges bounded"

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        limit = o.config.mot_recovery_limit
        n: int = mon
        c = o.continued
        nudged = isinstance(c, MaxOutputTokensRecovery) or any(
            isinstance(m, UserMessage)
            and m.origin == "nudge"
            and m.content
            and isinstance(m.content[0], TextBlock)
            and m.content[0].text == MOT_NUDGE
            for m in (o.appended or ())
        )
        ex = o.mot_ladder and n >= limit and not isinstance(c, MaxOutputTokensEscalate)
        bad = None
        if nudged:
            if n >= limit:
                bad = f"recovery nudge {n + 1} exceeds the limit of {limit} since the last reset"
            n = _sat(n + 1, limit)
        if isinstance(c, (NextTurn, StopHookBlocking, TokenBudgetContinuation)):
            n = 0
        return n, ex, bad


class EscalateOnce(Invariant):
    """INV-3: max-output-tokens escalation at most once per user turn."""

    id = "INV-3"
    title = "escalation at most once per user turn"

    def applies(self, config: LoopConfig) -> bool:
        return config.gates.max_tokens_escalation and config.max_output_tokens_env_override is None

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        n: int = mon
        esc = isinstance(o.continued, MaxOutputTokensEscalate)
        s = o.state
        ex = o.mot_ladder and n >= 1 and s is not None and s.max_output_tokens_override is None
        bad = None
        if esc:
            if n >= 1:
                bad = f"escalation number {n + 1} in one user turn (the max_tokens override was reset by a recovery nudge)"
            n = _sat(n + 1, 1)
        return n, ex, bad


class ReactiveOnce(Invariant):
    """INV-4: reactive compaction at most once between next_turn / token_budget_continuation."""

    id = "INV-4"
    title = "reactive compaction at most once between its resets"

    def applies(self, config: LoopConfig) -> bool:
        return config.gates.reactive_compact

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        n: int = mon
        issued = any(c.trigger == "reactive" for c in o.compacts)
        ex = (
            o.failure_kind in ("prompt_too_long", "media")
            and n >= 1
            and not isinstance(o.continued, CollapseDrainRetry)
        )
        bad = None
        if issued:
            if n >= 1:
                bad = "a second reactive compaction before next_turn or token_budget_continuation"
            n = _sat(n + 1, 1)
        if isinstance(o.continued, (NextTurn, TokenBudgetContinuation)):
            n = 0
        return n, ex, bad


class DrainOnce(Invariant):
    """INV-5: the collapse drain never twice in a row."""

    id = "INV-5"
    title = "collapse drain never twice in a row"

    def applies(self, config: LoopConfig) -> bool:
        return config.gates.context_collapse

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return False

    def check(self, mon: Any, o: Observation) -> Verdict:
        last_was_drain: bool = mon
        c = o.continued
        drain = isinstance(c, CollapseDrainRetry)
        ex = o.failure_kind == "prompt_too_long" and last_was_drain
        bad = (
            "collapse_drain_retry right after collapse_drain_retry"
            if drain and last_was_drain
            else None
        )
        if c is not None:
            last_was_drain = drain
        return last_was_drain, ex, bad


class NoHooksAfterApiError(Invariant):
    """INV-6: no stop hooks after an API-error response or an unrecoverable PTL/media error."""

    id = "INV-6"
    title = "no stop hooks after an API error"

    def check(self, mon: Any, o: Observation) -> Verdict:
        hooks = o.hooks
        bad = None
        if hooks and o.api_errors:
            bad = f"RunStopHooks in the step that emitted an API error ({o.api_errors[0].api_error.kind})"  # type: ignore[union-attr]
        elif hooks and _is_api_error(hooks[0].conversation.last):
            bad = "RunStopHooks on a conversation that ends in an API-error message"
        elif o.api_errors and o.terminal is None:
            bad = (
                f"an API error ({o.api_errors[0].api_error.kind}) was emitted and the turn went on"  # type: ignore[union-attr]
            )
        ex = bool(o.api_errors) and isinstance(o.terminal, (Completed, PromptTooLong, ImageError))
        return mon, ex, bad


class StopHookCap(Invariant):
    """INV-7: stop-hook blocking retries bounded by stop_hook_block_cap."""

    id = "INV-7"
    title = "stop-hook blocking retries bounded"

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        cap = o.config.stop_hook_block_cap
        n: int = mon
        e = o.event
        blocked = isinstance(o.continued, StopHookBlocking)
        asked = isinstance(e, StopHooksFinished) and bool(e.blocking_errors) and not e.prevent
        ex = asked and n >= (cap if cap is not None else 1)
        bad = None
        if blocked:
            if cap is not None and n >= cap:
                bad = f"stop_hook_blocking number {n + 1} with a cap of {cap}"
            n = _sat(n + 1, cap if cap is not None else 0)
        return n, ex, bad


class _Pairing:
    """Memoised tool_use / tool_result bookkeeping of conversations (by digest)."""

    def __init__(self) -> None:
        empty = Conversation.empty()
        self.memo: dict[bytes, tuple[frozenset[str], str | None, bool]] = {
            empty.digest: (frozenset(), None, False)
        }

    def state(self, conv: Conversation) -> tuple[frozenset[str], str | None, bool]:
        """(unanswered tool_use ids, first problem, any tool_use seen)."""
        memo = self.memo
        hit = memo.get(conv.digest)
        if hit is not None:
            return hit
        stack: list[Conversation] = []
        node: Conversation | None = conv
        while node is not None and node.digest not in memo:
            stack.append(node)
            node = node.prev
        cur = memo[node.digest] if node is not None else (frozenset(), None, False)
        for c in reversed(stack):
            cur = self._add(cur, c.last)
            memo[c.digest] = cur
        return cur

    @staticmethod
    def _add(
        cur: tuple[frozenset[str], str | None, bool], m: Message | None
    ) -> tuple[frozenset[str], str | None, bool]:
        open_ids, problem, seen = cur
        if isinstance(m, AssistantMessage):
            for b in m.content:
                if isinstance(b, ToolUseBlock):
                    seen = True
                    if b.id in open_ids and problem is None:
                        problem = f"tool_use {b.id} appears twice"
                    open_ids = open_ids | {b.id}
        elif isinstance(m, UserMessage):
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    if b.tool_use_id in open_ids:
                        open_ids = open_ids - {b.tool_use_id}
                    elif problem is None:
                        problem = f"tool_result for {b.tool_use_id} answers no open tool_use"
        return open_ids, problem, seen


class ToolResultPairing(Invariant):
    """INV-8: every tool_use answered by exactly one tool_result on every path."""

    id = "INV-8"
    title = "every tool_use answered by exactly one tool_result"

    def __init__(self) -> None:
        self._pairing = _Pairing()

    def check(self, mon: Any, o: Observation) -> Verdict:
        convs = [("CallModel", c.conversation) for c in o.calls]
        if o.terminal is not None:
            convs.append(("the conversation the turn leaves", o.next.conversation))
        ex = False
        for what, conv in convs:
            open_ids, problem, seen = self._pairing.state(conv)
            ex = ex or seen
            if problem is not None:
                return mon, ex, f"{what}: {problem}"
            if open_ids:
                return mon, ex, f"{what}: tool_use {', '.join(sorted(open_ids))} has no tool_result"
        return mon, ex, None


class WithheldErrors(Invariant):
    """INV-9: a recoverable error is emitted only after its recovery failed, and ends the turn."""

    id = "INV-9"
    title = "no withheld error emitted before its recovery failed"

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return (0, 0, 0, False)  # nudges since reset, escalations, reactive attempts, last drain

    def check(self, mon: Any, o: Observation) -> Verdict:
        cfg = o.config
        nudges, escal, reactive, last_drain = mon
        s, e = o.state, o.event
        withholds_ptl = cfg.gates.reactive_compact or cfg.gates.context_collapse
        ex = o.mot_ladder or (o.failure_kind == "prompt_too_long" and withholds_ptl)
        ex = ex or (o.failure_kind == "media" and cfg.media_recovery_enabled)
        failed_reactive = (
            s is not None and s.phase == "reactive_compacting" and isinstance(e, CompactionFailed)
        )
        bad = None
        for err in o.api_errors:
            kind = err.api_error.kind if err.api_error is not None else ""
            if kind not in RECOVERABLE:
                continue
            if kind == "prompt_too_long" and not withholds_ptl:
                continue  # not withheld in this config (R-PTL-1): emitted at once
            if kind == "media" and not cfg.media_recovery_enabled:
                continue
            if o.terminal is None:
                bad = f"withheld {kind} error emitted while the turn goes on"
            elif kind == "max_output_tokens":
                override = s.max_output_tokens_override if s is not None else None
                can_escalate = (
                    cfg.gates.max_tokens_escalation
                    and cfg.max_output_tokens_env_override is None
                    and override is None
                    and (cfg.compat.reescalate_after_recovery or escal == 0)
                )
                if can_escalate:
                    bad = "max_output_tokens error surfaced while escalation was still possible"
                elif nudges < cfg.mot_recovery_limit:
                    bad = f"max_output_tokens error surfaced after {nudges} of {cfg.mot_recovery_limit} nudges"
            elif not failed_reactive and cfg.gates.reactive_compact and reactive == 0:
                bad = f"{kind} error surfaced without trying reactive compaction"
            elif (
                kind == "prompt_too_long"
                and not failed_reactive
                and cfg.gates.context_collapse
                and not last_drain
                and s is not None
                and _drain_would_commit(s)
            ):
                bad = "prompt_too_long error surfaced while the collapse drain could still fold"
            if bad:
                break
        c = o.continued
        if isinstance(c, MaxOutputTokensRecovery):
            nudges = _sat(nudges + 1, cfg.mot_recovery_limit)
        if isinstance(c, MaxOutputTokensEscalate):
            escal = 1
        if any(cp.trigger == "reactive" for cp in o.compacts):
            reactive = 1
        if isinstance(c, (NextTurn, StopHookBlocking, TokenBudgetContinuation)):
            nudges = 0
        if isinstance(c, (NextTurn, TokenBudgetContinuation)):
            reactive = 0
        if c is not None:
            last_drain = isinstance(c, CollapseDrainRetry)
        return (nudges, escal, reactive, last_drain), ex, bad


def _drain_would_commit(s: LoopState) -> bool:
    count = max(0, s.conversation.token_count() - s.tokens_freed)
    return collapse(s.conversation, count, None, 1, "probe")[2] > 0


class TruncatedInputsNeverRun(Invariant):
    """INV-10: a tool_use whose input was cut off is never asked for, started or stored."""

    id = "INV-10"
    title = "no tool run from a truncated input"

    def check(self, mon: Any, o: Observation) -> Verdict:
        e, s = o.event, o.state
        ex = False
        if (
            isinstance(e, ModelBlockReceived)
            and isinstance(e.block, ToolUseBlock)
            and not e.input_complete
        ):
            ex = True
            tid = e.block.id
            if any(sl.tool_use_id == tid for sl in o.next.round.slots):
                return mon, ex, f"truncated tool_use {tid} became a tool slot"
            for eff in o.effects:
                if isinstance(eff, (AskPermission, StartTool)) and eff.tool_use_id == tid:
                    return mon, ex, f"{type(eff).__name__} for truncated tool_use {tid}"
                if isinstance(eff, Emit) and isinstance(eff.item, AssistantMessage):
                    if any(isinstance(b, ToolUseBlock) and b.id == tid for b in eff.item.content):
                        return mon, ex, f"truncated tool_use {tid} was emitted"
        for eff in o.effects:
            if isinstance(eff, StartTool):
                asking = s is not None and any(
                    sl.tool_use_id == eff.tool_use_id and sl.status == "asking"
                    for sl in s.round.slots
                )
                if not asking:
                    return (
                        mon,
                        ex,
                        f"StartTool for {eff.tool_use_id}, which was not asking permission",
                    )
        return mon, ex, None


class MaxTurnsBound(Invariant):
    """INV-11: the turn count never exceeds max_turns (at most max_turns - 1 next_turns)."""

    id = "INV-11"
    title = "at most max_turns tool rounds"

    def applies(self, config: LoopConfig) -> bool:
        return config.max_turns is not None

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        mt = o.config.max_turns
        n: int = mon
        if mt is None:
            return n, False, None
        nt = isinstance(o.continued, NextTurn)
        term = o.terminal
        ex = isinstance(term, MaxTurns) or (nt and n + 2 > mt)
        bad = None
        if nt:
            if n + 2 > mt:
                bad = f"next_turn to turn {n + 2} with max_turns {mt}"
            n = _sat(n + 1, mt)
        elif isinstance(term, MaxTurns) and n < mt and term.turn_count != n + 2:
            bad = f"MaxTurns(turn_count={term.turn_count}) after {n} next_turn transitions"
        return n, ex, bad


class NothingAfterFinish(Invariant):
    """INV-12: Finish is the last effect of its step and no step follows it."""

    id = "INV-12"
    title = "no effect after Finish"

    def check(self, mon: Any, o: Observation) -> Verdict:
        fx = o.effects
        fins = [i for i, e in enumerate(fx) if isinstance(e, Finish)]
        ex = bool(fins)
        if o.state is not None and o.state.phase == "done":
            return mon, True, f"a step after Finish returned {len(fx)} effect(s)"
        if len(fins) > 1:
            return mon, ex, "two Finish effects in one step"
        if fins and fins[0] != len(fx) - 1:
            return mon, ex, f"{type(fx[-1]).__name__} after Finish"
        if bool(fins) != (o.next.phase == "done"):
            return mon, ex, f"Finish {'without' if fins else 'but'} phase done"
        return mon, ex, None


class NoProgressFreeCycle(Invariant):
    """INV-13: no reachable cycle without a progress step (checked on the abstract graph)."""

    id = "INV-13"
    title = "no cycle without progress"

    def check(self, mon: Any, o: Observation) -> Verdict:
        return mon, False, None


def catalogue() -> tuple[Invariant, ...]:
    """A fresh instance of every invariant of specs/invariants.md (some hold memo tables)."""
    return (
        AutoCompactBreaker(),
        MotRecoveryLimit(),
        EscalateOnce(),
        ReactiveOnce(),
        DrainOnce(),
        NoHooksAfterApiError(),
        StopHookCap(),
        ToolResultPairing(),
        WithheldErrors(),
        TruncatedInputsNeverRun(),
        MaxTurnsBound(),
        NothingAfterFinish(),
        NoProgressFreeCycle(),
    )


CATALOGUE: Final = catalogue()
"""The invariant catalogue (use :func:`catalogue` for fresh memo tables in long runs)."""


def expected_breaks(config: LoopConfig) -> dict[str, str]:
    """Catalogue rules ``config`` breaks on purpose, each with the flag or setting that
    reproduces the reference's behaviour (specs/ Q-1, Q-8, G11)."""
    out: dict[str, str] = {}
    if (
        config.compat.reescalate_after_recovery
        and config.gates.max_tokens_escalation
        and config.max_output_tokens_env_override is None
    ):
        out["INV-3"] = "Q-1 reescalate_after_recovery"
    if config.compat.image_error_skips_orphan_repair:
        out["INV-8"] = "Q-8 image_error_skips_orphan_repair"
    if config.stop_hook_block_cap is None:
        out["INV-7"] = "stop_hook_block_cap=None (G11: the reference has no cap)"
        out["INV-13"] = out["INV-7"]
    return out


def initial_monitors(
    invariants: Sequence[Invariant],
    config: LoopConfig,
    request: Request,
    session: Session | None = None,
) -> tuple[Hashable, ...]:
    return tuple(inv.initial(config, request, session) for inv in invariants)


def check_step(
    invariants: Sequence[Invariant], monitors: tuple[Hashable, ...], o: Observation
) -> tuple[tuple[Hashable, ...], tuple[bool, ...], tuple[str | None, ...]]:
    """Run every invariant on one observation: (monitors, exercised flags, violations)."""
    mons: list[Hashable] = []
    exs: list[bool] = []
    bads: list[str | None] = []
    for inv, mon in zip(invariants, monitors, strict=True):
        m, ex, bad = inv.check(mon, o)
        mons.append(m)
        exs.append(ex)
        bads.append(bad)
    return tuple(mons), tuple(exs), tuple(bads)


# =============================================================================================
# Counterexamples and the report
# =============================================================================================


@attrs.frozen(kw_only=True)
class Counterexample:
    """A violation, replayable: ``start(request, config, session)`` then ``events`` in order.

    ``labels`` name the moves the events came from. For a cycle (a lasso), ``loop_start`` is
    the index of the first event of the repeating part and :meth:`loop_labels` the moves of
    one lap; playing those labels again from the last state (ids are recomputed from the
    state, see :func:`moves`) goes round the loop once more.
    """

    config: LoopConfig
    request: Request
    events: tuple[Event, ...]
    invariant: str
    explanation: str
    session: Session | None = None
    labels: tuple[str, ...] = ()
    loop_start: int | None = None
    loop_move: int | None = None  # index in ``labels`` where the loop begins

    def loop_labels(self) -> tuple[str, ...]:
        """The moves of one lap of the loop (empty when this is not a lasso)."""
        return () if self.loop_move is None else self.labels[self.loop_move :]

    def trace_events(self) -> list[Event]:
        """The events to feed to step() after start(), in order."""
        return list(self.events)

    def replay(self) -> list[tuple[LoopState, tuple[Effect, ...]]]:
        """Run the counterexample: [(state, effects)] for start() and every event."""
        s, fx = start(self.request, self.config, self.session)
        out = [(s, fx)]
        for ev in self.events:
            s, fx = step(s, ev, self.config)
            out.append((s, fx))
        return out

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data (reducer.serialize): the events and what they break."""
        from reducer.serialize import unstructure

        return {
            "invariant": self.invariant,
            "explanation": self.explanation,
            "profile": self.config.profile_name,
            "config": unstructure(self.config),
            "request": unstructure(self.request),
            "session": None if self.session is None else unstructure(self.session),
            "events": [unstructure(e) for e in self.events],
            "labels": list(self.labels),
            "loop_start": self.loop_start,
            "loop_move": self.loop_move,
        }


@attrs.frozen(kw_only=True)
class InvariantResult:
    id: str
    title: str
    applicable: bool
    exercised: int
    violations: int
    counterexample: Counterexample | None = None
    expected: str | None = None  # why this config breaks the rule on purpose (a quirk flag)

    @property
    def status(self) -> str:
        """``broken``, ``unexercised`` (a guard never reached), ``held`` or ``n/a``."""
        if not self.applicable:
            return "n/a"
        if self.violations:
            return "broken"
        if not self.exercised:
            return "unexercised"
        return "held"


@attrs.frozen(kw_only=True)
class ExploreProgress:
    """Handed to the progress callback every so often and when a new call layer starts."""

    states: int
    transitions: int
    expanded: int
    frontier: int
    rounds: int  # the model-call layer being explored
    bound: int | None  # the bound of the tier being explored (None: none)
    deep: bool  # exploring the deep tier


@attrs.frozen(kw_only=True)
class Report:
    """What a run of :func:`explore` found."""

    config: LoopConfig
    request: Request
    rounds_bound: int | None  # full alphabet within this many model calls (None: everywhere)
    deep_rounds_bound: int | None  # deep alphabet up to this many (None: no bound)
    deep: bool  # a deep tier was explored
    states: int
    transitions: int
    expanded: int
    rounds_reached: int
    complete: bool  # no state was left unexpanded (by a bound or max_states)
    results: tuple[InvariantResult, ...]
    errors: tuple[Counterexample, ...] = ()  # step() raised (specs/ M-5)
    longest_progress_free: int | None = None  # model answers; None = unbounded (a lasso)
    longest_progress_free_witness: Counterexample | None = None

    @property
    def broken(self) -> tuple[InvariantResult, ...]:
        return tuple(r for r in self.results if r.status == "broken")

    @property
    def unexercised(self) -> tuple[InvariantResult, ...]:
        return tuple(r for r in self.results if r.status == "unexercised")

    @property
    def counterexamples(self) -> tuple[Counterexample, ...]:
        found = [r.counterexample for r in self.results if r.counterexample is not None]
        return (*found, *self.errors)

    @property
    def ok(self) -> bool:
        """No invariant broken, every applicable guard exercised, step() never raised."""
        return not self.broken and not self.unexercised and not self.errors

    def result(self, inv_id: str) -> InvariantResult:
        for r in self.results:
            if r.id == inv_id:
                return r
        raise KeyError(inv_id)


# =============================================================================================
# The search
# =============================================================================================

DEEP_WORLD: Final = World(
    max_tools=1,
    tool_kinds=("unsafe",),
    tool_outcomes=("ok",),
    permissions=("allow",),
    failures=("prompt_too_long", "media"),
    interrupts=(),
)
"""The deep tier's alphabet (specs/ ABS-3): the answers that move the round-level counters
(replies at every usage class, truncations, prompt-too-long and media errors, one tool call
that leads to next_turn, compaction and stop-hook outcomes). Retries, interrupts, permission
outcomes and tool interleavings, which play out inside a round, are left to the first tier."""

RETRY_DEEP_WORLD: Final = attrs.evolve(
    DEEP_WORLD, failures=("prompt_too_long", "media", "rate_limited", "stream_broken")
)
"""The deep alphabet with retries (the slow run): every retry chain in every round context."""

# edge flags
_PROGRESS: Final = 1
_BLOCKING: Final = 2


class _Graph:
    """Nodes (abstract states, one concrete representative each) and labelled edges.

    A representative is dropped once its node is expanded (memory); :meth:`state` rebuilds it
    from the path, which is why every node keeps the move that first reached it.
    """

    def __init__(self, config: LoopConfig, request: Request, session: Session | None) -> None:
        self.config = config
        self.request = request
        self.session = session
        self.ids: dict[Hashable, int] = {}
        self.rep: list[LoopState | None] = []
        self.mons: list[tuple[Hashable, ...]] = []
        self.parent: list[int] = []
        self.via: list[Move | None] = []
        self.calls: list[int] = []
        self.depth: list[int] = []
        self.expanded: list[bool] = []
        # out edges per node: (dst, label, model answers, flags)
        self.out: list[list[tuple[int, str, int, int]]] = []

    def add(
        self,
        key: Hashable,
        s: LoopState,
        mons: tuple[Hashable, ...],
        parent: int,
        via: Move | None,
        calls: int,
        depth: int,
    ) -> int:
        n = len(self.rep)
        self.ids[key] = n
        self.rep.append(s)
        self.mons.append(mons)
        self.parent.append(parent)
        self.via.append(via)
        self.calls.append(calls)
        self.depth.append(depth)
        self.expanded.append(False)
        self.out.append([])
        return n

    def path(self, n: int) -> list[Move]:
        out: list[Move] = []
        while n >= 0 and self.via[n] is not None:
            mv = self.via[n]
            assert mv is not None
            out.append(mv)
            n = self.parent[n]
        out.reverse()
        return out

    def state(self, n: int) -> LoopState:
        s = self.rep[n]
        if s is not None:
            return s
        s, _ = start(self.request, self.config, self.session)
        for mv in self.path(n):
            for ev in mv.events:
                s, _ = step(s, ev, self.config)
        return s


def explore(
    config: LoopConfig,
    *,
    rounds: int | None = DEFAULT_ROUNDS,
    deep_world: World | None = DEEP_WORLD,
    deep_rounds: int | None = None,
    request: Request | None = None,
    session: Session | None = None,
    world: World | None = None,
    invariants: Sequence[Invariant] | None = None,
    max_states: int | None = None,
    on_progress: Callable[[ExploreProgress], None] | None = None,
    progress_every: int = 2_000,
) -> Report:
    """Explore every abstract state reachable from ``start(request, config, session)``.

    Two tiers (specs/ ABS-3): a state reached within ``rounds`` model calls is expanded with
    the full alphabet ``world``; a state reached later, with ``deep_world`` up to
    ``deep_rounds`` model calls. ``rounds=None`` uses the full alphabet everywhere with no
    bound (the whole graph; affordable only for small alphabets); ``deep_world=None`` stops at
    ``rounds``.

    Args:
        config: the machine's config.
        rounds: the bound on model calls per path for the full alphabet.
        deep_world: the alphabet beyond ``rounds`` (default :data:`DEEP_WORLD`).
        deep_rounds: the bound on model calls for the deep tier (None: none).
        request: the user turn (default :data:`DEFAULT_REQUEST`).
        session: the session the turn continues (default a new one).
        world: the full alphabet (default :class:`World`).
        invariants: the checks (default a fresh :func:`catalogue`).
        max_states: stop after this many abstract states (the report says it is incomplete).
        on_progress: called with an :class:`ExploreProgress` now and then.
        progress_every: expansions between two progress calls.

    Returns:
        The :class:`Report`: counts, per-invariant results with the shortest counterexample
        of every broken one, and the longest progress-free path.
    """
    request = request or DEFAULT_REQUEST
    world = world or World()
    invs = tuple(invariants) if invariants is not None else catalogue()
    applicable = tuple(inv.applies(config) for inv in invs)
    absn = Abstraction(config)
    g = _Graph(config, request, session)
    exercised = [0] * len(invs)
    violations = [0] * len(invs)
    firsts: list[Counterexample | None] = [None] * len(invs)
    errors: list[Counterexample] = []
    transitions = 0

    def cex(node: int, extra: Sequence[Move], inv_id: str, text: str) -> Counterexample:
        path = [*g.path(node), *extra]
        return Counterexample(
            config=config,
            request=request,
            session=session,
            events=tuple(ev for mv in path for ev in mv.events),
            labels=tuple(mv.label for mv in path),
            invariant=inv_id,
            explanation=text,
        )

    def record(
        exs: Iterable[bool], bads: Iterable[str | None], node: int, extra: Sequence[Move]
    ) -> None:
        for i, (ex, bad) in enumerate(zip(exs, bads, strict=True)):
            if not applicable[i]:
                continue
            if ex:
                exercised[i] += 1
            if bad is not None:
                violations[i] += 1
                if firsts[i] is None:
                    firsts[i] = cex(node, extra, invs[i].id, bad)

    # the start transition
    s0, fx0 = start(request, config, session)
    o0 = Observation(config, None, None, fx0, s0)
    mons0, exs0, bads0 = check_step(invs, initial_monitors(invs, config, request, session), o0)
    root = g.add((absn.key(s0), mons0), s0, mons0, -1, None, len(o0.calls), 0)
    record(exs0, bads0, root, ())

    heap: list[tuple[int, int, int]] = [(g.calls[root], 0, root)]
    rounds_reached = 0
    cut = False
    expanded = 0
    layer = -1

    def report_progress(calls: int, deep: bool) -> None:
        assert on_progress is not None
        on_progress(
            ExploreProgress(
                states=len(g.rep),
                transitions=transitions,
                expanded=expanded,
                frontier=len(heap),
                rounds=calls,
                bound=deep_rounds if deep else rounds,
                deep=deep,
            )
        )

    while heap:
        calls, depth, n = heapq.heappop(heap)
        if g.expanded[n]:
            continue
        deep = rounds is not None and calls > rounds
        if deep and (deep_world is None or (deep_rounds is not None and calls > deep_rounds)):
            cut = True
            continue
        if max_states is not None and len(g.rep) >= max_states:
            cut = True
            break
        alphabet = deep_world if deep and deep_world is not None else world
        g.expanded[n] = True
        expanded += 1
        rounds_reached = max(rounds_reached, calls)
        if on_progress is not None and (calls != layer or expanded % progress_every == 0):
            layer = calls
            report_progress(calls, deep)
        s = g.state(n)
        g.rep[n] = None  # rebuilt from the path if a counterexample needs it
        if s.phase == "done":
            _probe_done(config, invs, g.mons[n], s, n, record)
            continue
        mons0 = g.mons[n]
        for mv in moves(s, config, alphabet):
            mons = mons0
            cur = s
            answers = 0
            flags = 0
            new_calls = 0
            failed = False
            for ev in mv.events:
                try:
                    nxt, fx = step(cur, ev, config)
                except Exception as exc:  # specs/ M-5: only IllegalEvent, and never for these
                    if len(errors) < 20:
                        errors.append(
                            cex(n, [mv], "M-5", f"step() raised {type(exc).__name__}: {exc}")
                        )
                    failed = True
                    break
                o = Observation(config, cur, ev, fx, nxt)
                mons, exs, bads = check_step(invs, mons, o)
                if any(exs) or any(b is not None for b in bads):
                    record(exs, bads, n, [mv])
                if o.current_call_event and isinstance(ev, (ModelResponseEnded, ModelCallFailed)):
                    answers += 1
                if o.progress:
                    flags |= _PROGRESS
                if isinstance(o.continued, StopHookBlocking):
                    flags |= _BLOCKING
                new_calls += len(o.calls)
                cur = nxt
            transitions += 1
            if failed:
                continue
            akey = absn.key(cur)
            key = akey if cur.phase == "done" else (akey, mons)
            dst = g.ids.get(key)
            if dst is None:
                dst = g.add(key, cur, mons, n, mv, calls + new_calls, depth + 1)
                heapq.heappush(heap, (calls + new_calls, depth + 1, dst))
            g.out[n].append((dst, mv.label, answers, flags))
    complete = not cut and not heap
    if on_progress is not None:
        report_progress(rounds_reached, rounds is not None and rounds_reached > rounds)

    # --- graph checks: progress-free cycles (INV-13), unbounded stop-hook blocking (INV-7) ----
    analysis = _Analysis(g, config, world, deep_world)
    lasso = analysis.progress_free_lasso()
    longest, witness_path = analysis.longest_progress_free()
    for i, inv in enumerate(invs):
        if not applicable[i]:
            continue
        if isinstance(inv, NoProgressFreeCycle):
            exercised[i] += analysis.spinning_edges
            if lasso is not None:
                violations[i] += 1
                firsts[i] = firsts[i] or _lasso_cex(
                    analysis, lasso, inv.id, "a cycle without progress: "
                )
        if isinstance(inv, StopHookCap) and config.stop_hook_block_cap is None:
            loop = analysis.blocking_cycle()
            if loop is not None:
                violations[i] += 1
                firsts[i] = firsts[i] or _lasso_cex(
                    analysis, loop, inv.id, "stop-hook blocking without a cap repeats forever: "
                )
    witness = None
    if witness_path is not None:
        start_node, labels = witness_path
        witness = _concrete(
            analysis,
            start_node,
            labels,
            "longest",
            f"the longest progress-free path: {longest} model answers without progress",
        )
    known = expected_breaks(config)
    results = tuple(
        InvariantResult(
            id=inv.id,
            title=inv.title,
            applicable=applicable[i],
            exercised=exercised[i],
            violations=violations[i],
            counterexample=firsts[i],
            expected=known.get(inv.id),
        )
        for i, inv in enumerate(invs)
    )
    return Report(
        config=config,
        request=request,
        rounds_bound=rounds,
        deep_rounds_bound=deep_rounds,
        deep=rounds is not None and deep_world is not None,
        states=len(g.rep),
        transitions=transitions,
        expanded=expanded,
        rounds_reached=rounds_reached,
        complete=complete,
        results=results,
        errors=tuple(errors),
        longest_progress_free=longest,
        longest_progress_free_witness=witness,
    )


def _probe_done(
    config: LoopConfig,
    invs: Sequence[Invariant],
    mons: tuple[Hashable, ...],
    s: LoopState,
    n: int,
    record: Callable[[Iterable[bool], Iterable[str | None], int, Sequence[Move]], None],
) -> None:
    """INV-12: after Finish, step() must refuse even an interrupt (legal in every other phase)."""
    probe = Interrupted(kind="hard")
    try:
        nxt, fx = step(s, probe, config)
    except IllegalEvent:
        return
    o = Observation(config, s, probe, fx, nxt)
    exs = [False] * len(invs)
    bads: list[str | None] = [None] * len(invs)
    for i, inv in enumerate(invs):
        if isinstance(inv, NothingAfterFinish):
            _, exs[i], bads[i] = inv.check(mons[i], o)
            bads[i] = bads[i] or "step() accepted an event after Finish"
    record(exs, bads, n, [Move("probe:after_finish", (probe,))])


class _Analysis:
    """Cycle and path analysis of the explored abstract graph."""

    def __init__(self, g: _Graph, config: LoopConfig, world: World, deep: World | None) -> None:
        self.g = g
        self.config = config
        self.worlds = (world,) if deep is None else (world, deep)
        n = len(g.rep)
        self.np_scc = _tarjan(n, lambda u: [d for d, _, _, f in g.out[u] if not f & _PROGRESS])
        self.spinning_edges = sum(
            1 for u in range(n) for _, _, a, f in g.out[u] if a and not f & _PROGRESS
        )

    def _cycle(
        self,
        comp: list[int],
        ok: Callable[[int, int, int, int], bool],
        need: Callable[[int, int, int], bool],
        candidates: int = 16,
    ) -> tuple[int, list[str]] | None:
        """The shortest lasso through an SCC: over the ``candidates`` nodes reached first, the
        one whose path plus shortest cycle (through an edge satisfying ``need``) is shortest."""
        g = self.g
        best: tuple[int, int, int, list[str]] | None = None
        for entry in sorted(comp, key=lambda u: (g.depth[u], g.calls[u]))[:candidates]:
            if best is not None and g.depth[entry] >= best[0]:
                break
            cyc = self._cycle_at(comp, entry, ok, need)
            if cyc is None:
                continue
            rank = (g.depth[entry] + len(cyc), g.calls[entry])
            if best is None or rank < (best[0], best[1]):
                best = (rank[0], rank[1], entry, cyc)
        return None if best is None else (best[2], best[3])

    def _cycle_at(
        self,
        comp: list[int],
        entry: int,
        ok: Callable[[int, int, int, int], bool],
        need: Callable[[int, int, int], bool],
    ) -> list[str] | None:
        """The shortest cycle through ``entry`` inside the SCC that uses a ``need`` edge."""
        g = self.g
        members = set(comp)
        # forward BFS from entry, backward BFS to entry, both inside the SCC over ok edges
        fwd: dict[int, tuple[int, str] | None] = {entry: None}
        dist_from: dict[int, int] = {entry: 0}
        q = deque([entry])
        while q:
            u = q.popleft()
            for d, lab, a, f in g.out[u]:
                if d in members and ok(u, d, a, f) and d not in fwd:
                    fwd[d] = (u, lab)
                    dist_from[d] = dist_from[u] + 1
                    q.append(d)
        rev: dict[int, list[tuple[int, str]]] = {}
        for u in comp:
            for d, lab, a, f in g.out[u]:
                if d in members and ok(u, d, a, f):
                    rev.setdefault(d, []).append((u, lab))
        back: dict[int, tuple[int, str] | None] = {entry: None}
        dist_to: dict[int, int] = {entry: 0}
        q = deque([entry])
        while q:
            v = q.popleft()
            for u, lab in rev.get(v, []):
                if u not in back:
                    back[u] = (v, lab)
                    dist_to[u] = dist_to[v] + 1
                    q.append(u)
        best: tuple[int, int, str, int] | None = None
        for u in comp:
            if u not in fwd:
                continue
            for d, lab, a, f in g.out[u]:
                if d in members and ok(u, d, a, f) and need(d, a, f) and d in back:
                    cost = dist_from[u] + 1 + dist_to[d]
                    if best is None or cost < best[0]:
                        best = (cost, u, lab, d)
        if best is None:
            return None
        _, u, lab, d = best
        labels: list[str] = []
        x = u
        while fwd[x] is not None:
            p, lb = fwd[x]  # type: ignore[misc]
            labels.append(lb)
            x = p
        labels.reverse()
        labels.append(lab)
        x = d
        while back[x] is not None:
            nx, lb = back[x]  # type: ignore[misc]
            labels.append(lb)
            x = nx
        return labels

    def progress_free_lasso(self) -> tuple[int, list[str]] | None:
        """The shortest-to-reach progress-free cycle that makes a model call, if any."""
        g = self.g
        found: list[tuple[tuple[int, int], tuple[int, list[str]]]] = []
        for comp in self.np_scc:
            members = set(comp)
            spinning = any(
                d in members and a and not f & _PROGRESS for u in comp for d, _, a, f in g.out[u]
            )
            if not spinning:
                continue
            cyc = self._cycle(comp, lambda u, d, a, f: not f & _PROGRESS, lambda d, a, f: a > 0)
            if cyc is not None:
                found.append((_rank(g, cyc)[:2], cyc))
        if not found:
            return None
        found.sort(key=lambda x: x[0])
        return found[0][1]

    def blocking_cycle(self) -> tuple[int, list[str]] | None:
        """A cycle through a stop_hook_blocking edge (progress-free ones first)."""
        g = self.g

        def non_progress(u: int, d: int, a: int, f: int) -> bool:
            return not f & _PROGRESS

        def any_edge(u: int, d: int, a: int, f: int) -> bool:
            return True

        every = _tarjan(len(g.rep), lambda u: [d for d, _, _, _ in g.out[u]])
        passes: list[tuple[list[list[int]], Callable[[int, int, int, int], bool]]] = [
            (self.np_scc, non_progress),
            (every, any_edge),
        ]
        for sccs, ok in passes:
            best = None
            for comp in sccs:
                members = set(comp)
                if not any(
                    d in members and f & _BLOCKING and ok(u, d, a, f)
                    for u in comp
                    for d, _, a, f in g.out[u]
                ):
                    continue
                cyc = self._cycle(comp, ok, lambda d, a, f: bool(f & _BLOCKING))
                if cyc is not None and (best is None or _rank(g, cyc) < _rank(g, best)):
                    best = cyc
            if best is not None:
                return best
        return None

    def longest_progress_free(self) -> tuple[int | None, tuple[int, list[str]] | None]:
        """Most model answers on a path without progress; None when a lasso makes it unbounded."""
        g = self.g
        comp_of: dict[int, int] = {}
        for ci, comp in enumerate(self.np_scc):
            for u in comp:
                comp_of[u] = ci
        best: list[int] = [0] * len(self.np_scc)
        choice: list[tuple[int, int, str] | None] = [None] * len(self.np_scc)
        # Tarjan emits SCCs sinks first: successors are final before their predecessors.
        for ci, comp in enumerate(self.np_scc):
            for u in comp:
                for d, lab, a, f in g.out[u]:
                    if f & _PROGRESS:
                        continue
                    cd = comp_of[d]
                    if cd == ci:
                        if a:
                            return None, None
                        continue
                    val = a + best[cd]
                    if val > best[ci] or (choice[ci] is None and val == best[ci] and a):
                        best[ci] = val
                        choice[ci] = (u, d, lab)
        if not best:
            return 0, None
        top = max(
            range(len(best)), key=lambda ci: (best[ci], -min(g.depth[u] for u in self.np_scc[ci]))
        )
        if best[top] == 0:
            return 0, None
        # walk the choices, joining them by paths inside each SCC
        start_node = min(self.np_scc[top], key=lambda u: (g.calls[u], g.depth[u]))
        labels: list[str] = []
        cur = start_node
        ci = top
        while choice[ci] is not None:
            u, d, lab = choice[ci]  # type: ignore[misc]
            labels.extend(self._inside(ci, cur, u, comp_of))
            labels.append(lab)
            cur = d
            ci = comp_of[d]
        return best[top], (start_node, labels)

    def _inside(self, ci: int, a: int, b: int, comp_of: dict[int, int]) -> list[str]:
        if a == b:
            return []
        g = self.g
        prev: dict[int, tuple[int, str] | None] = {a: None}
        q = deque([a])
        while q:
            u = q.popleft()
            if u == b:
                break
            for d, lab, _, f in g.out[u]:
                if not f & _PROGRESS and comp_of.get(d) == ci and d not in prev:
                    prev[d] = (u, lab)
                    q.append(d)
        out: list[str] = []
        x = b
        while prev.get(x) is not None:
            p, lb = prev[x]  # type: ignore[misc]
            out.append(lb)
            x = p
        out.reverse()
        return out


def _rank(g: _Graph, cyc: tuple[int, list[str]]) -> tuple[int, int, int]:
    """Lassos compare by total moves (path + loop), then model calls to the loop."""
    e = cyc[0]
    return (g.depth[e] + len(cyc[1]), g.calls[e], len(cyc[1]))


def _tarjan(n: int, succ: Callable[[int], Iterable[int]]) -> list[list[int]]:
    """Strongly connected components (iterative Tarjan), emitted sinks first."""
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work: list[tuple[int, Iterable[int]]] = [(root, iter(succ(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, iter(succ(w))))
                    advanced = True
                    break
                if on[w]:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp: list[int] = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def _concrete(
    a: _Analysis,
    node: int,
    labels: Sequence[str],
    inv_id: str,
    text: str,
    loop: bool = False,
) -> Counterexample:
    """Turn an abstract path (node + move labels) into concrete events: the path to the node,
    then each label's move recomputed from the concrete state reached so far (labels name a
    move independently of ids, so the loop of a lasso can be fed again and again)."""
    g = a.g
    prefix = g.path(node)
    s = g.state(node)
    out: list[Move] = []
    for lab in labels:
        mv = None
        for w in a.worlds:
            mv = next((m for m in moves(s, a.config, w) if m.label == lab), None)
            if mv is not None:
                break
        if mv is None:  # pragma: no cover - labels come from the same generator
            break
        for ev in mv.events:
            s, _ = step(s, ev, a.config)
        out.append(mv)
    events = tuple(ev for mv in prefix for ev in mv.events)
    loop_events = tuple(ev for mv in out for ev in mv.events)
    return Counterexample(
        config=a.config,
        request=g.request,
        session=g.session,
        events=events + loop_events,
        labels=tuple(m.label for m in prefix) + tuple(m.label for m in out),
        invariant=inv_id,
        explanation=text,
        loop_start=len(events) if loop else None,
        loop_move=len(prefix) if loop else None,
    )


def _lasso_cex(a: _Analysis, cyc: tuple[int, list[str]], inv_id: str, lead: str) -> Counterexample:
    node, labels = cyc
    s = a.g.state(node)
    text = (
        f"{lead}from phase {s.phase} (after {_tag(s.transition) or 'start'}) the moves "
        f"{' → '.join(labels)} lead back to the same abstract state"
    )
    return _concrete(a, node, labels, inv_id, text, loop=True)
