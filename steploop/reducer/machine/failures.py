"""Failed model calls: retries with backoff, the overflow retry, the streaming and model
fallbacks, the errors that end the turn or go down the recovery ladders [R-RETRY-*]."""

from __future__ import annotations

from typing import Any, Final

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CancelTools, Emit, Wait
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import ModelCallFailed, WaitElapsed
from steploop.reducer.machine import ending, pipeline, streaming, table
from steploop.reducer.machine.helpers import FX, PROMPT_TOO_LONG, api_error, commit, msg_id, system
from steploop.reducer.messages import (
    AssistantMessage,
    ErrorInfo,
    Message,
    RedactedThinkingBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    UserMessage,
)
from steploop.reducer.state import LoopState
from steploop.reducer.texts import api_error_text
from steploop.reducer.transitions import ImageError, ModelError

FALLBACK_RESULT: Final = "Model fallback triggered"
RETRYABLE: Final = frozenset({"rate_limited", "overloaded", "server_error", "connection"})


def discard_attempt(s: LoopState, fx: FX, *, tombstone: bool) -> LoopState:
    """Drop the attempt's blocks and tool slots (keeping the round's retry counters);
    running tools are cancelled and their late results ignored [G12]."""
    r = s.round
    if tombstone:
        fx.extend(Emit(item=Tombstone(message_id=b.id)) for b in r.blocks)
    _cancel_running(s, fx, "discarded")
    # the round's generation becomes the next attempt's: late results of this one are stale
    nxt = s.ids.generation + 1  # [R-TOOL-8]
    return evolve(
        s,
        round=evolve(
            r, generation=nxt, blocks=(), slots=(), results=(), sibling_error=None, hook_stop=False
        ),
    )


def _synthesize_results(
    s: LoopState, cfg: LoopConfig, fx: FX, text: str, *, store: bool
) -> LoopState:
    """One error tool_result for every tool_use of the attempt that has none yet [G13]."""
    r = s.round
    slots = list(r.slots)
    for i, sl in enumerate(slots):
        if sl.status != "done":
            slots[i] = evolve(
                sl,
                status="done",
                synthetic=True,
                result=ToolResultBlock(tool_use_id=sl.tool_use_id, content=text, is_error=True),
            )
    s = evolve(s, round=evolve(r, slots=tuple(slots)))
    if store:
        return streaming.release(s, cfg, fx, everything=True)
    # emitted only (the attempt is dropped from state): reference model-fallback behaviour
    for sl in slots:
        if sl.message is None and sl.result is not None:
            s, mid = msg_id(s)
            fx.append(Emit(item=UserMessage(id=mid, content=(sl.result,), origin="tool_result")))
    return s


def on_call_failed(s: LoopState, e: ModelCallFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    if streaming.late_call(s, e):
        return s
    kind = e.kind
    if kind == "context_overflow":  # [R-OVERFLOW-1]
        cap = _overflow_cap(s, e, cfg)
        if cap is not None:
            return _overflow_retry(s, cfg, fx, cap)
        kind = "invalid_request"  # the error stands [R-AUTH-1]
    if kind == "stream_broken" and s.round.streaming:
        return _stream_fallback(s, cfg, fx)
    if kind in RETRYABLE or kind == "stream_broken":
        return _retry(s, e, cfg, fx)
    if kind == "unknown":
        return _model_error(s, e, cfg, fx)
    if kind == "image_client":  # [T-IMAGE-1]
        s = _cancel_running(s, fx, "model_error")
        if not cfg.compat.image_error_skips_orphan_repair:
            s = _synthesize_results(s, cfg, fx, e.message or "Image error", store=True)
        s, err = api_error(
            s, "image_client", e.message or "Image could not be processed", e.status, cfg=cfg
        )
        fx.append(Emit(item=err))
        s = commit(s, [err])
        return ending.finish(s, cfg, fx, ImageError)
    # prompt too long, media, auth, invalid request: the attempt produced no usable output
    s = discard_attempt(s, fx, tombstone=True)
    if kind == "prompt_too_long":  # [R-PTL-1]
        s, err = api_error(
            s,
            "prompt_too_long",
            PROMPT_TOO_LONG,
            e.status,
            cfg=cfg,
            raw=e.message,
            details=e.message,
        )
        withhold = cfg.gates.reactive_compact or cfg.gates.context_collapse
    elif kind == "media":  # [R-MEDIA-1]
        s, err = api_error(
            s,
            "media",
            f"API Error: {e.message or 'media rejected'}",
            e.status,
            cfg=cfg,
            raw=e.message,
        )
        withhold = cfg.media_recovery_enabled
    else:
        text = api_error_text(cfg, kind, e.message)
        s, err = api_error(s, kind, text, e.status, cfg=cfg, raw=e.message)
        withhold = False
    if withhold:
        s = evolve(s, round=evolve(s.round, ended=True, withheld=err))
    else:
        fx.append(Emit(item=err))
        s = evolve(s, round=evolve(s.round, ended=True, error_message=err))
    return table.no_tool_use(s, cfg, fx, e.at_ms)


def _overflow_cap(s: LoopState, e: ModelCallFailed, cfg: LoopConfig) -> int | None:
    """[R-OVERFLOW-1] the output cap that fits: context limit - input - safety buffer; None
    when less than the floor fits, the numbers are missing or no retry is left."""
    if e.input_tokens is None or e.context_limit is None:
        return None
    if s.round.retry_attempt >= cfg.retry.max_retries:
        return None
    available = max(0, e.context_limit - e.input_tokens - cfg.overflow_safety_buffer)
    floor = cfg.floor_output_tokens
    if available < floor:
        return None
    return max(floor, available, (cfg.thinking_budget or 0) + 1)


def _overflow_retry(s: LoopState, cfg: LoopConfig, fx: FX, cap: int) -> LoopState:
    """[R-OVERFLOW-1] resend at once with the lowered cap (kept for the round's later
    attempts); no wait, no notice; it counts as a retry."""
    s = discard_attempt(s, fx, tombstone=True)
    r = s.round
    s = evolve(s, round=evolve(r, retry_attempt=r.retry_attempt + 1, max_tokens=cap))
    return pipeline.call_model(s, cfg, fx)


def _cancel_running(s: LoopState, fx: FX, reason: Any) -> LoopState:
    r = s.round
    running = tuple(sl.tool_use_id for sl in r.slots if sl.status in ("asking", "running"))
    if running:
        fx.append(CancelTools(generation=r.generation, tool_use_ids=running, reason=reason))
    return s


def _model_error(s: LoopState, e: ModelCallFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    """[T-MODEL-1] an unrecognised failure: results for the attempt's tool_uses, the error."""
    text = e.message or "Unknown model error"
    if not cfg.compat.model_error_leaves_tools_running:
        s = _cancel_running(s, fx, "model_error")
    s = _synthesize_results(s, cfg, fx, text, store=True)
    s, err = api_error(s, "unknown", f"API Error: {text}", e.status, cfg=cfg, raw=e.message)
    fx.append(Emit(item=err))
    s = commit(s, [err])
    return ending.finish(
        s, cfg, fx, ModelError, error=ErrorInfo(kind=e.kind, message=text, status=e.status)
    )


def _retry(s: LoopState, e: ModelCallFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    r = s.round
    policy = cfg.retry
    # [R-RETRY-6] a 529 counts toward the limit only for the models the policy names
    counted = e.kind == "overloaded" and policy.counts_529(s.model)
    c529 = r.consecutive_529 + 1 if counted else 0
    s = evolve(s, round=evolve(r, consecutive_529=c529))
    if counted and cfg.gates.fallback_on_overload and c529 >= policy.max_consecutive_529:
        fb = cfg.fallback_model
        if fb is not None and s.model != fb:
            return _model_fallback(s, cfg, fx, fb)
        return _give_up(s, e, cfg, fx)  # [R-RETRY-3] no fallback: cannot retry
    if r.retry_attempt >= policy.max_retries:
        return _give_up(s, e, cfg, fx)
    attempt = r.retry_attempt + 1
    ms = policy.delay_ms(attempt, e.retry_after_ms)  # [R-RETRY-1] deterministic backoff
    s = discard_attempt(s, fx, tombstone=True)
    s, notice = system(
        s,
        "api_error",
        f"API error ({e.status or e.kind}); retrying in {ms} ms (attempt {attempt} of {policy.max_retries})",
        "warning",
    )
    fx.append(Emit(item=notice))
    wid = s.ids.wait + 1
    fx.append(Wait(wait_id=wid, ms=ms))
    return evolve(
        s,
        phase="waiting_retry",
        ids=evolve(s.ids, wait=wid),
        round=evolve(s.round, retry_attempt=attempt, pending_id=wid),
    )


def _give_up(s: LoopState, e: ModelCallFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-RETRY-4] retries exhausted: an API-error message ends the turn without stop hooks."""
    s = discard_attempt(s, fx, tombstone=True)
    text = api_error_text(cfg, e.kind, e.message)
    s, err = api_error(s, e.kind, text, e.status, cfg=cfg, raw=e.message)
    fx.append(Emit(item=err))
    s = evolve(s, round=evolve(s.round, ended=True, error_message=err))
    return table.no_tool_use(s, cfg, fx, e.at_ms)


def _stream_fallback(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-RETRY-5] a broken stream: tombstone the partial attempt, retry without streaming."""
    s = discard_attempt(s, fx, tombstone=True)
    s = evolve(s, round=evolve(s.round, streaming=False, sticky_fallback=True))
    return pipeline.call_model(s, cfg, fx)


def _model_fallback(s: LoopState, cfg: LoopConfig, fx: FX, fallback: str) -> LoopState:
    """[R-RETRY-2] consecutive 529s with a fallback model: orphans answered, switch, retry."""
    s = _cancel_running(s, fx, "discarded")
    s = _synthesize_results(s, cfg, fx, FALLBACK_RESULT, store=False)
    s = discard_attempt(s, fx, tombstone=False)
    s, notice = system(
        s, "model_fallback", f"Switched to {fallback} due to high demand for {s.model}", "warning"
    )
    fx.append(Emit(item=notice))
    conv = s.conversation
    if cfg.strip_signatures_on_fallback:
        conv = _strip_thinking(conv)
    s = evolve(
        s,
        on_fallback=True,
        model=fallback,
        conversation=conv,
        # a new model: fresh retry counters, and the cap of the new call [R-OVERFLOW-1]
        round=evolve(s.round, retry_attempt=0, consecutive_529=0, max_tokens=0),
    )
    return pipeline.call_model(s, cfg, fx)


def _strip_thinking(conv: Conversation) -> Conversation:
    """Signatures are bound to the model: drop thinking blocks before a fallback [R-RETRY-2]."""
    out: list[Message] = []
    changed = False
    for m in conv.messages():
        if isinstance(m, AssistantMessage) and any(
            isinstance(b, (ThinkingBlock, RedactedThinkingBlock)) for b in m.content
        ):
            changed = True
            kept = tuple(
                b for b in m.content if not isinstance(b, (ThinkingBlock, RedactedThinkingBlock))
            )
            if kept:
                out.append(evolve(m, content=kept))
            continue
        out.append(m)
    return Conversation.of(out) if changed else conv


def on_wait_elapsed(s: LoopState, e: WaitElapsed, cfg: LoopConfig, fx: FX) -> LoopState:
    if e.wait_id != s.round.pending_id:
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"wait {e.wait_id} is not outstanding"
        )
    return pipeline.call_model(s, cfg, fx)
