"""LoopState, Session, Request and the per-round bookkeeping (specs/ R-STATE-*).

All frozen; step() rebuilds what changes with ``attrs.evolve`` and shares the rest.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

import attrs

from steploop.reducer.conversation import Conversation
from steploop.reducer.events import Checked, ToolTraits
from steploop.reducer.messages import AssistantMessage, Block, ToolResultBlock, Usage, UserMessage
from steploop.reducer.transitions import Terminal, Transition

__all__ = [
    "PHASES",
    "AutoCompactTracking",
    "BudgetTracker",
    "Ids",
    "LoopState",
    "Phase",
    "Request",
    "Round",
    "Session",
    "Slot",
]

Phase: TypeAlias = Literal[
    "compacting",
    "streaming",
    "waiting_retry",
    "running_tools",
    "draining",
    "reactive_compacting",
    "stop_hooks",
    "refreshing_tools",
    "done",
]
PHASES: tuple[Phase, ...] = (
    "compacting",
    "streaming",
    "waiting_retry",
    "running_tools",
    "draining",
    "reactive_compacting",
    "stop_hooks",
    "refreshing_tools",
    "done",
)

SlotStatus: TypeAlias = Literal["queued", "asking", "running", "done"]


@attrs.frozen(kw_only=True, slots=False)
class Ids:
    """Per-kind id counters (R-ID-1): inserting an effect of one kind never renumbers another."""

    msg: int = 0
    call: int = 0
    generation: int = 0
    wait: int = 0
    compact: int = 0
    hooks: int = 0
    summary: int = 0


@attrs.frozen(kw_only=True, slots=False)
class Slot:
    """One tool_use of the current attempt, in arrival (= tool_use) order."""

    tool_use_id: str
    name: str
    input: dict[str, Any] = attrs.field(factory=dict, hash=False)
    traits: ToolTraits
    status: SlotStatus = "queued"
    result: ToolResultBlock | None = None
    synthetic: bool = False
    hook_stopped: bool = False
    hook_event: str = ""  # which hook stopped the turn, and its reason [T-HOOK-1]
    hook_reason: str = ""
    message: UserMessage | None = None  # set once the result is emitted


@attrs.frozen(kw_only=True, slots=False)
class Round:
    """One model call attempt and the tools it asked for.

    ``retry_attempt``, ``consecutive_529`` and ``streaming`` survive retries within the round;
    the rest is reset by every new attempt.
    """

    call_id: int = 0
    generation: int = 0
    streaming: bool = True
    retry_attempt: int = 0
    consecutive_529: int = 0
    max_tokens: int = 0
    blocks: tuple[AssistantMessage, ...] = ()
    slots: tuple[Slot, ...] = ()
    results: tuple[UserMessage, ...] = ()  # tool results in emission order
    ended: bool = False
    stop_reason: str | None = None
    usage: Usage | None = None
    withheld: AssistantMessage | None = None
    error_message: AssistantMessage | None = None
    sibling_error: str | None = None
    hook_stop: bool = False
    sticky_fallback: bool = False
    pending_id: int = 0  # the outstanding wait / compaction / stop-hooks id
    pending_terminal: Terminal | None = None  # what a draining phase ends with
    abort_kind: str | None = None  # "hard" or "submit" once the round was interrupted


@attrs.frozen(kw_only=True, slots=False)
class AutoCompactTracking:
    compacted: bool = False
    turn_counter: int = 0
    consecutive_failures: int = 0


@attrs.frozen(kw_only=True, slots=False)
class BudgetTracker:
    continuation_count: int = 0
    last_delta_tokens: int = 0
    last_global_turn_tokens: int = 0


@attrs.frozen(kw_only=True, slots=False)
class Request(Checked):
    """A user turn's input. ``prompt`` is text or blocks; budgets are optional. Checked when
    built (M-TYPE-1)."""

    prompt: str | tuple[Block, ...]
    token_budget: int | None = None
    task_budget: int | None = None
    at_ms: int = 0


@attrs.frozen(kw_only=True, slots=False)
class Session(Checked):
    """What carries from one user turn to the next (R-SESSION-1). Checked when built
    (M-TYPE-1)."""

    conversation: Conversation = attrs.field(factory=Conversation.empty)
    model: str | None = None  # a sticky fallback model, once switched
    autocompact_failures: int = 0  # used when the breaker is session-scoped
    last_assistant_at_ms: int | None = None
    ids: Ids = attrs.field(factory=Ids)


@attrs.frozen(kw_only=True, slots=False)
class LoopState:
    """The whole machine state between two events."""

    phase: Phase
    conversation: Conversation
    model: str
    on_fallback: bool = False  # the model is the fallback (sticky for the session)
    turn_count: int = 1
    transition: Transition | None = None
    mot_recovery_count: int = 0
    has_attempted_reactive_compact: bool = False
    max_output_tokens_override: int | None = None
    escalated: bool = False
    stop_hook_active: bool = False
    stop_hook_blocks: int = 0
    tracking: AutoCompactTracking = attrs.field(factory=AutoCompactTracking)
    compacted_this_round: bool = False
    tokens_freed: int = 0
    token_budget: int | None = None
    budget: BudgetTracker = attrs.field(factory=BudgetTracker)
    turn_output_tokens: int = 0
    task_budget_total: int | None = None
    task_budget_remaining: int | None = None
    last_assistant_at_ms: int | None = None
    queued_commands: tuple[tuple[str, str], ...] = ()
    consumed_commands: tuple[str, ...] = ()
    summary_id: int = 0  # the outstanding tool-use summary (0: none)
    summary_text: str | None = None
    summary_tool_ids: tuple[str, ...] = ()
    last_usage: Usage | None = None
    pause_resumes: int = 0  # paused responses resumed in a row [S-PAUSE-1]
    round: Round = attrs.field(factory=Round)
    ids: Ids = attrs.field(factory=Ids)

    def session(self) -> Session:
        """The session to start the next user turn from (meaningful once the turn ended)."""
        return Session(
            conversation=self.conversation,
            model=self.model if self.on_fallback else None,
            autocompact_failures=self.tracking.consecutive_failures,
            last_assistant_at_ms=self.last_assistant_at_ms,
            ids=self.ids,
        )
