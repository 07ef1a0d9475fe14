"""Errors the reducer raises: only for misuse by the driver, never for bad world data (which
becomes an event; specs/ M-5)."""

from __future__ import annotations

__all__ = ["ConfigError", "IllegalEvent", "MalformedConversation", "SteploopError", "WrongType"]


class SteploopError(Exception):
    """Base class of steploop's own errors."""


class ConfigError(SteploopError, ValueError):
    """A LoopConfig (or override) is invalid; raised when the config is built."""


class IllegalEvent(SteploopError):
    """An event that cannot happen in the current phase was fed to step().

    Attributes:
        phase: the phase the machine was in.
        event: the offending event.
        allowed: names of the event types the phase accepts.
    """

    def __init__(
        self, phase: str, event: object, allowed: tuple[str, ...], detail: str = ""
    ) -> None:
        self.phase = phase
        self.event = event
        self.allowed = allowed
        what = type(event).__name__
        accepts = ", ".join(allowed) if allowed else "nothing (the turn has ended)"
        msg = f"{what} is illegal in phase {phase!r}; it accepts {accepts}"
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class MalformedConversation(SteploopError, ValueError):
    """A conversation the Messages API would refuse, offered to the machine from outside
    (specs/ M-HIST-1): :func:`~steploop.reducer.start` given an empty or blank prompt or a
    session whose history holds a tool_use id twice, an empty tool_use id or a tool_result
    naming no earlier tool_use; step() given inserted messages that would make one.

    Attributes:
        problem: what is wrong, one sentence naming the id or the message.
    """

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


class WrongType(SteploopError, TypeError):
    """A value of the wrong type given to the machine (specs/ M-TYPE-1): an event, a field of
    an event, a request, a session, a state or a config that is not what its type says.

    Attributes:
        where: the value's name, dotted (``ModelBlockReceived.block.text``).
    """

    def __init__(self, where: str, expected: str, got: object) -> None:
        self.where = where
        super().__init__(f"{where} must be {expected}, got {type(got).__name__} {got!r:.80}")
