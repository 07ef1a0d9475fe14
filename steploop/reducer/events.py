"""Events: facts the world reports to step(), named in the past tense (specs/ R-EV-*).

Every event carries ``at_ms``, the world's clock when it happened; the machine never reads a
clock of its own (time-based microcompact uses it, R-CTX-3). Bad data from outside (a malformed
tool input, a crashed tool, an API error) arrives as an event; only an event that cannot happen
in the current phase makes step() raise :class:`steploop.reducer.IllegalEvent`.
"""

from __future__ import annotations

from typing import ClassVar, Literal, TypeAlias

import attrs

from steploop.reducer.messages import Block, Message, Usage
from steploop.reducer.typecheck import check_fields

__all__ = [
    "FAILURE_KINDS",
    "Checked",
    "CommandQueued",
    "CompactionFailed",
    "CompactionFinished",
    "Event",
    "Interrupted",
    "MessagesInserted",
    "ModelBlockReceived",
    "ModelCallFailed",
    "ModelResponseEnded",
    "PermissionAnswered",
    "StopHooksFinished",
    "ToolFinished",
    "ToolTraits",
    "ToolUseSummaryReady",
    "ToolsRefreshed",
    "WaitElapsed",
]

InterruptBehavior: TypeAlias = Literal["cancel", "block"]


class Checked:
    """Checked when built [M-TYPE-1]: every field against its annotation, nested values
    included; a wrong one raises :class:`~steploop.reducer.errors.WrongType` naming it."""

    __slots__ = ()

    __attrs_post_init__ = check_fields  # the check itself: no frame of its own


@attrs.frozen(kw_only=True)
class ToolTraits(Checked):
    """What the shell knows of a tool call *for this input* (the tool registry, steploop/effects/tools/).

    ``max_result_chars`` of None means the tool's results are never budgeted (like Read).
    """

    known: bool = True
    concurrency_safe: bool = False
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error: bool = False
    max_result_chars: int | None = 50_000


@attrs.frozen(kw_only=True)
class ModelBlockReceived(Checked):
    """A content block completed in the stream of model call ``call_id``.

    For a tool_use block, ``tool`` carries the traits and ``input_complete`` is False when the
    input JSON was cut off (such a call never runs, R-TOOL-4; the same holds for an opaque
    server block whose input was cut off). ``model`` is the model serving the response when
    the client knows it at this point (None: the requested one, until ``ModelResponseEnded``
    says which served it).
    """

    TAG: ClassVar[str] = "model_block_received"
    call_id: int
    block: Block
    tool: ToolTraits | None = None
    input_complete: bool = True
    model: str | None = None
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class ModelResponseEnded(Checked):
    """The response finished (message_stop) with this stop reason and usage.

    ``model`` is the model that served the response (the API's id, which may differ from the
    alias requested). ``stop_details`` is the API's ``stop_details`` object as compact JSON
    text (a refusal's category and explanation), None when the response had none.
    """

    TAG: ClassVar[str] = "model_response_ended"
    call_id: int
    model: str
    stop_reason: str | None
    usage: Usage
    stop_details: str | None = None
    at_ms: int = 0


FAILURE_KINDS: tuple[str, ...] = (
    "prompt_too_long",  # 400 "prompt is too long"
    "media",  # image/document rejected, request too large (413)
    "rate_limited",  # 429
    "overloaded",  # 529 or an overloaded_error event
    "server_error",  # other 5xx, api_error event
    "connection",  # refused, reset before the stream began
    "stream_broken",  # dropped, stalled, or ended without message_stop
    "auth",  # 401/403
    "invalid_request",  # other 4xx
    "image_client",  # an image the client could not size or resize
    "unknown",  # anything nothing recognises -> model_error
    "context_overflow",  # 400 "input length and `max_tokens` exceed context limit: A + B > C"
)


@attrs.frozen(kw_only=True)
class ModelCallFailed(Checked):
    """Model call ``call_id`` failed; the shell only classifies (``kind`` in FAILURE_KINDS).

    For ``context_overflow`` the shell also reads the numbers of the message: the request's
    input tokens (A) and the context limit (C) (R-OVERFLOW-1).
    """

    TAG: ClassVar[str] = "model_call_failed"
    call_id: int
    kind: str
    message: str = ""
    status: int | None = None
    retry_after_ms: int | None = None
    input_tokens: int | None = None
    context_limit: int | None = None
    at_ms: int = 0

    def __attrs_post_init__(self) -> None:
        check_fields(self)
        if self.kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {self.kind!r}; expected one of {FAILURE_KINDS}")


HookEvent: TypeAlias = Literal["PreToolUse", "PostToolUse"]


@attrs.frozen(kw_only=True)
class ToolFinished(Checked):
    """A tool started by ``StartTool(generation, tool_use_id)`` finished (completion order).

    ``hook_stopped``: a hook asked the loop to stop after this call; ``hook_event`` says which
    (a PreToolUse hook that let the call run, or a PostToolUse hook) and ``hook_stop_reason``
    the hook's own stop reason, if it gave one (T-HOOK-1). ``model``: the tool set the main
    loop's model for the rest of the turn (a Skill whose definition names a model, R-MODEL-2).
    """

    TAG: ClassVar[str] = "tool_finished"
    generation: int
    tool_use_id: str
    content: str
    is_error: bool = False
    hook_stopped: bool = False
    hook_event: HookEvent = "PostToolUse"
    hook_stop_reason: str = ""
    model: str | None = None
    at_ms: int = 0


PermissionDecision: TypeAlias = Literal["allow", "deny_by_rule", "rejected_by_user"]


@attrs.frozen(kw_only=True)
class PermissionAnswered(Checked):
    TAG: ClassVar[str] = "permission_answered"
    generation: int
    tool_use_id: str
    decision: PermissionDecision
    reason: str = ""
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class CompactionFinished(Checked):
    """Compaction ``compact_id`` succeeded: ``messages`` replace the conversation
    (boundary, summary, kept messages, attachments, in that order)."""

    TAG: ClassVar[str] = "compaction_finished"
    compact_id: int
    messages: tuple[Message, ...]
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class CompactionFailed(Checked):
    TAG: ClassVar[str] = "compaction_failed"
    compact_id: int
    reason: str = ""
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class StopHooksFinished(Checked):
    """Stop hooks ``hooks_id`` ran. ``error`` is set when the hooks themselves failed."""

    TAG: ClassVar[str] = "stop_hooks_finished"
    hooks_id: int
    blocking_errors: tuple[str, ...] = ()
    prevent: bool = False
    stop_reason: str = ""
    hook_count: int = 0
    error: str | None = None
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class Interrupted(Checked):
    """The user interrupted: ``hard`` (Esc/Ctrl-C) or ``submit`` (a new message was sent)."""

    TAG: ClassVar[str] = "interrupted"
    kind: Literal["hard", "submit"] = "hard"
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class WaitElapsed(Checked):
    TAG: ClassVar[str] = "wait_elapsed"
    wait_id: int
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class ToolUseSummaryReady(Checked):
    """The gated tool-use summary is ready (``summary`` None when it failed)."""

    TAG: ClassVar[str] = "tool_use_summary_ready"
    summary_id: int
    summary: str | None
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class CommandQueued(Checked):
    """The user queued a command while the turn runs; attached at the next tool round."""

    TAG: ClassVar[str] = "command_queued"
    command_id: str
    text: str
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class MessagesInserted(Checked):
    """The shell added messages to the turn without a model call: an attachment, a skill's or
    a slash command's expansion, hook context (R-INSERT-1). Legal while a model call has
    produced nothing yet; the call is then made again with the messages before it."""

    TAG: ClassVar[str] = "messages_inserted"
    messages: tuple[Message, ...]
    at_ms: int = 0


@attrs.frozen(kw_only=True)
class ToolsRefreshed:
    """The tool list at the end of tool round ``call_id`` (RefreshTools): the tools' names in
    the order the model sees them and the shell's digest of their definitions ("" when the
    world keeps no tool list) [R-REFRESH-1]. Recorded, so a replay knows when the list
    changed; the machine only waits for it."""

    TAG: ClassVar[str] = "tools_refreshed"
    call_id: int
    tools: tuple[str, ...] = ()
    digest: str = ""
    at_ms: int = 0


Event: TypeAlias = (
    ModelBlockReceived
    | ModelResponseEnded
    | ModelCallFailed
    | ToolFinished
    | PermissionAnswered
    | CompactionFinished
    | CompactionFailed
    | StopHooksFinished
    | Interrupted
    | WaitElapsed
    | ToolUseSummaryReady
    | CommandQueued
    | MessagesInserted
    | ToolsRefreshed
)
