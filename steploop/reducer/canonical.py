"""Canonical encoding and digests (specs/ R-COST-2).

A value is encoded to plain JSON data: attrs instances become dicts with their ``TAG`` under
``"type"`` (fields in declaration order), tuples become lists, and the JSON text is written with
sorted keys and no spaces. Digests are BLAKE2b over that text, never Python's salted ``hash()``,
so they are stable across processes and machines.

Text is encoded as UTF-8 with lone surrogates passed through (``surrogatepass``): a str that
is not valid Unicode (an undecodable file name, a ``\\ud800`` escape) still has one canonical
text and one digest, the same in every process. Such bytes are hashed, never written.

What crosses into the machine as free-form JSON data (a tool's input) is bounded by
:func:`data_problem`: at most :data:`MAX_DEPTH` levels deep, integers of at most
:data:`MAX_INT_DIGITS` digits, finite floats, string keys. The interpreter refuses anything
else where it enters, so every value in a state can be encoded, digested, written to a trace
and read back (specs/trace-format.md, "Limits").

:func:`canonical_bytes` is a fast path ("canonical_text" of :mod:`steploop.reducer.fastpaths`,
where its figure is): compiled per-class writers and a memo of texts; with it off, it is
:func:`canonical_bytes_reference`, the definition.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs

from steploop.reducer import fastpaths

__all__ = [
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "canonical_bytes",
    "canonical_bytes_reference",
    "chain_digest",
    "data_problem",
    "digest_bytes",
    "state_digest",
    "to_data",
]

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


# --- the canonical text, composed -------------------------------------------------------------
# canonical_bytes() must equal json.dumps(to_data(v), sort_keys=True, separators=(",", ":"),
# ensure_ascii=False). It is composed field by field instead, so that the text of immutable
# sub-values (messages, blocks, tool slots) can be memoised: a state digest per step then costs
# what changed, not the whole state (specs/ R-COST-2; tests/reducer/test_canonical.py).

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode
# what _dumps(s) does for a str, without its Python frame (the C encoder when there is one)
_dumps_str: Any = (
    getattr(json.encoder, "c_encode_basestring", None) or json.encoder.encode_basestring
)
_TEXT: dict[type, Any] = {}
_MEMO: dict[int, tuple[Any, str]] = {}
_MEMO_MAX = 4096  # entries; with _MEMO_TEXT_MAX it bounds the memo's memory
_MEMO_TEXT_MAX = 4 << 20  # characters of cached text
_memo_text = [0]


def _compile_text(cls: type) -> Any:
    """Compile ``'{"a":' + T(v.a) + ',"b":' + T(v.b) + '}'`` for one attrs class."""
    canon = getattr(cls, "__canonical__", None)
    if canon is not None:
        return lambda v: _dumps(canon(v))
    names = [f.name for f in attrs.fields(cls)]
    tag = getattr(cls, "TAG", None)
    keys = sorted([*names, "type"] if tag is not None else names)
    pieces = []
    for n, k in enumerate(keys):
        sep = "{" if n == 0 else ","
        if k == "type" and tag is not None:
            pieces.append(repr(sep + _dumps(k) + ":" + _dumps(tag)))
        else:
            # a str or None field (the usual cases) is written here, without a call of _text
            pieces.append(
                repr(sep + _dumps(k) + ":")
                + f" + (S(x) if (x := v.{k}).__class__ is str else 'null' if x is None else T(x))"
            )
    body = " + ".join(pieces) + " + '}'" if pieces else "'{}'"
    memo = tag is not None or cls.__name__ in ("Slot", "Usage", "ErrorInfo", "ToolTraits")
    if memo:
        src = (
            "def enc(v):\n"
            "    hit = M.get(id(v))\n"
            "    if hit is not None and hit[0] is v:\n"
            "        return hit[1]\n"
            f"    out = {body}\n"
            "    if len(M) >= MAX or SIZE[0] > TEXT_MAX:\n"
            "        M.clear()\n"
            "        SIZE[0] = 0\n"
            "    M[id(v)] = (v, out)  # keeps v alive, so its id is not reused while cached\n"
            "    SIZE[0] += len(out)\n"
            "    return out\n"
        )
    else:
        src = f"def enc(v):\n    return {body}\n"
    ns: dict[str, Any] = {
        "T": _text,
        "S": _dumps_str,
        "M": _MEMO,
        "MAX": _MEMO_MAX,
        "SIZE": _memo_text,
        "TEXT_MAX": _MEMO_TEXT_MAX,
    }
    exec(compile(src, f"<canonical {cls.__qualname__}>", "exec"), ns)
    return ns["enc"]


def _text(v: Any) -> str:
    cls = type(v)
    if cls is str:
        return _dumps_str(v)  # type: ignore[no-any-return]
    if cls is bool:
        return "true" if v else "false"
    if cls is int:
        return str(v)
    if v is None:
        return "null"
    enc = _TEXT.get(cls)
    if enc is not None:
        return enc(v)  # type: ignore[no-any-return]
    if cls is tuple or cls is list:
        return "[" + ",".join([_text(x) for x in v]) + "]" if v else "[]"
    if attrs.has(cls) or getattr(cls, "__canonical__", None) is not None:
        enc = _TEXT[cls] = _compile_text(cls)
        return enc(v)  # type: ignore[no-any-return]
    if isinstance(v, (tuple, list)):
        return "[" + ",".join([_text(x) for x in v]) + "]"
    if isinstance(v, dict):
        if not all(k.__class__ is str for k in v):
            v = {str(k): x for k, x in v.items()}  # as to_data does (a later key wins)
        # the keys are unique strs now, so sorting the items compares keys only
        return "{" + ",".join([_dumps_str(k) + ":" + _text(x) for k, x in sorted(v.items())]) + "}"
    return _dumps(to_data(v))


def canonical_bytes(value: Any) -> bytes:
    """The canonical JSON text of ``value`` as UTF-8 bytes (lone surrogates passed through).

    Raises:
        ValueError: ``value`` is nested too deep to encode (deeper than the interpreter lets
            data in, see :func:`data_problem`), instead of a RecursionError.
    """
    try:
        if _reference[0]:  # the fast path is off: the definition itself
            return canonical_bytes_reference(value)
        return _text(value).encode("utf-8", "surrogatepass")
    except RecursionError:
        raise ValueError(
            f"cannot encode a value nested this deep canonically (free-form data is "
            f"limited to {MAX_DEPTH} levels)"
        ) from None


_reference = [False]


def _switched() -> None:
    _reference[0] = not fastpaths.on("canonical_text")


fastpaths.watch(_switched)


def canonical_bytes_reference(value: Any) -> bytes:
    """The definition canonical_bytes() must match (slow; used by tests)."""
    return json.dumps(
        to_data(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8", "surrogatepass")


MAX_DEPTH = 100
"""Levels of nesting free-form data (a tool input) may have; the object itself is level 1."""
MAX_INT_DIGITS = 100
"""Decimal digits an integer in free-form data may have."""
_INT_BOUND = 10**MAX_INT_DIGITS
_JSON_LEAVES = (str, bool, type(None))


def data_problem(value: Any, what: str = "it") -> str | None:
    """None when ``value`` is JSON data within the limits; else what is wrong, in one line
    (``what`` names the value in it).

    JSON data: dicts with str keys, lists, str, int, float, bool and None; at most
    :data:`MAX_DEPTH` levels of dicts and lists; integers of at most :data:`MAX_INT_DIGITS`
    digits; no NaN or infinity. Iterative, so any depth is checked without recursion."""
    if value.__class__ is dict:  # the usual tool input: one level of scalars
        for k, x in value.items():
            if k.__class__ is not str:
                break
            cls = x.__class__
            if cls in _JSON_LEAVES or (cls is int and -_INT_BOUND < x < _INT_BOUND):
                continue
            break
        else:
            return None
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        cls = v.__class__
        if cls in _JSON_LEAVES:
            continue
        if cls is int:
            if not -_INT_BOUND < v < _INT_BOUND:
                return f"{what} holds an integer of more than {MAX_INT_DIGITS} digits"
        elif cls is float:
            if v - v != 0.0:  # inf - inf and nan - nan are nan
                return f"{what} holds {v!r}, which JSON cannot carry"
        elif cls is dict or cls is list:
            if depth > MAX_DEPTH:
                return f"{what} is nested deeper than {MAX_DEPTH} levels"
            if cls is dict:
                for k in v:
                    if k.__class__ is not str:
                        return f"{what} has a key that is not a string: {k!r:.40}"
                items = v.values()
            else:
                items = v
            stack.extend((x, depth + 1) for x in items if x.__class__ not in _JSON_LEAVES)
        else:
            return f"{what} holds a {cls.__name__}, which is not JSON data"
    return None


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
