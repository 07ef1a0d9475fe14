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

Which request an effect opens and which it withdraws is the world protocol's
(:mod:`steploop.reducer.protocol`: ``opens``, ``withdrawn``; the same keys every world uses); the
workflow keeps one task, or one pending question, per open key. The loop is not the
workflow's: the workflow is a world of :mod:`steploop.reducer.drive` (``drive_async``, the pulled form),
whose ``perform`` does what this table says and whose ``next_event`` awaits the next answer
Temporal's futures, timers and handlers bring.

Times: every event carries a time that the history holds, never ``workflow.now()`` (a
workflow task's clock is not always the one its replay sees: a rejected update's speculative
task leaves no trace in the history). Activities stamp their events with the worker's clock
as they happen; a client's update or signal carries the client's clock; an answer the workflow
makes itself (a permission the policy settles, a failed activity) takes the time of the last
event stepped, and a timer's ``WaitElapsed`` that time plus the wait. What those answers hold
is the answering layer's (:mod:`steploop.effects.answer`), as in every world.

Values cross Temporal as plain JSON data (``steploop.reducer.serialize.unstructure``), never as pickles:
effects go to activities, events come back, the loop state travels through ``continue_as_new``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias

from steploop.reducer.effects import (
    AcknowledgeCommands,
    Effect,
    Emit,
    Finish,
    PersistToolResult,
)
from steploop.reducer.events import Event
from steploop.reducer.protocol import Key, opens, withdrawn, withdraws, withdraws_any
from steploop.reducer.serialize import structure, unstructure

__all__ = [
    "Key",
    "Kind",
    "decode_event",
    "decode_events",
    "encode",
    "kind_of",
    "opens",
    "withdrawn",
    "withdraws",
    "withdraws_any",
]

Kind: TypeAlias = Literal["opens", "withdraws", "fire_and_forget", "finish"]


def kind_of(effect: Effect) -> Kind:
    """Which of the four kinds of the module docstring ``effect`` is."""
    if isinstance(effect, Finish):
        return "finish"
    if opens(effect) is not None:
        return "opens"
    if withdraws_any(effect):
        return "withdraws"
    assert isinstance(effect, (PersistToolResult, AcknowledgeCommands, Emit)), effect
    return "fire_and_forget"


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
