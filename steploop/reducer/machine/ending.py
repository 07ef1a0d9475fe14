"""Continue and Terminal: the only two places a transition is made. A Continue writes what
the reset table (``table.RESETS``) says and begins the next round; a Terminal ends the turn
with ``Finish``."""

from __future__ import annotations

from typing import Any

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import AcknowledgeCommands, Finish
from steploop.reducer.machine import pipeline, streaming, table
from steploop.reducer.machine.helpers import FX
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import AbortedStreaming, AbortedTools, Continue, Terminal


def take_continue(
    s: LoopState, cfg: LoopConfig, fx: FX, kind: type[Continue], now: int, **payload: int
) -> LoopState:
    """Take a Continue: the only place one is made. Write what the reset table says it writes
    [C-RESET-1] and start the next round. ``s.conversation`` already holds the messages the next round
    starts from."""
    t = kind(**payload)
    s = table.apply_reset(s, cfg, t)
    fx.passed += (t,)
    return pipeline.begin_round(s, cfg, fx, now)


def finish(
    s: LoopState, cfg: LoopConfig, fx: FX, kind: type[Terminal], **payload: Any
) -> LoopState:
    """End the turn with a Terminal, the only place one is made: the summary if one is
    ready, acknowledgements, then Finish (last)."""
    terminal: Terminal = kind(**payload)
    aborted = kind is AbortedStreaming or kind is AbortedTools
    if s.summary_text is not None and not (
        aborted and cfg.compat.summary_dropped_on_abort
    ):
        s = streaming.emit_ready_summary(s, fx)
    if s.consumed_commands:  # [R-CMD-2] acknowledged only on a normal return
        fx.append(AcknowledgeCommands(command_ids=s.consumed_commands))
    fx.append(Finish(terminal=terminal))
    fx.passed += (terminal,)
    return evolve(s, phase="done", transition=terminal)
