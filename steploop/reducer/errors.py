"""Errors the reducer raises: only for misuse by the driver, never for bad world data."""

from __future__ import annotations

__all__ = ["ConfigError", "IllegalEvent", "SteploopError"]


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
