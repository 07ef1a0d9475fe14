"""Hypothesis strategies for outside JSON: a real document with values replaced, at any depth,
by JSON values of other types (lists and objects where strings or integers stood, unknown
kinds, booleans for numbers): the shapes a proxy, a newer version or an attacker can send."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1, 6),
    st.text(max_size=4),
    st.sampled_from(["text", "tool_use", "user", "assistant", "text_delta", "{"]),
)


def values(
    keys: Sequence[str] = ("type", "index", "text", "id", "content"),
) -> st.SearchStrategy[Any]:
    """JSON values: leaves, and lists and objects of them (objects keyed by ``keys``)."""
    return st.recursive(
        LEAVES,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(st.sampled_from(list(keys)), inner, max_size=3),
        ),
        max_leaves=6,
    )


def paths(obj: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value in ``obj`` (keys and indexes), depth first, ``obj`` itself (the
    empty path) first."""
    out = [at]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, (*at, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, (*at, i))
    return out


def get(obj: Any, path: tuple[Any, ...]) -> Any:
    """The value at ``path`` in ``obj``."""
    for step in path:
        obj = obj[step]
    return obj


@st.composite
def mutated(draw: st.DrawFn, base: list[Any], most: int = 4) -> list[Any]:
    """A deep copy of the documents ``base`` with 1 to ``most`` values replaced and up to two
    documents dropped."""
    docs = copy.deepcopy(base)
    replacement = values()
    for _ in range(draw(st.integers(1, most))):
        k = draw(st.integers(0, len(docs) - 1))
        where = paths(docs[k])[1:]  # the values inside, not the document itself
        if not where:
            continue
        path = draw(st.sampled_from(where))
        get(docs[k], path[:-1])[path[-1]] = draw(replacement)
    drop = draw(st.sets(st.integers(0, len(docs) - 1), max_size=2))
    return [d for i, d in enumerate(docs) if i not in drop]
