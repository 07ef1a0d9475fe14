"""The invariant catalogue (specs/invariants.md): each invariant with its monitor, checked on
every transition.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, ClassVar, Final

from steploop.reducer.config import LoopConfig
from steploop.reducer.context import collapse
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import AskPermission, Emit, Finish, StartTool
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    ModelBlockReceived,
    ModelResponseEnded,
    StopHooksFinished,
)
from steploop.reducer.explore.abstraction import saturate
from steploop.reducer.explore.memo import ChainMemo
from steploop.reducer.explore.observation import Observation, is_api_error
from steploop.reducer.explore.world import RECOVERABLE
from steploop.reducer.machine import MOT_NUDGE
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Message,
    SystemMessage,
    TextBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.state import LoopState, Request, Session
from steploop.reducer.transitions import (
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    NextTurn,
    PromptTooLong,
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
        return saturate(n, config.max_autocompact_failures)

    def check(self, mon: Any, o: Observation) -> Verdict:
        cfg = o.config
        limit = cfg.max_autocompact_failures
        n: int = mon
        s, e = o.state, o.event
        if s is not None and s.phase == "compacting" and isinstance(e, CompactionFailed):
            n = saturate(n + 1, limit)
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
            n = saturate(n + 1, limit)
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
            n = saturate(n + 1, 1)
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
            n = saturate(n + 1, 1)
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
        if o.config.legacy.stop_hooks_after_api_error:
            return mon, False, None  # VER-1: the versions before the guard ran them
        hooks = o.hooks
        bad = None
        if hooks and o.api_errors:
            bad = f"RunStopHooks in the step that emitted an API error ({o.api_errors[0].api_error.kind})"  # type: ignore[union-attr]
        elif hooks and is_api_error(hooks[0].conversation.last):
            bad = "RunStopHooks on a conversation that ends in an API-error message"
        elif o.api_errors and o.terminal is None and not _refusal_with_tools(o):
            bad = (
                f"an API error ({o.api_errors[0].api_error.kind}) was emitted and the turn went on"  # type: ignore[union-attr]
            )
        ex = bool(o.api_errors) and isinstance(o.terminal, (Completed, PromptTooLong, ImageError))
        return mon, ex, bad


def _refusal_with_tools(o: Observation) -> bool:
    """A refusal next to complete tool calls: the calls run and the turn goes on, the error
    stored after the round's results (R-REFUSAL-1)."""
    s = o.state
    return (
        s is not None
        and bool(s.round.slots)
        and all(m.api_error is not None and m.api_error.kind == "refusal" for m in o.api_errors)
    )


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
            n = saturate(n + 1, cap if cap is not None else 0)
        return n, ex, bad


class _Pairing:
    """Memoised tool_use / tool_result bookkeeping of conversations (per node)."""

    def __init__(self) -> None:
        self.memo: ChainMemo[tuple[frozenset[str], str | None, bool]] = ChainMemo(
            (frozenset(), None, False), lambda cur, c: self._add(cur, c.last)
        )

    def state(self, conv: Conversation) -> tuple[frozenset[str], str | None, bool]:
        """(unanswered tool_use ids, first problem, any tool_use seen)."""
        return self.memo.get(conv)

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
            nudges = saturate(nudges + 1, cfg.mot_recovery_limit)
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
            n = saturate(n + 1, mt)
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


class ResultsNeverReplaced(Invariant):
    """INV-14: a finished call's result is the one emitted and stored; no result is emitted twice."""

    id = "INV-14"
    title = "tool results never replaced nor emitted twice"

    def check(self, mon: Any, o: Observation) -> Verdict:
        s = o.state
        results = [
            (m.id, b)
            for m in o.emitted
            if isinstance(m, UserMessage) and m.origin == "tool_result"
            for b in m.content
            if isinstance(b, ToolResultBlock)
        ]
        if s is None or not s.round.slots:
            return mon, False, None
        before = {sl.tool_use_id: sl for sl in s.round.slots}
        # exercised: the round ends or is repaired while a finished call waits to be emitted
        ex = any(sl.status == "done" and sl.message is None for sl in s.round.slots) and (
            o.terminal is not None or o.continued is not None or bool(results)
        )
        seen: set[str] = set()
        for _mid, b in results:
            tid = b.tool_use_id
            if tid in seen:
                return mon, ex, f"the result of {tid} is emitted twice in one step"
            seen.add(tid)
            sl = before.get(tid)
            if sl is None:
                continue
            if sl.message is not None:
                return mon, ex, f"the result of {tid} was emitted already and is emitted again"
            if sl.status == "done" and not sl.synthetic and sl.result is not None:
                if b.content != sl.result.content or b.is_error != sl.result.is_error:
                    return mon, ex, f"the finished result of {tid} was replaced by {b.content!r}"
        return mon, ex, None


def _msg_number(mid: str) -> int | None:
    """K of a machine message id ``mK`` (ids from elsewhere, a compaction's, are not)."""
    if len(mid) > 1 and mid[0] == "m" and mid[1:].isdigit():
        return int(mid[1:])
    return None


class MessageIdsFromTheCounter(Invariant):
    """INV-15: every message id the machine gives is drawn from its counter, never twice."""

    id = "INV-15"
    title = "message ids drawn from the counter, never twice"

    def check(self, mon: Any, o: Observation) -> Verdict:
        s, nxt = o.state, o.next
        counter = nxt.ids.msg
        if s is not None and counter < s.ids.msg:
            return mon, True, f"the message counter went back from {s.ids.msg} to {counter}"
        fresh: list[Message] = [m for m in o.emitted if isinstance(m, _MESSAGE_TYPES)]
        appended = o.appended
        if appended is None:  # replaced (start, compaction, snip, collapse): read it all
            fresh.extend(nxt.conversation.messages())
        else:
            fresh.extend(appended)
        ids: dict[str, Message] = {}
        ex = False
        for m in fresh:
            k = _msg_number(m.id)
            if k is None:
                continue
            ex = True
            if k > counter:
                return (
                    mon,
                    ex,
                    f"message id {m.id} is ahead of the counter ({counter}): it will be given again",
                )
            other = ids.setdefault(m.id, m)
            if other is not m and _body(other) != _body(m):
                return mon, ex, f"two messages with id {m.id} in one step"
        return mon, ex, None


_MESSAGE_TYPES = (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)


def _body(m: Message) -> object:
    """What tells two messages apart (a stored record may differ from its emitted one only by
    the usage stamped on it)."""
    if isinstance(m, (UserMessage, AssistantMessage)):
        return (type(m), m.content)
    if isinstance(m, SystemMessage):
        return (type(m), m.text)
    return (type(m), m.data)


class FinalResponseCommitted(Invariant):
    """INV-16: a turn that ends keeps the last response it showed: every block the final round
    emitted and did not tombstone is in the conversation the next turn starts from."""

    id = "INV-16"
    title = "the final response is committed"

    def check(self, mon: Any, o: Observation) -> Verdict:
        s = o.state
        if o.terminal is None or s is None or o.continued is not None or not s.round.blocks:
            return mon, False, None  # (a round that a Continue ended was committed or dropped)
        tomb = {t.message_id for t in o.emitted if isinstance(t, Tombstone)}
        wanted = [b.id for b in s.round.blocks if b.id not in tomb]
        if not wanted:
            return mon, True, None
        stored = set()
        node: Conversation | None = o.next.conversation
        # the round's records sit at the end, behind at most its results and a few notices
        for _ in range(len(s.round.blocks) + 2 * len(s.round.slots) + 64):
            if node is None or node.last is None:
                break
            stored.add(node.last.id)
            node = node.prev
        missing = [mid for mid in wanted if mid not in stored]
        if missing:
            return (
                mon,
                True,
                f"the turn ended ({o.terminal.TAG}) without storing {', '.join(missing)}",
            )
        return mon, True, None


class PauseResumesBounded(Invariant):
    """INV-17: at most pause_turn_resumes paused responses resumed in a row (S-PAUSE-1)."""

    id = "INV-17"
    title = "pause_turn resumes bounded"

    def initial(self, config: LoopConfig, request: Request, session: Session | None) -> Hashable:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        cap = o.config.pause_turn_resumes
        n: int = mon  # paused responses without tool use in a row, before this one
        e, s = o.event, o.state
        if not (o.current_call_event and isinstance(e, ModelResponseEnded)):
            return n, False, None
        if e.stop_reason != "pause_turn":
            return 0, False, None
        assert s is not None
        if s.round.slots:  # a paused tool response runs its tools: neither resumed nor counted
            return n, False, None
        # resumed: sent again at once (a call, an auto-compaction first, or the blocking limit
        # of the new round), no Continue, no stop hooks
        resumed = (
            o.continued is None
            and not o.hooks
            and (bool(o.calls) or bool(o.compacts) or isinstance(o.terminal, BlockingLimit))
        )
        bad = None
        if resumed and n >= cap:
            bad = f"paused response {n + 1} in a row was resumed (the cap is {cap} resumes)"
        return saturate(n + 1, cap), n >= cap, bad


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
        ResultsNeverReplaced(),
        MessageIdsFromTheCounter(),
        FinalResponseCommitted(),
        PauseResumesBounded(),
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
