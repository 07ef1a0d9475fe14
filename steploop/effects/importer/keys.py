"""Record uuids (and response ids, prompts) as 64-bit keys (specs/import.md, IMP-4)."""

from __future__ import annotations

import hashlib

__all__ = ["key"]


def key(text: str) -> int:
    """``text`` as a 64-bit key, never 0 (0 means "none").

    Keys are compared, never shown; two different strings share a key with probability about
    n²/2⁶⁵ for n records (under 10⁻⁷ for a million)."""
    k = int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")
    return k or 1
