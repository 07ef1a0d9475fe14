"""steploop: the agent loop of a production coding agent as an explicit, pure state machine.

This module is the public face: the names a user needs, each importable as ``steploop.NAME``.

The pure machine (no I/O, no clock, no randomness, no asyncio):

- :func:`start`, :func:`step`: open a user turn and advance it one event at a time;
  :func:`advance` is :func:`step` that also reports every transition it passed through;
- :func:`drive`, :func:`drive_async`: the one driver loop, run against any *world* (an object
  that answers effects); :func:`check_world` says whether a world of yours keeps the protocol;
- the profiles: :func:`default`, :func:`claude_code_2_1_88`, :func:`full`, :func:`profile`
  (by name), :func:`claude_code` (the profile of a given Claude Code version); the config and
  state types :class:`LoopConfig`, :class:`Request`, :class:`Session`, :class:`LoopState`.

The shell (anyio, the ``anthropic`` SDK, files):

- :func:`run`, :func:`run_sync`: run one user turn live, with a model client, tools, hooks;
- :class:`TraceRecorder`: record a run as JSONL; :func:`replay_exact` and
  :func:`replay_counterfactual` replay a recording, exactly or under a changed config;
- :func:`import_transcripts`: Claude Code session transcripts as traces.

The Hypothesis kit is :mod:`steploop.reducer.testing` (``pip install 'steploop[testing]'``).

The shell's names are loaded on first use, so ``import steploop`` (or ``steploop.reducer``)
does not pay for the SDK and anyio until a shell name is asked for. The packages below are the
implementation: :mod:`steploop.reducer` (pure) and :mod:`steploop.effects` (the shell).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from steploop.reducer.config import (
    PROFILES,
    LoopConfig,
    claude_code_2_1_88,
    default,
    full,
    profile,
)
from steploop.reducer.drive import Outcome, check_world, check_world_async, drive, drive_async
from steploop.reducer.errors import ConfigError, IllegalEvent, SteploopError
from steploop.reducer.machine import advance, start, step
from steploop.reducer.state import LoopState, Request, Session
from steploop.reducer.versions import claude_code

if TYPE_CHECKING:
    from steploop.effects.importer import import_paths as import_transcripts
    from steploop.effects.run import PermissionPolicy, Run, RunResult, run, run_sync
    from steploop.effects.trace import TraceRecorder, replay_counterfactual, replay_exact

# name -> (module, attribute): the shell's names, imported when first asked for (PEP 562).
_LAZY: dict[str, tuple[str, str]] = {
    "run": ("steploop.effects.run", "run"),
    "run_sync": ("steploop.effects.run", "run_sync"),
    "Run": ("steploop.effects.run", "Run"),
    "RunResult": ("steploop.effects.run", "RunResult"),
    "PermissionPolicy": ("steploop.effects.run", "PermissionPolicy"),
    "TraceRecorder": ("steploop.effects.trace", "TraceRecorder"),
    "replay_exact": ("steploop.effects.trace", "replay_exact"),
    "replay_counterfactual": ("steploop.effects.trace", "replay_counterfactual"),
    "import_transcripts": ("steploop.effects.importer", "import_paths"),
}


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, read when asked for
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("steploop")
        except PackageNotFoundError:
            return "0+unknown"
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'steploop' has no attribute {name!r}")
    value = getattr(import_module(where[0]), where[1])
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "PROFILES",
    "ConfigError",
    "IllegalEvent",
    "LoopConfig",
    "LoopState",
    "Outcome",
    "PermissionPolicy",
    "Request",
    "Run",
    "RunResult",
    "Session",
    "SteploopError",
    "TraceRecorder",
    "__version__",
    "advance",
    "check_world",
    "check_world_async",
    "claude_code",
    "claude_code_2_1_88",
    "default",
    "drive",
    "drive_async",
    "full",
    "import_transcripts",
    "profile",
    "replay_counterfactual",
    "replay_exact",
    "run",
    "run_sync",
    "start",
    "step",
]
