"""Compaction and the other events: a compaction's answer (auto and reactive), messages
the shell inserts, queued commands and tool-use summaries."""

from __future__ import annotations

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.conversation import SYNTHETIC_MODEL, Conversation
from steploop.reducer.effects import CancelModelCall, Emit
from steploop.reducer.errors import IllegalEvent, MalformedConversation
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    MessagesInserted,
    ToolUseSummaryReady,
)
from steploop.reducer.machine import ending, pipeline, round_end, streaming, table
from steploop.reducer.machine.helpers import FX
from steploop.reducer.messages import AssistantMessage
from steploop.reducer.state import AutoCompactTracking, LoopState
from steploop.reducer.transitions import ImageError, PromptTooLong, ReactiveCompactRetry


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
            s.phase, e, table.allowed_events(s.phase), f"compaction {e.compact_id} is not running"
        )
    conversation = Conversation.of(e.messages)
    if conversation.problem is not None:  # [M-HIST-1] a summary the API would refuse failed
        failed = CompactionFailed(compact_id=e.compact_id, at_ms=e.at_ms)
        return on_compaction_failed(s, failed, cfg, fx)
    s = _task_budget_carry(s)
    fx.extend(Emit(item=m) for m in e.messages)
    s = evolve(s, conversation=conversation, tokens_freed=0)
    if s.phase == "reactive_compacting":  # [C-REACTIVE-1]
        return ending.take_continue(s, cfg, fx, ReactiveCompactRetry, e.at_ms)
    s = evolve(s, compacted_this_round=True, tracking=AutoCompactTracking(compacted=True))
    return pipeline.blocking_then_call(s, cfg, fx)


def on_compaction_failed(s: LoopState, e: CompactionFailed, cfg: LoopConfig, fx: FX) -> LoopState:
    if e.compact_id != s.round.pending_id:
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"compaction {e.compact_id} is not running"
        )
    if s.phase == "reactive_compacting":
        w = s.round.withheld
        assert w is not None and w.api_error is not None
        return round_end.surface(
            s, cfg, fx, ImageError if w.api_error.kind == "media" else PromptTooLong
        )
    t = s.tracking
    s = evolve(s, tracking=evolve(t, consecutive_failures=t.consecutive_failures + 1))  # [G6]
    return pipeline.blocking_then_call(s, cfg, fx)


def on_messages_inserted(s: LoopState, e: MessagesInserted, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-INSERT-1] messages the shell adds join the conversation before the model answers:
    the outstanding call (which has produced nothing) is withdrawn, the messages are emitted
    and appended, and the round begins again with them (its pipeline, then a new call)."""
    r = s.round
    if r.blocks or r.ended:
        raise IllegalEvent(
            s.phase,
            e,
            table.allowed_events(s.phase),
            f"model call {r.call_id} has already answered; messages are inserted before an answer",
        )
    conversation = s.conversation.extend(e.messages)
    if conversation.problem is not None:  # [M-HIST-1] (a state start() made has none)
        raise MalformedConversation(f"the inserted messages cannot be sent: {conversation.problem}")
    fx.append(CancelModelCall(call_id=r.call_id))
    fx.extend(Emit(item=m) for m in e.messages)
    s = evolve(s, conversation=conversation)
    return pipeline.begin_round(s, cfg, fx, e.at_ms)


def on_command_queued(s: LoopState, e: CommandQueued, cfg: LoopConfig, fx: FX) -> LoopState:
    return evolve(s, queued_commands=(*s.queued_commands, (e.command_id, e.text)))


def on_summary_ready(s: LoopState, e: ToolUseSummaryReady, cfg: LoopConfig, fx: FX) -> LoopState:
    """[R-SUM-1] legal in every non-terminal phase; a superseded summary is ignored."""
    if e.summary_id == 0 or e.summary_id != s.summary_id:  # 0: none outstanding
        if e.summary_id <= s.ids.summary:
            return s
        raise IllegalEvent(
            s.phase, e, table.allowed_events(s.phase), f"no summary {e.summary_id} was requested"
        )
    if e.summary is None:
        return evolve(s, summary_id=0, summary_tool_ids=())
    s = evolve(s, summary_text=e.summary)
    if s.round.ended:  # past the point the round shows it: show it now
        return streaming.emit_ready_summary(s, fx)
    return s
