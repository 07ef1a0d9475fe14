"""steploop's pure core: ``start(request, config, session)`` and ``step(state, event, config)``.

No I/O, no clock, no randomness: everything the machine needs arrives in its arguments.
"""

from steploop.reducer.config import (
    PROFILES,
    Compat,
    Gates,
    Legacy,
    LoopConfig,
    RetryPolicy,
    claude_code_2_1_88,
    default,
    full,
    profile,
)
from steploop.reducer.conversation import Conversation
from steploop.reducer.errors import (
    ConfigError,
    IllegalEvent,
    MalformedConversation,
    SteploopError,
    WrongType,
)
from steploop.reducer.machine import TABLE, allowed_events, start, step
from steploop.reducer.state import PHASES, LoopState, Phase, Request, Session
from steploop.reducer.versions import VERSION_ROWS, claude_code, version_basis

__all__ = [
    "PHASES",
    "PROFILES",
    "TABLE",
    "VERSION_ROWS",
    "Compat",
    "ConfigError",
    "Conversation",
    "Gates",
    "IllegalEvent",
    "Legacy",
    "LoopConfig",
    "LoopState",
    "MalformedConversation",
    "Phase",
    "Request",
    "RetryPolicy",
    "Session",
    "SteploopError",
    "WrongType",
    "allowed_events",
    "claude_code",
    "claude_code_2_1_88",
    "default",
    "full",
    "profile",
    "start",
    "step",
    "version_basis",
]
