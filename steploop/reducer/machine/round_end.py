"""The no-tool-use path: the rungs of the ``ROUND_END`` ladder (the recovery ladders,
the API-error exit, the pause resume, the stop hooks, the token budget, completed) and the stop
hooks' answer. The ladder itself, as ordered data, is ``table.ROUND_END``.

A rung is a function (state, config, effects, now) -> (state, ended): ``ended`` False passes
the state on to the next rung."""

from __future__ import annotations

from typing import Final

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.context import collapse
from steploop.reducer.effects import Compact, Emit, RunStopHooks
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import StopHooksFinished
from steploop.reducer.machine import ending, pipeline, table
from steploop.reducer.machine.helpers import (
    FX,
    Rungs,
    attachment,
    commit,
    count,
    round_messages,
    system,
    user,
)
from steploop.reducer.messages import Message, Tombstone
from steploop.reducer.state import BudgetTracker, LoopState
from steploop.reducer.transitions import (
    CollapseDrainRetry,
    Completed,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    PromptTooLong,
    StopHookBlocking,
    StopHookPrevented,
    Terminal,
    TokenBudgetContinuation,
)

MOT_NUDGE: Final = (
    "Output token limit hit. Resume directly — no apology, no recap of what you were doing. "
    "Pick up mid-thought if that is where the cut happened. Break remaining work into smaller "
    "pieces."
)


def _withheld_kind(s: LoopState) -> str | None:
    w = s.round.withheld
    return w.api_error.kind if w is not None and w.api_error is not None else None


def prompt_too_long(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-PTL-1] a withheld prompt-too-long error: drain the staged collapses once
    [C-COLLAPSE-1] [G4], else one reactive compaction [C-REACTIVE-1], else surface it
    [T-PTL-1] (no stop hooks, [G2])."""
    if _withheld_kind(s) != "prompt_too_long":
        return s, False
    if cfg.gates.context_collapse and not isinstance(s.transition, CollapseDrainRetry):
        conv, freed, committed = collapse(
            s.conversation, count(s, cfg), None, 1, f"m{s.ids.msg + 1}"
        )
        if committed > 0:
            s = evolve(
                s,
                conversation=conv,
                tokens_freed=s.tokens_freed + freed,
                ids=evolve(s.ids, msg=s.ids.msg + 1),
            )
            return ending.take_continue(
                s, cfg, fx, CollapseDrainRetry, now, committed=committed
            ), True
    if cfg.gates.reactive_compact and not s.has_attempted_reactive_compact:
        return _reactive_compact(s, cfg, fx), True
    return surface(s, cfg, fx, PromptTooLong), True


def media(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-MEDIA-1] a withheld media error: one reactive compaction [G5], else surface it.
    (A media error is withheld only when media recovery is on: failures.on_call_failed decides.)"""
    if _withheld_kind(s) != "media":
        return s, False
    if not s.has_attempted_reactive_compact:
        return _reactive_compact(s, cfg, fx), True
    return surface(s, cfg, fx, ImageError), True


def api_error_exit(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[G1] an API error ends the turn without stop hooks; [VER-1] before the guard, the
    error joins the conversation and the stop hooks run on it (the rungs after this one)."""
    err = s.round.error_message
    if err is None:
        return s, False
    if cfg.legacy.stop_hooks_after_api_error:
        s = commit(s, [err])
        # committed: the round's records and the error are now in the conversation
        return evolve(s, round=evolve(s.round, blocks=(), results=(), error_message=None)), False
    s = commit(s, [err])
    return ending.finish(s, cfg, fx, Completed), True


def pause_turn(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[S-PAUSE-1] a paused server-tool loop is resumed (no transition), up to the cap of
    resumes in a row; past it a warning, and the pause ends the turn as end_turn does."""
    if s.round.stop_reason != "pause_turn" or not cfg.pause_turn_resumes:
        return s, False
    if s.pause_resumes < cfg.pause_turn_resumes:
        return _resume_paused(s, cfg, fx, now), True
    return _pause_cap_reached(s, cfg, fx), False


def stop_hooks(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-HOOK-1] run the stop hooks on the conversation with the response; wait for them."""
    hid = s.ids.hooks + 1
    s = evolve(
        s, phase="stop_hooks", ids=evolve(s.ids, hooks=hid), round=evolve(s.round, pending_id=hid)
    )
    fx.append(
        RunStopHooks(
            hooks_id=hid,
            conversation=s.conversation.extend(round_messages(s)),
            stop_hook_active=s.stop_hook_active,
        )
    )
    return s, True


def completed(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[T-COMPLETED-1] the response is committed and the turn ends."""
    s = commit(s)
    return ending.finish(s, cfg, fx, Completed), True


def _resume_paused(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    """[S-PAUSE-1] a paused server-tool loop is resumed: the paused response is committed and
    the conversation sent again (through the round pipeline), with no user message. Not a
    transition: ``state.transition`` stays, like a retry."""
    s = commit(s)
    s = evolve(s, pause_resumes=s.pause_resumes + 1)
    return pipeline.begin_round(s, cfg, fx, now)


def _pause_cap_reached(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    """[S-PAUSE-1] the cap of resumes in a row is reached: a warning (not stored)."""
    s, notice = system(
        s,
        "pause_turn_cap",
        f"The model paused its turn {s.pause_resumes + 1} times in a row; the cap of "
        f"{cfg.pause_turn_resumes} resumes is reached, so this pause ends the turn",
        "warning",
    )
    fx.append(Emit(item=notice))
    return s


def token_budget(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[C-BUDGET-1] continue below 90% of the budget unless returns diminish; sub-agents never."""
    budget = s.token_budget
    if cfg.gates.token_budget and budget is not None and budget > 0 and not cfg.is_subagent:
        tracker = s.budget
        turn = s.turn_output_tokens
        delta = turn - tracker.last_global_turn_tokens
        diminishing = (
            tracker.continuation_count >= cfg.budget_min_continuations
            and delta < cfg.budget_diminishing_tokens
            and tracker.last_delta_tokens < cfg.budget_diminishing_tokens
        )
        if not diminishing and turn * 100 < budget * cfg.budget_completion_pct:
            pct = (turn * 200 + budget) // (2 * budget)  # round(turn / budget * 100), half up
            s, nudge = user(
                s,
                f"Stopped at {pct}% of token target ({turn:,} / {budget:,}). Keep working — do not summarize.",
                origin="nudge",
                meta=True,
            )
            if not cfg.compat.unyielded_nudges:
                fx.append(Emit(item=nudge))
            s = commit(s, [nudge])
            s = evolve(
                s,
                budget=BudgetTracker(
                    continuation_count=tracker.continuation_count + 1,
                    last_delta_tokens=delta,
                    last_global_turn_tokens=turn,
                ),
            )
            return ending.take_continue(s, cfg, fx, TokenBudgetContinuation, now), True
    return s, False


def surface(s: LoopState, cfg: LoopConfig, fx: FX, terminal: type[Terminal]) -> LoopState:
    """Recovery failed: the withheld error is finally emitted and ends the turn."""
    w = s.round.withheld
    assert w is not None
    fx.append(Emit(item=w))
    s = commit(s, [w])
    return ending.finish(s, cfg, fx, terminal)


def _reactive_compact(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    cid = s.ids.compact + 1
    fx.append(
        Compact(
            compact_id=cid,
            conversation=s.conversation,
            trigger="reactive",
            pre_tokens=count(s, cfg),
        )
    )
    return evolve(
        s,
        phase="reactive_compacting",
        ids=evolve(s.ids, compact=cid),
        round=evolve(s.round, pending_id=cid),
    )


def mot_ladder(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-MOT-1] a withheld max-output-tokens error: [C-ESCALATE-1] escalate once, [C-MOT-1]
    then up to 3 nudges [G10], then surface it (the API-error exit, [G1])."""
    w = s.round.withheld
    if w is None or w.api_error is None or w.api_error.kind != "max_output_tokens":
        return s, False
    escalate = (
        cfg.gates.max_tokens_escalation
        and s.max_output_tokens_override is None
        and cfg.max_output_tokens_env_override is None
        and (cfg.compat.reescalate_after_recovery or not s.escalated)
    )
    if escalate:
        # the truncated attempt is dropped; its emitted blocks are tombstoned unless
        if not cfg.compat.no_tombstone_on_escalate:
            fx.extend(Emit(item=Tombstone(message_id=b.id)) for b in s.round.blocks)
        return ending.take_continue(s, cfg, fx, MaxOutputTokensEscalate, now), True
    if s.mot_recovery_count < cfg.mot_recovery_limit:
        attempt = s.mot_recovery_count + 1
        s, nudge = user(s, MOT_NUDGE, origin="nudge", meta=True)
        extra: list[Message] = [nudge]
        if cfg.compat.unyielded_nudges:  # nudge not emitted; the error stays in state
            w = s.round.withheld
            assert w is not None
            extra = [w, nudge]
        else:
            fx.append(Emit(item=nudge))
        s = commit(s, extra)
        return ending.take_continue(s, cfg, fx, MaxOutputTokensRecovery, now, attempt=attempt), True
    return surface(s, cfg, fx, Completed), True  # exhausted: API-error exit [G1]


def _stop_hook_summary(s: LoopState, e: StopHooksFinished, cfg: LoopConfig, fx: FX) -> LoopState:
    """Emit the stop-hook summary when a hook ran (never sent to the model); [VER-2] never
    in the versions that wrote none."""
    if e.hook_count and not cfg.legacy.no_stop_hook_summary:
        s, summary = system(
            s, "stop_hook_summary", f"Ran {e.hook_count} stop hook(s)", "suggestion"
        )
        fx.append(Emit(item=summary))
    return s


def on_stop_hooks(s: LoopState, e: StopHooksFinished, cfg: LoopConfig, fx: FX) -> LoopState:
    if e.hooks_id != s.round.pending_id:
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"stop hooks {e.hooks_id} are not running"
        )
    if e.error is not None:  # the hooks failed: warn and carry on as if they passed [R-HOOK-4]
        s, warn = system(s, "stop_hook_error", f"Stop hook failed: {e.error}", "warning")
        fx.append(Emit(item=warn))
    extra: list[Message] = []
    cap = cfg.stop_hook_block_cap
    capped = bool(e.blocking_errors) and cap is not None and s.stop_hook_blocks >= cap
    # [Q-13] the summary follows the hooks' own messages (the prevent attachment, the feedback)
    summary_last = cfg.compat.stop_hook_summary_last and (
        e.prevent or (bool(e.blocking_errors) and not capped)
    )
    if not summary_last:
        s = _stop_hook_summary(s, e, cfg, fx)
    if e.prevent:  # [T-PREVENT-1]
        s, att = attachment(
            s, "hook_stopped_continuation", (("hookName", "Stop"), ("stopReason", e.stop_reason))
        )
        fx.append(Emit(item=att))
        if summary_last:
            s = _stop_hook_summary(s, e, cfg, fx)
        s = commit(s, [*extra, att])
        return ending.finish(s, cfg, fx, StopHookPrevented)
    if e.blocking_errors:
        if capped:  # [G11] the cap
            s, notice = system(
                s,
                "stop_hook_cap",
                f"Stop hooks blocked {s.stop_hook_blocks + 1} times in this turn; the cap of {cap} blocking retries is reached",
                "warning",
            )
            fx.append(Emit(item=notice))
            s = commit(s)
            return ending.finish(s, cfg, fx, StopHookPrevented)
        for text in e.blocking_errors:  # [C-BLOCKING-1]
            s, fb = user(s, f"Stop hook feedback:\n{text}", origin="stop_hook_feedback", meta=True)
            fx.append(Emit(item=fb))
            extra.append(fb)
        if summary_last:
            s = _stop_hook_summary(s, e, cfg, fx)
        s = commit(s, extra)
        s = evolve(s, stop_hook_blocks=s.stop_hook_blocks + 1)
        return ending.take_continue(s, cfg, fx, StopHookBlocking, e.at_ms)
    return table.end_round(s, cfg, fx, e.at_ms, table.AFTER_HOOKS_AT)
