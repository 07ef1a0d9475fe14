"""Record uuids (and response ids, prompts) as 64-bit keys (specs/import.md, IMP-4)."""

from __future__ import annotations

__all__ = ["key"]

_MASK = (1 << 64) - 1


def key(text: str) -> int:
    """``text`` as a 64-bit key, never 0 (0 means "none").

    Keys are compared within one import, never shown nor stored: Python's string hash (64-bit
    SipHash, salted per process, computed once per string) serves; two different strings share
    a key with probability about n²/2⁶⁵ for n records (under 10⁻⁷ for a million)."""
    return (hash(text) & _MASK) or 1
