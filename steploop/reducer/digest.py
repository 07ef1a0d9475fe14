"""State digests at the cost of what changed.

:class:`StateDigester` computes ``canonical.state_digest(state)`` for consecutive states of a
recording or a replay, reusing the canonical texts of the fields that hold the same objects as
last time; :func:`field_digest` is the digest of one field's value (a trace's ``fields``).
"""

from __future__ import annotations

import hashlib
import json
import operator
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from steploop.reducer import fastpaths
from steploop.reducer.canonical import canonical_bytes, digest_bytes
from steploop.reducer.state import Ids, LoopState, Round, Slot

STATE_FIELDS: tuple[str, ...] = tuple(f.name for f in attrs.fields(LoopState))

Former = Mapping[type, Mapping[str, Any]]
"""Fields an earlier version of the state's classes had, with the value each always held."""


def field_digest(value: Any) -> str:
    return digest_bytes(canonical_bytes(value)).hex()[:16]


def field_digests(state: LoopState) -> dict[str, str]:
    return {name: field_digest(getattr(state, name)) for name in STATE_FIELDS}


class StateDigester:
    """``state_digest(state)`` for consecutive states of a recording or a replay, at the cost
    of what changed; and the digests of single fields (:meth:`field_digest`) from the same
    texts.

    A fast path ("incremental_digest" of :mod:`steploop.reducer.fastpaths`, where its figure
    is): with it off, a digester encodes the whole state (unless ``former`` fields must be
    counted, which only the composition does).

    The canonical text of an attrs instance is fixed by R-COST-2 (and
    ``canonical.canonical_bytes_reference``): ``{"name":TEXT,...}`` over its fields in sorted
    order (with ``"type"`` when it has a TAG), and a tuple's is ``[TEXT,...]``. The text of a
    LoopState is therefore composed here from the canonical texts of its fields (those of its
    round, its ids and each tool slot from theirs in turn), each computed by ``canonical_bytes``
    and reused while the field holds the same object (states are immutable; a reference to each
    reused object is kept, so its identity is never recycled). Only classes without a TAG and
    without their own ``__canonical__`` are composed; anything else is encoded whole. The
    result equals ``state_digest(state)`` (tests/effects/test_trace_fast.py checks every step of
    the golden scenarios); a reported mismatch is recomputed with ``state_digest``.

    ``former``: fields a class of the state had in an earlier version of it, each with the
    value it always held then; the digest is then that version's (the text counts them in
    their sorted place). A trace of format version 1 is verified so (its states had
    ``Round.summary_due``, always false; steploop/effects/trace/format.py).
    """

    def __init__(self, former: Former | None = None) -> None:
        former = former or {}
        for cls in former:
            if not _composed(cls):
                raise TypeError(f"{cls.__name__} is encoded whole: no former field is counted")
        slots = _Items(lambda: _Layout(Slot, {}, former.get(Slot)) if _composed(Slot) else None)
        nested: dict[str, _Layout | _Items] = {}
        if _composed(Round):
            nested["round"] = _Layout(Round, {"slots": slots}, former.get(Round))
        if _composed(Ids):
            nested["ids"] = _Layout(Ids, {}, former.get(Ids))
        self.layout = (
            _Layout(LoopState, nested, former.get(LoopState))
            if _composed(LoopState) and (former or fastpaths.on("incremental_digest"))
            else None
        )
        self.text = self.layout.text if self.layout is not None else canonical_bytes
        self.former = former

    def __call__(self, state: LoopState) -> str:
        return hashlib.blake2b(self.text(state), digest_size=16).hexdigest()

    def field_digest(self, state: LoopState, name: str) -> str:
        """``field_digest(getattr(state, name))``, from the field's text composed by the last
        call, which must have been for ``state``."""
        if self.layout is None or state.__class__ is not LoopState:
            return field_digest(getattr(state, name))
        return digest_bytes(self.layout.field_text(name)).hex()[:16]

    def field_digests(self, state: LoopState) -> dict[str, str]:
        """The digest of every field of ``state`` (:func:`field_digests`, with ``former``)."""
        self(state)
        return {name: self.field_digest(state, name) for name in STATE_FIELDS}


def digest_with(state: LoopState, former: Former | None) -> str:
    """``state_digest(state)``, or with ``former`` fields the digest of that earlier version,
    computed from scratch."""
    if not former:
        return digest_bytes(canonical_bytes(state)).hex()
    return StateDigester(former)(state)


def _composed(cls: type) -> bool:
    """Whether canonical.py writes ``cls`` as the composition of its fields' texts."""
    return getattr(cls, "__canonical__", None) is None and getattr(cls, "TAG", None) is None


class _Layout:
    """The canonical text of one attrs class, composed from its fields' cached texts.

    ``text`` is compiled per class: for each field, in sorted order, its text is recomputed only
    when the field holds another object than last time; a tuple field keeps the texts of its
    items the same way (a tuple's text is ``[ITEM,...]``), so appending costs one item.
    """

    def __init__(
        self,
        cls: type,
        nested: Mapping[str, _Layout | _Items],
        former: Mapping[str, Any] | None = None,
    ) -> None:
        if not _composed(cls):
            raise TypeError(f"{cls.__name__} is not composed from its fields")
        former = former or {}
        plan = _plan(cls, frozenset(nested), tuple(sorted(former.items())))
        names, real, tuples, code = plan
        values: list[Any] = [_NOTHING] * len(names)
        texts: list[bytes] = [b""] * len(names) + [b"}"]
        ns: dict[str, Any] = {
            "CLS": cls,
            # a tuple however many names
            "GET": operator.attrgetter(*[names[n] for n in real], "__class__"),
            "V": values,
            "T": texts,
            "JOIN": b"".join,
            "canonical_bytes": canonical_bytes,
        }
        for n, name in enumerate(names):
            ns[f"P{n}"] = (("{" if n == 0 else ",") + json.dumps(name) + ":").encode()
            if name in former:  # a field of an earlier version: its one value, written once
                texts[n] = ns[f"P{n}"] + canonical_bytes(former[name])
            elif name in nested:
                ns[f"E{n}"] = nested[name].text
            elif n in tuples:
                ns[f"E{n}"] = _Items().text
            else:
                ns[f"E{n}"] = _value_text
        exec(code, ns)  # the function is compiled once per class (_plan); its caches are ours
        self.text: Callable[[Any], bytes] = ns["text"]
        self._texts = texts
        self._cut = {name: (n, len(ns[f"P{n}"])) for n, name in enumerate(names)}

    def field_text(self, name: str) -> bytes:
        """The canonical text of field ``name`` of the instance ``text`` was last called for
        (an instance of this very class: for another, ``text`` composes nothing)."""
        n, cut = self._cut[name]
        return self._texts[n][cut:]


_PLANS: dict[tuple[Any, ...], tuple[list[str], list[int], frozenset[int], Any]] = {}


def _plan(
    cls: type, nested: frozenset[str], former: tuple[tuple[str, Any], ...]
) -> tuple[list[str], list[int], frozenset[int], Any]:
    """The sorted names of a layout, which of them are real fields, which are tuples, and the
    compiled code of its text function: made once per (class, nested fields, former fields),
    since compiling and reading the type hints cost milliseconds and a replay of a short trace
    makes a digester."""
    key = (cls, nested, former)
    got = _PLANS.get(key)
    if got is not None:
        return got
    fields = [f.name for f in attrs.fields(cls)]
    gone = {name for name, _ in former}
    names = sorted([*fields, *gone])
    real = [n for n, name in enumerate(names) if name not in gone]
    hints = typing.get_type_hints(cls)
    tuples = frozenset(
        n for n in real if names[n] not in nested and typing.get_origin(hints[names[n]]) is tuple
    )
    lines = [
        "def text(obj):",
        "    if obj.__class__ is not CLS:",
        "        return canonical_bytes(obj)",
        f"    {', '.join(f'x{n}' for n in real)}, _ = GET(obj)",
    ]
    for n in real:
        lines += [
            f"    if x{n} is not V[{n}]:",
            f"        V[{n}] = x{n}",
            f"        T[{n}] = P{n} + E{n}(x{n})",
        ]
    lines.append("    return JOIN(T)")
    code = compile("\n".join(lines) + "\n", f"<state text {cls.__qualname__}>", "exec")
    got = _PLANS[key] = (names, real, tuples, code)
    return got


def _value_text(v: Any) -> bytes:
    """``canonical_bytes(v)``, with the JSON of an int, a bool and None written here."""
    cls = v.__class__
    if cls is int:
        return b"%d" % v
    if cls is bool:
        return b"true" if v else b"false"
    if v is None:
        return b"null"
    return canonical_bytes(v)


class _Items:
    """The canonical text of a tuple, reusing the texts of items that are the same objects as
    the items at the same places last time; with ``layout``, an item that changed is composed
    by a layout of its own place (a tool slot whose status changed keeps its input's text)."""

    def __init__(self, layout: Callable[[], _Layout | None] | None = None) -> None:
        self.values: tuple[Any, ...] = ()
        self.texts: list[bytes] = []
        self.layout = layout
        self.layouts: list[Callable[[Any], bytes]] = []

    def text(self, v: Any) -> bytes:
        if type(v) is not tuple:
            return canonical_bytes(v)
        old, old_texts = self.values, self.texts
        keep = len(old)
        if self.layout is None:
            texts = [
                old_texts[k] if k < keep and x is old[k] else canonical_bytes(x)
                for k, x in enumerate(v)
            ]
        else:
            while len(self.layouts) < len(v):
                made = self.layout()
                self.layouts.append(canonical_bytes if made is None else made.text)
            layouts = self.layouts
            texts = [
                old_texts[k] if k < keep and x is old[k] else layouts[k](x) for k, x in enumerate(v)
            ]
        self.values, self.texts = v, texts
        return b"[" + b",".join(texts) + b"]"


_NOTHING = object()
