"""Where outside data enters the machine, it is made well-formed or refused (README, "the rules
of the house": outside data becomes an event or a clear error, never a crash).

What a model client, a tool, a compactor or a stop hook hands a world passes through here before
it becomes an event, by way of the answering layer (:mod:`steploop.effects.answer`), the same in
the interpreter, the Temporal activities and counterfactual replay:

- **Text** (model text and thinking, tool results, file names inside them, compaction
  summaries, hook output, the prompt) has every lone surrogate replaced by U+FFFD. A lone
  surrogate is what Python makes of an undecodable byte in a file name (``bad\\xff.txt`` read
  with ``surrogateescape``) or of a ``\\ud800`` JSON escape; it is not Unicode, cannot be
  encoded as UTF-8, and the API refuses it. Replaced here, the conversation stays sendable and
  every writer (trace, transcript) can write it.
- **A model response** whose tool_use repeats an id of the same response or of the conversation
  it answers (an earlier round, an earlier turn: :class:`ToolUseIds`), or whose input is not
  JSON data within :func:`steploop.reducer.canonical.data_problem`'s limits (nested deeper than 100
  levels, a 5,000-digit integer, NaN, a non-string key, a Python object), is a malformed
  response: :func:`model_problem` names it and the world reports the call as failed
  (``ModelCallFailed(kind="unknown")``, rule T-MODEL-1), so the machine answers every tool_use
  of the attempt and ends the turn in a Terminal.
- **A tool's output** whose content is not a str (None, an int, bytes) or whose flags are not
  bools becomes an error result naming what it returned (:func:`tool_output`).
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import attrs

from steploop.effects.tools.base import ToolOutput, tool_use_error
from steploop.reducer.canonical import data_problem
from steploop.reducer.conversation import Conversation
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    ModelCallFailed,
    ModelResponseEnded,
)
from steploop.reducer.messages import AssistantMessage, TextBlock, ToolUseBlock

__all__ = [
    "ToolUseIds",
    "clean",
    "clean_block",
    "clean_event",
    "clean_text",
    "compaction_result",
    "model_problem",
    "tool_output",
]

T = TypeVar("T")

_SURROGATE = re.compile("[\ud800-\udfff]")
_search = _SURROGATE.search


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD (the same object when none)."""
    if text.isascii() or _search(text) is None:
        return text
    return _SURROGATE.sub("\ufffd", text)


_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in attrs.fields(cls) if f.init)
    return names


def clean(value: Any) -> Any:
    """``value`` with :func:`clean_text` applied to every str in it (dict keys too), through
    attrs instances, tuples, lists and dicts; the same object when nothing changed. The value
    must be bounded (checked data, or the machine's own values): this recurses."""
    cls = value.__class__
    if cls is str:
        return clean_text(value)
    if cls is dict:
        out = {clean(k): clean(v) for k, v in value.items()}
        return value if _same_items(out, value) else out
    if cls is tuple or cls is list:
        items = [clean(v) for v in value]
        if all(a is b for a, b in zip(items, value, strict=True)):
            return value
        return cls(items)
    if attrs.has(cls):
        changes = {}
        for name in _fields(cls):
            old = getattr(value, name)
            new = clean(old)
            if new is not old:
                changes[name] = new
        return attrs.evolve(value, **changes) if changes else value
    return value


def _same_items(a: dict[Any, Any], b: dict[Any, Any]) -> bool:
    return all(
        k1 is k2 and v1 is v2 for (k1, v1), (k2, v2) in zip(a.items(), b.items(), strict=True)
    )


class ToolUseIds:
    """The tool_use ids of the conversation a model call answers, for :func:`model_problem`
    (rule B-MODEL-2). The real API never reuses an id, and a conversation holding one twice
    cannot be sent again (a tool_result names its tool_use by id); so a response that repeats
    an id the conversation already holds is malformed, like one that repeats its own.

    One index per run (a fresh one per Temporal activity): a run's conversations grow by
    appending, so each call reads only the messages added since the last one (a conversation
    that does not extend the last one read, after a compaction, is read whole). The conversation is read only when a response
    holds a tool_use."""

    __slots__ = ("_ids", "_node")

    def __init__(self) -> None:
        self._node: Conversation | None = None
        self._ids: set[str] = set()

    def of(self, conversation: Conversation) -> set[str]:
        """The tool_use ids in ``conversation`` (a set this index keeps: do not change it)."""
        node: Conversation | None = conversation
        added: list[AssistantMessage] = []
        while node is not None and node is not self._node and node.last is not None:
            if node.last.__class__ is AssistantMessage:
                added.append(node.last)
            node = node.prev
        if node is not self._node:  # not an extension of the last one read
            self._ids = set()
        ids = self._ids
        for m in added:
            for b in m.content:
                if b.__class__ is ToolUseBlock:
                    ids.add(b.id)
        self._node = conversation
        return ids

    def response(self, conversation: Conversation) -> ResponseIds:
        """What :func:`model_problem` checks one response's blocks against."""
        return ResponseIds(self, conversation)


class ResponseIds:
    """The ids one response has used so far, and (read when first needed) its conversation's."""

    __slots__ = ("_conversation", "_earlier", "_index", "seen")

    def __init__(self, index: ToolUseIds | None, conversation: Conversation | None) -> None:
        self._index = index
        self._conversation = conversation
        self._earlier: set[str] | None = None
        self.seen: set[str] = set()

    def earlier(self) -> set[str]:
        if self._earlier is None:
            if self._index is None or self._conversation is None:
                self._earlier = set()
            else:
                self._earlier = self._index.of(self._conversation)
        return self._earlier


def model_problem(block: object, ids: ResponseIds) -> str | None:
    """What makes a streamed block malformed, or None. ``ids``: the tool_use ids of the
    response so far (this adds the block's) and of the conversation it answers."""
    if block.__class__ is not ToolUseBlock:
        return None
    tid = block.id
    seen = ids.seen
    if tid in seen:
        return f"tool_use id {tid!r} appears twice in one response"
    if tid in ids.earlier():
        return (
            f"tool_use id {tid!r} is already used by an earlier message of the conversation"
            " (the API never reuses one; a tool_result could not name its tool_use)"
        )
    seen.add(tid)
    data = block.input
    if data.__class__ is not dict:
        return f"the input of tool_use {tid!r} is a {type(data).__name__}, not an object"
    problem = data_problem(data)
    return None if problem is None else f"the input of tool_use {tid!r}: {problem}"


def _dirty(value: Any) -> bool:
    """Whether any str in ``value`` (JSON data, or a block's fields) may hold a surrogate
    (only a non-ASCII str is looked at closely). Iterative; the value is bounded anyway."""
    if value.__class__ is dict:  # the usual tool input: one level of ASCII strings
        for k, x in value.items():
            if not (k.isascii() and (x.__class__ is not str or x.isascii())) or x.__class__ in (
                dict,
                list,
                tuple,
            ):
                break
        else:
            return False
    stack = [value]
    while stack:
        v = stack.pop()
        cls = v.__class__
        if cls is str:
            if not v.isascii() and _search(v) is not None:
                return True
        elif cls is dict:
            for k, x in v.items():
                if k.__class__ is str and not k.isascii() and _search(k) is not None:
                    return True
                if x.__class__ is str:
                    if not x.isascii() and _search(x) is not None:
                        return True
                elif x.__class__ in (dict, list, tuple):
                    stack.append(x)
        elif cls is list or cls is tuple:
            stack.extend(v)
    return False


def clean_block(block: T) -> T:
    """A streamed block with its text cleaned; the same block when it has no surrogate (the
    usual case, checked without rebuilding anything)."""
    cls = block.__class__
    if cls is TextBlock:
        if clean_text(block.text) is block.text:  # type: ignore[attr-defined]
            return block
    elif cls is ToolUseBlock:
        b: Any = block
        if b.id.isascii() and b.name.isascii() and not _dirty(b.input):
            return block
    elif not _dirty([getattr(block, name) for name in _fields(cls)]):
        return block
    return clean(block)  # type: ignore[no-any-return]


def clean_event(event: T) -> T:
    """A model stream's end or failure with its text cleaned; the same event when clean."""
    if isinstance(event, ModelResponseEnded):
        if event.model.isascii() and (event.stop_reason is None or event.stop_reason.isascii()):
            return event
    elif isinstance(event, ModelCallFailed) and event.message.isascii():
        return event
    return clean(event)  # type: ignore[no-any-return]


def tool_output(name: str, out: object) -> ToolOutput:
    """A tool's output as the machine may take it: content a str, flags bools, text clean."""
    if not isinstance(out, ToolOutput):
        return tool_use_error(
            f"Error calling tool {name}: it returned {type(out).__name__}, not a ToolOutput"
        )
    content, is_error, hook_stopped = out.content, out.is_error, out.hook_stopped
    if content.__class__ is not str:
        return tool_use_error(
            f"Error calling tool {name}: its result content is {type(content).__name__} "
            f"{content!r:.60}, not a str"
        )
    if is_error.__class__ is not bool or hook_stopped.__class__ is not bool:
        return tool_use_error(
            f"Error calling tool {name}: is_error and hook_stopped must be bools, got "
            f"{is_error!r:.20} and {hook_stopped!r:.20}"
        )
    text = clean_text(content)
    return (
        out
        if text is content
        else ToolOutput(content=text, is_error=is_error, hook_stopped=hook_stopped)
    )


def compaction_result(result: Any) -> Any:
    """A compactor's (type-checked) result with its text cleaned; a result whose messages hold
    a tool_use input beyond :func:`steploop.reducer.canonical.data_problem`'s limits becomes a
    ``CompactionFailed`` naming it (the breaker counts it; nothing crashes)."""
    if isinstance(result, CompactionFinished):
        for m in result.messages:
            for b in getattr(m, "content", ()):
                if isinstance(b, ToolUseBlock):
                    problem = data_problem(b.input)
                    if problem is not None:
                        problem = f"the input of tool_use {b.id!r}: {problem}"
                        return CompactionFailed(
                            compact_id=result.compact_id,
                            reason=f"the compactor returned malformed data: {problem}",
                        )
    return clean(result)
