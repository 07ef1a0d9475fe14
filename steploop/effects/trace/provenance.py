"""Provenance: where and how a trace was made, and the secrets that must never reach it."""

from __future__ import annotations

import functools
import os
import platform
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REDACTED = "[REDACTED]"
"""The start of what replaces a secret (see :func:`redaction_marker`)."""
_MIN_SECRET_LEN = 8
_SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")
_SECRET_KEY = re.compile(r"key|token|secret|password|auth|credential|cookie", re.I)


def redaction_marker(length: int) -> str:
    """What replaces a secret of ``length`` characters: as many characters, so that everything
    the machine measures (sizes, token estimates, budgets) is unchanged by the redaction:
    ``[REDACTED]`` padded with ``*`` inside the brackets (``[REDACTED******]``), or ``*`` only
    for a secret shorter than ``[REDACTED]`` (specs/trace-format.md §2)."""
    if length < len(REDACTED):
        return "*" * length
    return REDACTED[:-1] + "*" * (length - len(REDACTED)) + "]"


@functools.cache
def _steploop_version() -> str:
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
        "steploop": _steploop_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "client": type(model).__name__ if model is not None else None,
    }
    if workspace is not None:
        prov["workspace"] = str(Path(workspace).resolve())
    _check_provenance(extra)
    for key, value in extra.items():
        if value is not None and not isinstance(value, (str, int, bool)):
            raise ValueError(f"provenance value for {key!r} must be a plain scalar")
        prov[key] = value
    return prov


def _check_provenance(prov: Mapping[str, Any]) -> None:
    for key in prov:
        if _SECRET_KEY.search(str(key)):
            raise ValueError(f"provenance key {key!r} looks like a secret; traces never hold one")


def _secrets(extra: Iterable[str] | None) -> tuple[str, ...]:
    found = [os.environ.get(name, "") for name in _SECRET_ENV]
    found.extend(extra or ())
    return tuple(
        sorted(
            {s for s in found if isinstance(s, str) and len(s) >= _MIN_SECRET_LEN},
            key=len,
            reverse=True,
        )
    )


def client_secrets(model: object | None) -> list[str]:
    """The credentials a model client knows, so that a recorder can keep them out of a trace
    even when they were not in the environment: a ``secrets`` attribute of the client (an
    iterable of strings, for clients of one's own), and for a client on the Anthropic SDK
    (``AnthropicModelClient`` keeps it as ``_client``) its ``api_key``, its ``auth_token``
    and the value of every custom header whose name looks like a credential (``Authorization``,
    ``X-Api-Key``, ``X-My-Auth``, ``Cookie``, ...; for ``Bearer TOKEN`` the token too)."""
    out: list[str] = []
    if model is None:
        return out
    own = getattr(model, "secrets", None)
    if own is not None and not callable(own) and not isinstance(own, (str, bytes)):
        try:
            out.extend(s for s in own if isinstance(s, str))
        except TypeError:
            pass
    for client in (model, getattr(model, "_client", None)):
        if client is None:
            continue
        for name in ("api_key", "auth_token"):
            value = getattr(client, name, None)
            if isinstance(value, str):
                out.append(value)
        headers = getattr(client, "_custom_headers", None)
        if isinstance(headers, Mapping):
            for key, value in headers.items():
                if isinstance(value, str) and _SECRET_KEY.search(str(key)):
                    out.append(value)
                    scheme, _, token = value.partition(" ")
                    if token and scheme.isalpha():
                        out.append(token.strip())
    return out
