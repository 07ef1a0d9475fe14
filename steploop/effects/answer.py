"""The answering layer: what a handler's output becomes, the same in every world (specs/
W-ANSWER-1).

The worlds run the handlers (a model client, tools, a compactor, stop hooks, a summarizer)
each its own way: the live world in tasks of one task group (:mod:`steploop.effects.run`), the
Temporal world in activities (:mod:`steploop.effects.temporal.activities`) and its workflow,
counterfactual replay for what a recording lacks (:mod:`steploop.effects.trace.counterfactual`).
What they get back becomes an event here, through the same functions:

- **a model call's stream**, event by event (:class:`ModelStream`; :func:`response` takes a
  whole response for a world that steps it at once): an event that is not the
  call's, a tool_use that repeats an id of its response or of the conversation, or a tool
  input that is not JSON data ends the call as ``ModelCallFailed(kind="unknown")`` naming it
  (B-MODEL-1, B-MODEL-2, T-MODEL-1); text is cleaned (B-TEXT-1); a stream that stops without
  an end is ``stream_broken``;
- **a tool's output** (:func:`tool`): checked (B-TOOL-1) and cleaned, with the hook that
  stopped the turn and its reason (E-HOOK-1), as a ``ToolFinished``;
- **a compaction, stop hooks, a summary** (:func:`compaction`, :func:`stop_hooks`,
  :func:`summary`): a result of the wrong type or for another request is malformed data,
  named in a ``CompactionFailed``, a hook error or no summary; the rest is cleaned;
- **a handler that raised** (:func:`raised`), **gave no answer** (:func:`gave_up`: past its
  deadline, its worker lost) or **is not configured** (:func:`unhandled`): the failure the
  machine expects for that request; :func:`outcome` awaits a one-result handler and answers
  with its checked result or its failure;
- **a permission** the :class:`PermissionPolicy` settles (:meth:`PermissionPolicy.answer`) or
  a person answers (:func:`permission`);
- **the tool list** a world reads for ``RefreshTools`` (:func:`tools_refreshed`: its names, in
  order, and the digest of their definitions; R-REFRESH-1);
- **the usage** of a turn (:func:`counted`): only a response that ends the call the machine
  still waits for counts (a late response, after an interrupt or a timeout, does not);
- **answers to withdrawn requests** (:func:`not_withdrawn`, the protocol's filter, the one the
  driver loop uses): never stepped (W-DRIVE-2).

Nothing here does I/O of its own or reads a clock: each function takes what a handler gave
and the time the world stamps (``at_ms``) and returns the event (:func:`outcome` awaits the
handler call the world hands it, under the world's own deadline or heartbeat). Everything but
:func:`outcome` is deterministic, so the Temporal workflow calls it as workflow code. The
checks and the cleaning themselves are :mod:`steploop.effects.boundary`'s; the worlds reach
them only through this module (a world keeps its own :class:`~steploop.effects.boundary.ToolUseIds`
index, the one state a check needs).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias, TypeVar, assert_never

import attrs

from steploop.effects.boundary import (
    ToolUseIds,
    clean,
    clean_block,
    clean_event,
    clean_text,
    compaction_result,
    model_problem,
    tool_output,
)
from steploop.effects.hooks import StopEventName
from steploop.effects.protocols import ModelClient
from steploop.effects.tools.base import ToolOutput, tool_use_error
from steploop.reducer import LoopState, Request, fastpaths
from steploop.reducer._replace import evolve
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    RefreshTools,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
)
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    HookEvent,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    PermissionDecision,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolUseSummaryReady,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    SystemMessage,
    Usage,
    UserMessage,
)
from steploop.reducer.protocol import not_withdrawn
from steploop.reducer.typecheck import check_fields

__all__ = [
    "Asked",
    "Handled",
    "ModelStream",
    "PermissionPolicy",
    "compaction",
    "counted",
    "gave_up",
    "not_withdrawn",
    "outcome",
    "permission",
    "raised",
    "request",
    "response",
    "stamped",
    "stop_event",
    "stop_hooks",
    "summary",
    "tool",
    "tools_refreshed",
    "unhandled",
]

E = TypeVar("E")

Asked: TypeAlias = CallModel | StartTool | Compact | RunStopHooks | SummarizeToolUse
"""The effects a world answers by running a handler."""


def stamped(event: E, at_ms: int) -> E:
    """``event`` with the world's time (the reducer's fast evolve)."""
    if at_ms.__class__ is int and fastpaths.on("stamp"):  # fast path: stamp
        stamp = _STAMPS.get(event.__class__)
        if stamp is None:
            stamp = _STAMPS[event.__class__] = _stamper(event.__class__)
        if stamp is not False:
            return stamp(event, at_ms)  # type: ignore[no-any-return]
    return evolve(event, at_ms=at_ms)


_STAMPS: dict[type, Any] = {}


def _stamper(cls: type) -> Any:
    """The copy of an event of ``cls`` with ``at_ms`` set, slot by slot (False: evolve it).

    An event is checked when it is built (M-TYPE-1) and a world checks the data in it at
    the boundary (:mod:`steploop.effects.boundary`) before stamping it, so the copy checks
    only what changes, the stamp, as the checker would (``at_ms.__class__ is int``); building
    it through ``__init__`` (evolve, the slower twin) checked every field again, nested
    blocks included. Only for slotted attrs classes without converters, validators or an init
    hook other than the check."""
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        return False
    fields = attrs.fields(cls)
    if (
        "at_ms" not in {f.name for f in fields}
        or any(not f.init or f.converter is not None or f.validator is not None for f in fields)
        or getattr(cls, "__attrs_pre_init__", None) is not None
        or getattr(cls, "__attrs_post_init__", check_fields) is not check_fields
    ):
        return False
    lines = ["def stamp(e, at_ms):", "    n = _new(cls)"]
    for f in fields:
        value = "at_ms" if f.name == "at_ms" else f"e.{f.name}"
        lines.append(f"    _set(n, {f.name!r}, {value})")
    lines.append("    return n")
    ns: dict[str, Any] = {"cls": cls, "_new": object.__new__, "_set": object.__setattr__}
    exec(compile("\n".join(lines) + "\n", f"<stamp {cls.__qualname__}>", "exec"), ns)
    return ns["stamp"]


def request(req: Request) -> Request:
    """The user's request as the machine may take it: its text cleaned (a prompt from argv or
    a file can hold lone surrogates, B-TEXT-1)."""
    return clean(req)  # type: ignore[no-any-return]


# -- model calls ---------------------------------------------------------------------------


class ModelStream:
    """One model call's stream, checked event by event as the client yields it.

    ``ids``: the world's index of the tool_use ids of its conversations (one per run, so each
    call reads only the messages added since the last); None: a fresh one, which reads the
    call's conversation whole when a response holds a tool_use.

    :meth:`check` gives each event as the machine may take it; in place of malformed data, the
    ``ModelCallFailed`` that ends the call (``refused`` is then set). The call has ended when
    the event returned is not a ``ModelBlockReceived``.
    """

    __slots__ = ("_call_id", "_ids", "refused")

    def __init__(self, effect: CallModel, ids: ToolUseIds | None = None) -> None:
        self._call_id = effect.call_id
        self._ids = (ids if ids is not None else ToolUseIds()).response(effect.conversation)
        self.refused = False

    def check(self, raw: object) -> Event:
        call_id = self._call_id
        if (
            not isinstance(raw, (ModelBlockReceived, ModelResponseEnded, ModelCallFailed))
            or raw.call_id != call_id
        ):
            return self._refuse(f"the model client produced malformed data: {raw!r:.200}")
        if isinstance(raw, ModelBlockReceived):  # steploop/effects/boundary.py
            problem = model_problem(raw.block, self._ids)
            if problem is not None:
                return self._refuse(f"the model sent a malformed response: {problem}")
            block = clean_block(raw.block)
            return raw if block is raw.block else attrs.evolve(raw, block=block)
        return clean_event(raw)

    def _refuse(self, message: str) -> ModelCallFailed:
        self.refused = True
        return ModelCallFailed(call_id=self._call_id, kind="unknown", message=message)

    def ran_dry(self, at_ms: int = 0) -> ModelCallFailed:
        """The answer when the stream stopped before the response ended."""
        return ModelCallFailed(
            call_id=self._call_id,
            kind="stream_broken",
            message="the model stream ended without a result",
            at_ms=at_ms,
        )


async def response(
    effect: CallModel,
    client: ModelClient,
    ids: ToolUseIds | None = None,
    *,
    now: Callable[[], int] | None = None,
    passing: tuple[type[BaseException], ...] = (),
) -> list[Event]:
    """The whole answer to model call ``effect`` from ``client``, for a world that takes a
    response at once (a Temporal activity, counterfactual replay's policy): each event checked
    as it came (:class:`ModelStream`) and stamped with ``now()`` (None: as the client stamped
    it), up to the end or the failure; a client that raises is a model error, one that stops
    early a broken stream. An exception of a ``passing`` type propagates; the stream is closed
    either way."""
    checked = ModelStream(effect, ids)
    out: list[Event] = []
    stream = client.stream(effect)
    try:
        async for raw in stream:
            event = checked.check(raw)
            out.append(event if now is None else stamped(event, now()))
            if not isinstance(event, ModelBlockReceived):  # the end, or the failure
                return out
        last: Event = checked.ran_dry()
    except passing:
        raise
    except Exception as exc:  # a broken client is a model error, not a crash
        last = raised(effect, exc)
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            await aclose()
    return [*out, last if now is None else stamped(last, now())]


# -- tools ---------------------------------------------------------------------------------

_HOOK_EVENTS: tuple[HookEvent, ...] = ("PreToolUse", "PostToolUse")


def tool(effect: StartTool, given: object, at_ms: int = 0) -> ToolFinished:
    """What tool call ``effect`` returned (``given``), as the machine takes it: an output that
    is not a :class:`~steploop.effects.tools.base.ToolOutput`, or whose content is not a str or
    flags not bools, is an error result naming it (B-TOOL-1); text is cleaned (B-TEXT-1); a
    call that stopped the turn carries which hook stopped it and why (E-HOOK-1)."""
    out = tool_output(effect.name, given)
    event: HookEvent = "PostToolUse"
    reason = ""
    if out.hook_stopped:
        event = getattr(given, "hook_event", "PostToolUse")
        reason = getattr(given, "hook_stop_reason", "")
        if event not in _HOOK_EVENTS or reason.__class__ is not str:
            out = tool_use_error(
                f"Error calling tool {effect.name}: hook_event must be PreToolUse or "
                f"PostToolUse and hook_stop_reason a str, got {event!r:.30} and {reason!r:.30}"
            )
            event, reason = "PostToolUse", ""
        else:
            reason = clean_text(reason)
    return ToolFinished(
        generation=effect.generation,
        tool_use_id=effect.tool_use_id,
        content=out.content,
        is_error=out.is_error,
        hook_stopped=out.hook_stopped,
        hook_event=event,
        hook_stop_reason=reason,
        at_ms=at_ms,
    )


# -- compactions, stop hooks, summaries ------------------------------------------------------

_KEPT = (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)


def compaction(
    effect: Compact, result: object, at_ms: int = 0
) -> CompactionFinished | CompactionFailed:
    """A compactor's result for ``effect``: one of the wrong type, for another compaction or
    holding what is not a message is malformed data (a ``CompactionFailed`` naming it, which
    the breaker counts); a tool input beyond the data limits too; text is cleaned."""
    cid = effect.compact_id
    ok = (isinstance(result, CompactionFailed) and result.compact_id == cid) or (
        isinstance(result, CompactionFinished)
        and result.compact_id == cid
        and all(isinstance(m, _KEPT) for m in result.messages)
    )
    if not ok:
        result = CompactionFailed(
            compact_id=cid, reason=f"the compactor returned malformed data: {result!r:.200}"
        )
    return stamped(compaction_result(result), at_ms)  # type: ignore[no-any-return]


def stop_hooks(effect: RunStopHooks, result: object, at_ms: int = 0) -> StopHooksFinished:
    """The stop hooks' result for ``effect``: one of the wrong type or for another run is
    malformed data (a hook error naming it); text is cleaned."""
    if not (isinstance(result, StopHooksFinished) and result.hooks_id == effect.hooks_id):
        result = StopHooksFinished(
            hooks_id=effect.hooks_id,
            error=f"the stop hooks returned malformed data: {result!r:.200}",
        )
    return stamped(clean(result), at_ms)  # type: ignore[no-any-return]


def summary(effect: SummarizeToolUse, text: object, at_ms: int = 0) -> ToolUseSummaryReady:
    """A summarizer's text (cleaned); anything but a str is no summary."""
    return ToolUseSummaryReady(
        summary_id=effect.summary_id,
        summary=clean_text(text) if isinstance(text, str) else None,
        at_ms=at_ms,
    )


def tools_refreshed(
    effect: RefreshTools, names: Sequence[str] = (), digest: str = "", at_ms: int = 0
) -> ToolsRefreshed:
    """The tool list read for ``effect`` [R-REFRESH-1]: the tools' names in the order the model
    sees them and the digest of their definitions (a world with no tool list: none, "")."""
    return ToolsRefreshed(
        call_id=effect.call_id,
        tools=tuple(clean_text(n) for n in names),
        digest=clean_text(digest),
        at_ms=at_ms,
    )


def stop_event(subagent: bool) -> StopEventName:
    """The hook event stop hooks run as: SubagentStop in a subagent, else Stop."""
    return "SubagentStop" if subagent else "Stop"


# -- handlers that fail --------------------------------------------------------------------


def _what(exc: BaseException) -> str:
    return clean_text(f"{type(exc).__name__}: {exc}")


def raised(effect: Asked, exc: BaseException, at_ms: int = 0) -> Event:
    """The answer when the handler of ``effect`` raised ``exc``: a model error (``unknown``),
    a failed compaction (the breaker counts it), a stop-hook error, an error result, no
    summary; never a crash of the run."""
    what = _what(exc)
    match effect:
        case CallModel():
            return ModelCallFailed(
                call_id=effect.call_id, kind="unknown", message=what, at_ms=at_ms
            )
        case StartTool():
            return tool(effect, tool_use_error(f"Error calling tool {effect.name}: {what}"), at_ms)
        case Compact():
            return CompactionFailed(compact_id=effect.compact_id, reason=what, at_ms=at_ms)
        case RunStopHooks():
            return StopHooksFinished(hooks_id=effect.hooks_id, error=what, at_ms=at_ms)
        case SummarizeToolUse():
            return summary(effect, None, at_ms)
        case _:
            assert_never(effect)


def gave_up(effect: Asked, why: str, at_ms: int = 0) -> Event:
    """The answer when the handler of ``effect`` gave none, for the reason ``why`` (its
    deadline passed, the activity running it failed): a broken model stream, an error result,
    a failed compaction, a stop-hook error, no summary."""
    why = clean_text(why)
    match effect:
        case CallModel():
            return ModelCallFailed(
                call_id=effect.call_id, kind="stream_broken", message=why, at_ms=at_ms
            )
        case StartTool():
            return tool(effect, ToolOutput(content=why, is_error=True), at_ms)
        case Compact():
            return CompactionFailed(compact_id=effect.compact_id, reason=why, at_ms=at_ms)
        case RunStopHooks():
            return StopHooksFinished(hooks_id=effect.hooks_id, error=why, at_ms=at_ms)
        case SummarizeToolUse():
            return summary(effect, None, at_ms)
        case _:
            assert_never(effect)


Handled = TypeVar("Handled", Compact, RunStopHooks, SummarizeToolUse)
"""An effect whose handler gives one result, checked by :func:`compaction`, :func:`stop_hooks`
or :func:`summary`."""


async def outcome(
    effect: Handled, call: Callable[[], Awaitable[object]], check: Callable[[Handled, Any], Event]
) -> Event:
    """Run ``call`` (the handler of ``effect``) and answer with ``check(effect, result)``, or
    with :func:`raised` if it raised. Cancellation (a world's deadline) passes through: the
    world answers it with :func:`gave_up`."""
    try:
        result = await call()
    except Exception as exc:  # a broken handler is a failed request, never a crash
        return raised(effect, exc)
    return check(effect, result)


def unhandled(effect: Compact | RunStopHooks | SummarizeToolUse, at_ms: int = 0) -> Event:
    """The answer when the world has no handler for ``effect``: no compactor is a failed
    compaction, no stop hooks is a run that stops nothing, no summarizer is no summary."""
    match effect:
        case Compact():
            return CompactionFailed(
                compact_id=effect.compact_id, reason="no compactor configured", at_ms=at_ms
            )
        case RunStopHooks():
            return StopHooksFinished(hooks_id=effect.hooks_id, at_ms=at_ms)
        case SummarizeToolUse():
            return summary(effect, None, at_ms)
        case _:
            assert_never(effect)


# -- permissions ---------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PermissionPolicy:
    """Which tool calls run without asking: ``allow`` and ``deny`` are tool names; everything
    else gets ``default``. "ask" surfaces a permission request to whoever answers them (the
    live run's consumer, the Temporal workflow's ``answer_permission`` update)."""

    allow: frozenset[str] = frozenset()
    deny: frozenset[str] = frozenset()
    default: Literal["allow", "ask", "deny"] = "ask"

    def decide(self, name: str, input: Mapping[str, Any]) -> Literal["allow", "ask", "deny"]:
        """An MCP tool (``mcp__SERVER__TOOL``) is also named by the rules ``mcp__SERVER`` and
        ``mcp__SERVER__*``, which name every tool of the server, as in Claude Code (E-MCP-6)."""
        if name in self.deny or (name[:5] == "mcp__" and _server_rule(name, self.deny)):
            return "deny"
        if name in self.allow or (name[:5] == "mcp__" and _server_rule(name, self.allow)):
            return "allow"
        return self.default

    def answer(self, effect: AskPermission, at_ms: int = 0) -> PermissionAnswered | None:
        """The answer the policy gives ``effect`` at once, or None when it asks."""
        decision = self.decide(effect.name, effect.input)
        if decision == "ask":
            return None
        if decision == "allow":
            return permission(effect, "allow", "", at_ms)
        return permission(effect, "deny_by_rule", "The permission policy denies this tool.", at_ms)


def _server_rule(name: str, rules: frozenset[str]) -> bool:
    """Whether ``rules`` name the MCP server of tool ``name`` as a whole."""
    server = name[5:].split("__", 1)[0]
    return f"mcp__{server}" in rules or f"mcp__{server}__*" in rules


def permission(
    effect: AskPermission, decision: PermissionDecision, reason: str = "", at_ms: int = 0
) -> PermissionAnswered:
    """The answer to permission request ``effect``: the policy's, or a person's (the live
    run's consumer, a Temporal client's update); the reason cleaned."""
    return PermissionAnswered(
        generation=effect.generation,
        tool_use_id=effect.tool_use_id,
        decision=decision,
        reason=clean_text(reason),
        at_ms=at_ms,
    )


# -- usage ---------------------------------------------------------------------------------


def counted(total: Usage, event: Event | None, before: LoopState | None) -> Usage:
    """``total`` plus the usage of ``event`` if it ends the model call that ``before`` (the
    state it was stepped in) waited for; a late response (its call was interrupted, timed out
    or retried) counts nothing, as the machine takes nothing from it."""
    if (
        isinstance(event, ModelResponseEnded)
        and before is not None
        and event.call_id == before.round.call_id
    ):
        u = event.usage
        return Usage(
            input_tokens=total.input_tokens + u.input_tokens,
            output_tokens=total.output_tokens + u.output_tokens,
            cache_creation_input_tokens=total.cache_creation_input_tokens
            + u.cache_creation_input_tokens,
            cache_read_input_tokens=total.cache_read_input_tokens + u.cache_read_input_tokens,
        )
    return total
