"""Building a Messages API request from a ``CallModel`` (pure): the conversation as API
messages, the prompt-cache breakpoints, the stable prefix, the thinking parameter."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal, TypeAlias

from steploop.reducer.conversation import SYNTHETIC_MODEL, Conversation
from steploop.reducer.effects import CallModel
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Block,
    ImageBlock,
    Message,
    OpaqueBlock,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

EPHEMERAL: Mapping[str, str] = {"type": "ephemeral"}
"""The prompt-cache breakpoint marker put on the stable prefix and on the latest message."""

TASK_BUDGET_BETA = "task-budgets-2026-03-13"
"""The beta header the API's ``output_config.task_budget`` needs."""

Thinking: TypeAlias = int | Literal["adaptive"] | None
"""Extended thinking: a budget in tokens, ``"adaptive"``, or None (off)."""


class ThinkingMismatch(ValueError):
    """A thinking setting besides the call's own budget, which differs from it (R-THINK-1)."""


def request_thinking(effect: CallModel, setting: Thinking = None) -> Thinking:
    """[R-THINK-1] The thinking of ``effect``'s request: its budget (the loop config's
    ``thinking_budget``, which the machine's output caps know), else ``setting`` when it is
    ``"adaptive"`` (adaptive thinking has no budget to leave room for).

    Raises:
        ThinkingMismatch: ``setting`` is a budget other than the call's, or adaptive thinking
            for a call with a budget: two settings where there must be one.
    """
    budget = effect.thinking_budget
    if setting is None or setting == budget:
        return budget
    if setting == "adaptive" and budget is None:
        return setting
    raise ThinkingMismatch(
        f"thinking={setting!r} on the model client, but the loop's thinking budget is "
        f"{budget!r} (LoopConfig.thinking_budget, which CallModel carries): set thinking once, "
        "as LoopConfig.thinking_budget (--set thinking_budget=N), so the machine's output caps "
        "leave room for it (R-OVERFLOW-1); the client takes only thinking='adaptive', for a "
        "loop without a budget"
    )


# ---------------------------------------------------------------------------------------------
# Request building (pure)


def _attachment_text(m: AttachmentMessage) -> str:
    def show(v: str | int | bool | None) -> str:
        if isinstance(v, str):
            return v
        return json.dumps(v)

    fields = " ".join(f"{k}={show(v)}" for k, v in m.data)
    return f'<attachment type="{m.attachment_type}">{fields}</attachment>'


def _block_param(b: Block, keep_thinking: bool) -> dict[str, Any] | None:
    """One content block as the API takes it, or None when it is not sent."""
    if isinstance(b, TextBlock):
        # The API rejects empty text blocks.
        if not b.text:
            return None
        if b.citations is None:
            return {"type": "text", "text": b.text}
        return {"type": "text", "text": b.text, "citations": json.loads(b.citations)}
    if isinstance(b, OpaqueBlock):
        return json.loads(b.raw)  # type: ignore[no-any-return]  # as the API sent it
    if isinstance(b, ToolResultBlock):
        out: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": b.tool_use_id,
            "content": b.content,
        }
        if b.is_error:
            out["is_error"] = True
        return out
    if isinstance(b, ToolUseBlock):
        return {"type": "tool_use", "id": b.id, "name": b.name, "input": b.input}
    if isinstance(b, ThinkingBlock):
        if not keep_thinking:
            return None
        return {"type": "thinking", "thinking": b.thinking, "signature": b.signature}
    if isinstance(b, RedactedThinkingBlock):
        return {"type": "redacted_thinking", "data": b.data} if keep_thinking else None
    if isinstance(b, ImageBlock):
        kind = "document" if b.media_type == "application/pdf" else "image"
        source = {"type": "base64", "media_type": b.media_type, "data": b.data}
        return {"type": kind, "source": source}
    raise TypeError(f"unsupported content block {type(b).__name__}")


class MessageFold:
    """:func:`to_api_messages` as a left fold over the records that can be continued later.

    ``out`` holds the closed API messages; the message being built is its role, the response
    it belongs to (assistant) and, for a user message, its tool results and other blocks kept
    apart until it is closed. The fold never changes a dict once it has put it in ``out``, so a
    client may keep one fold per conversation and carry it on as the conversation grows.
    """

    __slots__ = ("keep_thinking", "others", "out", "response_id", "results", "role")

    def __init__(self, keep_thinking: bool) -> None:
        self.keep_thinking = keep_thinking
        self.out: list[dict[str, Any]] = []
        self.role: str | None = None
        self.response_id: str | None = None
        self.results: list[dict[str, Any]] = []
        self.others: list[dict[str, Any]] = []

    def close(self) -> None:
        """Close the message being built (dropped when it has no blocks)."""
        role = self.role
        if role is not None:
            content = self.results + self.others if role == "user" else self.others
            if content:
                self.out.append({"role": role, "content": content})
            self.role = self.response_id = None
            self.results = []
            self.others = []

    def add(self, m: Message) -> None:
        """Take the next conversation record."""
        keep = self.keep_thinking
        if isinstance(m, AssistantMessage):
            if m.api_error is not None or m.model == SYNTHETIC_MODEL:
                return
            if self.role != "assistant" or self.response_id != m.response_id:
                self.close()
                self.role, self.response_id = "assistant", m.response_id
            others = self.others
            for b in m.content:
                p = _block_param(b, keep)
                if p is not None:
                    others.append(p)
        elif isinstance(m, (UserMessage, AttachmentMessage)):
            if self.role != "user":
                self.close()
                self.role = "user"
            if isinstance(m, AttachmentMessage):
                self.others.append({"type": "text", "text": _attachment_text(m)})
                return
            for b in m.content:
                p = _block_param(b, keep)
                if p is not None:
                    (self.results if p["type"] == "tool_result" else self.others).append(p)
        # SystemMessage: a notice for the user, never sent to the model.

    def messages(self) -> list[dict[str, Any]]:
        """The API messages so far, as if closed now: a fresh list; the fold is unchanged.

        Every message but a last one built from the open message is shared with the fold.
        """
        out = list(self.out)
        role = self.role
        if role is not None:
            content = self.results + self.others if role == "user" else list(self.others)
            if content:
                out.append({"role": role, "content": content})
        return out


def to_api_messages(messages: Sequence[Message], *, keep_thinking: bool) -> list[dict[str, Any]]:
    """Convert conversation records to the API's alternating user/assistant messages.

    - Records of one response (same ``response_id``) become one assistant message.
    - User messages and attachments next to each other become one user message, tool_result
      blocks first (the API requires results to lead the message that answers tool calls).
    - System notices and synthetic API-error messages are not sent.
    - Thinking blocks are sent only when ``keep_thinking``.
    - A message left without blocks is dropped.

    Args:
        messages: the conversation, oldest first.
        keep_thinking: whether thinking and redacted_thinking blocks are sent.

    Returns:
        The ``messages`` parameter, fresh dicts (the caller may add cache markers).
    """
    fold = MessageFold(keep_thinking)
    for m in messages:
        fold.add(m)
    fold.close()
    return fold.out


def appended(conversation: Conversation, base: Conversation) -> list[Message] | None:
    """The records appended to ``base`` to make ``conversation``, oldest first; None when
    ``conversation`` does not extend ``base`` (the nodes are compared by identity)."""
    node = conversation
    new: list[Message] = []
    for _ in range(conversation.length - base.length):
        last, prev = node.last, node.prev
        if last is None or prev is None:
            return None
        new.append(last)
        node = prev
    if node is not base:
        return None
    new.reverse()
    return new


_CACHEABLE = frozenset({"text", "tool_use", "tool_result", "image", "document"})


def with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put the moving cache breakpoint on the last cacheable block of the latest message.

    The latest message and that block are replaced by marked copies, never changed in place:
    the other dicts may be shared with earlier requests (see :class:`MessageFold`).
    """
    if messages:
        latest = messages[-1]
        content = latest["content"]
        for i in range(len(content) - 1, -1, -1):
            block = content[i]
            # The API refuses cache_control on thinking blocks; an opaque block is sent as
            # it came, so it is never marked either.
            kind = block.get("type") if isinstance(block, dict) else None  # opaque: anything
            if isinstance(kind, str) and kind in _CACHEABLE:
                marked = list(content)
                marked[i] = {**block, "cache_control": dict(EPHEMERAL)}
                messages[-1] = {"role": latest["role"], "content": marked}
                break
    return messages


def prefix(
    system: str, tools: Sequence[Mapping[str, Any]]
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]:
    """The stable part of every request: system blocks and tools, with their breakpoint."""
    tools_param = [dict(t) for t in tools] or None
    system_param: list[dict[str, Any]] | None = (
        [{"type": "text", "text": system}] if system else None
    )
    if tools_param:
        tools_param[-1]["cache_control"] = dict(EPHEMERAL)
    elif system_param:
        system_param[-1]["cache_control"] = dict(EPHEMERAL)
    return system_param, tools_param


def thinking_request_param(thinking: Thinking, max_tokens: int) -> dict[str, Any] | None:
    """The request's ``thinking``. The API takes a budget only below ``max_tokens``: a budget
    the call's cap cannot hold is sent as ``max_tokens - 1`` [R-THINK-1]."""
    if thinking is None:
        return None
    if thinking == "adaptive":
        return {"type": "adaptive"}
    return {"type": "enabled", "budget_tokens": min(thinking, max_tokens - 1)}


def assemble(
    effect: CallModel,
    system_param: list[dict[str, Any]] | None,
    tools_param: list[dict[str, Any]] | None,
    thinking: Thinking,
    messages: list[dict[str, Any]],
) -> dict[str, Any]:
    request: dict[str, Any] = {"model": effect.model, "max_tokens": effect.max_tokens}
    if system_param is not None:
        request["system"] = system_param
    if tools_param is not None:
        request["tools"] = tools_param
    request["messages"] = messages
    thinking_param = thinking_request_param(thinking, effect.max_tokens)
    if thinking_param is not None:
        request["thinking"] = thinking_param
    if effect.task_budget is not None:
        budget: dict[str, int] = {"total": effect.task_budget.total}
        if effect.task_budget.remaining is not None:
            budget["remaining"] = effect.task_budget.remaining
        request["extra_body"] = {"output_config": {"task_budget": budget}}
        request["extra_headers"] = {"anthropic-beta": TASK_BUDGET_BETA}
    return request


def build_request(
    effect: CallModel,
    *,
    system: str = "",
    tools: Sequence[Mapping[str, Any]] = (),
    thinking: Thinking = None,
) -> dict[str, Any]:
    """The keyword arguments of ``messages.create`` for ``effect`` (without ``stream``).

    Deterministic: the same effect and settings give equal dicts that serialize to the same
    JSON bytes. Prompt-cache breakpoints sit on the last tool (or the system block when there
    are no tools) and on the last block of the latest message, so consecutive rounds share a
    byte-identical tools/system prefix and earlier messages.

    Args:
        effect: the model call.
        system: the system prompt ("" for none).
        tools: tool definitions, ``{"name", "description", "input_schema"}`` each, in order.
        thinking: the client's thinking setting: None (the call's budget decides, R-THINK-1)
            or ``"adaptive"``; thinking blocks are sent back only when the request thinks.

    Returns:
        ``model``, ``max_tokens``, ``system``, ``tools``, ``messages``, ``thinking`` and, with a
        task budget, ``extra_body`` (``output_config.task_budget``) and ``extra_headers``.

    Raises:
        ThinkingMismatch: ``thinking`` and the call's budget are two different settings.
    """
    thinking = request_thinking(effect, thinking)
    system_param, tools_param = prefix(system, tools)
    messages = to_api_messages(effect.conversation.messages(), keep_thinking=thinking is not None)
    return assemble(effect, system_param, tools_param, thinking, with_breakpoint(messages))
