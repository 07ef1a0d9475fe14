"""The trace format: its name and version, the record types, the errors, and how events
and effects are written (messages by reference, conversations by length and digest).

The normative text is ``specs/trace-format.md``.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any, TypeAlias

import attrs

from steploop.reducer import LoopConfig, Request, Session, SteploopError
from steploop.reducer.canonical import to_data
from steploop.reducer.conversation import Conversation
from steploop.reducer.digest import Former
from steploop.reducer.effects import (
    CallModel,
    Compact,
    Effect,
    Emit,
    RunStopHooks,
    SummarizeToolUse,
)
from steploop.reducer.events import CompactionFinished, Event
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Message,
    SystemMessage,
    UserMessage,
)
from steploop.reducer.serialize import unstructure
from steploop.reducer.state import Round
from steploop.reducer.transitions import Terminal, Transition

FORMAT = "steploop-trace"
VERSION = 2
"""The version written. Version 2's state digest no longer counts ``Round.summary_due`` (dead
state: nothing set or read it, and it was always false); everything else is as in version 1."""
READS: tuple[int, ...] = (1, 2)
"""The versions read (and replayed, and resumed: a resumed file keeps its version)."""
FORMER: dict[int, Former] = {1: {Round: {"summary_due": False}}, 2: {}}
"""Per version, the state fields its digests count that the state no longer has."""
DEFAULT_MESSAGE_WINDOW = 1024
"""How many message records a reader keeps bound (specs/trace-format.md, "Message window")."""
MAX_MESSAGE_WINDOW = 1_000_000

_MESSAGE_TYPES = (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)
CONV_EFFECTS = (CallModel, Compact, RunStopHooks, SummarizeToolUse)

_EMPTY = Conversation.empty()
EFFECT_CLASSES: tuple[type, ...] = typing.get_args(Effect)
EVENT_CLASSES: tuple[type, ...] = typing.get_args(Event)

Record: TypeAlias = "TraceHeader | StepRecord | EndRecord | ResumeRecord"


class TraceError(SteploopError):
    """A trace that cannot be read or replayed: ``FILE:LINE: what is wrong`` (one line)."""

    def __init__(self, file: str, line: int | None, what: str) -> None:
        self.file = file
        self.line = line
        self.what = " ".join(what.split("\n"))
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {self.what}")


class ReplayError(SteploopError):
    """A replay that cannot run as asked (a policy without its model, ...)."""


class BadValue(Exception):
    """What is wrong with one record; the reader adds the file and line."""


def dumps_line(obj: Any) -> str:
    # ensure_ascii: lone surrogates (undecodable tool output) stay valid UTF-8 on disk
    return json.dumps(obj, separators=(",", ":"))


def _conv_ref(c: Conversation) -> dict[str, Any]:
    return {"length": c.length, "digest": c.digest.hex()}


def hollow_conversation(length: int, digest: bytes) -> Conversation:
    """A conversation known only by its length and digest: equal to the real one, no messages."""
    return Conversation(
        prev=None,
        last=None,
        length=length,
        digest=digest,
        est_total=0,
        anchor_usage=None,
        est_at_anchor=0,
        run_response_id=None,
        est_after_run_first=0,
    )


RefFn: TypeAlias = Callable[[Message], Any]


def _inline(m: Message) -> Any:
    return unstructure(m)


def encode_event(event: Event, ref: RefFn = _inline) -> dict[str, Any]:
    """An event as trace data; ``ref`` writes each message it carries."""
    if isinstance(event, CompactionFinished):
        d: dict[str, Any] = unstructure(attrs.evolve(event, messages=()))
        d["messages"] = [ref(m) for m in event.messages]
        return d
    out: dict[str, Any] = unstructure(event)
    return out


def encode_effect(effect: Effect, ref: RefFn = _inline) -> dict[str, Any]:
    """An effect as trace data: conversations by length and digest, messages through ``ref``."""
    if isinstance(effect, Emit):
        item = effect.item
        return {
            "type": Emit.TAG,
            "item": ref(item) if isinstance(item, _MESSAGE_TYPES) else unstructure(item),
        }
    if isinstance(effect, CONV_EFFECTS):
        d: dict[str, Any] = unstructure(attrs.evolve(effect, conversation=_EMPTY))
        d["conversation"] = _conv_ref(effect.conversation)
        return d
    out: dict[str, Any] = unstructure(effect)
    return out


def describe_effect(effect: Effect | Event | None, limit: int = 300) -> str:
    """One line of JSON for an effect or event (messages inline, conversations by digest)."""
    if effect is None:
        return "none"
    data: Any
    if isinstance(effect, EFFECT_CLASSES):
        data = encode_effect(typing.cast(Effect, effect))
    elif isinstance(effect, EVENT_CLASSES):
        data = encode_event(typing.cast(Event, effect))
    else:
        data = to_data(effect)
    text = json.dumps(data, ensure_ascii=False, separators=(", ", ": "))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@attrs.frozen(kw_only=True)
class TraceHeader:
    version: int
    steploop: str
    provenance: dict[str, Any] = attrs.field(eq=False)
    message_window: int
    config: LoopConfig
    session: Session | None
    request: Request
    line: int


@attrs.frozen(kw_only=True)
class StepRecord:
    """One ``start()`` (i == 0, event None) or ``step()``; messages already resolved.

    Conversations in effects are hollow: equal to the real one, but without messages.
    """

    i: int
    event: Event | None
    effects: tuple[Effect, ...]
    digest: str
    phase: str
    turn_count: int
    transition: Transition | None
    fields: dict[str, str] = attrs.field(eq=False)
    line: int


@attrs.frozen(kw_only=True)
class EndRecord:
    i: int
    terminal: Terminal
    line: int


@attrs.frozen(kw_only=True)
class ResumeRecord:
    after: int
    provenance: dict[str, Any] = attrs.field(eq=False)
    reissued: tuple[Effect, ...]
    line: int


RECORD_TYPES = ("header", "message", "step", "end", "resume")
KEYS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    # record type: (required keys, optional keys)
    "header": (
        frozenset(
            {
                "record",
                "format",
                "version",
                "steploop",
                "provenance",
                "message_window",
                "config",
                "session",
                "request",
            }
        ),
        frozenset(),
    ),
    "message": (frozenset({"record", "id", "message"}), frozenset()),
    "step": (
        frozenset({"record", "i", "event", "effects", "digest", "phase", "turn_count"}),
        frozenset({"transition", "fields"}),
    ),
    "end": (frozenset({"record", "i", "terminal"}), frozenset()),
    "resume": (frozenset({"record", "after", "provenance", "reissued"}), frozenset()),
}


ALLOWED = {kind: required | optional for kind, (required, optional) in KEYS.items()}
