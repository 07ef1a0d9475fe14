"""What the importer's driver reads of a turn's records ahead, and what a record stands for
(specs/import.md IMP-12, IMP-17, IMP-21, T-HOOK-1, VER-7, VER-9, VER-10).

The driver (:mod:`~steploop.effects.importer.driver`) feeds a turn's records one by one; some
of its answers depend on records further on: which results the user's interrupt wrote, which
call the user refused, which result a hook's stop follows, which response an auto compaction
follows (and its ``preTokens``), which model a Skill switches to. These functions find them;
:func:`api_failure_kind` says which failure an API-error record stands for.
"""

from __future__ import annotations

import re

import attrs

from steploop.effects.importer.convert import INTERRUPT_TEXTS
from steploop.effects.importer.segment import Item
from steploop.reducer.conversation import estimate_message
from steploop.reducer.messages import AssistantMessage, ToolResultBlock, UserMessage
from steploop.reducer.texts import USAGE_LIMIT_PREFIX

__all__ = [
    "INTERRUPT_TOOLS",
    "REJECT_PREFIX",
    "SIBLING_CANCEL_PREFIX",
    "START_OUTPUT_TOKENS",
    "STOPPED_PREFIX",
    "UNKNOWN_TOOL_PREFIX",
    "Compacted",
    "api_failure_kind",
    "compacted_responses",
    "first_result_id",
    "hook_stopped_results",
    "interrupted_results",
    "is_interrupt_text",
    "rejected_calls",
    "switched_model",
]

UNKNOWN_TOOL_PREFIX = "<tool_use_error>Error: No such tool available:"
SIBLING_CANCEL_PREFIX = "<tool_use_error>Cancelled: parallel tool call"
#: How Claude Code's synthetic result for a tool the user's interrupt stopped begins.
REJECT_PREFIX = "The user doesn't want to proceed with this tool use"
#: How every version's text for a call the user stopped begins (REJECT_MESSAGE, and the
#: older "The user doesn't want to take this action right now" wording): IMP-21.
STOPPED_PREFIX = "The user doesn't want to "
INTERRUPT_TOOLS = "[Request interrupted by user for tool use]"
#: A record's usage shows at most this many output tokens when it holds message_start's usage,
#: not the response's final one (VER-7).
START_OUTPUT_TOKENS = 5

#: Claude Code's API-error categories (the record's ``error``) as steploop failure kinds.
_API_ERROR_KINDS = {
    "rate_limit": "rate_limited",
    "overloaded": "overloaded",
    "server_error": "server_error",
    "authentication_failed": "auth",
    "invalid_request": "invalid_request",
    "prompt_too_long": "prompt_too_long",
    "billing_error": "invalid_request",
    "unknown": "unknown",
}


_STATUS = re.compile(r"^API Error: (\d{3})\b")


def api_failure_kind(message: AssistantMessage) -> str:
    """IMP-17: the failure kind an API-error record stands for: by its `error` field; where
    that says nothing (`unknown`, or no field: 1.0.x), by its HTTP status (the record's
    `apiErrorStatus`, or the `API Error: NNN` its text begins with): 429 rate limited, 529
    overloaded, another 5xx a server error, 401/403 authentication, another 4xx an invalid
    request; a usage limit (`Claude AI usage limit reached|<epoch>`) is rate limited, a
    connection error or a timeout a connection failure (VER-10)."""
    err = message.api_error
    text = err.message if err is not None else ""
    if text.startswith("Prompt is too long"):
        return "prompt_too_long"
    kind = _API_ERROR_KINDS.get(err.kind if err is not None else "unknown", "unknown")
    if kind != "unknown":
        return kind
    status = err.status if err is not None else None
    m = _STATUS.match(text)
    if status is None and m is not None:
        status = int(m.group(1))
    if status is not None:
        if status == 429:
            return "rate_limited"
        if status == 529:
            return "overloaded"
        if status >= 500:
            return "server_error"
        if status in (401, 403):
            return "auth"
        if 400 <= status < 500:
            return "invalid_request"
    if text.startswith(USAGE_LIMIT_PREFIX):
        return "rate_limited"
    low = text.lower()
    if "connection error" in low or "timed out" in low or "timeout" in low:
        return "connection"
    return "unknown"


@attrs.frozen
class Compacted:
    """A response an auto compaction follows (VER-7): Claude Code's count there (the
    boundary's ``preTokens``) and the estimate of what the transcript adds after the
    response's last record before the boundary."""

    pre_tokens: int
    after: int


def is_interrupt_text(text: str | None) -> bool:
    return text in INTERRUPT_TEXTS


def result_text(it: Item) -> str | None:
    m = it.message
    if isinstance(m, UserMessage):
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                return b.content
    return None


def first_result_id(it: Item) -> str | None:
    m = it.message
    if isinstance(m, UserMessage):
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                return b.tool_use_id
    return None


def rejected_calls(items: list[Item], interrupted: set[int]) -> dict[str, int]:
    """IMP-21: the first call of each run of interrupted results is the one the user refused
    (at its permission question, or while it ran): its permission is answered
    ``rejected_by_user`` where its result stands."""
    out: dict[str, int] = {}
    previous_interrupted = False
    for it in items:
        if it.kind == "result" and it.line in interrupted:
            if not previous_interrupted:
                call = first_result_id(it)
                if call is not None:
                    out[call] = it.line
            previous_interrupted = True
        elif it.kind not in ("system_other", "queue", "command", "retry_notice"):
            previous_interrupted = False
    return out


def hook_stopped_results(items: list[Item]) -> set[int]:
    """T-HOOK-1: the line of the last result before a tool hook's stop attachment (the hook of
    that tool stopped the turn)."""
    out: set[int] = set()
    for i, it in enumerate(items):
        if it.kind != "hook_stop":
            continue
        for prev in reversed(items[:i]):
            if prev.kind == "result":
                out.add(prev.line)
                break
    return out


def interrupted_results(items: list[Item]) -> set[int]:
    """IMP-21: the lines of results carrying Claude Code's rejection text that an interrupt
    marker follows before the next response: the first such result is where the user
    interrupted; the machine writes them and the marker itself."""
    out: set[int] = set()
    for i, it in enumerate(items):
        if it.kind != "result" or not (result_text(it) or "").startswith(STOPPED_PREFIX):
            continue
        for nxt in items[i + 1 :]:
            if nxt.kind in ("result", "system_other", "queue", "command", "retry_notice"):
                continue
            if nxt.kind == "interrupt":
                out.add(it.line)
            break
    return out


def switched_model(it: Item) -> str | None:
    """VER-9: the model a Skill's result sets for the rest of the turn (``toolUseResult.model``:
    the skill's definition names one; Claude Code's context modifier switches the main loop)."""
    result = it.record.get("toolUseResult")
    if isinstance(result, dict) and isinstance(result.get("commandName"), str):
        model = result.get("model")
        if isinstance(model, str) and model:
            return model
    return None


_AFTER_KINDS = frozenset({"result", "inserted", "stop_feedback", "machine_attachment", "hook_stop"})


def compacted_responses(items: list[Item]) -> dict[str, Compacted]:
    """VER-7: the responses an auto compaction follows before any other response, with the
    boundary's ``preTokens`` and the estimate of the messages between them."""
    out: dict[str, Compacted] = {}
    if not any(it.kind == "compact" for it in items):
        return out  # the common case: a turn without an auto compaction
    current: str | None = None
    after = 0
    for it in items:
        m = it.message
        if it.kind == "block" and isinstance(m, AssistantMessage):
            if m.response_id != current:
                current = m.response_id
            after = 0
        elif it.kind in _AFTER_KINDS and m is not None:
            after += estimate_message(m)
        elif it.kind == "compact" and current is not None:
            meta = it.record.get("compactMetadata")
            pre = meta.get("preTokens") if isinstance(meta, dict) else None
            if isinstance(pre, int) and not isinstance(pre, bool) and pre > 0:
                out[current] = Compacted(pre_tokens=pre, after=after)
            current = None
        elif it.kind in ("api_error", "interrupt", "candidate"):
            current = None
    return out
