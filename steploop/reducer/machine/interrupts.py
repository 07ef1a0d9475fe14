"""The user's interrupts [I-*]: what a hard or a submit interrupt does in each phase, the
drain of ``block`` tools, and the end of an aborted round."""

from __future__ import annotations

from typing import Final

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import (
    CancelCompaction,
    CancelModelCall,
    CancelRefreshTools,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Emit,
)
from steploop.reducer.events import Interrupted
from steploop.reducer.machine import ending, streaming, tool_round_end
from steploop.reducer.machine.helpers import FX, commit, user
from steploop.reducer.messages import Message, ToolResultBlock
from steploop.reducer.state import LoopState
from steploop.reducer.texts import interrupted_result
from steploop.reducer.transitions import AbortedStreaming, AbortedTools, StopHookPrevented, Terminal

# User-visible texts. The ones the facts file quotes are kept verbatim so transcripts match; the
# texts that differ between steploop's and Claude Code's style live in steploop/reducer/texts.py.
INTERRUPT_MESSAGE: Final = "[Request interrupted by user]"
INTERRUPT_MESSAGE_TOOLS: Final = "[Request interrupted by user for tool use]"


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


def interrupt(s: LoopState, cfg: LoopConfig, fx: FX, kind: str, now: int) -> LoopState:
    """A hard or submit interrupt (``kind``) in the current phase: what I-1..I-6 say it does."""
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
        s = streaming.release(s, cfg, fx)
        if drains:
            return evolve(
                s,
                phase="draining",
                round=evolve(s.round, pending_terminal=AbortedStreaming(), abort_kind=kind),
            )
        return _end_aborted(s, cfg, fx, kind, AbortedStreaming)
    if phase == "running_tools":  # [I-3]
        s, drains = _abort_slots(s, cfg, fx, kind)
        s = streaming.release(s, cfg, fx)
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
        s = streaming.release(s, cfg, fx)
        assert s.round.pending_terminal is not None
        return finish_aborted(s, cfg, fx, type(s.round.pending_terminal))
    if phase == "refreshing_tools":  # [I-7] the round's results are committed already
        fx.append(CancelRefreshTools(call_id=r.call_id))
        if kind == "hard":
            s, m = user(s, INTERRUPT_MESSAGE_TOOLS, origin="interrupt")
            fx.append(Emit(item=m))
            s = evolve(s, conversation=s.conversation.append(m))
        if cfg.max_turns is not None and s.turn_count + 1 > cfg.max_turns:
            s = tool_round_end.max_turns_attachment(s, cfg, fx, s.turn_count + 1)
        return ending.finish(s, cfg, fx, AbortedTools)
    if phase == "stop_hooks":  # [I-6]
        fx.append(CancelStopHooks(hooks_id=r.pending_id))
        extra: list[Message] = []
        if kind == "hard":
            s, m = user(s, INTERRUPT_MESSAGE, origin="interrupt")
            fx.append(Emit(item=m))
            extra.append(m)
        s = commit(s, extra)
        return ending.finish(s, cfg, fx, StopHookPrevented)
    raise AssertionError(f"no interrupt rule for phase {phase}")  # pragma: no cover


def _end_aborted(
    s: LoopState, cfg: LoopConfig, fx: FX, kind: str, terminal: type[Terminal]
) -> LoopState:
    s = evolve(s, round=evolve(s.round, abort_kind=kind))
    return finish_aborted(s, cfg, fx, terminal)


def finish_aborted(s: LoopState, cfg: LoopConfig, fx: FX, terminal: type[Terminal]) -> LoopState:
    """Commit what the round produced, the interruption message on a hard interrupt
    (never on submit), and for aborted tools the max-turns attachment when due."""
    s = streaming.release(s, cfg, fx, everything=True)
    err = s.round.error_message  # an emitted refusal is stored [R-REFUSAL-1]
    extra: list[Message] = [] if err is None else [err]
    if s.round.withheld is not None and cfg.compat.unyielded_nudges:
        extra.append(s.round.withheld)
    if s.round.abort_kind == "hard":
        text = INTERRUPT_MESSAGE_TOOLS if terminal is AbortedTools else INTERRUPT_MESSAGE
        s, m = user(s, text, origin="interrupt")
        fx.append(Emit(item=m))
        extra.append(m)
    s = commit(s, extra)
    if terminal is AbortedTools and cfg.max_turns is not None and s.turn_count + 1 > cfg.max_turns:
        s = tool_round_end.max_turns_attachment(s, cfg, fx, s.turn_count + 1)
    return ending.finish(s, cfg, fx, terminal)


def on_interrupted(s: LoopState, e: Interrupted, cfg: LoopConfig, fx: FX) -> LoopState:
    return interrupt(s, cfg, fx, e.kind, e.at_ms)
