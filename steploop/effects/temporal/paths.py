"""Where the Temporal world keeps its files by default (importable without ``temporalio``)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_root"]


def default_root() -> Path:
    """The store clients and workers of this user share unless told otherwise:
    ``$STEPLOOP_TEMPORAL_STORE``, else ``$XDG_DATA_HOME/steploop/temporal`` (by default
    ``~/.local/share/steploop/temporal``); absolute, whatever the working directory."""
    given = os.environ.get("STEPLOOP_TEMPORAL_STORE")
    if given:
        return Path(given).expanduser().resolve()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return (Path(data).expanduser() / "steploop" / "temporal").resolve()
