"""Why a round ended: 7 ``Continue`` and 10 ``Terminal`` transitions (specs/ T-*, C-*).

Each is its own frozen class with a stable ``TAG`` equal to the reference's reason string.
"""

from __future__ import annotations

from typing import ClassVar, TypeAlias

import attrs

from steploop.reducer.messages import ErrorInfo

__all__ = [
    "CONTINUE_TYPES",
    "TERMINAL_TYPES",
    "AbortedStreaming",
    "AbortedTools",
    "BlockingLimit",
    "CollapseDrainRetry",
    "Completed",
    "Continue",
    "HookStopped",
    "ImageError",
    "MaxOutputTokensEscalate",
    "MaxOutputTokensRecovery",
    "MaxTurns",
    "ModelError",
    "NextTurn",
    "PromptTooLong",
    "ReactiveCompactRetry",
    "StopHookBlocking",
    "StopHookPrevented",
    "Terminal",
    "TokenBudgetContinuation",
    "Transition",
]


# --- Continue (7) -------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class NextTurn:
    TAG: ClassVar[str] = "next_turn"


@attrs.frozen(kw_only=True)
class ReactiveCompactRetry:
    TAG: ClassVar[str] = "reactive_compact_retry"


@attrs.frozen(kw_only=True)
class MaxOutputTokensRecovery:
    TAG: ClassVar[str] = "max_output_tokens_recovery"
    attempt: int


@attrs.frozen(kw_only=True)
class MaxOutputTokensEscalate:
    TAG: ClassVar[str] = "max_output_tokens_escalate"


@attrs.frozen(kw_only=True)
class CollapseDrainRetry:
    TAG: ClassVar[str] = "collapse_drain_retry"
    committed: int


@attrs.frozen(kw_only=True)
class StopHookBlocking:
    TAG: ClassVar[str] = "stop_hook_blocking"


@attrs.frozen(kw_only=True)
class TokenBudgetContinuation:
    TAG: ClassVar[str] = "token_budget_continuation"


Continue: TypeAlias = (
    NextTurn
    | ReactiveCompactRetry
    | MaxOutputTokensRecovery
    | MaxOutputTokensEscalate
    | CollapseDrainRetry
    | StopHookBlocking
    | TokenBudgetContinuation
)

# --- Terminal (10) ------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Completed:
    TAG: ClassVar[str] = "completed"


@attrs.frozen(kw_only=True)
class BlockingLimit:
    TAG: ClassVar[str] = "blocking_limit"


@attrs.frozen(kw_only=True)
class ImageError:
    TAG: ClassVar[str] = "image_error"


@attrs.frozen(kw_only=True)
class ModelError:
    TAG: ClassVar[str] = "model_error"
    error: ErrorInfo


@attrs.frozen(kw_only=True)
class AbortedStreaming:
    TAG: ClassVar[str] = "aborted_streaming"


@attrs.frozen(kw_only=True)
class AbortedTools:
    TAG: ClassVar[str] = "aborted_tools"


@attrs.frozen(kw_only=True)
class PromptTooLong:
    TAG: ClassVar[str] = "prompt_too_long"


@attrs.frozen(kw_only=True)
class StopHookPrevented:
    TAG: ClassVar[str] = "stop_hook_prevented"


@attrs.frozen(kw_only=True)
class HookStopped:
    TAG: ClassVar[str] = "hook_stopped"


@attrs.frozen(kw_only=True)
class MaxTurns:
    TAG: ClassVar[str] = "max_turns"
    turn_count: int


Terminal: TypeAlias = (
    Completed
    | BlockingLimit
    | ImageError
    | ModelError
    | AbortedStreaming
    | AbortedTools
    | PromptTooLong
    | StopHookPrevented
    | HookStopped
    | MaxTurns
)

Transition: TypeAlias = Continue | Terminal

CONTINUE_TYPES: tuple[type[Continue], ...] = (
    NextTurn,
    ReactiveCompactRetry,
    MaxOutputTokensRecovery,
    MaxOutputTokensEscalate,
    CollapseDrainRetry,
    StopHookBlocking,
    TokenBudgetContinuation,
)
TERMINAL_TYPES: tuple[type[Terminal], ...] = (
    Completed,
    BlockingLimit,
    ImageError,
    ModelError,
    AbortedStreaming,
    AbortedTools,
    PromptTooLong,
    StopHookPrevented,
    HookStopped,
    MaxTurns,
)
