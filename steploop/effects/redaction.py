"""Secrets out of every output: one redaction for the trace, the transcript and the terminal.

The secrets known are the values of ``ANTHROPIC_API_KEY`` and ``ANTHROPIC_AUTH_TOKEN``, any
string given, and what the run's model client holds (:func:`client_secrets`); each at least 8
characters. A secret is replaced in the values, before they are encoded, by a marker of the
same length (:func:`redaction_marker`), so that what is measured is unchanged and a secret with
``"``, ``\\`` or non-ASCII characters is found too (specs/trace-format.md §2, TR-SECRET-1).

:class:`Redactor` holds the secrets of one output and replaces them; the trace recorder
(:mod:`steploop.effects.trace.record`), the transcript (:mod:`steploop.effects.transcript`) and
the command line's live display (:mod:`steploop.effects.cli_drive`) use the same rules.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "MIN_SECRET_LEN",
    "REDACTED",
    "SECRET_ENV",
    "SECRET_NAME",
    "Redactor",
    "client_secrets",
    "known_secrets",
    "redaction_marker",
]

REDACTED = "[REDACTED]"
"""The start of what replaces a secret (see :func:`redaction_marker`)."""

#: Environment variables whose values are secrets.
SECRET_ENV = ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN")

#: Shorter strings would match too much to be secrets worth hiding.
MIN_SECRET_LEN = 8

#: A name (a header, a provenance key) that looks like it holds a credential.
SECRET_NAME = re.compile(r"key|token|secret|password|auth|credential|cookie", re.I)


def redaction_marker(length: int) -> str:
    """What replaces a secret of ``length`` characters: as many characters, so that everything
    the machine measures (sizes, token estimates, budgets) is unchanged by the redaction:
    ``[REDACTED]`` padded with ``*`` inside the brackets (``[REDACTED******]``), or ``*`` only
    for a secret shorter than ``[REDACTED]`` (specs/trace-format.md §2)."""
    if length < len(REDACTED):
        return "*" * length
    return REDACTED[:-1] + "*" * (length - len(REDACTED)) + "]"


def known_secrets(extra: Iterable[str] | None = None) -> tuple[str, ...]:
    """The environment's secrets and ``extra``, at least :data:`MIN_SECRET_LEN` characters
    each, longest first (so a secret that holds another is replaced whole)."""
    found = [os.environ.get(name, "") for name in SECRET_ENV]
    found.extend(extra or ())
    return tuple(
        sorted(
            {s for s in found if isinstance(s, str) and len(s) >= MIN_SECRET_LEN},
            key=len,
            reverse=True,
        )
    )


def client_secrets(model: object | None) -> list[str]:
    """The credentials a model client knows, so that an output can keep them out even when
    they were not in the environment: a ``secrets`` attribute of the client (an iterable of
    strings, for clients of one's own), and for a client on the Anthropic SDK
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
                if isinstance(value, str) and SECRET_NAME.search(str(key)):
                    out.append(value)
                    scheme, _, token = value.partition(" ")
                    if token and scheme.isalpha():
                        out.append(token.strip())
    return out


class Redactor:
    """The secrets of one output, and their replacement by same-length markers.

    Args:
        secrets: strings to hide besides the environment's.
        model: a model client whose credentials are hidden too (:func:`client_secrets`).

    Attributes:
        redactions: how many times a secret was replaced so far.
    """

    def __init__(self, secrets: Iterable[str] | None = None, *, model: object | None = None) -> None:
        self.secrets: tuple[str, ...] = ()
        self._masks: tuple[tuple[str, str], ...] = ()
        self.redactions = 0
        self.add([*(secrets or ()), *client_secrets(model)])

    def add(self, secrets: Iterable[str]) -> None:
        """Hide these strings too (the environment's are always hidden)."""
        self.secrets = known_secrets([*self.secrets, *secrets])
        self._masks = tuple((s, redaction_marker(len(s))) for s in self.secrets)

    def __bool__(self) -> bool:
        return bool(self._masks)

    def text(self, text: str) -> str:
        """``text`` with every secret replaced by its marker."""
        for secret, marker in self._masks:
            if secret in text:
                self.redactions += text.count(secret)
                text = text.replace(secret, marker)
        return text

    def value(self, value: Any) -> Any:
        """``value`` (a string, or dicts and lists of them, keys included) with every secret
        replaced; anything else is returned as it is."""
        if not self._masks:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, tuple):
            return tuple(self.value(v) for v in value)
        return value
