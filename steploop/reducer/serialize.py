"""The cattrs converter for every public type (specs/ R-SER-1).

Tagged unions (blocks, messages, emitted items, events, effects, transitions) are written as
dicts with the member's stable ``TAG`` under ``"type"``. A conversation is written as its list of
messages and rebuilt (so its digest is recomputed, never trusted from the input).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn
from cattrs.strategies import configure_union_passthrough

from steploop.reducer import fastpaths
from steploop.reducer.conversation import Conversation
from steploop.reducer.errors import SteploopError

__all__ = ["SerializationError", "converter", "fast_structurer", "structure", "unstructure"]


class SerializationError(SteploopError, ValueError):
    """Data that does not describe a steploop value (unknown tag, missing field, ...)."""


def _tagged(cls: type) -> bool:
    return attrs.has(cls) and isinstance(getattr(cls, "TAG", None), str)


def _union_members(t: Any) -> tuple[type, ...] | None:
    origin = typing.get_origin(t)
    if origin is typing.Union or isinstance(t, types.UnionType):
        args = tuple(a for a in typing.get_args(t) if a is not type(None))
        if args and all(isinstance(a, type) and _tagged(a) for a in args):
            return args
    return None


def _make() -> cattrs.Converter:
    c = cattrs.Converter(forbid_extra_keys=True)
    configure_union_passthrough(str | int | bool | None, c)

    c.register_unstructure_hook(Conversation, lambda v: [c.unstructure(m) for m in v.messages()])

    def structure_conversation(v: Any, _t: Any) -> Conversation:
        from steploop.reducer.messages import Message

        if not isinstance(v, list):
            raise SerializationError(
                f"a conversation is a list of messages, got {type(v).__name__}"
            )
        return Conversation.of(c.structure(m, Message) for m in v)  # type: ignore[arg-type]

    c.register_structure_hook(Conversation, structure_conversation)

    def unstructure_factory(cls: type) -> Callable[[Any], dict[str, Any]]:
        base: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(cls, c)
        tag = cls.TAG  # type: ignore[attr-defined]

        def fn(v: Any) -> dict[str, Any]:
            d = base(v)
            d["type"] = tag
            return d

        return fn

    c.register_unstructure_hook_factory(_tagged, unstructure_factory)

    def structure_tagged_factory(cls: type) -> Callable[[Any, Any], Any]:
        base: Callable[[Any, Any], Any] = make_dict_structure_fn(
            cls, c, _cattrs_forbid_extra_keys=True
        )
        tag = cls.TAG  # type: ignore[attr-defined]

        def fn(v: Any, _t: Any) -> Any:
            if not isinstance(v, dict):
                raise SerializationError(
                    f"{cls.__name__}: expected an object, got {type(v).__name__}"
                )
            got = v.get("type", tag)
            if got != tag:
                raise SerializationError(f"expected type {tag!r}, got {got!r}")
            return base({k: x for k, x in v.items() if k != "type"}, cls)

        return fn

    c.register_structure_hook_factory(_tagged, structure_tagged_factory)

    def union_factory(t: Any) -> Callable[[Any, Any], Any]:
        members = _union_members(t)
        assert members is not None
        by_tag = {m.TAG: m for m in members}  # type: ignore[attr-defined]
        optional = type(None) in typing.get_args(t)
        names = ", ".join(sorted(by_tag))

        def fn(v: Any, _t: Any) -> Any:
            if v is None and optional:
                return None
            if not isinstance(v, dict) or "type" not in v:
                raise SerializationError(f"expected an object with a 'type' (one of {names})")
            cls = by_tag.get(v["type"])
            if cls is None:
                raise SerializationError(f"unknown type {v['type']!r}; expected one of {names}")
            return c.structure(v, cls)

        return fn

    c.register_structure_hook_factory(lambda t: _union_members(t) is not None, union_factory)
    return c


converter = _make()


def unstructure(value: Any) -> Any:
    """Plain JSON data for a steploop value."""
    return converter.unstructure(value)


def structure(data: Any, cls: Any) -> Any:
    """Rebuild a value of type ``cls`` (a class or a union) from JSON data.

    Data exactly as :func:`unstructure` writes it takes the compiled fast path
    (:func:`fast_structurer`); anything else goes through the converter, which accepts the same
    values (and coerces more) and words every error.

    Raises:
        SerializationError: the data does not describe a ``cls``.
    """
    fast = _FAST.get(cls, _UNKNOWN)
    if fast is _UNKNOWN:
        fast = fast_structurer(cls)
    if fast is not None:
        try:
            return fast(data)
        except Exception:  # the converter below decides, and words the error
            pass
    try:
        return converter.structure(data, cls)
    except SerializationError:
        raise
    except cattrs.BaseValidationError as e:
        raise SerializationError(explain_error(e)) from None
    except (KeyError, TypeError, ValueError) as e:
        raise SerializationError(f"{type(e).__name__}: {e}") from None


def _leaves(e: BaseException) -> list[BaseException]:
    subs = getattr(e, "exceptions", None)
    if not subs:
        return [e]
    return [leaf for sub in subs for leaf in _leaves(sub)]


def explain_error(e: BaseException) -> str:
    """One line: our own message (an unknown tag, ...) where there is one, with the path."""
    notes = cattrs.transform_error(e) if isinstance(e, cattrs.BaseValidationError) else [str(e)]
    ours = [leaf for leaf in _leaves(e) if isinstance(leaf, SerializationError)]
    if ours:
        where = next((n.rsplit(" @ ", 1)[1] for n in notes if " @ " in n), "")
        return f"{ours[0]}" + (f" @ {where}" if where else "")
    return "; ".join(notes) if notes else str(e)


# --- the fast path ----------------------------------------------------------------------------
# A compiled structurer per class (and per union of tagged classes) for data in exactly the shape
# unstructure() writes: every key present, no other key, a tagged class's "type" present,
# scalars of exactly their declared type, tuples as lists. It is a partial function of the
# converter above: it either returns what ``converter.structure`` returns for the same data, or
# raises (any exception); structure() then asks the converter, which words the error or coerces.
# It never coerces ("5" for an int, 1 for a bool, a string for a tuple) and never guesses, so it
# cannot accept what the converter rejects (tests/reducer/test_serialize.py checks both on
# every recorded trace and on mutations of it).

_UNKNOWN: Any = object()
_FAST: dict[Any, Callable[[Any], Any] | None] = {}
_SCALAR_TYPES = (str, int, bool)


class _Unsupported(Exception):
    """A type the fast path does not handle: the converter handles it."""


class _NotFast(Exception):
    """Data the fast path does not take (raised only inside compiled structurers)."""


def fast_structurer(
    cls: Any, overrides: dict[str, Callable[[Any], Any]] | None = None
) -> Callable[[Any], Any] | None:
    """The compiled fast structurer of ``cls`` (an attrs class or a union of tagged classes).

    The function returns exactly what ``converter.structure(data, cls)`` returns, or raises
    (any exception) for data it does not take: callers fall back to :func:`structure`.
    ``overrides`` maps field names to functions that build that field from its raw value
    instead (the class is then compiled anew, not cached); they must raise the same way.
    None: the type has a field the fast path does not handle, or the fast path is off
    (:mod:`steploop.reducer.fastpaths`).
    """
    if not fastpaths.on("fast_structurers"):
        return None
    if overrides is None and cls in _FAST:
        return _FAST[cls]
    try:
        fn = _compile_fast(cls, overrides or {})
    except _Unsupported:
        fn = None
    if not overrides:
        _FAST[cls] = fn
    return fn


fastpaths.watch(_FAST.clear)  # the switch moved: compile (or not) anew


def _member_fn(t: Any) -> Callable[[Any], Any]:
    fn = fast_structurer(t)
    if fn is None:
        raise _Unsupported(t)
    return fn


def _compile_fast(t: Any, overrides: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    members = _union_members(t)
    if members is not None:
        return _compile_union(members, optional=type(None) in typing.get_args(t))
    if not (isinstance(t, type) and attrs.has(t)) or t in _COMPILING:
        raise _Unsupported(t)  # not an attrs class, or a recursive one
    _COMPILING.add(t)
    try:
        return _compile_class(t, overrides)
    finally:
        _COMPILING.discard(t)


_COMPILING: set[type] = set()


def _compile_union(members: tuple[type, ...], optional: bool) -> Callable[[Any], Any]:
    by_tag: dict[str, Callable[[Any], Any]] = {}
    for m in members:
        fn = fast_structurer(m)
        if fn is not None:  # a member the fast path cannot take falls back when it occurs
            by_tag[m.TAG] = fn  # type: ignore[attr-defined]
    get = by_tag.__getitem__

    if optional:

        def union_or_none(v: Any) -> Any:
            return None if v is None else get(v["type"])(v)

        return union_or_none

    def union(v: Any) -> Any:
        return get(v["type"])(v)  # a non-dict, a missing or unknown tag: raises

    return union


def _compile_class(cls: type, overrides: dict[str, Callable[[Any], Any]]) -> Callable[[Any], Any]:
    hints = typing.get_type_hints(cls)
    fields = attrs.fields(cls)
    tag = getattr(cls, "TAG", None) if _tagged(cls) else None
    names = [f.name for f in fields]
    if tag is not None and "type" in names:
        raise _Unsupported(cls)
    if any(not f.init or f.alias != f.name for f in fields):
        raise _Unsupported(cls)
    ns: dict[str, Any] = {"CLS": cls, "NotFast": _NotFast, "TAG": tag}
    keys = frozenset(names) | ({"type"} if tag is not None else set())
    ns["KEYS"] = keys
    lines = [
        "def fast(v):",
        "    if v.__class__ is not dict or v.keys() != KEYS:",
        "        raise NotFast",
    ]
    if tag is not None:
        lines += ["    if v['type'] != TAG:", "        raise NotFast"]
    for n, f in enumerate(fields):
        x = f"x{n}"
        lines.append(f"    {x} = v[{f.name!r}]")
        if f.name in overrides:
            ns[f"O{n}"] = overrides[f.name]
            lines.append(f"    {x} = O{n}({x})")
            continue
        lines += _field_code(hints[f.name], x, n, ns)
    args = ", ".join(f"{f.name}=x{n}" for n, f in enumerate(fields))
    lines.append(f"    return CLS({args})")
    src = "\n".join(lines) + "\n"
    exec(compile(src, f"<fast structure {cls.__qualname__}>", "exec"), ns)
    fn: Callable[[Any], Any] = ns["fast"]
    return fn


def _check(x: str, types_: tuple[type, ...], optional: bool) -> list[str]:
    cond = " and ".join(f"{x}.__class__ is not {t.__name__}" for t in types_)
    if optional:
        cond = f"{x} is not None and {cond}"
    return [f"    if {cond}:", "        raise NotFast"]


def _field_code(t: Any, x: str, n: int, ns: dict[str, Any]) -> list[str]:
    """Lines that check ``x`` (the raw value of a field of type ``t``) and rebuild it in place."""
    if t in _SCALAR_TYPES:
        return _check(x, (t,), optional=False)
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Literal:
        if not args or not all(type(a) is str for a in args):
            raise _Unsupported(t)
        ns[f"L{n}"] = frozenset(args)
        return [f"    if {x}.__class__ is not str or {x} not in L{n}:", "        raise NotFast"]
    if origin is typing.Union or isinstance(t, types.UnionType):
        rest = tuple(a for a in args if a is not type(None))
        optional = len(rest) < len(args)
        if rest and all(a in _SCALAR_TYPES for a in rest):
            # configure_union_passthrough: a value of exactly one of the types is kept as is
            return _check(x, rest, optional)
        if _union_members(t) is not None:
            ns[f"F{n}"] = fast_structurer(t)
            return [f"    {x} = F{n}({x})"]
        if optional and len(rest) == 1 and isinstance(rest[0], type) and attrs.has(rest[0]):
            ns[f"F{n}"] = _member_fn(rest[0])
            return [f"    if {x} is not None:", f"        {x} = F{n}({x})"]
        raise _Unsupported(t)
    if origin is tuple:
        if len(args) != 2 or args[1] is not Ellipsis:
            raise _Unsupported(t)
        item = args[0]
        if item in _SCALAR_TYPES:
            ns[f"T{n}"] = item
            return [
                f"    if {x}.__class__ is not list:",
                "        raise NotFast",
                f"    for e in {x}:",
                f"        if e.__class__ is not T{n}:",
                "            raise NotFast",
                f"    {x} = tuple({x})",
            ]
        if typing.get_origin(item) is tuple:
            ns[f"F{n}"] = _fixed_tuple_fn(item)
            return [
                f"    if {x}.__class__ is not list:",
                "        raise NotFast",
                f"    {x} = tuple([F{n}(e) for e in {x}])",
            ]
        ns[f"F{n}"] = fast_structurer(item) if _union_members(item) is not None else None
        if ns[f"F{n}"] is None:
            if not (isinstance(item, type) and attrs.has(item)):
                raise _Unsupported(t)
            ns[f"F{n}"] = _member_fn(item)
        return [
            f"    if {x}.__class__ is not list:",
            "        raise NotFast",
            f"    {x} = tuple([F{n}(e) for e in {x}])",
        ]
    if origin is dict:
        if args != (str, Any):
            raise _Unsupported(t)
        # keys are structured as str (kept when they are str), values as Any (kept as they are)
        return [
            f"    if {x}.__class__ is not dict:",
            "        raise NotFast",
            f"    for e in {x}:",
            "        if e.__class__ is not str:",
            "            raise NotFast",
            f"    {x} = dict({x})",
        ]
    if t is Conversation:
        from steploop.reducer.messages import Message

        ns[f"F{n}"] = fast_structurer(Message)
        ns["Conversation"] = Conversation
        return [
            f"    if {x}.__class__ is not list:",
            "        raise NotFast",
            f"    {x} = Conversation.of([F{n}(e) for e in {x}])",
        ]
    if isinstance(t, type) and attrs.has(t):
        ns[f"F{n}"] = _member_fn(t)
        return [f"    {x} = F{n}({x})"]
    raise _Unsupported(t)


def _scalar_types(t: Any) -> tuple[tuple[type, ...], bool]:
    """The exact types a scalar or a union of scalars (optionally with None) keeps as they are."""
    if t in _SCALAR_TYPES:
        return (t,), False
    if typing.get_origin(t) is typing.Union or isinstance(t, types.UnionType):
        args = typing.get_args(t)
        rest = tuple(a for a in args if a is not type(None))
        if rest and all(a in _SCALAR_TYPES for a in rest):
            return rest, len(rest) < len(args)
    raise _Unsupported(t)


def _fixed_tuple_fn(t: Any) -> Callable[[Any], Any]:
    """A fixed-length tuple of scalars (``tuple[str, str | int | bool | None]``), as a list."""
    items = [_scalar_types(a) for a in typing.get_args(t)]
    if not items or Ellipsis in typing.get_args(t):
        raise _Unsupported(t)
    size = len(items)

    def fixed(v: Any) -> tuple[Any, ...]:
        if v.__class__ is not list or len(v) != size:
            raise _NotFast
        for x, (allowed, optional) in zip(v, items, strict=True):
            if x.__class__ not in allowed and not (optional and x is None):
                raise _NotFast
        return tuple(v)

    return fixed
