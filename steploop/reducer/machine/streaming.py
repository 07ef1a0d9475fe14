"""Streaming: the response's blocks, its tool calls (scheduled, asked, run, their results
released in order) and the end of the response, which sends the round down one of its two
ladders (no tool use, tool use)."""

from __future__ import annotations

from typing import Final, assert_never

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.context import persisted_preview
from steploop.reducer.effects import AskPermission, CancelTools, Emit, PersistToolResult, StartTool
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import (
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.machine import failures, interrupts, table
from steploop.reducer.machine.helpers import FX, api_error
from steploop.reducer.messages import (
    AssistantMessage,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    UserMessage,
)
from steploop.reducer.state import LoopState, Round, Slot
from steploop.reducer.texts import refusal_text, rejected_result

# the stop reasons of a response cut at its output cap (R-MOT-1)
MOT_REASONS: Final = frozenset({"max_tokens", "model_context_window_exceeded"})


def _desc(slot: Slot) -> str:
    for key in ("command", "file_path", "pattern"):
        v = slot.input.get(key)
        if isinstance(v, str):
            return v if len(v) <= 40 else v[:40] + "…"
    return ""


def late_call(s: LoopState, e: ModelBlockReceived | ModelResponseEnded | ModelCallFailed) -> bool:
    """Not in the table: an event of an earlier (cancelled or retried) call is a no-op;
    an event of a call never made is a driver error."""
    if e.call_id < s.round.call_id:
        return True
    if e.call_id > s.round.call_id:
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"no model call {e.call_id} was made"
        )
    return False


MALFORMED: Final = "the model sent a malformed response: "
"""How the machine words a response it refuses (the shell's words, B-MODEL-1)."""


def tool_use_problem(s: LoopState, tool_use_id: str) -> str | None:
    """[B-MODEL-2] [M-HIST-1] What makes a streamed tool_use's id one the API would refuse in
    the next request, or None: empty, repeated in the response, or used by the conversation
    (O(1): the conversation's id index, R-COST-3)."""
    if not tool_use_id or tool_use_id.isspace():
        return f"tool_use id {tool_use_id!r} is empty"
    for sl in s.round.slots:
        if sl.tool_use_id == tool_use_id:
            return f"tool_use id {tool_use_id!r} appears twice in one response"
    if s.conversation.has_tool_use(tool_use_id):
        return (
            f"tool_use id {tool_use_id!r} is already used by an earlier message of the"
            " conversation (the API never reuses one; a tool_result could not name its tool_use)"
        )
    return None


def on_block(s: LoopState, e: ModelBlockReceived, cfg: LoopConfig, fx: FX) -> LoopState:
    if late_call(s, e):
        return s
    if e.block.__class__ is ToolUseBlock:  # [B-MODEL-2] a malformed response ends the call
        problem = tool_use_problem(s, e.block.id)
        if problem is not None:
            failed = ModelCallFailed(
                call_id=e.call_id, kind="unknown", message=MALFORMED + problem, at_ms=e.at_ms
            )
            return failures.on_call_failed(s, failed, cfg, fx)
    r = s.round
    # a non-streaming answer is one complete message: a further block joins it
    joins = not r.streaming and bool(r.blocks) and cfg.compat.nonstreaming_single_message
    if r.sticky_fallback and cfg.compat.sticky_streaming_fallback and r.blocks and not joins:
        # the reference re-runs the tombstone-and-clear on every later item
        s = failures.discard_attempt(s, fx, tombstone=True)
        r = s.round
    block = e.block
    if not e.input_complete:
        return s  # [R-TOOL-4] a truncated tool (or server tool) input is never emitted or stored
    n = s.ids.msg + 1
    model = e.model or s.model  # [R-MODEL-1] the serving model, once the client knows it
    if joins:
        last = r.blocks[-1]
        fx.append(Emit(item=Tombstone(message_id=last.id)))
        rec = AssistantMessage(
            id=f"m{n}", response_id=last.response_id, model=model, content=(*last.content, block)
        )
        fx.append(Emit(item=rec))
        blocks = (*r.blocks[:-1], rec)
    else:
        rec = AssistantMessage(
            id=f"m{n}", response_id=f"r{r.call_id}", model=model, content=(block,)
        )
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
        return release(s, cfg, fx)
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


def release(s: LoopState, cfg: LoopConfig, fx: FX, *, everything: bool = False) -> LoopState:
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


def find_slot(s: LoopState, e: ToolFinished | PermissionAnswered) -> tuple[int, Slot] | None:
    """Not in the table: which slot a tool event is for. None means a late result for a
    discarded slot (a legal no-op, [R-TOOL-8]); a slot never created is a driver error."""
    r = s.round
    if e.generation < r.generation:
        return None
    if e.generation > r.generation:
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"no tool generation {e.generation} exists"
        )
    for i, sl in enumerate(r.slots):
        if sl.tool_use_id == e.tool_use_id:
            if sl.status == "done" and sl.synthetic:
                return None
            return i, sl
    raise IllegalEvent(
        s.phase, e, table.allowed_events(s.phase), f"no tool call {e.tool_use_id!r} in this round"
    )


def _slot_in(
    s: LoopState, e: ToolFinished | PermissionAnswered, status: str
) -> tuple[int, Slot] | None:
    """The slot ``e`` is for, which must be in ``status``; None for a late, discarded one."""
    found = find_slot(s, e)
    if found is not None and found[1].status != status:
        raise IllegalEvent(
            s.phase,
            e,
            table.allowed_events(s.phase),
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
        return interrupts.interrupt(s, cfg, fx, "hard", e.at_ms)
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
    if e.model and not sl.traits.concurrency_safe:
        # [R-MODEL-2] the tool's context modifier sets the main loop's model for the rest of
        # the turn (the reference applies modifiers of non-safe tools only)
        s = evolve(s, model=e.model)
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
    s = release(s, cfg, fx)
    r = s.round
    if not r.ended or not all(sl.status == "done" for sl in r.slots):
        return s
    if s.phase == "running_tools":
        return table.after_tools(s, cfg, fx, now)
    if s.phase == "draining":
        assert r.pending_terminal is not None
        return interrupts.finish_aborted(s, cfg, fx, type(r.pending_terminal))
    return s


def on_response_ended(s: LoopState, e: ModelResponseEnded, cfg: LoopConfig, fx: FX) -> LoopState:
    if late_call(s, e):
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
        s, err = api_error(s, "max_output_tokens", text, cfg=cfg)
        s = evolve(s, round=evolve(s.round, withheld=err))
    elif e.stop_reason == "refusal":
        s = _refusal(s, e, cfg, fx)
    s = emit_ready_summary(s, fx)  # [R-SUM-1] the previous round's summary, after the stream
    s = _schedule(s, cfg, fx)
    s = release(s, cfg, fx)
    if s.round.slots:
        s = evolve(s, phase="running_tools")
        if all(sl.status == "done" for sl in s.round.slots):
            return table.after_tools(s, cfg, fx, e.at_ms)
        return s
    return table.no_tool_use(s, cfg, fx, e.at_ms)


def _refusal(s: LoopState, e: ModelResponseEnded, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-REFUSAL-1] the model refused: an API-error message (the usage-policy text), emitted
    at once; the turn then ends as an API error does (G1), without stop hooks."""
    text = refusal_text(cfg, s.model, e.stop_details)
    s, err = api_error(s, "refusal", text, cfg=cfg, details=e.stop_details or "")
    fx.append(Emit(item=err))
    return evolve(s, round=evolve(s.round, error_message=err))


def _served(r: Round, e: ModelResponseEnded) -> tuple[AssistantMessage, ...]:
    """[R-MODEL-1] the response's records name the model that served it (``e.model``)."""
    served = e.model
    if not served or all(b.model == served for b in r.blocks):
        return r.blocks
    return tuple(evolve(b, model=served) for b in r.blocks)


def emit_ready_summary(s: LoopState, fx: FX) -> LoopState:
    """Emit the tool-use summary that is ready, if any, and clear it (R-SUM-1)."""
    if s.summary_text is None:
        return s
    fx.append(
        Emit(item=ToolUseSummary(summary=s.summary_text, preceding_tool_use_ids=s.summary_tool_ids))
    )
    return evolve(s, summary_text=None, summary_id=0, summary_tool_ids=())
