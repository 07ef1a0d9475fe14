"""A scripted model: answers model calls from a fixed list, for tests, demos and users' own tests.

:class:`ScriptedModel` has the same ``stream(effect)`` interface as
:class:`steploop.effects.model.AnthropicModelClient`. Each call takes the next scripted entry:

- a :class:`ScriptedResponse` (content blocks, stop reason, usage) is streamed as one
  ``ModelBlockReceived`` per block, then ``ModelResponseEnded``;
- a :class:`ScriptedFailure` yields the blocks it lists (a partial response), then one
  ``ModelCallFailed``.

Asking for more calls than scripted raises :class:`ScriptExhausted`.

Build entries with :func:`reply`, :func:`tool_call`, :func:`truncated_tool_call`,
:func:`response` and :func:`failure`, or load a JSON script with :meth:`ScriptedModel.from_json`::

    model = ScriptedModel(
        [tool_call("Read", {"path": "a.txt"}), reply("Done.")],
        traits_for=lambda name, input: ToolTraits(concurrency_safe=True),
    )

Tool calls without an explicit id get ``toolu_001``, ``toolu_002``, ... numbered by their
position among all tool calls of the script, so ids never depend on timing or randomness.
A numbered id the conversation of the first call already holds (a resumed session, a
session an earlier script answered) is moved to the next number nobody used, so a script
never makes the API-invalid conversation of two tool calls with one id (B-MODEL-2).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import anyio.lowlevel
import attrs

from steploop.reducer.conversation import Conversation, estimate_message
from steploop.reducer.effects import CallModel
from steploop.reducer.errors import SteploopError
from steploop.reducer.events import (
    FAILURE_KINDS,
    Event,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Block,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    Usage,
)

__all__ = [
    "ScriptEntry",
    "ScriptError",
    "ScriptExhausted",
    "ScriptedFailure",
    "ScriptedModel",
    "ScriptedResponse",
    "failure",
    "reply",
    "response",
    "tool_call",
    "tool_use",
    "truncated_tool_call",
]

TraitsFor: TypeAlias = Callable[[str, dict[str, Any]], ToolTraits]


class ScriptExhausted(SteploopError):
    """The scripted model was asked for more responses than its script holds."""

    def __init__(self, scripted: int, call: CallModel) -> None:
        self.scripted = scripted
        self.call = call
        super().__init__(
            f"ScriptedModel has no response left for model call {call.call_id} "
            f"(the script holds {scripted} response{'s' if scripted != 1 else ''}, "
            f"all used); add entries to the script"
        )


class ScriptError(SteploopError, ValueError):
    """A script (usually loaded from JSON) is malformed; the message names the entry."""


@attrs.frozen(kw_only=True)
class ScriptedResponse:
    """One model answer.

    Attributes:
        blocks: the content blocks, in order. A tool_use block with ``id == ""`` gets a
            deterministic id when the :class:`ScriptedModel` is built.
        stop_reason: as the API reports it.
        usage: reported usage; None means a deterministic estimate (input: the conversation's
            token count, output: the blocks' rough size).
        model: the model name to report (None: the one the call asked for).
        cut_last_tool: the last block is a tool_use whose input was cut off (reported with
            ``input={}`` and ``input_complete=False``).
    """

    blocks: tuple[Block, ...]
    stop_reason: str | None = "end_turn"
    usage: Usage | None = None
    model: str | None = None
    cut_last_tool: bool = False


@attrs.frozen(kw_only=True)
class ScriptedFailure:
    """A failed call: ``blocks`` are streamed first (a partial response), then the failure."""

    kind: str = attrs.field()
    message: str = ""
    status: int | None = None
    retry_after_ms: int | None = None
    blocks: tuple[Block, ...] = ()

    @kind.validator
    def _check_kind(self, _attribute: object, value: str) -> None:
        if value not in FAILURE_KINDS:
            raise ScriptError(f"unknown failure kind {value!r}; expected one of {FAILURE_KINDS}")


ScriptEntry: TypeAlias = ScriptedResponse | ScriptedFailure


# ---------------------------------------------------------------------------------------------
# Constructors


def tool_use(
    name: str, input: Mapping[str, Any] | None = None, id: str | None = None
) -> ToolUseBlock:
    """A tool_use block; without ``id`` it is numbered when the model is built."""
    return ToolUseBlock(id=id or "", name=name, input=dict(input or {}))


def reply(
    text: str, *, stop_reason: str = "end_turn", usage: Usage | None = None
) -> ScriptedResponse:
    """A plain text answer."""
    return ScriptedResponse(blocks=(TextBlock(text=text),), stop_reason=stop_reason, usage=usage)


def tool_call(
    name: str,
    input: Mapping[str, Any] | None = None,
    id: str | None = None,
    text: str | None = None,
    *,
    usage: Usage | None = None,
) -> ScriptedResponse:
    """An answer calling one tool, optionally preceded by a text block (stop_reason tool_use)."""
    blocks: list[Block] = [TextBlock(text=text)] if text is not None else []
    blocks.append(tool_use(name, input, id))
    return ScriptedResponse(blocks=tuple(blocks), stop_reason="tool_use", usage=usage)


def truncated_tool_call(
    name: str, id: str | None = None, text: str | None = None, *, usage: Usage | None = None
) -> ScriptedResponse:
    """An answer cut off by max_tokens inside a tool call's input (the call must not run)."""
    blocks: list[Block] = [TextBlock(text=text)] if text is not None else []
    blocks.append(tool_use(name, None, id))
    return ScriptedResponse(
        blocks=tuple(blocks), stop_reason="max_tokens", usage=usage, cut_last_tool=True
    )


def response(
    *blocks: Block,
    stop_reason: str | None = "end_turn",
    usage: Usage | None = None,
    model: str | None = None,
) -> ScriptedResponse:
    """A general answer: any blocks (text, thinking, tool_use, ...)."""
    return ScriptedResponse(blocks=blocks, stop_reason=stop_reason, usage=usage, model=model)


def failure(
    kind: str,
    status: int | None = None,
    retry_after_ms: int | None = None,
    *,
    message: str = "",
    blocks: Sequence[Block] = (),
) -> ScriptedFailure:
    """A failed call of this kind (one of ``steploop.reducer.events.FAILURE_KINDS``)."""
    return ScriptedFailure(
        kind=kind,
        message=message or f"scripted {kind}",
        status=status,
        retry_after_ms=retry_after_ms,
        blocks=tuple(blocks),
    )


# ---------------------------------------------------------------------------------------------
# JSON scripts

_ENTRY_TYPES = ("reply", "tool_call", "truncated_tool_call", "response", "failure")
_BLOCK_TYPES = ("text", "thinking", "redacted_thinking", "tool_use")


class _Reader:
    """Typed access to one JSON object, with errors that say where."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ScriptError(f"{where}: expected an object, got {type(data).__name__}")
        self.data: dict[str, Any] = data
        self.where = where
        self.used: set[str] = {"type"}

    def _get(self, key: str, types: tuple[type, ...], what: str, default: Any) -> Any:
        self.used.add(key)
        if key not in self.data:
            if default is _REQUIRED:
                raise ScriptError(f"{self.where}: missing {key!r}")
            return default
        value = self.data[key]
        if value is None and default is not _REQUIRED:
            return default
        # bool is an int subclass: never accept it for a number.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise ScriptError(f"{self.where}: {key!r} must be {what}, got {value!r}")
        return value

    def get_str(self, key: str, default: Any = None) -> Any:
        return self._get(key, (str,), "a string", default)

    def get_int(self, key: str, default: Any = None) -> Any:
        return self._get(key, (int,), "an integer", default)

    def get_obj(self, key: str, default: Any = None) -> Any:
        return self._get(key, (dict,), "an object", default)

    def get_list(self, key: str, default: Any = None) -> Any:
        return self._get(key, (list,), "a list", default)

    def done(self) -> None:
        extra = sorted(set(self.data) - self.used)
        if extra:
            raise ScriptError(f"{self.where}: unexpected key(s) {', '.join(map(repr, extra))}")


_REQUIRED = object()


def _usage_from(r: _Reader) -> Usage | None:
    raw = r.get_obj("usage")
    if raw is None:
        return None
    u = _Reader(raw, f"{r.where}.usage")
    u.used.discard("type")
    usage = Usage(
        input_tokens=u.get_int("input_tokens", 0),
        output_tokens=u.get_int("output_tokens", 0),
        cache_creation_input_tokens=u.get_int("cache_creation_input_tokens", 0),
        cache_read_input_tokens=u.get_int("cache_read_input_tokens", 0),
    )
    u.done()
    return usage


def _block_from(data: object, where: str) -> Block:
    r = _Reader(data, where)
    kind = r.get_str("type", _REQUIRED)
    block: Block
    if kind == "text":
        block = TextBlock(text=r.get_str("text", _REQUIRED))
    elif kind == "thinking":
        block = ThinkingBlock(
            thinking=r.get_str("thinking", _REQUIRED), signature=r.get_str("signature", "")
        )
    elif kind == "redacted_thinking":
        block = RedactedThinkingBlock(data=r.get_str("data", _REQUIRED))
    elif kind == "tool_use":
        block = tool_use(r.get_str("name", _REQUIRED), r.get_obj("input", {}), r.get_str("id"))
    else:
        raise ScriptError(f"{where}: unknown block type {kind!r}; expected one of {_BLOCK_TYPES}")
    r.done()
    return block


def _entry_from(data: object, where: str) -> ScriptEntry:
    r = _Reader(data, where)
    kind = r.get_str("type", _REQUIRED)
    entry: ScriptEntry
    if kind == "reply":
        entry = reply(
            r.get_str("text", _REQUIRED),
            stop_reason=r.get_str("stop_reason", "end_turn"),
            usage=_usage_from(r),
        )
    elif kind == "tool_call":
        entry = tool_call(
            r.get_str("name", _REQUIRED),
            r.get_obj("input", {}),
            r.get_str("id"),
            r.get_str("text"),
            usage=_usage_from(r),
        )
    elif kind == "truncated_tool_call":
        entry = truncated_tool_call(
            r.get_str("name", _REQUIRED), r.get_str("id"), r.get_str("text"), usage=_usage_from(r)
        )
    elif kind == "response":
        blocks = r.get_list("blocks", _REQUIRED)
        entry = response(
            *(_block_from(b, f"{where}.blocks[{i}]") for i, b in enumerate(blocks)),
            stop_reason=r.get_str("stop_reason", "end_turn"),
            usage=_usage_from(r),
            model=r.get_str("model"),
        )
    elif kind == "failure":
        fkind = r.get_str("kind", _REQUIRED)
        if fkind not in FAILURE_KINDS:
            raise ScriptError(
                f"{where}: unknown failure kind {fkind!r}; expected one of {FAILURE_KINDS}"
            )
        blocks = r.get_list("blocks", [])
        entry = failure(
            fkind,
            r.get_int("status"),
            r.get_int("retry_after_ms"),
            message=r.get_str("message", ""),
            blocks=[_block_from(b, f"{where}.blocks[{i}]") for i, b in enumerate(blocks)],
        )
    else:
        raise ScriptError(f"{where}: unknown entry type {kind!r}; expected one of {_ENTRY_TYPES}")
    r.done()
    return entry


# ---------------------------------------------------------------------------------------------
# The model


def _number_tool_ids(entries: Iterable[ScriptEntry]) -> tuple[list[ScriptEntry], set[str]]:
    """The entries with every tool call given an id, and the ids given (the numbered ones)."""
    out: list[ScriptEntry] = []
    numbered: set[str] = set()
    n = 0
    for entry in entries:
        blocks: list[Block] = []
        for b in entry.blocks:
            if isinstance(b, ToolUseBlock):
                n += 1
                if not b.id:
                    b = attrs.evolve(b, id=f"toolu_{n:03d}")
                    numbered.add(b.id)
            blocks.append(b)
        out.append(attrs.evolve(entry, blocks=tuple(blocks)))
    return out, numbered


def _tool_use_ids(conversation: Conversation) -> set[str]:
    return {
        b.id
        for m in conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    }


def _zero_clock() -> int:
    return 0


class ScriptedModel:
    """A model client that answers from a script (see the module docstring).

    Args:
        script: the entries, one per model call, in order.
        traits_for: the traits of a tool call, from its name and input (as for the real
            client).
        clock: milliseconds for the events' ``at_ms`` (None: 0).

    Attributes:
        calls: every ``CallModel`` answered so far (the one that exhausted the script too).
    """

    def __init__(
        self,
        script: Iterable[ScriptEntry],
        traits_for: TraitsFor,
        *,
        clock: Callable[[], int] | None = None,
    ) -> None:
        entries = list(script)
        for i, entry in enumerate(entries):
            if not isinstance(entry, (ScriptedResponse, ScriptedFailure)):
                raise ScriptError(
                    f"script entry {i}: expected a ScriptedResponse or ScriptedFailure, "
                    f"got {type(entry).__name__}"
                )
        self._entries, self._numbered = _number_tool_ids(entries)
        # ids taken when the first call came (its conversation's, the script's own) and the
        # numbered ids moved off them; None until the first call
        self._taken: set[str] | None = None
        self._moved: dict[str, str] = {}
        self._traits_for = traits_for
        self._clock = clock if clock is not None else _zero_clock
        self._next = 0
        self.calls: list[CallModel] = []

    @classmethod
    def from_json(
        cls, data: object, traits_for: TraitsFor, *, clock: Callable[[], int] | None = None
    ) -> ScriptedModel:
        """Build from JSON-loaded data: a list of entries, or ``{"responses": [...]}``.

        Entry forms (``usage`` is optional everywhere, an object of token counts)::

            {"type": "reply", "text": "...", "stop_reason": "end_turn"}
            {"type": "tool_call", "name": "Read", "input": {...}, "id": "...", "text": "..."}
            {"type": "truncated_tool_call", "name": "Write"}
            {"type": "response", "blocks": [{"type": "text", "text": "..."},
                {"type": "thinking", "thinking": "...", "signature": "..."},
                {"type": "tool_use", "name": "...", "input": {...}}], "stop_reason": "..."}
            {"type": "failure", "kind": "overloaded", "status": 529, "retry_after_ms": 1000}

        Raises:
            ScriptError: naming the first bad entry (``script[3]``, ``script[3].blocks[0]``).
        """
        items = data
        if isinstance(data, dict):
            if set(data) != {"responses"}:
                raise ScriptError('script: expected a list of entries or {"responses": [...]}')
            items = data["responses"]
        if not isinstance(items, list):
            raise ScriptError(f"script: expected a list of entries, got {type(items).__name__}")
        entries = [_entry_from(item, f"script[{i}]") for i, item in enumerate(items)]
        return cls(entries, traits_for, clock=clock)

    @property
    def script(self) -> tuple[ScriptEntry, ...]:
        """The entries, with tool ids filled in."""
        return tuple(self._entries)

    @property
    def remaining(self) -> int:
        """How many scripted entries are still unused."""
        return len(self._entries) - self._next

    def skip(self, n: int) -> None:
        """Start at entry ``n``: the first ``n`` answered an earlier part of the run (a killed
        run that is resumed: ``ResumePoint.model_answers``). Only before the first call.

        Raises:
            ScriptError: ``n`` is more than the script holds, or a call was answered already.
        """
        if self.calls:
            raise ScriptError("skip() goes before the first model call")
        if not 0 <= n <= len(self._entries):
            raise ScriptError(
                f"the run used {n} answer{'s' if n != 1 else ''} already; the script holds "
                f"{len(self._entries)}"
            )
        self._next = n

    def _first_call(self, conversation: Conversation) -> None:
        """Move every numbered id the conversation already holds to the next free number."""
        held = _tool_use_ids(conversation)
        taken = held | {
            b.id for e in self._entries for b in e.blocks if isinstance(b, ToolUseBlock)
        }
        n = 0
        for e in self._entries:
            for b in e.blocks:
                if isinstance(b, ToolUseBlock) and b.id in self._numbered and b.id in held:
                    while True:
                        n += 1
                        fresh = f"toolu_{n:03d}"
                        if fresh not in taken:
                            break
                    taken.add(fresh)
                    self._moved[b.id] = fresh
        self._taken = taken

    def _renumbered(self, entry: ScriptEntry) -> ScriptEntry:
        blocks = tuple(
            attrs.evolve(b, id=self._moved[b.id])
            if isinstance(b, ToolUseBlock) and b.id in self._moved
            else b
            for b in entry.blocks
        )
        return attrs.evolve(entry, blocks=blocks)

    def _event_of(self, call_id: int, block: Block, cut: bool) -> ModelBlockReceived:
        at = self._clock()
        if not isinstance(block, ToolUseBlock):
            return ModelBlockReceived(call_id=call_id, block=block, at_ms=at)
        if cut:
            block = attrs.evolve(block, input={})
        return ModelBlockReceived(
            call_id=call_id,
            block=block,
            tool=self._traits_for(block.name, block.input),
            input_complete=not cut,
            at_ms=at,
        )

    async def stream(self, effect: CallModel) -> AsyncGenerator[Event, None]:
        """Answer ``effect`` with the next scripted entry.

        An async generator that opens no task group or cancel scope; it checkpoints once, so
        it can be cancelled like a real call.

        Yields:
            ``ModelBlockReceived`` per block then ``ModelResponseEnded``, or the failure's
            blocks then ``ModelCallFailed``.

        Raises:
            ScriptExhausted: no entry is left.
        """
        await anyio.lowlevel.checkpoint()
        self.calls.append(effect)
        if self._next >= len(self._entries):
            raise ScriptExhausted(len(self._entries), effect)
        entry = self._entries[self._next]
        self._next += 1
        if self._taken is None:
            self._first_call(effect.conversation)
        if self._moved:
            entry = self._renumbered(entry)
        call_id = effect.call_id
        if isinstance(entry, ScriptedFailure):
            for block in entry.blocks:
                yield self._event_of(call_id, block, False)
            yield ModelCallFailed(
                call_id=call_id,
                kind=entry.kind,
                message=entry.message,
                status=entry.status,
                retry_after_ms=entry.retry_after_ms,
                at_ms=self._clock(),
            )
            return
        last = len(entry.blocks) - 1
        for i, block in enumerate(entry.blocks):
            yield self._event_of(call_id, block, entry.cut_last_tool and i == last)
        usage = entry.usage
        if usage is None:
            produced = AssistantMessage(
                id="scripted", response_id="scripted", model="scripted", content=entry.blocks
            )
            usage = Usage(
                input_tokens=effect.conversation.token_count(),
                output_tokens=estimate_message(produced),
            )
        yield ModelResponseEnded(
            call_id=call_id,
            model=entry.model or effect.model,
            stop_reason=entry.stop_reason,
            usage=usage,
            at_ms=self._clock(),
        )
