"""The machine: start(), step() and the transition table (specs/ rules cited as [X-n]).

Theory of operation
===================

A *user turn* starts with :func:`start` and ends with a ``Finish`` effect carrying one of the
10 Terminal transitions. Between them the turn is a sequence of *rounds*; each round makes one
model call (plus retries) and ends either in a Terminal or in one of the 7 Continue
transitions, which starts the next round.

A round runs the reference order [R-ORDER-1]:

    tool-result budget  (applied when a result is written, so it is frozen per tool_use_id)
    snip -> microcompact -> context collapse -> auto-compact -> blocking limit -> CallModel
    stream: blocks arrive; safe tools start mid-stream; non-safe ones after the end
    no tool use:  PTL ladder -> media ladder -> MOT ladder -> API-error exit (a refusal is
                  one) -> pause_turn resume -> stop hooks -> token budget -> completed
    tool use:     (interrupts abort) -> hook_stopped -> max_turns -> next_turn

The machine waits for the world in *phases*. ``TABLE`` below maps (phase, event type) to the
handler that applies; a pair missing from the table is a driver error and raises
:class:`IllegalEvent` naming the events the phase accepts. ``done`` accepts nothing. Everything
a table cannot say (which call or tool an event belongs to, late results for discarded slots)
is checked by the handlers, under the comment "not in the table".

Handlers never touch the outside world: they return a new state and append effects to ``fx``.
Ids come from per-kind counters in the state [R-ID-1]; time comes from ``event.at_ms``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeAlias, assert_never

import attrs

from steploop.reducer._replace import evolve as _fast_evolve
from steploop.reducer.config import QUERY_SOURCES_NO_BLOCKING, LoopConfig
from steploop.reducer.context import collapse, microcompact, persisted_preview, snip
from steploop.reducer.conversation import SYNTHETIC_MODEL, Conversation
from steploop.reducer.effects import (
    AcknowledgeCommands,
    AskPermission,
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Effect,
    Emit,
    Finish,
    PersistToolResult,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    TaskBudget,
    Wait,
)
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    MessagesInserted,
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
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    Message,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    UserMessage,
)
from steploop.reducer.state import (
    AutoCompactTracking,
    BudgetTracker,
    LoopState,
    Phase,
    Request,
    Round,
    Session,
    Slot,
)
from steploop.reducer.texts import error_category, interrupted_result, refusal_text, rejected_result
from steploop.reducer.transitions import (
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    Continue,
    HookStopped,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    StopHookPrevented,
    Terminal,
    TokenBudgetContinuation,
    Transition,
)

__all__ = [
    "AFTER_HOOKS",
    "OUTCOMES",
    "RESETS",
    "ROUND_END",
    "START",
    "TABLE",
    "TOOL_ROUND_END",
    "Reset",
    "Rung",
    "Stepped",
    "Write",
    "advance",
    "allowed_events",
    "begin",
    "start",
    "step",
]


class FX(list[Effect]):
    """The effects one call of start() or step() returns, in order, and ``passed``: every
    Continue and Terminal that call passed through, in order (a Continue whose next round ends
    at once in ``blocking_limit`` is followed by that Terminal in the same call)."""

    passed: tuple[Transition, ...] = ()


Stepped: TypeAlias = tuple[LoopState, tuple[Effect, ...], tuple[Transition, ...]]
"""What :func:`advance` and :func:`begin` return: the state, the effects, the transitions."""
Handler = Callable[[LoopState, Any, LoopConfig, FX], LoopState]

evolve = _fast_evolve

# User-visible texts. The ones the facts file quotes are kept verbatim so transcripts match.
INTERRUPT_MESSAGE: Final = "[Request interrupted by user]"
INTERRUPT_MESSAGE_TOOLS: Final = "[Request interrupted by user for tool use]"
MOT_NUDGE: Final = (
    "Output token limit hit. Resume directly — no apology, no recap of what you were doing. "
    "Pick up mid-thought if that is where the cut happened. Break remaining work into smaller "
    "pieces."
)
PROMPT_TOO_LONG: Final = "Prompt is too long"
FALLBACK_RESULT: Final = "Model fallback triggered"
# The texts that differ between steploop's and Claude Code's style live in steploop/reducer/texts.py.
MOT_REASONS: Final = frozenset({"max_tokens", "model_context_window_exceeded"})
RETRYABLE: Final = frozenset({"rate_limited", "overloaded", "server_error", "connection"})


# =============================================================================================
# Small helpers
# =============================================================================================


def _msg_id(s: LoopState) -> tuple[LoopState, str]:
    n = s.ids.msg + 1
    return evolve(s, ids=evolve(s.ids, msg=n)), f"m{n}"


def _count(s: LoopState) -> int:
    """Context size the thresholds compare against [R-TOK-1]."""
    return max(0, s.conversation.token_count() - s.tokens_freed)


def _breaker_tripped(s: LoopState, cfg: LoopConfig) -> bool:
    return s.tracking.consecutive_failures >= cfg.max_autocompact_failures  # [G6]


def _api_error(
    s: LoopState,
    kind: str,
    text: str,
    status: int | None = None,
    *,
    cfg: LoopConfig,
    raw: str = "",
    details: str = "",
) -> tuple[LoopState, AssistantMessage]:
    """A synthetic assistant API-error message (never sent back to the model). ``raw`` is the
    API's own words: they decide the category [R-CATEGORY-1] (a failure with none, or a
    message the machine writes itself, is categorised by its kind and status alone);
    ``details`` what the text leaves out."""
    s, mid = _msg_id(s)
    category = error_category(kind, status, raw) if cfg.texts == "claude_code" else None
    return s, AssistantMessage(
        id=mid,
        response_id=f"r{s.round.call_id}",
        model=SYNTHETIC_MODEL,
        content=(TextBlock(text=text),),
        stop_reason="stop_sequence",
        api_error=ErrorInfo(
            kind=kind, message=text, status=status, category=category, details=details
        ),
    )


def _user(
    s: LoopState, text: str, *, origin: str, meta: bool = False
) -> tuple[LoopState, UserMessage]:
    s, mid = _msg_id(s)
    return s, UserMessage(id=mid, content=(TextBlock(text=text),), is_meta=meta, origin=origin)


def _system(
    s: LoopState, subtype: str, text: str, level: str = "info"
) -> tuple[LoopState, SystemMessage]:
    s, mid = _msg_id(s)
    return s, SystemMessage(id=mid, subtype=subtype, text=text, level=level)


def _attachment(
    s: LoopState, kind: str, data: tuple[tuple[str, str | int | bool | None], ...]
) -> tuple[LoopState, AttachmentMessage]:
    s, mid = _msg_id(s)
    return s, AttachmentMessage(id=mid, attachment_type=kind, data=data)


def _round_messages(s: LoopState) -> list[Message]:
    """The attempt's block records (usage stamped on the last) and its emitted results."""
    r = s.round
    out: list[Message] = list(r.blocks)
    if out and r.usage is not None:
        last = out[-1]
        assert isinstance(last, AssistantMessage)
        out[-1] = evolve(last, usage=r.usage, stop_reason=r.stop_reason)
    out.extend(r.results)
    return out


def _commit(s: LoopState, extra: list[Message] | tuple[Message, ...] = ()) -> LoopState:
    """Append the round's messages (and ``extra``) to the conversation."""
    conv = s.conversation.extend(_round_messages(s)).extend(extra)
    freed = 0 if s.round.usage is not None else s.tokens_freed
    return evolve(s, conversation=conv, tokens_freed=freed)


def _desc(slot: Slot) -> str:
    for key in ("command", "file_path", "pattern"):
        v = slot.input.get(key)
        if isinstance(v, str):
            return v if len(v) <= 40 else v[:40] + "…"
    return ""


# =============================================================================================
# start(): open a user turn
# =============================================================================================


def start(
    request: Request, config: LoopConfig, session: Session | None = None
) -> tuple[LoopState, tuple[Effect, ...]]:
    """Open a user turn.

    Args:
        request: the user's prompt and the turn's optional budgets.
        config: the frozen configuration snapshot for the whole turn.
        session: what the previous turn left (``state.session()``), or None for a new session.

    Returns:
        The first state and its effects: the prompt is emitted, then the first round's
        pipeline runs (usually ending in ``CallModel``).
    """
    s, fx = _open(request, config, session)
    return s, tuple(fx)


def _open(request: Request, config: LoopConfig, session: Session | None) -> tuple[LoopState, FX]:
    session = session or Session()
    content = (
        (TextBlock(text=request.prompt),) if isinstance(request.prompt, str) else request.prompt
    )
    failures = session.autocompact_failures if config.autocompact_breaker_scope == "session" else 0
    s = LoopState(
        phase="streaming",
        conversation=session.conversation,
        model=session.model or config.model,  # a fallback model is sticky [R-RETRY-2]
        on_fallback=session.model is not None,
        token_budget=request.token_budget,
        task_budget_total=request.task_budget,
        last_assistant_at_ms=session.last_assistant_at_ms,
        tracking=AutoCompactTracking(consecutive_failures=failures),  # [G6] scope
        ids=session.ids,
    )
    s, mid = _msg_id(s)
    prompt = UserMessage(id=mid, content=content, origin="prompt")
    s = evolve(s, conversation=s.conversation.append(prompt))
    fx = FX((Emit(item=prompt),))
    return _begin_round(s, config, fx, request.at_ms), fx


def begin(request: Request, config: LoopConfig, session: Session | None = None) -> Stepped:
    """:func:`start`, with every transition it passed through (the first round can end at once
    in ``blocking_limit``): ``(state, effects, transitions)``."""
    s, fx = _open(request, config, session)
    return s, tuple(fx), fx.passed


# =============================================================================================
# The round pipeline [R-ORDER-1]
# =============================================================================================


def _begin_round(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    gates = cfg.gates
    # [S-SNIP-1] snip (steploop rule)
    if gates.history_snip and _count(s) >= cfg.snip_threshold:
        conv, freed, boundary = snip(
            s.conversation, _count(s), cfg.snip_threshold, cfg.snip_keep_rounds, f"m{s.ids.msg + 1}"
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
    if gates.context_collapse and _count(s) >= cfg.collapse_threshold:
        conv, freed, committed = collapse(
            s.conversation,
            _count(s),
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
        and _count(s) >= cfg.autocompact_threshold
    ):
        cid = s.ids.compact + 1
        fx.append(
            Compact(
                compact_id=cid, conversation=s.conversation, trigger="auto", pre_tokens=_count(s)
            )
        )
        return evolve(
            s,
            phase="compacting",
            ids=evolve(s.ids, compact=cid),
            # generation = the next call's, so the last round's results are stale [R-TOOL-8]
            round=Round(call_id=s.ids.call, generation=s.ids.generation + 1, pending_id=cid),
        )
    return _blocking_then_call(s, cfg, fx)


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


def _blocking_then_call(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    if _blocking_applies(s, cfg) and _count(s) >= cfg.blocking_limit:
        s, err = _api_error(s, "blocking_limit", PROMPT_TOO_LONG, cfg=cfg)
        fx.append(Emit(item=err))
        fresh = Round(call_id=s.ids.call, generation=s.ids.generation + 1)  # no call was made
        s = evolve(s, conversation=s.conversation.append(err), round=fresh)
        return _finish(s, cfg, fx, BlockingLimit)
    return _call_model(s, cfg, fx, fresh=True)


def _call_model(s: LoopState, cfg: LoopConfig, fx: FX, *, fresh: bool = False) -> LoopState:
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
        )
    )
    return s


# =============================================================================================
# Streaming: blocks, tools, the end of the response
# =============================================================================================


def _late_call(s: LoopState, e: ModelBlockReceived | ModelResponseEnded | ModelCallFailed) -> bool:
    """Not in the table: an event of an earlier (cancelled or retried) call is a no-op;
    an event of a call never made is a driver error."""
    if e.call_id < s.round.call_id:
        return True
    if e.call_id > s.round.call_id:
        raise IllegalEvent(
            s.phase, e, allowed_events(s.phase), f"no model call {e.call_id} was made"
        )
    return False


def on_block(s: LoopState, e: ModelBlockReceived, cfg: LoopConfig, fx: FX) -> LoopState:
    if _late_call(s, e):
        return s
    r = s.round
    if r.sticky_fallback and cfg.compat.sticky_streaming_fallback and r.blocks:
        # the reference re-runs the tombstone-and-clear on every later item
        s = _discard_attempt(s, fx, tombstone=True)
        r = s.round
    block = e.block
    if not e.input_complete:
        return s  # [R-TOOL-4] a truncated tool (or server tool) input is never emitted or stored
    n = s.ids.msg + 1
    model = e.model or s.model  # [R-MODEL-1] the serving model, once the client knows it
    rec = AssistantMessage(id=f"m{n}", response_id=f"r{r.call_id}", model=model, content=(block,))
    fx.append(Emit(item=rec))
    blocks = (*r.blocks, rec)
    ids = evolve(s.ids, msg=n)
    if isinstance(block, ToolUseBlock):
        traits = e.tool or ToolTraits(known=False)
        slot = Slot(tool_use_id=block.id, name=block.name, input=block.input, traits=traits)
        if not traits.known:  # [R-TOOL-6]
            slot = evolve(
                slot,
                status="done",
                result=ToolResultBlock(
                    tool_use_id=block.id,
                    content=f"<tool_use_error>Error: No such tool available: {block.name}</tool_use_error>",
                    is_error=True,
                ),
            )
        elif r.sibling_error is not None:  # [R-TOOL-7] later calls of an errored round
            slot = evolve(
                slot,
                status="done",
                synthetic=True,
                result=_sibling_result(block.id, r.sibling_error),
            )
        s = evolve(s, round=evolve(r, blocks=blocks, slots=(*r.slots, slot)), ids=ids)
        s = _schedule(s, cfg, fx)
        return _release(s, cfg, fx)
    return evolve(s, round=evolve(r, blocks=blocks), ids=ids)


def _sibling_result(tool_use_id: str, desc: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=tool_use_id,
        content=f"<tool_use_error>Cancelled: parallel tool call {desc} errored</tool_use_error>",
        is_error=True,
    )


def _schedule(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-TOOL-1..3] start what may start: safe tools together (mid-stream when streaming
    execution is on), a non-safe tool alone, after the response ended and everything before it."""
    r = s.round
    for sl in r.slots:
        if sl.status == "queued":
            break
    else:
        return s  # nothing waits to start (the common case: checked without allocating)
    executing = [sl for sl in r.slots if sl.status in ("asking", "running")]
    busy = bool(executing)
    all_safe = all(sl.traits.concurrency_safe for sl in executing)
    slots = list(r.slots)
    changed = False
    for i, sl in enumerate(slots):
        if sl.status != "queued":
            continue
        safe = sl.traits.concurrency_safe
        # the reference starts a non-safe tool mid-stream too, when nothing executes
        allowed_now = r.ended or (
            cfg.gates.streaming_tool_execution
            and (safe or cfg.compat.nonsafe_tools_start_mid_stream)
        )
        if allowed_now and (not busy or (safe and all_safe)):
            slots[i] = evolve(sl, status="asking")
            fx.append(
                AskPermission(
                    generation=r.generation,
                    tool_use_id=sl.tool_use_id,
                    name=sl.name,
                    input=sl.input,
                )
            )
            busy = True
            all_safe = all_safe and safe
            changed = True
        elif not safe:
            break  # a waiting non-safe tool blocks everything after it
    if not changed:
        return s
    return evolve(s, round=evolve(r, slots=tuple(slots)))


def _release(s: LoopState, cfg: LoopConfig, fx: FX, *, everything: bool = False) -> LoopState:
    """[R-TOOL-5] emit finished results in tool_use order (or, under [Q-5], the reference's
    order, where safe tools may overtake each other). ``everything``: the round is over, so
    emit every result there is, in tool_use order."""
    r = s.round
    slots = list(r.slots)
    results = list(r.results)
    out_of_order = cfg.compat.out_of_order_safe_results
    changed = False
    n = s.ids.msg
    for i, sl in enumerate(slots):
        if sl.message is not None:
            continue
        if sl.status == "done":
            assert sl.result is not None
            n += 1
            msg = UserMessage(id=f"m{n}", content=(sl.result,), origin="tool_result")
            fx.append(Emit(item=msg))
            slots[i] = evolve(sl, message=msg)
            results.append(msg)
            changed = True
        elif everything:
            continue
        elif not out_of_order or (
            sl.status in ("asking", "running") and not sl.traits.concurrency_safe
        ):
            break
    if not changed:
        return s
    return evolve(
        s, ids=evolve(s.ids, msg=n), round=evolve(r, slots=tuple(slots), results=tuple(results))
    )


def _find_slot(s: LoopState, e: ToolFinished | PermissionAnswered) -> tuple[int, Slot] | None:
    """Not in the table: which slot a tool event is for. None means a late result for a
    discarded slot (a legal no-op, [R-TOOL-8]); a slot never created is a driver error."""
    r = s.round
    if e.generation < r.generation:
        return None
    if e.generation > r.generation:
        raise IllegalEvent(
            s.phase, e, allowed_events(s.phase), f"no tool generation {e.generation} exists"
        )
    for i, sl in enumerate(r.slots):
        if sl.tool_use_id == e.tool_use_id:
            if sl.status == "done" and sl.synthetic:
                return None
            return i, sl
    raise IllegalEvent(
        s.phase, e, allowed_events(s.phase), f"no tool call {e.tool_use_id!r} in this round"
    )


def _slot_in(
    s: LoopState, e: ToolFinished | PermissionAnswered, status: str
) -> tuple[int, Slot] | None:
    """The slot ``e`` is for, which must be in ``status``; None for a late, discarded one."""
    found = _find_slot(s, e)
    if found is not None and found[1].status != status:
        raise IllegalEvent(
            s.phase,
            e,
            allowed_events(s.phase),
            f"tool {e.tool_use_id!r} is {found[1].status}, not {status}",
        )
    return found


def _set_slot(s: LoopState, i: int, slot: Slot) -> LoopState:
    slots = list(s.round.slots)
    slots[i] = slot
    return evolve(s, round=evolve(s.round, slots=tuple(slots)))


def on_permission(s: LoopState, e: PermissionAnswered, cfg: LoopConfig, fx: FX) -> LoopState:
    found = _slot_in(s, e, "asking")
    if found is None:
        return s
    i, sl = found
    r = s.round
    if e.decision == "allow":
        fx.append(
            StartTool(
                generation=r.generation, tool_use_id=sl.tool_use_id, name=sl.name, input=sl.input
            )
        )
        return _set_slot(s, i, evolve(sl, status="running"))
    if e.decision == "deny_by_rule":  # [R-PERM-2] an error result; the round goes on
        why = f" {e.reason}" if e.reason else ""
        result = ToolResultBlock(
            tool_use_id=sl.tool_use_id,
            content=f"Permission to use {sl.name} was denied by a rule.{why}",
            is_error=True,
        )
        s = _set_slot(s, i, evolve(sl, status="done", result=result))
        return _after_slot_change(s, cfg, fx, e.at_ms)
    if e.decision == "rejected_by_user":  # [R-PERM-3] the user's rejection aborts the round
        text = rejected_result(cfg, e.reason)  # [R-TEXTS-1]
        result = ToolResultBlock(tool_use_id=sl.tool_use_id, content=text, is_error=True)
        s = _set_slot(s, i, evolve(sl, status="done", result=result))
        return _interrupt(s, cfg, fx, "hard", e.at_ms)
    assert_never(e.decision)


def _budget_result(s: LoopState, sl: Slot, e: ToolFinished, cfg: LoopConfig, fx: FX) -> str:
    """[R-CTX-0] tool-result budget: an oversized result is replaced by a preview and a
    reference, decided once when the result arrives (so frozen per tool_use_id)."""
    content = e.content
    limit = sl.traits.max_result_chars
    if not cfg.gates.tool_result_budget or limit is None:
        return content
    per_tool = min(limit, cfg.default_max_result_chars)
    so_far = sum(len(x.result.content) for x in s.round.slots if x.result is not None)
    if len(content) > per_tool or so_far + len(content) > cfg.per_message_result_chars:
        fx.append(PersistToolResult(tool_use_id=sl.tool_use_id, content=content))
        return persisted_preview(sl.tool_use_id, content, cfg.preview_chars)
    return content


def on_tool_finished(s: LoopState, e: ToolFinished, cfg: LoopConfig, fx: FX) -> LoopState:
    found = _slot_in(s, e, "running")
    if found is None:
        return s
    i, sl = found
    content = _budget_result(s, sl, e, cfg, fx)
    # [T-HOOK-1] / [Q-2]: the reference ignores hook stops of tools finishing mid-stream
    hook = e.hook_stopped and not (cfg.compat.ignore_midstream_hook_stop and not s.round.ended)
    result = ToolResultBlock(tool_use_id=sl.tool_use_id, content=content, is_error=e.is_error)
    done = evolve(sl, status="done", result=result, hook_stopped=hook)
    if hook:
        done = evolve(done, hook_event=e.hook_event, hook_reason=e.hook_stop_reason)
    s = _set_slot(s, i, done)
    if hook:
        s = evolve(s, round=evolve(s.round, hook_stop=True))
    if e.is_error and sl.traits.cancels_siblings_on_error and s.round.sibling_error is None:
        s = _cancel_siblings(s, sl, fx)
    return _after_slot_change(s, cfg, fx, e.at_ms)


def _cancel_siblings(s: LoopState, failed: Slot, fx: FX) -> LoopState:
    """[R-TOOL-7] a sibling-cancelling tool failed: every other unfinished call of the round
    gets a synthetic result, running ones are cancelled."""
    r = s.round
    desc = f"{failed.name}({_desc(failed)})"
    slots = list(r.slots)
    cancel: list[str] = []
    for i, sl in enumerate(slots):
        if sl.status == "done":
            continue
        if sl.status in ("asking", "running"):
            cancel.append(sl.tool_use_id)
        slots[i] = evolve(
            sl, status="done", synthetic=True, result=_sibling_result(sl.tool_use_id, desc)
        )
    if cancel:
        fx.append(
            CancelTools(generation=r.generation, tool_use_ids=tuple(cancel), reason="sibling_error")
        )
    return evolve(s, round=evolve(r, slots=tuple(slots), sibling_error=desc))


def _after_slot_change(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    s = _schedule(s, cfg, fx)
    s = _release(s, cfg, fx)
    r = s.round
    if not r.ended or not all(sl.status == "done" for sl in r.slots):
        return s
    if s.phase == "running_tools":
        return _after_tools(s, cfg, fx, now)
    if s.phase == "draining":
        assert r.pending_terminal is not None
        return _finish_aborted(s, cfg, fx, type(r.pending_terminal))
    return s


def on_response_ended(s: LoopState, e: ModelResponseEnded, cfg: LoopConfig, fx: FX) -> LoopState:
    if _late_call(s, e):
        return s
    r = s.round
    r = evolve(r, ended=True, stop_reason=e.stop_reason, usage=e.usage, blocks=_served(r, e))
    s = evolve(
        s,
        round=r,
        turn_output_tokens=s.turn_output_tokens + e.usage.output_tokens,
        last_assistant_at_ms=e.at_ms,
        last_usage=e.usage,
        pause_resumes=s.pause_resumes if e.stop_reason == "pause_turn" else 0,  # [S-PAUSE-1]
    )
    if e.stop_reason in MOT_REASONS:  # [R-MOT-1] withheld until recovery fails [G9]
        if e.stop_reason == "max_tokens":
            text = (
                f"API Error: Claude's response exceeded the {r.max_tokens} output token maximum. "
                "To configure this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment variable."
            )
        else:
            text = "API Error: The model has reached its context window limit."
        s, err = _api_error(s, "max_output_tokens", text, cfg=cfg)
        s = evolve(s, round=evolve(s.round, withheld=err))
    elif e.stop_reason == "refusal":
        s = _refusal(s, e, cfg, fx)
    s = _emit_ready_summary(s, fx)  # [R-SUM-1] the previous round's summary, after the stream
    s = _schedule(s, cfg, fx)
    s = _release(s, cfg, fx)
    if s.round.slots:
        s = evolve(s, phase="running_tools")
        if all(sl.status == "done" for sl in s.round.slots):
            return _after_tools(s, cfg, fx, e.at_ms)
        return s
    return _no_tool_use(s, cfg, fx, e.at_ms)


def _refusal(s: LoopState, e: ModelResponseEnded, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-REFUSAL-1] the model refused: an API-error message (the usage-policy text), emitted
    at once; the turn then ends as an API error does (G1), without stop hooks."""
    text = refusal_text(cfg, s.model, e.stop_details)
    s, err = _api_error(s, "refusal", text, cfg=cfg, details=e.stop_details or "")
    fx.append(Emit(item=err))
    return evolve(s, round=evolve(s.round, error_message=err))


def _served(r: Round, e: ModelResponseEnded) -> tuple[AssistantMessage, ...]:
    """[R-MODEL-1] the response's records name the model that served it (``e.model``)."""
    served = e.model
    if not served or all(b.model == served for b in r.blocks):
        return r.blocks
    return tuple(evolve(b, model=served) for b in r.blocks)


def _emit_ready_summary(s: LoopState, fx: FX) -> LoopState:
    if s.summary_text is None:
        return s
    fx.append(
        Emit(item=ToolUseSummary(summary=s.summary_text, preceding_tool_use_ids=s.summary_tool_ids))
    )
    return evolve(s, summary_text=None, summary_id=0, summary_tool_ids=())


# =============================================================================================
# Failures, retries and fallback [R-RETRY-*]
# =============================================================================================


def _discard_attempt(s: LoopState, fx: FX, *, tombstone: bool) -> LoopState:
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
        return _release(s, cfg, fx, everything=True)
    # emitted only (the attempt is dropped from state): reference model-fallback behaviour
    for sl in slots:
        if sl.message is None and sl.result is not None:
            s, mid = _msg_id(s)
            fx.append(Emit(item=UserMessage(id=mid, content=(sl.result,), origin="tool_result")))
    return s


def on_call_failed(s: LoopState, e: ModelCallFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    if _late_call(s, e):
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
        s, err = _api_error(
            s, "image_client", e.message or "Image could not be processed", e.status, cfg=cfg
        )
        fx.append(Emit(item=err))
        s = _commit(s, [err])
        return _finish(s, cfg, fx, ImageError)
    # prompt too long, media, auth, invalid request: the attempt produced no usable output
    s = _discard_attempt(s, fx, tombstone=True)
    if kind == "prompt_too_long":  # [R-PTL-1]
        s, err = _api_error(
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
        s, err = _api_error(
            s,
            "media",
            f"API Error: {e.message or 'media rejected'}",
            e.status,
            cfg=cfg,
            raw=e.message,
        )
        withhold = cfg.media_recovery_enabled
    else:
        s, err = _api_error(
            s, kind, f"API Error: {e.message or kind}", e.status, cfg=cfg, raw=e.message
        )
        withhold = False
    if withhold:
        s = evolve(s, round=evolve(s.round, ended=True, withheld=err))
    else:
        fx.append(Emit(item=err))
        s = evolve(s, round=evolve(s.round, ended=True, error_message=err))
    return _no_tool_use(s, cfg, fx, e.at_ms)


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
    s = _discard_attempt(s, fx, tombstone=True)
    r = s.round
    s = evolve(s, round=evolve(r, retry_attempt=r.retry_attempt + 1, max_tokens=cap))
    return _call_model(s, cfg, fx)


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
    s, err = _api_error(s, "unknown", f"API Error: {text}", e.status, cfg=cfg, raw=e.message)
    fx.append(Emit(item=err))
    s = _commit(s, [err])
    return _finish(
        s, cfg, fx, ModelError, error=ErrorInfo(kind=e.kind, message=text, status=e.status)
    )


def _retry(s: LoopState, e: ModelCallFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    r = s.round
    policy = cfg.retry
    c529 = r.consecutive_529 + 1 if e.kind == "overloaded" else 0
    s = evolve(s, round=evolve(r, consecutive_529=c529))
    if (
        e.kind == "overloaded"
        and cfg.gates.fallback_on_overload
        and c529 >= policy.max_consecutive_529
    ):
        fb = cfg.fallback_model
        if fb is not None and s.model != fb:
            return _model_fallback(s, cfg, fx, fb)
        return _give_up(s, e, cfg, fx)  # [R-RETRY-3] no fallback: cannot retry
    if r.retry_attempt >= policy.max_retries:
        return _give_up(s, e, cfg, fx)
    attempt = r.retry_attempt + 1
    ms = policy.delay_ms(attempt, e.retry_after_ms)  # [R-RETRY-1] deterministic backoff
    s = _discard_attempt(s, fx, tombstone=True)
    s, notice = _system(
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
    s = _discard_attempt(s, fx, tombstone=True)
    s, err = _api_error(
        s, e.kind, f"API Error: {e.message or e.kind}", e.status, cfg=cfg, raw=e.message
    )
    fx.append(Emit(item=err))
    s = evolve(s, round=evolve(s.round, ended=True, error_message=err))
    return _no_tool_use(s, cfg, fx, e.at_ms)


def _stream_fallback(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-RETRY-5] a broken stream: tombstone the partial attempt, retry without streaming."""
    s = _discard_attempt(s, fx, tombstone=True)
    s = evolve(s, round=evolve(s.round, streaming=False, sticky_fallback=True))
    return _call_model(s, cfg, fx)


def _model_fallback(s: LoopState, cfg: LoopConfig, fx: FX, fallback: str) -> LoopState:
    """[R-RETRY-2] consecutive 529s with a fallback model: orphans answered, switch, retry."""
    s = _cancel_running(s, fx, "discarded")
    s = _synthesize_results(s, cfg, fx, FALLBACK_RESULT, store=False)
    s = _discard_attempt(s, fx, tombstone=False)
    s, notice = _system(
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
    return _call_model(s, cfg, fx)


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
            s.phase, e, allowed_events(s.phase), f"wait {e.wait_id} is not outstanding"
        )
    return _call_model(s, cfg, fx)


# =============================================================================================
# The no-tool-use path: recovery ladders, stop hooks, token budget
# =============================================================================================


# The round-end ladder [R-ORDER-1], as ordered data: the no-tool-use path tries each rung in
# turn until one ends the round. A rung is a function (state, config, effects, now) -> (state,
# ended): ``ended`` False passes the state on to the next rung. Each names its rule and what it
# may lead to (a transition, or a phase it waits in), which ``steploop graph --static`` draws.
# The stop-hooks rung waits for the hooks; their answer (on_stop_hooks) goes on from the rung
# after it. The tool-use path has a ladder of its own (TOOL_ROUND_END).

Rungs = tuple[LoopState, bool]


@attrs.frozen
class Rung:
    rule: str
    name: str
    run: Callable[[LoopState, LoopConfig, FX, int], Rungs]
    exits: tuple[object, ...]  # transition classes, and phases it leaves the machine in
    waits: bool = False  # it waits for the world; the rungs after it run on the answer


def _withheld_kind(s: LoopState) -> str | None:
    w = s.round.withheld
    return w.api_error.kind if w is not None and w.api_error is not None else None


def _prompt_too_long(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-PTL-1] a withheld prompt-too-long error: drain the staged collapses once
    [C-COLLAPSE-1] [G4], else one reactive compaction [C-REACTIVE-1], else surface it
    [T-PTL-1] (no stop hooks, [G2])."""
    if _withheld_kind(s) != "prompt_too_long":
        return s, False
    if cfg.gates.context_collapse and not isinstance(s.transition, CollapseDrainRetry):
        conv, freed, committed = collapse(s.conversation, _count(s), None, 1, f"m{s.ids.msg + 1}")
        if committed > 0:
            s = evolve(
                s,
                conversation=conv,
                tokens_freed=s.tokens_freed + freed,
                ids=evolve(s.ids, msg=s.ids.msg + 1),
            )
            return _continue(s, cfg, fx, CollapseDrainRetry, now, committed=committed), True
    if cfg.gates.reactive_compact and not s.has_attempted_reactive_compact:
        return _reactive_compact(s, cfg, fx), True
    return _surface(s, cfg, fx, PromptTooLong), True


def _media(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-MEDIA-1] a withheld media error: one reactive compaction [G5], else surface it.
    (A media error is withheld only when media recovery is on: on_call_failed decides.)"""
    if _withheld_kind(s) != "media":
        return s, False
    if not s.has_attempted_reactive_compact:
        return _reactive_compact(s, cfg, fx), True
    return _surface(s, cfg, fx, ImageError), True


def _api_error_exit(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[G1] an API error ends the turn without stop hooks."""
    err = s.round.error_message
    if err is None:
        return s, False
    s = _commit(s, [err])
    return _finish(s, cfg, fx, Completed), True


def _pause_turn(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[S-PAUSE-1] a paused server-tool loop is resumed (no transition), up to the cap of
    resumes in a row; past it a warning, and the pause ends the turn as end_turn does."""
    if s.round.stop_reason != "pause_turn" or not cfg.pause_turn_resumes:
        return s, False
    if s.pause_resumes < cfg.pause_turn_resumes:
        return _resume_paused(s, cfg, fx, now), True
    return _pause_cap_reached(s, cfg, fx), False


def _stop_hooks(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-HOOK-1] run the stop hooks on the conversation with the response; wait for them."""
    hid = s.ids.hooks + 1
    s = evolve(
        s, phase="stop_hooks", ids=evolve(s.ids, hooks=hid), round=evolve(s.round, pending_id=hid)
    )
    fx.append(
        RunStopHooks(
            hooks_id=hid,
            conversation=s.conversation.extend(_round_messages(s)),
            stop_hook_active=s.stop_hook_active,
        )
    )
    return s, True


def _completed(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[T-COMPLETED-1] the response is committed and the turn ends."""
    s = _commit(s)
    return _finish(s, cfg, fx, Completed), True


def _resume_paused(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    """[S-PAUSE-1] a paused server-tool loop is resumed: the paused response is committed and
    the conversation sent again (through the round pipeline), with no user message. Not a
    transition: ``state.transition`` stays, like a retry."""
    s = _commit(s)
    s = evolve(s, pause_resumes=s.pause_resumes + 1)
    return _begin_round(s, cfg, fx, now)


def _pause_cap_reached(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    """[S-PAUSE-1] the cap of resumes in a row is reached: a warning (not stored)."""
    s, notice = _system(
        s,
        "pause_turn_cap",
        f"The model paused its turn {s.pause_resumes + 1} times in a row; the cap of "
        f"{cfg.pause_turn_resumes} resumes is reached, so this pause ends the turn",
        "warning",
    )
    fx.append(Emit(item=notice))
    return s


def _token_budget(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
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
            s, nudge = _user(
                s,
                f"Stopped at {pct}% of token target ({turn:,} / {budget:,}). Keep working — do not summarize.",
                origin="nudge",
                meta=True,
            )
            if not cfg.compat.unyielded_nudges:
                fx.append(Emit(item=nudge))
            s = _commit(s, [nudge])
            s = evolve(
                s,
                budget=BudgetTracker(
                    continuation_count=tracker.continuation_count + 1,
                    last_delta_tokens=delta,
                    last_global_turn_tokens=turn,
                ),
            )
            return _continue(s, cfg, fx, TokenBudgetContinuation, now), True
    return s, False


def _surface(s: LoopState, cfg: LoopConfig, fx: FX, terminal: type[Terminal]) -> LoopState:
    """Recovery failed: the withheld error is finally emitted and ends the turn."""
    w = s.round.withheld
    assert w is not None
    fx.append(Emit(item=w))
    s = _commit(s, [w])
    return _finish(s, cfg, fx, terminal)


def _reactive_compact(s: LoopState, cfg: LoopConfig, fx: FX) -> LoopState:
    cid = s.ids.compact + 1
    fx.append(
        Compact(
            compact_id=cid, conversation=s.conversation, trigger="reactive", pre_tokens=_count(s)
        )
    )
    return evolve(
        s,
        phase="reactive_compacting",
        ids=evolve(s.ids, compact=cid),
        round=evolve(s.round, pending_id=cid),
    )


def _mot_ladder(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
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
        return _continue(s, cfg, fx, MaxOutputTokensEscalate, now), True
    if s.mot_recovery_count < cfg.mot_recovery_limit:
        attempt = s.mot_recovery_count + 1
        s, nudge = _user(s, MOT_NUDGE, origin="nudge", meta=True)
        extra: list[Message] = [nudge]
        if cfg.compat.unyielded_nudges:  # nudge not emitted; the error stays in state
            w = s.round.withheld
            assert w is not None
            extra = [w, nudge]
        else:
            fx.append(Emit(item=nudge))
        s = _commit(s, extra)
        return _continue(s, cfg, fx, MaxOutputTokensRecovery, now, attempt=attempt), True
    return _surface(s, cfg, fx, Completed), True  # exhausted: API-error exit [G1]


ROUND_END: Final[tuple[Rung, ...]] = (
    Rung(
        "R-PTL-1",
        "prompt-too-long ladder",
        _prompt_too_long,
        (CollapseDrainRetry, "reactive_compacting", PromptTooLong),
    ),
    Rung("R-MEDIA-1", "media ladder", _media, ("reactive_compacting", ImageError)),
    Rung(
        "R-MOT-1",
        "max-output-tokens ladder",
        _mot_ladder,
        (MaxOutputTokensEscalate, MaxOutputTokensRecovery, Completed),
    ),
    Rung("G1", "API-error exit", _api_error_exit, (Completed,)),
    Rung("S-PAUSE-1", "pause_turn resume", _pause_turn, ("compacting", "streaming", BlockingLimit)),
    Rung("R-HOOK-1", "stop hooks", _stop_hooks, ("stop_hooks",), waits=True),
    Rung("C-BUDGET-1", "token budget", _token_budget, (TokenBudgetContinuation,)),
    Rung("T-COMPLETED-1", "completed", _completed, (Completed,)),
)
"""The no-tool-use path in the reference's order: PTL -> media -> MOT -> API-error exit (a
refusal is one) -> pause_turn resume -> stop hooks -> token budget -> completed."""

_AFTER_HOOKS: Final = next(i for i, r in enumerate(ROUND_END) if r.waits) + 1


_ROUND_END_RUNS: Final = tuple(r.run for r in ROUND_END)


def _round_end(s: LoopState, cfg: LoopConfig, fx: FX, now: int, start: int = 0) -> LoopState:
    for run in _ROUND_END_RUNS[start:] if start else _ROUND_END_RUNS:
        s, ended = run(s, cfg, fx, now)
        if ended:
            return s
    raise AssertionError("the last rung always ends the round")  # pragma: no cover


def _no_tool_use(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    """The no-tool-use path [R-ORDER-1]: ROUND_END from its first rung (the recovery ladders,
    the API-error exit [G1], the pause resume, stop hooks, the token budget [C-BUDGET-1],
    completed [T-COMPLETED-1])."""
    return _round_end(s, cfg, fx, now)


def _stop_hook_summary(s: LoopState, e: StopHooksFinished, fx: FX) -> LoopState:
    """Emit the stop-hook summary when a hook ran (never sent to the model)."""
    if e.hook_count:
        s, summary = _system(
            s, "stop_hook_summary", f"Ran {e.hook_count} stop hook(s)", "suggestion"
        )
        fx.append(Emit(item=summary))
    return s


def on_stop_hooks(s: LoopState, e: StopHooksFinished, cfg: LoopConfig, fx: FX) -> LoopState:
    if e.hooks_id != s.round.pending_id:
        raise IllegalEvent(
            s.phase, e, allowed_events(s.phase), f"stop hooks {e.hooks_id} are not running"
        )
    if e.error is not None:  # the hooks failed: warn and carry on as if they passed [R-HOOK-4]
        s, warn = _system(s, "stop_hook_error", f"Stop hook failed: {e.error}", "warning")
        fx.append(Emit(item=warn))
    extra: list[Message] = []
    cap = cfg.stop_hook_block_cap
    capped = bool(e.blocking_errors) and cap is not None and s.stop_hook_blocks >= cap
    # [Q-13] the summary follows the hooks' own messages (the prevent attachment, the feedback)
    summary_last = cfg.compat.stop_hook_summary_last and (
        e.prevent or (bool(e.blocking_errors) and not capped)
    )
    if not summary_last:
        s = _stop_hook_summary(s, e, fx)
    if e.prevent:  # [T-PREVENT-1]
        s, att = _attachment(
            s, "hook_stopped_continuation", (("hookName", "Stop"), ("stopReason", e.stop_reason))
        )
        fx.append(Emit(item=att))
        if summary_last:
            s = _stop_hook_summary(s, e, fx)
        s = _commit(s, [*extra, att])
        return _finish(s, cfg, fx, StopHookPrevented)
    if e.blocking_errors:
        if capped:  # [G11] the cap
            s, notice = _system(
                s,
                "stop_hook_cap",
                f"Stop hooks blocked {s.stop_hook_blocks + 1} times in this turn; the cap of {cap} blocking retries is reached",
                "warning",
            )
            fx.append(Emit(item=notice))
            s = _commit(s)
            return _finish(s, cfg, fx, StopHookPrevented)
        for text in e.blocking_errors:  # [C-BLOCKING-1]
            s, fb = _user(s, f"Stop hook feedback:\n{text}", origin="stop_hook_feedback", meta=True)
            fx.append(Emit(item=fb))
            extra.append(fb)
        if summary_last:
            s = _stop_hook_summary(s, e, fx)
        s = _commit(s, extra)
        s = evolve(s, stop_hook_blocks=s.stop_hook_blocks + 1)
        return _continue(s, cfg, fx, StopHookBlocking, e.at_ms)
    return _round_end(s, cfg, fx, e.at_ms, _AFTER_HOOKS)


# =============================================================================================
# The tool-use path
# =============================================================================================


def _tools_done(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-SUM-1] the round's results are committed and its summary requested."""
    r = s.round
    # a refusal that came with tool calls: its emitted error is stored too [R-REFUSAL-1]
    extra: list[Message] = [] if r.error_message is None else [r.error_message]
    if r.withheld is not None and cfg.compat.unyielded_nudges:
        extra.append(r.withheld)  # a withheld MOT error followed by tool use stays in state
    s = _commit(s, extra)
    ids = tuple(sl.tool_use_id for sl in r.slots)
    if cfg.gates.tool_use_summaries and not cfg.is_subagent:  # [R-SUM-1]
        sid = s.ids.summary + 1
        fx.append(SummarizeToolUse(summary_id=sid, tool_use_ids=ids, conversation=s.conversation))
        s = evolve(
            s,
            ids=evolve(s.ids, summary=sid),
            summary_id=sid,
            summary_text=None,
            summary_tool_ids=ids,
        )
    return s, False


def _hook_stopped(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[T-HOOK-1] a tool's hook stopped the turn."""
    if not s.round.hook_stop:
        return s, False
    s = _hook_stop_attachments(s, fx)
    return _finish(s, cfg, fx, HookStopped), True


def _queued_commands(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-CMD-1] queued commands ride along as attachments (and the breaker's turn count)."""
    if s.tracking.compacted:
        s = evolve(s, tracking=evolve(s.tracking, turn_counter=s.tracking.turn_counter + 1))
    if s.queued_commands:
        consumed = list(s.consumed_commands)
        for cid, text in s.queued_commands:
            s, att = _attachment(s, "queued_command", (("commandId", cid), ("prompt", text)))
            fx.append(Emit(item=att))
            s = evolve(s, conversation=s.conversation.append(att))
            consumed.append(cid)
        s = evolve(s, queued_commands=(), consumed_commands=tuple(consumed))
    return s, False


def _max_turns(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[T-MAXTURNS-1] the next round would pass max_turns."""
    next_count = s.turn_count + 1
    if cfg.max_turns is None or next_count <= cfg.max_turns:
        return s, False
    s = _max_turns_attachment(s, cfg, fx, next_count)
    return _finish(s, cfg, fx, MaxTurns, turn_count=next_count), True


def _next_turn(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[C-NEXT-1] the next round."""
    return _continue(s, cfg, fx, NextTurn, now), True


TOOL_ROUND_END: Final[tuple[Rung, ...]] = (
    Rung("R-SUM-1", "results committed, summary requested", _tools_done, ()),
    Rung("T-HOOK-1", "hook_stopped", _hook_stopped, (HookStopped,)),
    Rung("R-CMD-1", "queued commands", _queued_commands, ()),
    Rung("T-MAXTURNS-1", "max_turns", _max_turns, (MaxTurns,)),
    Rung("C-NEXT-1", "next_turn", _next_turn, (NextTurn,)),
)
"""The tool-use path once every tool of the round is done (interrupts abort before it):
hook_stopped -> max_turns -> next_turn."""


_TOOL_ROUND_END_RUNS: Final = tuple(r.run for r in TOOL_ROUND_END)


def _after_tools(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> LoopState:
    for run in _TOOL_ROUND_END_RUNS:
        s, ended = run(s, cfg, fx, now)
        if ended:
            return s
    raise AssertionError("the last rung always ends the round")  # pragma: no cover


HOOK_STOP_DEFAULTS: Final = {
    "PreToolUse": "Execution stopped by hook",
    "PostToolUse": "Execution stopped by PostToolUse hook",
}
"""The attachment's message when the hook gave no stop reason (the reference's texts)."""


def _hook_stop_attachments(s: LoopState, fx: FX) -> LoopState:
    """[T-HOOK-1] one ``hook_stopped_continuation`` per call a hook stopped, in tool_use
    order, as the reference builds it: the message, the hook's name (event:tool), the call."""
    for sl in s.round.slots:
        if not sl.hook_stopped:
            continue
        event = sl.hook_event or "PostToolUse"
        data: tuple[tuple[str, str | int | bool | None], ...] = (
            (
                "message",
                sl.hook_reason or HOOK_STOP_DEFAULTS.get(event, "Execution stopped by hook"),
            ),
            ("hookName", f"{event}:{sl.name}"),
            ("toolUseID", sl.tool_use_id),
            ("hookEvent", event),
        )
        s, att = _attachment(s, "hook_stopped_continuation", data)
        fx.append(Emit(item=att))
        s = evolve(s, conversation=s.conversation.append(att))
    return s


def _max_turns_attachment(s: LoopState, cfg: LoopConfig, fx: FX, next_count: int) -> LoopState:
    assert cfg.max_turns is not None
    s, att = _attachment(
        s, "max_turns_reached", (("maxTurns", cfg.max_turns), ("turnCount", next_count))
    )
    fx.append(Emit(item=att))
    return evolve(s, conversation=s.conversation.append(att))


# =============================================================================================
# Continue and Terminal
# =============================================================================================


# [C-RESET-1] What each Continue writes besides ``transition``, as data: a field and its new
# value, a constant or one of the writes below. A field not listed is kept. The rows are in
# specs/rules.md's order; ``steploop graph --static`` and the tests read them.


@attrs.frozen
class Write:
    """A written value that is not a constant: ``how`` names it (the table's wording),
    ``expr`` is the expression it stands for, of ``s``, ``cfg`` and the transition ``t``
    (``{field}`` is the row's field)."""

    how: str
    expr: str = attrs.field(repr=False)

    def __repr__(self) -> str:
        return self.how


PLUS_ONE: Final = Write("+1", "s.{field} + 1")  # the field's value plus one
ATTEMPT: Final = Write("attempt", "t.attempt")  # the transition's attempt
ESCALATED: Final = Write("escalated cap", "cfg.escalated_max_output_tokens")
RESET: Final = Write("reset", "AutoCompactTracking()")  # a fresh tracking
KEPT_OR_CLEARED: Final = Write(  # kept; cleared under
    "kept*", "False if cfg.compat.stop_hook_active_cleared_by_recovery else s.{field}"
)


@attrs.frozen
class Reset:
    """One row of the reset table: the Continue, the rule that defines it, what it writes."""

    transition: type[Continue]
    rule: str
    writes: tuple[tuple[str, object], ...]


RESETS: Final[tuple[Reset, ...]] = (
    Reset(
        NextTurn,
        "C-NEXT-1",
        (
            ("mot_recovery_count", 0),
            ("has_attempted_reactive_compact", False),
            ("max_output_tokens_override", None),
            ("turn_count", PLUS_ONE),
        ),
    ),
    Reset(
        ReactiveCompactRetry,
        "C-REACTIVE-1",
        (
            ("has_attempted_reactive_compact", True),
            ("max_output_tokens_override", None),
            ("tracking", RESET),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
    Reset(
        MaxOutputTokensRecovery,
        "C-MOT-1",
        (
            ("mot_recovery_count", ATTEMPT),
            ("max_output_tokens_override", None),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
    Reset(
        MaxOutputTokensEscalate,
        "C-ESCALATE-1",
        (
            ("max_output_tokens_override", ESCALATED),
            ("escalated", True),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
    Reset(
        CollapseDrainRetry,
        "C-COLLAPSE-1",
        (("max_output_tokens_override", None), ("stop_hook_active", KEPT_OR_CLEARED)),
    ),
    Reset(
        StopHookBlocking,
        "C-BLOCKING-1",
        (
            ("mot_recovery_count", 0),
            # [G3] has_attempted_reactive_compact is kept across stop-hook retries
            ("max_output_tokens_override", None),
            ("stop_hook_active", True),
        ),
    ),
    Reset(
        TokenBudgetContinuation,
        "C-BUDGET-1",
        (
            ("mot_recovery_count", 0),
            ("has_attempted_reactive_compact", False),
            ("max_output_tokens_override", None),
            ("stop_hook_active", KEPT_OR_CLEARED),
        ),
    ),
)


def _compile_reset(row: Reset) -> Callable[[LoopState, LoopConfig, Any], LoopState]:
    """One row as a function, compiled once: ``evolve(s, transition=t, <the row's writes>)``,
    what a hand-written branch per Continue would be (step() runs it every round)."""
    ns: dict[str, Any] = {"evolve": evolve, "AutoCompactTracking": AutoCompactTracking}
    args = []
    for n, (name, value) in enumerate(row.writes):
        if isinstance(value, Write):
            args.append(f"{name}=({value.expr.format(field=name)})")
        else:
            ns[f"C{n}"] = value
            args.append(f"{name}=C{n}")
    src = f"def apply(s, cfg, t):\n    return evolve(s, transition=t, {', '.join(args)})\n"
    exec(compile(src, f"<reset {row.transition.__name__}>", "exec"), ns)
    apply: Callable[[LoopState, LoopConfig, Any], LoopState] = ns["apply"]
    return apply


_RESET_APPLY: Final[dict[type, Callable[[LoopState, LoopConfig, Any], LoopState]]] = {
    row.transition: _compile_reset(row) for row in RESETS
}


def _continue(
    s: LoopState, cfg: LoopConfig, fx: FX, kind: type[Continue], now: int, **payload: int
) -> LoopState:
    """Take a Continue: the only place one is made. Write what the reset table says it writes
    [C-RESET-1] and start the next round. ``s.conversation`` already holds the messages the next round
    starts from."""
    t = kind(**payload)
    s = _RESET_APPLY[kind](s, cfg, t)
    fx.passed += (t,)
    return _begin_round(s, cfg, fx, now)


def _finish(
    s: LoopState, cfg: LoopConfig, fx: FX, kind: type[Terminal], **payload: Any
) -> LoopState:
    """End the turn with a Terminal, the only place one is made: the summary if one is
    ready, acknowledgements, then Finish (last)."""
    terminal: Terminal = kind(**payload)
    aborted = kind is AbortedStreaming or kind is AbortedTools
    if s.summary_text is not None and not (
        aborted and cfg.compat.summary_dropped_on_abort
    ):
        s = _emit_ready_summary(s, fx)
    if s.consumed_commands:  # [R-CMD-2] acknowledged only on a normal return
        fx.append(AcknowledgeCommands(command_ids=s.consumed_commands))
    fx.append(Finish(terminal=terminal))
    fx.passed += (terminal,)
    return evolve(s, phase="done", transition=terminal)


# =============================================================================================
# Interrupts [I-*]
# =============================================================================================


def _abort_slots(s: LoopState, cfg: LoopConfig, fx: FX, kind: str) -> tuple[LoopState, bool]:
    """Give unfinished calls their synthetic result (the rejection text with the streaming
    executor, else ``Interrupted by user``: [I-2], [R-TEXTS-1]); under a submit-interrupt,
    running ``block`` tools keep running (draining). Returns (state, whether anything drains)."""
    text = interrupted_result(cfg)
    r = s.round
    slots = list(r.slots)
    cancel: list[str] = []
    drains = False
    for i, sl in enumerate(slots):
        if sl.status == "done":
            continue
        if kind == "submit" and sl.status == "running" and sl.traits.interrupt == "block":
            drains = True
            continue
        if sl.status in ("asking", "running"):
            cancel.append(sl.tool_use_id)
        slots[i] = evolve(
            sl,
            status="done",
            synthetic=True,
            result=ToolResultBlock(tool_use_id=sl.tool_use_id, content=text, is_error=True),
        )
    if cancel:
        fx.append(
            CancelTools(
                generation=r.generation, tool_use_ids=tuple(cancel), reason="user_interrupted"
            )
        )
    s = evolve(s, round=evolve(r, slots=tuple(slots)))
    return s, drains


def _interrupt(s: LoopState, cfg: LoopConfig, fx: FX, kind: str, now: int) -> LoopState:
    phase = s.phase
    r = s.round
    if phase in ("compacting", "reactive_compacting", "waiting_retry"):  # [I-1], [I-5]
        fx.append(
            CancelWait(wait_id=r.pending_id)
            if phase == "waiting_retry"
            else CancelCompaction(compact_id=r.pending_id)
        )
        return _end_aborted(s, cfg, fx, kind, AbortedStreaming)
    if phase == "streaming":  # [I-2]
        fx.append(CancelModelCall(call_id=r.call_id))
        s = evolve(s, round=evolve(r, ended=True))
        s, drains = _abort_slots(s, cfg, fx, kind)
        s = _release(s, cfg, fx)
        if drains:
            return evolve(
                s,
                phase="draining",
                round=evolve(s.round, pending_terminal=AbortedStreaming(), abort_kind=kind),
            )
        return _end_aborted(s, cfg, fx, kind, AbortedStreaming)
    if phase == "running_tools":  # [I-3]
        s, drains = _abort_slots(s, cfg, fx, kind)
        s = _release(s, cfg, fx)
        if drains:
            return evolve(
                s,
                phase="draining",
                round=evolve(s.round, pending_terminal=AbortedTools(), abort_kind=kind),
            )
        return _end_aborted(s, cfg, fx, kind, AbortedTools)
    if phase == "draining":  # [I-4] a second, hard interrupt stops the block tools too
        if kind == "submit":
            return s
        s, _ = _abort_slots(s, cfg, fx, "hard")
        s = evolve(s, round=evolve(s.round, abort_kind="hard"))
        s = _release(s, cfg, fx)
        assert s.round.pending_terminal is not None
        return _finish_aborted(s, cfg, fx, type(s.round.pending_terminal))
    if phase == "stop_hooks":  # [I-6]
        fx.append(CancelStopHooks(hooks_id=r.pending_id))
        extra: list[Message] = []
        if kind == "hard":
            s, m = _user(s, INTERRUPT_MESSAGE, origin="interrupt")
            fx.append(Emit(item=m))
            extra.append(m)
        s = _commit(s, extra)
        return _finish(s, cfg, fx, StopHookPrevented)
    raise AssertionError(f"no interrupt rule for phase {phase}")  # pragma: no cover


def _end_aborted(
    s: LoopState, cfg: LoopConfig, fx: FX, kind: str, terminal: type[Terminal]
) -> LoopState:
    s = evolve(s, round=evolve(s.round, abort_kind=kind))
    return _finish_aborted(s, cfg, fx, terminal)


def _finish_aborted(s: LoopState, cfg: LoopConfig, fx: FX, terminal: type[Terminal]) -> LoopState:
    """Commit what the round produced, the interruption message on a hard interrupt
    (never on submit), and for aborted tools the max-turns attachment when due."""
    s = _release(s, cfg, fx, everything=True)
    err = s.round.error_message  # an emitted refusal is stored [R-REFUSAL-1]
    extra: list[Message] = [] if err is None else [err]
    if s.round.withheld is not None and cfg.compat.unyielded_nudges:
        extra.append(s.round.withheld)
    if s.round.abort_kind == "hard":
        text = INTERRUPT_MESSAGE_TOOLS if terminal is AbortedTools else INTERRUPT_MESSAGE
        s, m = _user(s, text, origin="interrupt")
        fx.append(Emit(item=m))
        extra.append(m)
    s = _commit(s, extra)
    if terminal is AbortedTools and cfg.max_turns is not None and s.turn_count + 1 > cfg.max_turns:
        s = _max_turns_attachment(s, cfg, fx, s.turn_count + 1)
    return _finish(s, cfg, fx, terminal)


def on_interrupted(s: LoopState, e: Interrupted, cfg: LoopConfig, fx: FX) -> LoopState:
    return _interrupt(s, cfg, fx, e.kind, e.at_ms)


# =============================================================================================
# Compaction, commands, summaries
# =============================================================================================


def _task_budget_carry(s: LoopState) -> LoopState:
    """[R-TASK-1] at every compaction the server loses sight of the pre-compact window: the
    input + output of the last response with real usage in the pre-compact conversation,
    which may be the previous user turn's (the reference's finalContextTokensFromLastResponse)."""
    if s.task_budget_total is None:
        return s
    final = 0
    for m in s.conversation.reversed():
        if isinstance(m, AssistantMessage) and m.usage is not None:
            if m.api_error is None and m.model != SYNTHETIC_MODEL:
                final = m.usage.input_tokens + m.usage.output_tokens
                break
    base = s.task_budget_remaining if s.task_budget_remaining is not None else s.task_budget_total
    return evolve(s, task_budget_remaining=max(0, base - final))


def on_compaction_finished(
    s: LoopState, e: CompactionFinished, cfg: LoopConfig, fx: FX
) -> LoopState:
    if e.compact_id != s.round.pending_id:
        raise IllegalEvent(
            s.phase, e, allowed_events(s.phase), f"compaction {e.compact_id} is not running"
        )
    s = _task_budget_carry(s)
    fx.extend(Emit(item=m) for m in e.messages)
    s = evolve(s, conversation=Conversation.of(e.messages), tokens_freed=0)
    if s.phase == "reactive_compacting":  # [C-REACTIVE-1]
        return _continue(s, cfg, fx, ReactiveCompactRetry, e.at_ms)
    s = evolve(s, compacted_this_round=True, tracking=AutoCompactTracking(compacted=True))
    return _blocking_then_call(s, cfg, fx)


def on_compaction_failed(s: LoopState, e: CompactionFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    if e.compact_id != s.round.pending_id:
        raise IllegalEvent(
            s.phase, e, allowed_events(s.phase), f"compaction {e.compact_id} is not running"
        )
    if s.phase == "reactive_compacting":
        w = s.round.withheld
        assert w is not None and w.api_error is not None
        return _surface(s, cfg, fx, ImageError if w.api_error.kind == "media" else PromptTooLong)
    t = s.tracking
    s = evolve(s, tracking=evolve(t, consecutive_failures=t.consecutive_failures + 1))  # [G6]
    return _blocking_then_call(s, cfg, fx)


def on_messages_inserted(s: LoopState, e: MessagesInserted, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-INSERT-1] messages the shell adds join the conversation before the model answers:
    the outstanding call (which has produced nothing) is withdrawn, the messages are emitted
    and appended, and the round begins again with them (its pipeline, then a new call)."""
    r = s.round
    if r.blocks or r.ended:
        raise IllegalEvent(
            s.phase,
            e,
            allowed_events(s.phase),
            f"model call {r.call_id} has already answered; messages are inserted before an answer",
        )
    fx.append(CancelModelCall(call_id=r.call_id))
    fx.extend(Emit(item=m) for m in e.messages)
    s = evolve(s, conversation=s.conversation.extend(e.messages))
    return _begin_round(s, cfg, fx, e.at_ms)


def on_command_queued(s: LoopState, e: CommandQueued, cfg: LoopConfig, fx: FX) -> LoopState:
    return evolve(s, queued_commands=(*s.queued_commands, (e.command_id, e.text)))


def on_summary_ready(s: LoopState, e: ToolUseSummaryReady, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-SUM-1] legal in every non-terminal phase; a superseded summary is ignored."""
    if e.summary_id == 0 or e.summary_id != s.summary_id:  # 0: none outstanding
        if e.summary_id <= s.ids.summary:
            return s
        raise IllegalEvent(
            s.phase, e, allowed_events(s.phase), f"no summary {e.summary_id} was requested"
        )
    if e.summary is None:
        return evolve(s, summary_id=0, summary_tool_ids=())
    s = evolve(s, summary_text=e.summary)
    if s.round.ended:  # past the point the round shows it: show it now
        return _emit_ready_summary(s, fx)
    return s


# =============================================================================================
# The transition table
# =============================================================================================

# Events every non-terminal phase accepts: the user's interrupts and queued commands, the
# summary, and late results of discarded calls and tool slots (handlers turn those into no-ops
# and reject anything that belongs to the current round but not to this phase).
_ALWAYS: dict[type, Handler] = {
    Interrupted: on_interrupted,
    CommandQueued: on_command_queued,
    ToolUseSummaryReady: on_summary_ready,
}


def _late_model(s: LoopState, e: Any, cfg: LoopConfig, fx: FX) -> LoopState:
    """Not in the table: outside ``streaming`` only events of earlier calls can arrive."""
    if e.call_id < s.round.call_id:
        return s
    raise IllegalEvent(
        s.phase, e, allowed_events(s.phase), f"model call {e.call_id} is not streaming"
    )


def _late_tool(s: LoopState, e: Any, cfg: LoopConfig, fx: FX) -> LoopState:
    """Not in the table: in a phase with no tool in flight, a tool event can only be the late
    answer of a discarded or cancelled slot [R-TOOL-8]; anything else is a driver error."""
    if _find_slot(s, e) is None:
        return s
    # defensive: the phases routed here start a round with no slots (compacting), discard the
    # attempt's slots with its generation (waiting_retry, reactive_compacting), or follow a
    # response with no tool_use (stop_hooks), so no live slot of the current generation exists
    raise IllegalEvent(  # pragma: no cover
        s.phase, e, allowed_events(s.phase), f"tool {e.tool_use_id!r} is not running"
    )


_LATE_MODEL: dict[type, Handler] = {
    ModelBlockReceived: _late_model,
    ModelResponseEnded: _late_model,
    ModelCallFailed: _late_model,
}
_LATE: dict[type, Handler] = {
    **_LATE_MODEL,
    ToolFinished: _late_tool,
    PermissionAnswered: _late_tool,
}

TABLE: dict[Phase, dict[type, Handler]] = {
    "compacting": {
        **_LATE,
        **_ALWAYS,
        CompactionFinished: on_compaction_finished,
        CompactionFailed: on_compaction_failed,
    },
    "streaming": {
        **_ALWAYS,
        ModelBlockReceived: on_block,
        ModelResponseEnded: on_response_ended,
        ModelCallFailed: on_call_failed,
        ToolFinished: on_tool_finished,
        PermissionAnswered: on_permission,
        MessagesInserted: on_messages_inserted,
    },
    "waiting_retry": {**_LATE, **_ALWAYS, WaitElapsed: on_wait_elapsed},
    "running_tools": {
        **_LATE_MODEL,
        **_ALWAYS,
        ToolFinished: on_tool_finished,
        PermissionAnswered: on_permission,
    },
    "draining": {
        **_LATE_MODEL,
        **_ALWAYS,
        ToolFinished: on_tool_finished,
        PermissionAnswered: on_permission,
    },
    "reactive_compacting": {
        **_LATE,
        **_ALWAYS,
        CompactionFinished: on_compaction_finished,
        CompactionFailed: on_compaction_failed,
    },
    "stop_hooks": {**_LATE, **_ALWAYS, StopHooksFinished: on_stop_hooks},
    "done": {},  # a finished turn accepts nothing
}

# Where each (phase, event type) of TABLE may lead, as data: a phase the machine is left in
# without a transition, a Terminal (the turn ends), a Continue (the next round begins: it waits
# in ``compacting`` or ``streaming``, or ends at once in ``blocking_limit``), or a ladder (every
# exit of its rungs). A pair not listed stays in its phase (commands, summaries, late answers).
# ``steploop graph --static`` draws the machine from this, TABLE and the ladders;
# tests/reducer/test_graph.py holds that drawing consistent with the one the explorer observes.

START: Final[tuple[object, ...]] = ("compacting", "streaming", BlockingLimit)
"""Where start() may lead: the first round's pipeline [R-ORDER-1]."""

AFTER_HOOKS: Final[tuple[Rung, ...]] = ROUND_END[_AFTER_HOOKS:]

OUTCOMES: Final[dict[Phase, dict[type, tuple[object, ...]]]] = {
    "compacting": {
        CompactionFinished: ("streaming", BlockingLimit),
        CompactionFailed: ("streaming", BlockingLimit),
        Interrupted: (AbortedStreaming,),
    },
    "streaming": {
        ModelBlockReceived: ("streaming",),
        ModelResponseEnded: ("running_tools", TOOL_ROUND_END, ROUND_END),
        ModelCallFailed: ("streaming", "waiting_retry", ModelError, ImageError, ROUND_END),
        ToolFinished: ("streaming",),
        PermissionAnswered: ("streaming", AbortedStreaming),
        Interrupted: ("draining", AbortedStreaming),
        MessagesInserted: START,
    },
    "waiting_retry": {WaitElapsed: ("streaming",), Interrupted: (AbortedStreaming,)},
    "running_tools": {
        ToolFinished: ("running_tools", TOOL_ROUND_END),
        PermissionAnswered: ("running_tools", TOOL_ROUND_END, AbortedTools),
        Interrupted: ("draining", AbortedTools),
    },
    "draining": {
        ToolFinished: ("draining", AbortedStreaming, AbortedTools),
        PermissionAnswered: ("draining", AbortedStreaming, AbortedTools),
        Interrupted: ("draining", AbortedStreaming, AbortedTools),
    },
    "reactive_compacting": {
        CompactionFinished: (ReactiveCompactRetry,),
        CompactionFailed: (ImageError, PromptTooLong),
        Interrupted: (AbortedStreaming,),
    },
    "stop_hooks": {
        StopHooksFinished: (StopHookPrevented, StopHookBlocking, AFTER_HOOKS),
        Interrupted: (StopHookPrevented,),
    },
    "done": {},
}

_ALLOWED: dict[Phase, tuple[str, ...]] = {
    p: tuple(sorted(t.__name__ for t in row)) for p, row in TABLE.items()
}


def allowed_events(phase: Phase) -> tuple[str, ...]:
    """Names of the event types ``phase`` accepts."""
    return _ALLOWED[phase]


def step(
    state: LoopState, event: Event, config: LoopConfig
) -> tuple[LoopState, tuple[Effect, ...]]:
    """Advance the machine by one event.

    Args:
        state: the current state (from :func:`start` or a previous step).
        event: what the world reported.
        config: the same config the turn was started with.

    Returns:
        The next state and the effects to execute, in order.

    Raises:
        IllegalEvent: the event cannot happen in ``state.phase`` (after a Terminal, none can).
    """
    handler = TABLE[state.phase].get(type(event))
    if handler is None:
        raise IllegalEvent(state.phase, event, _ALLOWED[state.phase])
    fx = FX()
    new = handler(state, event, config, fx)
    return new, tuple(fx)


def advance(state: LoopState, event: Event, config: LoopConfig) -> Stepped:
    """:func:`step`, with every transition it passed through, in order:
    ``(state, effects, transitions)``.

    ``transitions`` is empty for most events; it holds the Continue a round ended in (and, when
    the next round ends at once in ``blocking_limit``, that Terminal after it), or the Terminal
    that ended the turn. It is what happened, as data: no consumer needs to compare
    ``state.transition`` objects to find out, and none is lost.
    """
    handler = TABLE[state.phase].get(type(event))
    if handler is None:
        raise IllegalEvent(state.phase, event, _ALLOWED[state.phase])
    fx = FX()
    new = handler(state, event, config, fx)
    return new, tuple(fx), fx.passed
