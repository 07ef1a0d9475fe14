"""The JSON Schema of one trace line; ``specs/trace.schema.json`` is :func:`trace_schema`'s output."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal

import attrs

from steploop.effects.trace.format import (
    FORMAT,
    KEYS,
    MAX_MESSAGE_WINDOW,
    READS,
    RECORD_TYPES,
    VERSION,
)
from steploop.reducer import PHASES, LoopConfig, Request, Session
from steploop.reducer.conversation import Conversation
from steploop.reducer.digest import STATE_FIELDS
from steploop.reducer.effects import Effect, Emit
from steploop.reducer.events import CompactionFinished, Event
from steploop.reducer.messages import Message
from steploop.reducer.transitions import Terminal, Transition


def _is_tagged(t: Any) -> bool:
    return isinstance(t, type) and attrs.has(t) and isinstance(getattr(t, "TAG", None), str)


class _SchemaBuilder:
    def __init__(self) -> None:
        self.defs: dict[str, Any] = {}

    def ref(self, cls: type, mode: str) -> dict[str, Any]:
        name = cls.__name__
        if name not in self.defs:
            self.defs[name] = {}  # reserve (recursion)
            self.defs[name] = self.cls(cls, mode)
        return {"$ref": f"#/$defs/{name}"}

    def cls(self, cls: type, mode: str) -> dict[str, Any]:
        hints = typing.get_type_hints(cls)
        props: dict[str, Any] = {}
        required: list[str] = []
        tag = getattr(cls, "TAG", None)
        if isinstance(tag, str):
            props["type"] = {"const": tag}
            required.append("type")
        for f in attrs.fields(cls):
            t = hints[f.name]
            if cls is Emit and f.name == "item" and mode == "trace":
                props[f.name] = {
                    "oneOf": [
                        {"$ref": "#/$defs/message_ref"},
                        self.ref(_tombstone(), mode),
                        self.ref(_summary(), mode),
                    ]
                }
            elif cls is CompactionFinished and f.name == "messages":
                props[f.name] = {"type": "array", "items": {"$ref": "#/$defs/message_ref"}}
            else:
                props[f.name] = self.type(t, mode)
            if f.default is attrs.NOTHING:
                required.append(f.name)
        return {
            "type": "object",
            "properties": props,
            "required": required,
            "additionalProperties": False,
        }

    def type(self, t: Any, mode: str) -> dict[str, Any]:
        if t is type(None):
            return {"type": "null"}
        if t is str:
            return {"type": "string"}
        if t is bool:
            return {"type": "boolean"}
        if t is int:
            return {"type": "integer"}
        if t is float:
            return {"type": "number"}
        if t is Any:
            return {}
        if t is Conversation:
            if mode == "trace":
                return {"$ref": "#/$defs/conversation_ref"}
            return {"type": "array", "items": self.type(Message, mode)}
        origin = typing.get_origin(t)
        args = typing.get_args(t)
        if origin is Literal:
            return {"enum": list(args)}
        if origin is typing.Union or isinstance(t, types.UnionType):
            members = [a for a in args if a is not type(None)]
            opts = [self.type(a, mode) for a in members]
            if type(None) in args:
                opts.append({"type": "null"})
            key = "oneOf" if all(_is_tagged(a) for a in members) else "anyOf"
            return {key: opts}
        if origin is tuple:
            if len(args) == 2 and args[1] is Ellipsis:
                return {"type": "array", "items": self.type(args[0], mode)}
            return {
                "type": "array",
                "prefixItems": [self.type(a, mode) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        if origin is dict:
            return {"type": "object"}
        if isinstance(t, type) and attrs.has(t):
            return self.ref(t, mode)
        raise TypeError(f"no JSON Schema for {t!r}")


def _tombstone() -> type:
    from steploop.reducer.messages import Tombstone

    return Tombstone


def _summary() -> type:
    from steploop.reducer.messages import ToolUseSummary

    return ToolUseSummary


def trace_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one trace line; ``specs/trace.schema.json`` is this."""
    b = _SchemaBuilder()
    hex32 = {"type": "string", "pattern": "^[0-9a-f]{32}$"}
    header = {
        "type": "object",
        "properties": {
            "record": {"const": "header"},
            "format": {"const": FORMAT},
            "version": {"enum": list(READS)},
            "steploop": {"type": "string"},
            "provenance": {"$ref": "#/$defs/provenance"},
            "message_window": {"type": "integer", "minimum": 1, "maximum": MAX_MESSAGE_WINDOW},
            "config": b.type(LoopConfig, "inline"),
            "session": {"anyOf": [{"type": "null"}, b.type(Session, "inline")]},
            "request": b.type(Request, "inline"),
        },
        "required": sorted(KEYS["header"][0]),
        "additionalProperties": False,
    }
    message = {
        "type": "object",
        "properties": {
            "record": {"const": "message"},
            "id": {"type": "string"},
            "message": b.type(Message, "inline"),
        },
        "required": sorted(KEYS["message"][0]),
        "additionalProperties": False,
    }
    step_rec = {
        "type": "object",
        "properties": {
            "record": {"const": "step"},
            "i": {"type": "integer", "minimum": 0},
            "event": {"anyOf": [{"type": "null"}, b.type(Event, "trace")]},
            "effects": {"type": "array", "items": b.type(Effect, "trace")},
            "digest": hex32,
            "phase": {"enum": list(PHASES)},
            "turn_count": {"type": "integer", "minimum": 1},
            "transition": b.type(Transition, "trace"),
            "fields": {
                "type": "object",
                "propertyNames": {"enum": list(STATE_FIELDS)},
                "additionalProperties": {"type": "string", "pattern": "^[0-9a-f]{16}$"},
            },
        },
        "required": sorted(KEYS["step"][0]),
        "additionalProperties": False,
    }
    end = {
        "type": "object",
        "properties": {
            "record": {"const": "end"},
            "i": {"type": "integer", "minimum": 0},
            "terminal": b.type(Terminal, "trace"),
        },
        "required": sorted(KEYS["end"][0]),
        "additionalProperties": False,
    }
    resume = {
        "type": "object",
        "properties": {
            "record": {"const": "resume"},
            "after": {"type": "integer", "minimum": -1},
            "provenance": {"$ref": "#/$defs/provenance"},
            "reissued": {"type": "array", "items": b.type(Effect, "trace")},
        },
        "required": sorted(KEYS["resume"][0]),
        "additionalProperties": False,
    }
    defs: dict[str, Any] = {
        "header": header,
        "message": message,
        "step": step_rec,
        "end": end,
        "resume": resume,
        "message_ref": {
            "type": "object",
            "properties": {"ref": {"type": "string"}},
            "required": ["ref"],
            "additionalProperties": False,
        },
        "conversation_ref": {
            "type": "object",
            "properties": {"length": {"type": "integer", "minimum": 0}, "digest": hex32},
            "required": ["digest", "length"],
            "additionalProperties": False,
        },
        "provenance": {
            "type": "object",
            "properties": {
                "created_at": {"type": "string"},
                "steploop": {"type": "string"},
                "python": {"type": "string"},
                "platform": {"type": "string"},
                "client": {"type": ["string", "null"]},
                "workspace": {"type": "string"},
            },
            "additionalProperties": {"type": ["string", "integer", "boolean", "null"]},
        },
    }
    defs.update(dict(sorted(b.defs.items())))
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://steploop.invalid/specs/trace.schema.json",
        "title": f"One line of a steploop trace (format {FORMAT!r}, version {VERSION})",
        "description": "Generated by steploop.effects.trace.trace_schema(); see specs/trace-format.md.",
        "type": "object",
        "required": ["record"],
        "oneOf": [{"$ref": f"#/$defs/{k}"} for k in RECORD_TYPES],
        "$defs": defs,
    }
