"""Beginning a round: the pipeline of the reference order [R-ORDER-1] (snip, time-based
microcompact, context collapse, auto-compact, the blocking limit), then the model call."""

from __future__ import annotations

from steploop.reducer._replace import evolve
from steploop.reducer.config import QUERY_SOURCES_NO_BLOCKING, LoopConfig
from steploop.reducer.context import collapse, microcompact, snip
from steploop.reducer.effects import CallModel, Compact, Emit, TaskBudget
from steploop.reducer.machine import ending
from steploop.reducer.machine.helpers import FX, PROMPT_TOO_LONG, api_error, count
from steploop.reducer.state import LoopState, Round
from steploop.reducer.transitions import BlockingLimit


def _breaker_tripped(s: LoopState, cfg: LoopConfig) -> bool:
    return s.tracking.consecutive_failures >= cfg.max_autocompact_failures  # [G6]


def begin_round(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    """Begin a round: the pipeline of R-ORDER-1 (snip, time-based microcompact, context
    collapse, auto-compact), then the blocking limit and the model call. ``now``: the clock of
    the event that began it."""
    gates = cfg.gates
    # [S-SNIP-1] snip (steploop rule)
    if gates.history_snip and count(s, cfg) >= cfg.snip_threshold:
        conv, freed, boundary = snip(
            s.conversation,
            count(s, cfg),
            cfg.snip_threshold,
            cfg.snip_keep_rounds,
            f"m{s.ids.msg + 1}",
        )
        if boundary is not None:
            s = evolve(
                s,
                conversation=conv,
                tokens_freed=s.tokens_freed + freed,
                ids=evolve(s.ids, msg=s.ids.msg + 1),
            )
            fx.append(Emit(item=boundary))
    # [R-CTX-3] time-based microcompact: the clock is the triggering event's at_ms
    if (
        gates.time_based_microcompact
        and cfg.query_source.startswith("repl_main_thread")
        and s.last_assistant_at_ms is not None
        and now - s.last_assistant_at_ms >= cfg.microcompact_gap_ms
    ):
        conv, cleared = microcompact(s.conversation, cfg.microcompact_keep_recent)
        if cleared:
            s = evolve(s, conversation=conv)
    # [S-COLLAPSE-1] context collapse commit (steploop rule), nothing emitted
    if gates.context_collapse and count(s, cfg) >= cfg.collapse_threshold:
        conv, freed, committed = collapse(
            s.conversation,
            count(s, cfg),
            cfg.collapse_threshold,
            cfg.collapse_keep_rounds,
            f"m{s.ids.msg + 1}",
        )
        if committed:
            s = evolve(
                s,
                conversation=conv,
                tokens_freed=s.tokens_freed + freed,
                ids=evolve(s.ids, msg=s.ids.msg + 1),
            )
    # [R-CTX-4] auto-compact, guarded by the breaker [G6] and the recursion guards [G8]
    if (
        cfg.auto_compact_enabled
        and not _breaker_tripped(s, cfg)
        and count(s, cfg) >= cfg.autocompact_threshold
    ):
        cid = s.ids.compact + 1
        fx.append(
            Compact(
                compact_id=cid,
                conversation=s.conversation,
                trigger="auto",
                pre_tokens=count(s, cfg),
            )
        )
        return evolve(
            s,
            phase="compacting",
            ids=evolve(s.ids, compact=cid),
            # generation = the next call's, so the last round's results are stale [R-TOOL-8]
            round=Round(call_id=s.ids.call, generation=s.ids.generation + 1, pending_id=cid),
        )
    return blocking_then_call(s, cfg, fx)


def _blocking_applies(s: LoopState, cfg: LoopConfig) -> bool:
    """[T-BLOCKING-1] with the exemptions of [G7] and the fix of [Q-4]."""
    auto = cfg.auto_compact_enabled
    if s.compacted_this_round or cfg.query_source in QUERY_SOURCES_NO_BLOCKING:
        return False
    if auto and (cfg.gates.reactive_compact or cfg.gates.context_collapse):
        return False
    if auto and not cfg.compat.blocking_limit_with_auto_compact:
        return _breaker_tripped(s, cfg)
    return True


def blocking_then_call(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    """The end of the pipeline: the blocking limit ends the turn, else the round's first call."""
    if _blocking_applies(s, cfg) and count(s, cfg) >= cfg.blocking_limit:
        s, err = api_error(s, "blocking_limit", PROMPT_TOO_LONG, cfg=cfg)
        fx.append(Emit(item=err))
        fresh = Round(call_id=s.ids.call, generation=s.ids.generation + 1)  # no call was made
        s = evolve(s, conversation=s.conversation.append(err), round=fresh)
        return ending.finish(s, cfg, fx, BlockingLimit)
    return call_model(s, cfg, fx, fresh=True)


def call_model(s: LoopState, cfg: LoopConfig, fx: FX, *, fresh: bool = False) -> LoopState:
    """Issue CallModel. ``fresh``: the first call of a round (retry counters start at 0);
    otherwise a retry within the round, which keeps them."""
    call_id = s.ids.call + 1
    gen = s.ids.generation + 1
    r = s.round
    max_tokens = s.max_output_tokens_override or cfg.default_max_tokens
    if fresh:
        r = Round(call_id=call_id, generation=gen, max_tokens=max_tokens)
    else:
        # a retry keeps the round's cap: the same, or one lowered for an overflow [R-OVERFLOW-1]
        max_tokens = r.max_tokens or max_tokens
        r = Round(
            call_id=call_id,
            generation=gen,
            streaming=r.streaming,
            retry_attempt=r.retry_attempt,
            consecutive_529=r.consecutive_529,
            sticky_fallback=r.sticky_fallback,
            max_tokens=max_tokens,
        )
    s = evolve(
        s,
        phase="streaming",
        compacted_this_round=False,  # [G7] only the call right after a compaction skips the check
        ids=evolve(s.ids, call=call_id, generation=gen),
        round=r,
    )
    budget = None
    if s.task_budget_total is not None:
        budget = TaskBudget(total=s.task_budget_total, remaining=s.task_budget_remaining)
    fx.append(
        CallModel(
            call_id=call_id,
            model=s.model,
            conversation=s.conversation,
            max_tokens=max_tokens,
            streaming=r.streaming,
            task_budget=budget,
            query_source=cfg.query_source,
            thinking_budget=cfg.thinking_budget,  # [R-THINK-1]
        )
    )
    return s
