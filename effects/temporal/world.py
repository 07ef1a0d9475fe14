"""What the Temporal world does with each effect, in one table, and the data that crosses
Temporal's boundaries.

Every effect ``step()`` returns is one of four kinds here:

- it **opens** something that answers later with events: an activity (a model call, a tool, a
  compaction, stop hooks, a summary), a durable timer (``Wait``), or a question to a client
  (``AskPermission`` the policy does not settle: answered by the ``answer_permission`` update);
- it **withdraws** what an earlier effect opened (``CancelModelCall``, ``CancelTools``,
  ``CancelWait``, ``CancelCompaction``, ``CancelStopHooks``): the activity or timer is cancelled
  and whatever it might still answer is dropped;
- it is **fire and forget**: ``PersistToolResult`` (an activity whose answer is not an event),
  ``AcknowledgeCommands`` and ``Emit`` (kept in the workflow, readable by queries);
- ``Finish`` ends the turn.

:func:`opens` and :func:`withdraws` give the key of what an effect opens or withdraws; the
workflow keeps one task per open key. This is the matching a driver loop needs from any world;
when steploop grows one driver loop over pluggable worlds, this table is what the Temporal
world contributes to it.

Times: every event carries a time that the history holds, never ``workflow.now()`` (a
workflow task's clock is not always the one its replay sees: a rejected update's speculative
task leaves no trace in the history). Activities stamp their events with the worker's clock
as they happen; a client's update or signal carries the client's clock; an answer the workflow
makes itself (a permission the policy settles, a failed activity) takes the time of the last
event stepped, and a timer's ``WaitElapsed`` that time plus the wait.

Values cross Temporal as plain JSON data (``reducer.serialize.unstructure``), never as pickles:
effects go to activities, events come back, the loop state travels through ``continue_as_new``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from reducer.effects import (
    AcknowledgeCommands,
    AskPermission,
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Effect,
    Emit,
    Finish,
    PersistToolResult,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from reducer.events import Event, PermissionAnswered
from reducer.serialize import structure, unstructure

__all__ = [
    "Key",
    "Kind",
    "decode_event",
    "decode_events",
    "encode",
    "kind_of",
    "opens",
    "policy_answer",
    "withdraws",
]

Key: TypeAlias = tuple[str, str]
"""What an open effect is known by: its kind and its id (``("tool", "1/toolu_001")``)."""

Kind: TypeAlias = Literal["opens", "withdraws", "fire_and_forget", "finish"]


def _tool_key(generation: int, tool_use_id: str) -> Key:
    return ("tool", f"{generation}/{tool_use_id}")


def opens(effect: Effect) -> Key | None:
    """The key of what ``effect`` opens (it answers later with events), else None."""
    match effect:
        case CallModel(call_id=cid):
            return ("model", str(cid))
        case StartTool(generation=g, tool_use_id=tid):
            return _tool_key(g, tid)
        case AskPermission(generation=g, tool_use_id=tid):
            return ("permission", f"{g}/{tid}")
        case Wait(wait_id=wid):
            return ("wait", str(wid))
        case Compact(compact_id=cid):
            return ("compact", str(cid))
        case RunStopHooks(hooks_id=hid):
            return ("hooks", str(hid))
        case SummarizeToolUse(summary_id=sid):
            return ("summary", str(sid))
        case _:
            return None


def withdraws(effect: Effect) -> tuple[Key, ...]:
    """The keys ``effect`` withdraws (cancels), else ()."""
    match effect:
        case CancelModelCall(call_id=cid):
            return (("model", str(cid)),)
        case CancelTools(generation=g, tool_use_ids=ids):
            return tuple(_tool_key(g, tid) for tid in ids)
        case CancelWait(wait_id=wid):
            return (("wait", str(wid)),)
        case CancelCompaction(compact_id=cid):
            return (("compact", str(cid)),)
        case CancelStopHooks(hooks_id=hid):
            return (("hooks", str(hid)),)
        case _:
            return ()


def kind_of(effect: Effect) -> Kind:
    """Which of the four kinds of the module docstring ``effect`` is."""
    if isinstance(effect, Finish):
        return "finish"
    if opens(effect) is not None:
        return "opens"
    if withdraws(effect):
        return "withdraws"
    assert isinstance(effect, (PersistToolResult, AcknowledgeCommands, Emit)), effect
    return "fire_and_forget"


def policy_answer(effect: AskPermission, decision: str, at_ms: int) -> PermissionAnswered | None:
    """The answer a policy decision gives at once ("allow", "deny"), or None for "ask"."""
    if decision == "allow":
        return PermissionAnswered(
            generation=effect.generation,
            tool_use_id=effect.tool_use_id,
            decision="allow",
            at_ms=at_ms,
        )
    if decision == "deny":
        return PermissionAnswered(
            generation=effect.generation,
            tool_use_id=effect.tool_use_id,
            decision="deny_by_rule",
            reason="The permission policy denies this tool.",
            at_ms=at_ms,
        )
    return None


def encode(value: Any) -> dict[str, Any]:
    """Plain JSON data (an object) for an effect, event, terminal, state, session or usage."""
    data = unstructure(value)
    if not isinstance(data, dict):
        raise TypeError(f"expected a steploop value, got {type(value).__name__}")
    return data


def decode_event(data: Any) -> Event:
    event: Event = structure(data, Event)
    return event


def decode_events(data: Any) -> list[Event]:
    if not isinstance(data, list):
        raise TypeError(f"expected a list of events, got {type(data).__name__}")
    return [decode_event(d) for d in data]
