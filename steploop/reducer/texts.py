"""The machine's user-visible texts in both styles, and Claude Code's API-error category names.

``LoopConfig.texts`` picks the style: ``"steploop"`` (the default profile) or ``"claude_code"``
(``claude_code_2_1_88()`` and ``full()``), whose texts are Claude Code 2.1.88's own, verbatim, so
that a recorded Claude Code session replays to the same messages (specs/ R-TEXTS-1,
R-CATEGORY-1, R-REFUSAL-1). Texts both styles share stay in the machine
(``steploop/reducer/machine/``).

Pure functions of their arguments; nothing here reads a clock or the environment.
"""

from __future__ import annotations

import json
from typing import Final

from steploop.reducer.config import LoopConfig

__all__ = [
    "CC_REFUSAL_DEFAULT_MODEL",
    "CC_REJECT_MESSAGE",
    "CC_REJECT_WITH_REASON_PREFIX",
    "INTERRUPTED_RESULT",
    "INTERRUPTED_TOOL_RESULT",
    "REJECTED_RESULT",
    "USAGE_LIMIT_PREFIX",
    "api_error_text",
    "error_category",
    "interrupted_result",
    "refusal_text",
    "rejected_result",
]

# --- steploop's texts ---------------------------------------------------------------------------

REJECTED_RESULT: Final = (
    "The user rejected this tool use; nothing was executed. Stop and wait for the user's "
    "instructions."
)
"""The result of a call the user rejected when asked for permission."""

INTERRUPTED_TOOL_RESULT: Final = (
    "The user interrupted this tool call before it finished. Stop and wait for the user's "
    "instructions."
)
"""The result of a call that an interrupt stopped (queued, asking or running) while the
streaming executor runs tools: it may have done part of its work, so it does not say that
nothing was executed."""

INTERRUPTED_RESULT: Final = "Interrupted by user"
"""The result of a call an interrupt stopped without the streaming executor: the reference's
``yieldMissingToolResultBlocks`` text, the same in both styles."""

# --- Claude Code 2.1.88's texts (verbatim) --------------------------------------------------------

CC_REJECT_MESSAGE: Final = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). STOP what you are doing and "
    "wait for the user to tell you how to proceed."
)
"""Claude Code's REJECT_MESSAGE: a rejected call, and (with the streaming executor) a call an
interrupt stopped. Its memory-correction hint is behind a flag that is off in the shipped
build, so it is not appended."""

CC_REJECT_WITH_REASON_PREFIX: Final = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). To tell you how to proceed, "
    "the user said:\n"
)
"""Claude Code's REJECT_MESSAGE_WITH_REASON_PREFIX: a rejection with the user's words."""

_CC_POLICY: Final = (
    "API Error: Claude Code is unable to respond to this request, which appears to violate our "
    "Usage Policy (https://www.anthropic.com/legal/aup)."
)
CC_REFUSAL_NON_INTERACTIVE: Final = (
    _CC_POLICY + " Try rephrasing the request or attempting a different approach."
)
CC_REFUSAL_INTERACTIVE: Final = (
    _CC_POLICY + " Please double press esc to edit your last message or start a new session "
    "for Claude Code to assist with a different task."
)
CC_REFUSAL_SUGGESTION: Final = (
    " If you are seeing this refusal repeatedly, try running /model claude-sonnet-4-20250514 to "
    "switch models."
)
CC_REFUSAL_DEFAULT_MODEL: Final = "claude-sonnet-4-20250514"
"""The model for which Claude Code leaves out the suggestion to switch models."""


USAGE_LIMIT_PREFIX: Final = "Claude AI usage limit reached"
"""How the API words a subscription's usage limit (``Claude AI usage limit reached|<epoch>``),
which Claude Code 1.0.x wrote as the API-error message's text, unprefixed (VER-6)."""


def api_error_text(cfg: LoopConfig, kind: str, message: str) -> str:
    """[R-TEXTS-1], [VER-6] the text of the API-error message of a failure the API explained
    with ``message``: ``API Error: <message>``; under ``legacy.api_errors_1_0`` a usage-limit
    message is the API's own text (1.0.x shows it, and the epoch after ``|``, as it came)."""
    if cfg.legacy.api_errors_1_0 and message.startswith(USAGE_LIMIT_PREFIX):
        return message
    return f"API Error: {message or kind}"


def rejected_result(cfg: LoopConfig, reason: str = "") -> str:
    """[R-PERM-3], [R-TEXTS-1] the result of a call the user rejected (with their words)."""
    if cfg.texts == "claude_code":
        return CC_REJECT_WITH_REASON_PREFIX + reason if reason else CC_REJECT_MESSAGE
    return REJECTED_RESULT


def interrupted_result(cfg: LoopConfig) -> str:
    """[I-2], [I-3], [R-TEXTS-1] the result of a call an interrupt stopped before it finished.

    With the streaming executor (gate ``streaming_tool_execution``) the reference gives such a
    call its rejection text; without it, ``Interrupted by user`` (facts file 9.3 and 8.1).
    """
    if not cfg.gates.streaming_tool_execution:
        return INTERRUPTED_RESULT
    return CC_REJECT_MESSAGE if cfg.texts == "claude_code" else INTERRUPTED_TOOL_RESULT


def refusal_text(cfg: LoopConfig, model: str, stop_details: str | None) -> str:
    """[R-REFUSAL-1] the API-error message of a response that stopped with ``refusal``.

    Claude Code's text depends on whether the session is interactive and on the model; it
    shows nothing of ``stop_details``. steploop's names the policy category and gives the
    API's explanation when there is one.
    """
    if cfg.texts == "claude_code":
        base = CC_REFUSAL_NON_INTERACTIVE if cfg.non_interactive else CC_REFUSAL_INTERACTIVE
        return base + ("" if model == CC_REFUSAL_DEFAULT_MODEL else CC_REFUSAL_SUGGESTION)
    text = "API Error: The model refused to respond to this request."
    details = _object(stop_details)
    category = details.get("category")
    if isinstance(category, str) and category:
        text += f" Policy category: {category}."
    explanation = details.get("explanation")
    if isinstance(explanation, str) and explanation:
        text += f" {explanation}"
    return text


def _object(text: str | None) -> dict[str, object]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def error_category(kind: str, status: int | None, message: str) -> str:
    """[R-CATEGORY-1] Claude Code's ``error`` field for an API-error message of this failure.

    As Claude Code 2.1.88 builds the message (services/api/errors.ts
    ``getAssistantMessageFromError``; the output-limit and refusal messages in claude.ts):
    ``rate_limit``, ``authentication_failed``, ``invalid_request``, ``billing_error``,
    ``max_output_tokens``, ``unknown``; "" where Claude Code sets no ``error`` (a client-side
    image error, an image over the size limit). ``message`` is the API's own text.
    """
    low = message.lower()
    if kind == "max_output_tokens":
        return "max_output_tokens"
    if kind in ("refusal", "prompt_too_long", "blocking_limit"):
        return "invalid_request"
    if kind == "image_client":
        return ""
    if kind == "rate_limited" or status == 429:
        return "rate_limit"
    if "prompt is too long" in low:
        return "invalid_request"
    if "pdf pages" in low or "the pdf specified" in low:
        return "invalid_request"
    if status == 400 and "image exceeds" in low and "maximum" in low:
        return ""
    if status == 400 and "image dimensions exceed" in low and "many-image" in low:
        return "invalid_request"
    if status == 413:
        return "invalid_request"
    if "`tool_use` ids were found without" in low or "`tool_use` ids must be unique" in low:
        return "invalid_request"
    if "your credit balance is too low" in low:
        return "billing_error"
    if "x-api-key" in low or kind == "auth" or status in (401, 403):
        return "authentication_failed"
    if status == 404:
        return "invalid_request"
    return "unknown"
