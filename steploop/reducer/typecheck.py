"""Type checks of the values that enter the machine from outside (specs/ M-TYPE-1).

An event, a request or a session is checked once, when it is built (its ``__attrs_post_init__``
calls :func:`check_fields`): every field against its annotation, nested blocks, messages,
usage and traits included, so that step() never meets a value of the wrong type deep inside.
A wrong value raises one :class:`~steploop.reducer.errors.WrongType` (a ``TypeError``) naming
the field by its path (``ModelBlockReceived.block.text``). The machine's own values (its states,
the messages it builds) are not checked again.

The checker of a class is compiled once from its type hints into one function of plain
comparisons (``x.__class__ is int``), so a check costs about as much as building the value:
exact types (a bool is not an int, a list not a tuple, a subclass not its base), ``None`` where
the annotation allows it, a ``Literal``'s values, the members of a union of attrs classes (a
content block, a message), tuples item by item, a ``dict``'s keys as strings.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Final

import attrs

from steploop.reducer.errors import WrongType

__all__ = ["check_fields", "checker"]


class _Bad(Exception):
    """Raised inside compiled checkers: the path (innermost first), what was expected, the
    value. Turned into one WrongType at the top."""

    def __init__(self, part: str, expected: str, got: object) -> None:
        self.path = [part]
        self.expected = expected
        self.got = got


_CHECKERS: dict[type, Callable[[Any], None]] = {}
_COMPILING: set[type] = set()
_SCALARS: Final = {int: "an int", str: "a str", bool: "a bool", float: "a float"}


def _describe(t: Any) -> str:
    if t in _SCALARS:
        return _SCALARS[t]
    if t is type(None):
        return "None"
    if isinstance(t, type):
        return ("an " if t.__name__[:1] in "AEIOU" else "a ") + t.__name__
    origin = typing.get_origin(t)
    args = typing.get_args(t)
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in args)
    if origin is typing.Union or isinstance(t, types.UnionType):
        return " or ".join(_describe(a) for a in args)
    if origin is tuple:
        return "a tuple"
    if origin is dict:
        return "a dict"
    return str(t)


class _Code:
    """Source lines of one compiled checker and the names they use."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ns: dict[str, Any] = {"Bad": _Bad}
        self.n = 0

    def name(self, value: Any) -> str:
        self.n += 1
        key = f"N{self.n}"
        self.ns[key] = value
        return key

    def value(self, t: Any, x: str, part: str, indent: str) -> None:
        """Lines that check the value ``x`` against ``t``; ``part`` is its path segment."""
        add = self.lines.append
        what = self.name(_describe(t))
        where = self.name(part)
        fail = f"{indent}    raise Bad({where}, {what}, {x})"
        if t is Any:
            return
        if t in _SCALARS or t is type(None):
            add(f"{indent}if {x}.__class__ is not {self.name(t)}:")
            add(fail)
            return
        origin = typing.get_origin(t)
        args = typing.get_args(t)
        if origin is typing.Literal:
            add(f"{indent}if {x}.__class__ is not str or {x} not in {self.name(frozenset(args))}:")
            add(fail)
            return
        if origin is typing.Union or isinstance(t, types.UnionType):
            rest = tuple(a for a in args if a is not type(None))
            if len(rest) < len(args):  # optional
                add(f"{indent}if {x} is not None:")
                inner = rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007
                self.value(inner, x, part, indent + "    ")
                return
            if all(a in _SCALARS for a in rest):
                allowed = self.name(frozenset(rest))
                add(f"{indent}if {x}.__class__ not in {allowed}:")
                add(fail)
                return
            if all(isinstance(a, type) and attrs.has(a) for a in rest):
                members = self.name({a: checker(a) for a in rest})
                add(f"{indent}c = {members}.get({x}.__class__)")
                add(f"{indent}if c is None:")
                add(fail)
                self._nested(f"c({x})", where, indent)
                return
            runtime = [a if isinstance(a, type) else typing.get_origin(a) for a in rest]
            if len(set(runtime)) < len(rest) or not all(isinstance(c, type) for c in runtime):
                raise TypeError(f"no check for {t}")
            self.n += 1
            k = f"k{self.n}"
            add(f"{indent}{k} = {x}.__class__")
            for j, (a, c) in enumerate(zip(rest, runtime, strict=True)):
                add(f"{indent}{'if' if j == 0 else 'elif'} {k} is {self.name(c)}:")
                self.value(a, x, part, indent + "    ")
            add(f"{indent}else:")
            add(fail)
            return
        if origin is tuple:
            add(f"{indent}if {x}.__class__ is not tuple:")
            add(fail)
            if len(args) == 2 and args[1] is Ellipsis:
                self.n += 1
                i, e = f"i{self.n}", f"e{self.n}"
                add(f"{indent}for {i}, {e} in enumerate({x}):")
                self._item(args[0], e, i, where, indent + "    ")
            else:
                add(f"{indent}if len({x}) != {len(args)}:")
                add(fail)
                for pos, a in enumerate(args):
                    self.value(a, f"{x}[{pos}]", f"{part}[{pos}]", indent)
            return
        if origin is dict:
            add(f"{indent}if {x}.__class__ is not dict:")
            add(fail)
            if args and args[0] is str:
                add(f"{indent}for k in {x}:")
                add(f"{indent}    if k.__class__ is not str:")
                add(f"{indent}        raise Bad({where}, 'a dict with str keys', {x})")
            return
        if isinstance(t, type) and attrs.has(t):
            add(f"{indent}if {x}.__class__ is not {self.name(t)}:")
            add(fail)
            self._nested(f"{self.name(checker(t))}({x})", where, indent)
            return
        if isinstance(t, type):  # a plain class (a Conversation): its own invariants hold
            add(f"{indent}if {x}.__class__ is not {self.name(t)}:")
            add(fail)
            return
        raise TypeError(f"no check for {t}")

    def _item(self, t: Any, x: str, i: str, where: str, indent: str) -> None:
        """A tuple's item: checked, its index added to the path on failure."""
        add = self.lines.append
        add(f"{indent}try:")
        self.value(t, x, "", indent + "    ")
        add(f"{indent}except Bad as b:")
        add(f"{indent}    b.path[-1] = f'[{{{i}}}]' + b.path[-1]")
        add(f"{indent}    b.path.append({where})")
        add(f"{indent}    raise")

    def _nested(self, call: str, where: str, indent: str) -> None:
        add = self.lines.append
        add(f"{indent}try:")
        add(f"{indent}    {call}")
        add(f"{indent}except Bad as b:")
        add(f"{indent}    b.path.append({where})")
        add(f"{indent}    raise")


def checker(cls: type) -> Callable[[Any], None]:
    """The compiled checker of attrs class ``cls``'s fields (raises the internal ``_Bad``)."""
    fn = _CHECKERS.get(cls)
    if fn is not None:
        return fn
    if cls in _COMPILING:  # a recursive type: checked when called
        return lambda o: _CHECKERS[cls](o)
    _COMPILING.add(cls)
    try:
        hints = typing.get_type_hints(cls)
        code = _Code()
        code.lines.append("def check(o):")
        for f in attrs.fields(cls):
            code.value(hints[f.name], f"o.{f.name}", f".{f.name}", "    ")
        code.lines.append("    return None")
        src = "\n".join(code.lines) + "\n"
        exec(compile(src, f"<check {cls.__qualname__}>", "exec"), code.ns)
        compiled: Callable[[Any], None] = code.ns["check"]
        _CHECKERS[cls] = compiled
        return compiled
    finally:
        _COMPILING.discard(cls)


def check_fields(obj: object) -> None:
    """[M-TYPE-1] Check every field of ``obj`` (an attrs instance) against its annotation.

    Raises:
        WrongType: a field (or a field of a nested block, message, ...) is of the wrong type,
            named by its path from the class (``MessagesInserted.messages[0].content``).
    """
    cls = obj.__class__
    fn = _CHECKERS.get(cls)
    if fn is None:
        fn = checker(cls)
    try:
        fn(obj)
    except _Bad as b:
        path = cls.__name__ + "".join(reversed(b.path))
        raise WrongType(path, b.expected, b.got) from None
