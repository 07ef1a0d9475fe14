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

_FIELDS: dict[type, tuple[str, ...]] = {}


def _names(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = tuple(f.name for f in attrs.fields(cls))
        _FIELDS[cls] = names
    return names


def to_data(value: Any) -> Any:
    """Turn a value made of attrs classes, tuples, dicts and scalars into JSON data."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    cls = type(value)
    canon = getattr(cls, "__canonical__", None)
    if canon is not None:
        return canon(value)
    if attrs.has(cls):
        out: dict[str, Any] = {}
        tag = getattr(cls, "TAG", None)
        if tag is not None:
            out["type"] = tag
        for name in _names(cls):
            out[name] = to_data(getattr(value, name))
        return out
    if isinstance(value, (tuple, list)):
        return [to_data(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_data(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, frozenset):
        return sorted(to_data(v) for v in value)
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
