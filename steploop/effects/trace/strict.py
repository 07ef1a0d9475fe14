"""Strict checks of trace data before it is structured: a wrong type is an error, never a
coercion (specs/trace-format.md, "Reading").

:func:`type_problem` walks JSON data against a steploop type exactly as
:mod:`steploop.effects.trace.schema` maps that type to JSON Schema (so it agrees with
``specs/trace.schema.json``; ``tests/effects/test_trace_mutations.py`` checks both on mutated
traces), and returns the first thing wrong, naming the field by its path
(``gates.auto_compact``, ``content[0].text``). It runs only where a compiled fast structurer
declined the data, so a valid trace never pays for it.

:func:`limits_problem` bounds what any line may hold: at most :data:`MAX_LINE_DEPTH` levels of
arrays and objects, integers of at most :data:`MAX_INT_DIGITS` digits.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from typing import Any, Literal

import attrs

from steploop.reducer.canonical import MAX_DEPTH, MAX_INT_DIGITS
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import Emit
from steploop.reducer.events import CompactionFinished

__all__ = [
    "MAX_INT_DIGITS",
    "MAX_LINE_DEPTH",
    "limits_problem",
    "provenance_problem",
    "type_problem",
]

MAX_LINE_DEPTH = 128
"""Levels of arrays and objects one trace line may nest: a record's own structure (at most 7
levels above a tool input, in a header's session) plus tool input of up to
``steploop.reducer.canonical.MAX_DEPTH`` (100) levels, which the interpreter enforces where input enters."""
assert MAX_LINE_DEPTH >= MAX_DEPTH + 7

_INT_BOUND = 10**MAX_INT_DIGITS
_LEAVES = (str, bool, float, type(None))


def limits_problem(obj: Any) -> str | None:
    """What of the limits ``obj`` (a parsed line) breaks, or None. Iterative: any depth."""
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        v, depth = stack.pop()
        cls = v.__class__
        if cls is dict or cls is list:
            if depth > MAX_LINE_DEPTH:
                return f"nested deeper than {MAX_LINE_DEPTH} levels of arrays and objects"
            items = v.values() if cls is dict else v
            stack.extend((x, depth + 1) for x in items if x.__class__ not in _LEAVES)
        elif cls is int and not -_INT_BOUND < v < _INT_BOUND:
            return f"an integer of more than {MAX_INT_DIGITS} digits"
    return None


def _show(v: Any) -> str:
    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # pragma: no cover - parsed JSON data
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _at(path: str, what: str) -> str:
    return f"{path} {what}" if path else what


def _tagged(t: Any) -> bool:
    return isinstance(t, type) and attrs.has(t) and isinstance(getattr(t, "TAG", None), str)


Mode = Literal["inline", "trace"]
Check = typing.Callable[[Any, str], "str | None"]


@functools.cache
def _checker(t: Any, mode: Mode) -> Check:
    """A function ``(value, path) -> problem or None`` for type ``t`` (cached per type)."""
    if t is type(None):
        return lambda v, p: None if v is None else _at(p, f"must be null, got {_show(v)}")
    if t is Any:
        return lambda v, p: None
    if t in (str, bool, int):
        name = {str: "a string", bool: "true or false", int: "an integer"}[t]
        return lambda v, p: None if v.__class__ is t else _at(p, f"must be {name}, got {_show(v)}")
    if t is float:
        return lambda v, p: (
            None if v.__class__ in (int, float) else _at(p, f"must be a number, got {_show(v)}")
        )
    if t is Conversation:
        return _conversation(mode)
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is Literal:
        allowed = ", ".join(json.dumps(a) for a in args)

        def literal(v: Any, p: str) -> str | None:
            if any(v.__class__ is a.__class__ and v == a for a in args):
                return None
            return _at(p, f"must be one of {allowed}, got {_show(v)}")

        return literal
    if origin is typing.Union or isinstance(t, types.UnionType):
        return _union(args, mode)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            item = _checker(args[0], mode)

            def array(v: Any, p: str) -> str | None:
                if v.__class__ is not list:
                    return _at(p, f"must be an array, got {_show(v)}")
                for k, x in enumerate(v):
                    got = item(x, f"{p}[{k}]")
                    if got is not None:
                        return got
                return None

            return array
        items = [_checker(a, mode) for a in args]

        def fixed(v: Any, p: str) -> str | None:
            if v.__class__ is not list or len(v) != len(items):
                return _at(p, f"must be an array of {len(items)} items, got {_show(v)}")
            for k, (x, check) in enumerate(zip(v, items, strict=True)):
                got = check(x, f"{p}[{k}]")
                if got is not None:
                    return got
            return None

        return fixed
    if origin is dict:
        return lambda v, p: (
            None if v.__class__ is dict else _at(p, f"must be an object, got {_show(v)}")
        )
    if isinstance(t, type) and attrs.has(t):
        return _class(t, mode)
    raise TypeError(f"no strict check for {t!r}")  # pragma: no cover - a new field type


def _message_ref(v: Any, p: str) -> str | None:
    if v.__class__ is dict and v.keys() == {"ref"} and v["ref"].__class__ is str:
        return None
    return _at(p, f'must be a message reference {{"ref": "<id>"}}, got {_show(v)}')


def _conversation(mode: Mode) -> Check:
    if mode == "trace":

        def ref(v: Any, p: str) -> str | None:
            if (
                v.__class__ is dict
                and v.keys() == {"length", "digest"}
                and v["length"].__class__ is int
                and v["length"] >= 0
                and v["digest"].__class__ is str
                and len(v["digest"]) == 32
                and not v["digest"].strip("0123456789abcdef")
            ):
                return None
            return _at(p, f'must be {{"length": n, "digest": "<32 hex digits>"}}, got {_show(v)}')

        return ref
    from steploop.reducer.messages import Message

    return _checker(tuple[Message, ...], mode)


def _union(args: tuple[Any, ...], mode: Mode) -> Check:
    members = [a for a in args if a is not type(None)]
    optional = len(members) < len(args)
    if members and all(_tagged(m) for m in members):
        by_tag = {m.TAG: m for m in members}
        names = ", ".join(sorted(by_tag))

        def tagged(v: Any, p: str) -> str | None:
            if v is None and optional:
                return None
            if v.__class__ is not dict or v.get("type").__class__ is not str:
                return _at(p, f"must be an object with a 'type' (one of {names}), got {_show(v)}")
            cls = by_tag.get(v["type"])
            if cls is None:
                return _at(p, f"has unknown type {_show(v['type'])}; expected one of {names}")
            return _checker(cls, mode)(v, p)

        return tagged
    checks = [_checker(m, mode) for m in members]

    def any_of(v: Any, p: str) -> str | None:
        if v is None and optional:
            return None
        problems = [c(v, p) for c in checks]
        if not all(problems):
            return None
        return problems[0] if len(problems) == 1 else _at(p, f"has the wrong type: {_show(v)}")

    return any_of


def _class(cls: type, mode: Mode) -> Check:
    hints = typing.get_type_hints(cls)
    fields = attrs.fields(cls)
    tag = getattr(cls, "TAG", None) if _tagged(cls) else None
    allowed = {f.name for f in fields} | ({"type"} if tag is not None else set())
    required = [f.name for f in fields if f.default is attrs.NOTHING]
    checks: dict[str, Check] = {}
    for f in fields:
        if cls is Emit and f.name == "item" and mode == "trace":
            from steploop.reducer.messages import Tombstone, ToolUseSummary

            checks[f.name] = _emitted_ref(_checker(Tombstone | ToolUseSummary, mode))
        elif cls is CompactionFinished and f.name == "messages":
            checks[f.name] = _checker_refs
        else:
            checks[f.name] = _lazy(hints[f.name], mode)

    def check(v: Any, p: str) -> str | None:
        if v.__class__ is not dict:
            return _at(p, f"must be an object, got {_show(v)}")
        if tag is not None and "type" in v and v["type"] != tag:
            return _at(p, f"must have type {tag!r}, got {_show(v['type'])}")
        extra = sorted(k for k in v if k not in allowed)
        if extra:
            return _at(p, f"has unexpected field(s) {', '.join(repr(k) for k in extra)}")
        missing = [k for k in required if k not in v]
        if missing:
            return _at(p, f"is missing field(s) {', '.join(repr(k) for k in missing)}")
        for name, c in checks.items():
            if name in v:
                got = c(v[name], f"{p}.{name}" if p else name)
                if got is not None:
                    return got
        return None

    return check


def _emitted_ref(others: Check) -> Check:
    """Emit's item in a step record: a message reference, a tombstone or a tool-use summary."""

    def check(v: Any, p: str) -> str | None:
        if v.__class__ is dict and "ref" in v:
            return _message_ref(v, p)
        return others(v, p)

    return check


def _checker_refs(v: Any, p: str) -> str | None:
    if v.__class__ is not list:
        return _at(p, f"must be an array of message references, got {_show(v)}")
    for k, x in enumerate(v):
        got = _message_ref(x, f"{p}[{k}]")
        if got is not None:
            return got
    return None


def _lazy(t: Any, mode: Mode) -> Check:
    """The checker of ``t``, built on first use (types refer to each other)."""
    box: list[Check] = []

    def check(v: Any, p: str) -> str | None:
        if not box:
            box.append(_checker(t, mode))
        return box[0](v, p)

    return check


def type_problem(data: Any, t: Any, mode: Mode = "inline") -> str | None:
    """The first way ``data`` is not JSON data of type ``t`` (schema-strict), or None.

    ``mode="trace"``: events and effects as a step record writes them (a conversation as
    ``{"length", "digest"}``, a message inside an Emit as ``{"ref": id}``)."""
    return _checker(t, mode)(data, "")


_PROVENANCE_STR = frozenset({"created_at", "steploop", "python", "platform", "workspace"})


def provenance_problem(v: Any) -> str | None:
    """specs/trace.schema.json's provenance: an object of scalars; the known keys strings
    (``client`` a string or null)."""
    if v.__class__ is not dict:
        return f"must be an object, got {_show(v)}"
    for k, x in v.items():
        if k in _PROVENANCE_STR and x.__class__ is not str:
            return f"{k} must be a string, got {_show(x)}"
        if k == "client" and x is not None and x.__class__ is not str:
            return f"client must be a string or null, got {_show(x)}"
        if x is not None and x.__class__ not in (str, int, bool):
            return f"{k} must be a string, an integer, true, false or null, got {_show(x)}"
    return None
