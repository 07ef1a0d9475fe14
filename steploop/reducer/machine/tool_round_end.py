"""The tool-use path: the rungs of the ``TOOL_ROUND_END`` ladder (results committed and
summarised, hook_stopped, queued commands, the tool list refreshed, max_turns, next_turn), run
once every tool of the round is done. The ladder itself, as ordered data, is
``table.TOOL_ROUND_END``; the refresh waits for the world, and its answer
(:func:`on_tools_refreshed`) goes on from the rung after it."""

from __future__ import annotations

from typing import Final

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Emit, RefreshTools, SummarizeToolUse
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import ToolsRefreshed
from steploop.reducer.machine import ending, table
from steploop.reducer.machine.helpers import FX, Rungs, attachment, commit
from steploop.reducer.messages import Message
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import HookStopped, MaxTurns, NextTurn


def tools_done(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-SUM-1] the round's results are committed and its summary requested."""
    r = s.round
    # a refusal that came with tool calls: its emitted error is stored too [R-REFUSAL-1]
    extra: list[Message] = [] if r.error_message is None else [r.error_message]
    if r.withheld is not None and cfg.compat.unyielded_nudges:
        extra.append(r.withheld)  # a withheld MOT error followed by tool use stays in state
    s = commit(s, extra)
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


def hook_stopped(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[T-HOOK-1] a tool's hook stopped the turn."""
    if not s.round.hook_stop:
        return s, False
    s = _hook_stop_attachments(s, fx)
    return ending.finish(s, cfg, fx, HookStopped), True


def queued_commands(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-CMD-1] queued commands ride along as attachments (and the breaker's turn count)."""
    if s.tracking.compacted:
        s = evolve(s, tracking=evolve(s.tracking, turn_counter=s.tracking.turn_counter + 1))
    if s.queued_commands:
        consumed = list(s.consumed_commands)
        for cid, text in s.queued_commands:
            s, att = attachment(s, "queued_command", (("commandId", cid), ("prompt", text)))
            fx.append(Emit(item=att))
            s = evolve(s, conversation=s.conversation.append(att))
            consumed.append(cid)
        s = evolve(s, queued_commands=(), consumed_commands=tuple(consumed))
    return s, False


def refresh_tools(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[R-REFRESH-1] with the gate, the world reads the tool list as it is now (the reference's
    ``refreshTools()``, step 11 of the tool path) and the round waits for its answer."""
    if not cfg.gates.tool_refresh:
        return s, False
    fx.append(RefreshTools(call_id=s.round.call_id))
    return evolve(s, phase="refreshing_tools"), True


def on_tools_refreshed(s: LoopState, e: ToolsRefreshed, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-REFRESH-1] the list is read: the ladder goes on (max_turns, next_turn)."""
    if e.call_id != s.round.call_id:
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"no refresh of round {e.call_id} is open"
        )
    return table.after_tools(s, cfg, fx, e.at_ms, table.AFTER_REFRESH_AT)


def max_turns(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[T-MAXTURNS-1] the next round would pass max_turns."""
    next_count = s.turn_count + 1
    if cfg.max_turns is None or next_count <= cfg.max_turns:
        return s, False
    s = max_turns_attachment(s, cfg, fx, next_count)
    return ending.finish(s, cfg, fx, MaxTurns, turn_count=next_count), True


def next_turn(s: LoopState, cfg: LoopConfig, fx: FX, now: int) -> Rungs:
    """[C-NEXT-1] the next round."""
    return ending.take_continue(s, cfg, fx, NextTurn, now), True


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
        s, att = attachment(s, "hook_stopped_continuation", data)
        fx.append(Emit(item=att))
        s = evolve(s, conversation=s.conversation.append(att))
    return s


def max_turns_attachment(s: LoopState, cfg: LoopConfig, fx: FX, next_count: int) -> LoopState:
    """Emit and store the ``max_turns_reached`` attachment (T-MAXTURNS-1)."""
    assert cfg.max_turns is not None
    s, att = attachment(
        s, "max_turns_reached", (("maxTurns", cfg.max_turns), ("turnCount", next_count))
    )
    fx.append(Emit(item=att))
    return evolve(s, conversation=s.conversation.append(att))
