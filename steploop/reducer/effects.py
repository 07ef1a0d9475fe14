"""Effects: requests to the world, named in the imperative (specs/ R-EF-*).

Effects are plain data: no callables, clients, clocks or random ids. Ids come from per-kind
counters in the state (R-ID-1). Effects returned by one step() are independent and may run
concurrently, except that ``Emit`` items keep their order and ``Finish`` is always last.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from steploop.reducer.conversation import Conversation
from steploop.reducer.messages import Emitted
from steploop.reducer.transitions import Terminal

__all__ = [
    "AcknowledgeCommands",
    "AskPermission",
    "CallModel",
    "CancelCompaction",
    "CancelModelCall",
    "CancelRefreshTools",
    "CancelStopHooks",
    "CancelTools",
    "CancelWait",
    "Compact",
    "Effect",
    "Emit",
    "Finish",
    "PersistToolResult",
    "RefreshTools",
    "RunStopHooks",
    "StartTool",
    "SummarizeToolUse",
    "TaskBudget",
    "Wait",
]


@attrs.frozen(kw_only=True)
class TaskBudget:
    """The API's ``output_config.task_budget``; ``remaining`` only after a compaction."""

    total: int
    remaining: int | None = None


@attrs.frozen(kw_only=True)
class CallModel:
    """Call the model on ``conversation``. ``streaming=False`` after a broken stream.

    ``thinking_budget`` is the config's (``LoopConfig.thinking_budget``, the one thinking
    budget there is): the client builds the request's ``thinking`` from it (specs/ R-THINK-1).
    """

    TAG: ClassVar[str] = "call_model"
    call_id: int
    model: str
    conversation: Conversation
    max_tokens: int
    streaming: bool = True
    task_budget: TaskBudget | None = None
    query_source: str = "repl_main_thread"
    thinking_budget: int | None = None


@attrs.frozen(kw_only=True)
class CancelModelCall:
    TAG: ClassVar[str] = "cancel_model_call"
    call_id: int


@attrs.frozen(kw_only=True)
class AskPermission:
    """Consult the permission policy (and, if it says ask, the user) for one tool call."""

    TAG: ClassVar[str] = "ask_permission"
    generation: int
    tool_use_id: str
    name: str
    input: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen(kw_only=True)
class StartTool:
    TAG: ClassVar[str] = "start_tool"
    generation: int
    tool_use_id: str
    name: str
    input: dict[str, Any] = attrs.field(factory=dict, hash=False)


@attrs.frozen(kw_only=True)
class CancelTools:
    """Stop these running tools; their late results are ignored (R-TOOL-8)."""

    TAG: ClassVar[str] = "cancel_tools"
    generation: int
    tool_use_ids: tuple[str, ...]
    reason: Literal["sibling_error", "user_interrupted", "discarded", "model_error"]


@attrs.frozen(kw_only=True)
class Wait:
    TAG: ClassVar[str] = "wait"
    wait_id: int
    ms: int


@attrs.frozen(kw_only=True)
class CancelWait:
    TAG: ClassVar[str] = "cancel_wait"
    wait_id: int


@attrs.frozen(kw_only=True)
class Compact:
    """Summarise ``conversation``; answer with CompactionFinished or CompactionFailed."""

    TAG: ClassVar[str] = "compact"
    compact_id: int
    conversation: Conversation
    trigger: Literal["auto", "reactive"]
    pre_tokens: int


@attrs.frozen(kw_only=True)
class CancelCompaction:
    TAG: ClassVar[str] = "cancel_compaction"
    compact_id: int


@attrs.frozen(kw_only=True)
class RunStopHooks:
    TAG: ClassVar[str] = "run_stop_hooks"
    hooks_id: int
    conversation: Conversation
    stop_hook_active: bool


@attrs.frozen(kw_only=True)
class CancelStopHooks:
    TAG: ClassVar[str] = "cancel_stop_hooks"
    hooks_id: int


@attrs.frozen(kw_only=True)
class PersistToolResult:
    """Keep the full text of a result the tool-result budget replaced (fire and forget)."""

    TAG: ClassVar[str] = "persist_tool_result"
    tool_use_id: str
    content: str


@attrs.frozen(kw_only=True)
class SummarizeToolUse:
    """Start the (gated) tool-use summary; answered by ToolUseSummaryReady in any phase."""

    TAG: ClassVar[str] = "summarize_tool_use"
    summary_id: int
    tool_use_ids: tuple[str, ...]
    conversation: Conversation


@attrs.frozen(kw_only=True)
class RefreshTools:
    """Read the tool list as it is now, at the end of tool round ``call_id`` (the reference's
    ``refreshTools()``: newly connected MCP servers appear); answered by ToolsRefreshed
    [R-REFRESH-1]."""

    TAG: ClassVar[str] = "refresh_tools"
    call_id: int


@attrs.frozen(kw_only=True)
class CancelRefreshTools:
    """Stop reading the tool list of round ``call_id`` (an interrupt ended the round, I-7)."""

    TAG: ClassVar[str] = "cancel_refresh_tools"
    call_id: int


@attrs.frozen(kw_only=True)
class AcknowledgeCommands:
    """Mark queued commands consumed in this turn as completed (normal return only)."""

    TAG: ClassVar[str] = "acknowledge_commands"
    command_ids: tuple[str, ...]


@attrs.frozen(kw_only=True)
class Emit:
    """Hand an item to the consumer, in order."""

    TAG: ClassVar[str] = "emit"
    item: Emitted


@attrs.frozen(kw_only=True)
class Finish:
    """The user turn ended. Always the last effect; nothing follows it."""

    TAG: ClassVar[str] = "finish"
    terminal: Terminal


Effect: TypeAlias = (
    CallModel
    | CancelModelCall
    | AskPermission
    | StartTool
    | CancelTools
    | Wait
    | CancelWait
    | Compact
    | CancelCompaction
    | RunStopHooks
    | CancelStopHooks
    | PersistToolResult
    | SummarizeToolUse
    | RefreshTools
    | CancelRefreshTools
    | AcknowledgeCommands
    | Emit
    | Finish
)
