"""Canonical encoding and digests (specs/ R-COST-2).

A value is encoded to plain JSON data: attrs instances become dicts with their ``TAG`` under
``"type"`` (fields in declaration order), tuples become lists, and the JSON text is written with
sorted keys and no spaces. Digests are BLAKE2b over that text, never Python's salted ``hash()``,
so they are stable across processes and machines.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

__all__ = ["canonical_bytes", "chain_digest", "digest_bytes", "to_data"]

_ENCODERS: dict[type, Any] = {}
_SCALARS = (str, int, float, bool, type(None))


def _compile(cls: type) -> Any:
    """A per-class encoder: the attrs fields in declaration order, the TAG under "type"."""
    canon = getattr(cls, "__canonical__", None)
    if canon is not None:
        return canon
    names = tuple(f.name for f in attrs.fields(cls))
    tag = getattr(cls, "TAG", None)

    def encode(v: Any) -> dict[str, Any]:
        out: dict[str, Any] = {} if tag is None else {"type": tag}
        for name in names:
            x = getattr(v, name)
            out[name] = x if type(x) in _SCALARS else to_data(x)
        return out

    return encode


def to_data(value: Any) -> Any:
    """Turn a value made of attrs classes, tuples, dicts and scalars into JSON data."""
    cls = type(value)
    if cls in _SCALARS:
        return value
    enc = _ENCODERS.get(cls)
    if enc is not None:
        return enc(value)
    if attrs.has(cls) or getattr(cls, "__canonical__", None) is not None:
        enc = _ENCODERS[cls] = _compile(cls)
        return enc(value)
    if isinstance(value, (tuple, list)):
        return [v if type(v) in _SCALARS else to_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, frozenset):
        return sorted(to_data(v) for v in value)
    if isinstance(value, (str, int, float, bool)):  # subclasses of scalars
        return value
    raise TypeError(f"cannot encode {cls.__name__} canonically")


def canonical_bytes(value: Any) -> bytes:
    return json.dumps(
        to_data(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


def digest_bytes(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def chain_digest(prev: bytes, value: Any) -> bytes:
    """Digest of a chain: H(prev || canonical(value))."""
    h = hashlib.blake2b(prev, digest_size=16)
    h.update(canonical_bytes(value))
    return h.digest()


def state_digest(state: Any) -> str:
    """Hex digest of a state's canonical encoding (the conversation counts by its own digest)."""
    return digest_bytes(canonical_bytes(state)).hex()
