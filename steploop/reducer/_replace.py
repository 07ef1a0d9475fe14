"""A fast ``attrs.evolve`` for the hot path (specs/ R-COST-1).

``attrs.evolve`` introspects the class on every call; step() calls it millions of times in a
replay. ``evolve`` here picks, once per class, the cheapest way to build the changed copy:

* the state records step() rebuilds on every event (``LoopState``, ``Round``, ``Slot``,
  ``Ids`` ...) are frozen attrs classes *with* an instance ``__dict__`` (``slots=False``) and
  no validators or converters: the copy is a new instance whose ``__dict__`` is the old one's,
  updated with the changes, one C-level dict copy instead of one ``__setattr__`` per field.
  A misspelt change name still raises ``TypeError`` (it would make the dict longer);
* any other attrs class gets a compiled function that calls its own ``__init__`` with every
  field taken from the instance unless given, so its validators still run.

A fast path ("evolve" of :mod:`steploop.reducer.fastpaths`, where its figure is): with it off,
every call is ``attrs.evolve``.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs

from steploop.reducer import fastpaths

__all__ = ["evolve"]

T = TypeVar("T")
_MISSING = object()
_REPLACERS: dict[type, Any] = {}
_PLAIN: dict[type, int] = {}  # dict-backed classes: their number of fields
_new = object.__new__
_set = object.__setattr__


def _plain(cls: type) -> bool:
    """True if a copy of the instance dict is a valid instance of ``cls``."""
    if not fastpaths.on("evolve"):
        return False
    if "__slots__" in cls.__dict__ or getattr(cls, "__attrs_pre_init__", None) is not None:
        return False
    if getattr(cls, "__attrs_post_init__", None) is not None:
        return False
    return all(
        f.init and f.validator is None and f.converter is None and not f.name.startswith("_")
        for f in attrs.fields(cls)
    )


def _compile(cls: type) -> Any:
    fields = attrs.fields(cls)
    names = [f.name for f in fields]
    if not fastpaths.on("evolve") or any(not f.init or f.name.startswith("_") for f in fields):
        return lambda inst, **kw: attrs.evolve(inst, **kw)
    params = ", ".join(f"{n}=_M" for n in names)
    args = ", ".join(f"{n}=(self.{n} if {n} is _M else {n})" for n in names)
    src = f"def replace(self, *, {params}):\n    return cls({args})\n"
    ns: dict[str, Any] = {"cls": cls, "_M": _MISSING}
    exec(compile(src, f"<replace {cls.__qualname__}>", "exec"), ns)
    return ns["replace"]


def evolve(inst: T, **changes: Any) -> T:
    """Like ``attrs.evolve(inst, **changes)``, several times faster."""
    cls: Any = type(inst)
    n = _PLAIN.get(cls)
    if n is not None:  # the hot path, inlined: no second call, no kwargs re-packing
        d = inst.__dict__.copy()
        d.update(changes)
        if len(d) != n:  # every field is a key already: a longer dict means a misspelt name
            _unknown(cls, changes)
        new: T = _new(cls)
        _set(new, "__dict__", d)
        return new
    fn = _REPLACERS.get(cls)
    if fn is None:
        if _plain(cls):
            _PLAIN[cls] = len(attrs.fields(cls))
            return evolve(inst, **changes)
        fn = _REPLACERS[cls] = _compile(cls)
    result: T = fn(inst, **changes)
    return result


def _switched() -> None:
    """The fast path switch moved: choose every class's way again."""
    _PLAIN.clear()
    _REPLACERS.clear()


fastpaths.watch(_switched)


def _unknown(cls: type, changes: dict[str, Any]) -> None:
    bad = sorted(changes.keys() - {f.name for f in attrs.fields(cls)})
    raise TypeError(f"{cls.__qualname__} has no field(s) {', '.join(bad)}")
