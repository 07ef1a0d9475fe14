"""Provenance: where and how a trace was made, and the secrets that must never reach it
(the secrets and their markers are :mod:`steploop.effects.redaction`'s)."""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from steploop.effects.redaction import (
    REDACTED,
    SECRET_NAME,
    client_secrets,
    known_secrets,
    redaction_marker,
)

__all__ = ["REDACTED", "client_secrets", "known_secrets", "make_provenance", "redaction_marker"]

# record.py reads the secrets through this name
trace_secrets = known_secrets


@functools.cache
def steploop_version() -> str:
    """The installed package's version (read once: a metadata lookup costs milliseconds)."""
    try:
        from importlib.metadata import version

        return version("steploop")
    except Exception:
        return "0+unknown"


def make_provenance(
    *,
    model: object | None = None,
    workspace: str | os.PathLike[str] | None = None,
    **extra: str | int | bool | None,
) -> dict[str, Any]:
    """Where and how a trace was made. Never holds a secret.

    Args:
        model: the model client; only its class name is kept (never its key or headers).
        workspace: the workspace directory (resume uses it as the default workspace).
        **extra: more plain values; a key that looks like a secret (key, token, auth, ...)
            is refused.

    Raises:
        ValueError: an extra key looks like a secret, or a value is not a plain scalar.
    """
    prov: dict[str, Any] = {
        "created_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "steploop": steploop_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "client": type(model).__name__ if model is not None else None,
    }
    if workspace is not None:
        prov["workspace"] = str(Path(workspace).resolve())
    check_provenance(extra)
    for key, value in extra.items():
        if value is not None and not isinstance(value, (str, int, bool)):
            raise ValueError(f"provenance value for {key!r} must be a plain scalar")
        prov[key] = value
    return prov


def check_provenance(prov: Mapping[str, Any]) -> None:
    for key in prov:
        if SECRET_NAME.search(str(key)):
            raise ValueError(f"provenance key {key!r} looks like a secret; traces never hold one")
