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

from reducer.conversation import Conversation
from reducer.errors import SteploopError

__all__ = ["SerializationError", "converter", "structure", "unstructure"]


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
        from reducer.messages import Message

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

    Raises:
        SerializationError: the data does not describe a ``cls``.
    """
    try:
        return converter.structure(data, cls)
    except SerializationError:
        raise
    except cattrs.BaseValidationError as e:
        raise SerializationError(_explain(e)) from None
    except (KeyError, TypeError, ValueError) as e:
        raise SerializationError(f"{type(e).__name__}: {e}") from None


def _leaves(e: BaseException) -> list[BaseException]:
    subs = getattr(e, "exceptions", None)
    if not subs:
        return [e]
    return [leaf for sub in subs for leaf in _leaves(sub)]


def _explain(e: BaseException) -> str:
    """One line: our own message (an unknown tag, ...) where there is one, with the path."""
    notes = cattrs.transform_error(e) if isinstance(e, cattrs.BaseValidationError) else [str(e)]
    ours = [leaf for leaf in _leaves(e) if isinstance(leaf, SerializationError)]
    if ours:
        where = next((n.rsplit(" @ ", 1)[1] for n in notes if " @ " in n), "")
        return f"{ours[0]}" + (f" @ {where}" if where else "")
    return "; ".join(notes) if notes else str(e)
