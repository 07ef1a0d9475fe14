"""The machine: ``start()``, ``step()`` and the tables they read (specs/ rules cited as [X-n]).

A package of one module per part of a round; :mod:`steploop.reducer.machine.table` holds the
tables, ``step()`` and the theory of operation. This module re-exports what the rest of
steploop and its users import.
"""

from __future__ import annotations

# The table first: loading it loads every part of the machine (the parts import one another as
# modules, and the table reads their handlers when it is built).
from steploop.reducer.machine.table import (
    AFTER_HOOKS,
    ATTEMPT,
    ESCALATED,
    KEPT_OR_CLEARED,
    NEXT_ROUND,
    OUTCOMES,
    PLUS_ONE,
    RESET,
    RESETS,
    ROUND_END,
    START,
    TABLE,
    TOOL_ROUND_END,
    Reset,
    Rung,
    Stepped,
    Write,
    advance,
    allowed_events,
    begin,
    start,
    step,
)

# isort: split
from steploop.reducer.machine.interrupts import INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_TOOLS
from steploop.reducer.machine.round_end import MOT_NUDGE

__all__ = [
    "AFTER_HOOKS",
    "ATTEMPT",
    "ESCALATED",
    "INTERRUPT_MESSAGE",
    "INTERRUPT_MESSAGE_TOOLS",
    "KEPT_OR_CLEARED",
    "MOT_NUDGE",
    "NEXT_ROUND",
    "OUTCOMES",
    "PLUS_ONE",
    "RESET",
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
