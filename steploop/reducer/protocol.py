"""The world protocol: which request each effect opens or withdraws, which request each event
answers, and what a state still waits for (specs/rules.md, W-PROTO-1 ... W-PROTO-5).

The machine talks to the world in *requests*. An effect that waits for the world opens one
(``CallModel`` a model call, ``StartTool`` a tool run, ...); the world answers it with events
(``ModelBlockReceived`` ... ``ModelResponseEnded``, ``ToolFinished``, ...); a cancel effect
withdraws open requests (``CancelTools`` withdraws the permission requests and the tool runs of
the tool_use ids it names). A request is named by its :data:`Key`: the tag of the effect that
opens it, then the ids that tell it from every other request of its kind::

    ("call_model", 3)                       ("ask_permission", 2, "toolu_01")
    ("start_tool", 2, "toolu_01")           ("wait", 1)      ("compact", 1)
    ("run_stop_hooks", 1)                   ("summarize_tool_use", 4)
    ("refresh_tools", 3)

:data:`REQUESTS` is the table every function here is compiled from: one row per kind of
request. The rest of steploop (the drivers in :mod:`steploop.reducer.drive`, the interpreter, exact and
counterfactual replay, resume, the explorer) asks these functions and keeps no scheme of its
own.

Three facts of the machine the table encodes:

- A model call is answered by any number of ``ModelBlockReceived`` and closed by exactly one
  ``ModelResponseEnded`` or ``ModelCallFailed``; every other request by exactly one event.
- ``CancelTools`` withdraws both the permission request and the tool run of each id it names:
  the machine lists a slot in ``CancelTools`` while it is ``asking`` or ``running`` and marks it
  done, so an answer to either that comes later is a discarded late answer (R-TOOL-8).
- At most one summary is outstanding: a ``SummarizeToolUse`` supersedes (withdraws) the earlier
  one, whose answer the machine ignores (R-SUM-1).

Events nobody asked for (:data:`UNASKED`): ``Interrupted`` and ``CommandQueued``, which the
world may send in every phase but ``done``, and ``MessagesInserted``, which it may send while a
model call has produced nothing yet (R-INSERT-1).

:func:`awaiting` reads the requests a state still waits for off the state alone, in a fixed
order (the model call, the tool slots in order, the wait / compaction / stop hooks, the
summary): exactly the requests whose answer the machine accepts now as the answer it waits for.
:class:`Ledger` follows a run from outside (the effects issued, the events delivered) and says
what is wrong with an event: the conformance check of a world (W-PROTO-5) is built on it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from typing import Any, Final, TypeAlias

import attrs

from steploop.reducer._replace import evolve
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelRefreshTools,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Effect,
    RefreshTools,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.state import LoopState

__all__ = [
    "REQUESTS",
    "UNASKED",
    "Key",
    "Ledger",
    "RequestKind",
    "answers",
    "awaiting",
    "closes",
    "kind_of",
    "not_withdrawn",
    "opens",
    "readdress",
    "unasked",
    "withdrawn",
    "withdraws",
    "withdraws_any",
]

Key: TypeAlias = tuple[Any, ...]
"""A request: the tag of the effect that opens it, then its ids (see the module docstring)."""


@attrs.frozen
class RequestKind:
    """One kind of request: the effect that opens it, the events that answer it, the effect
    that withdraws it.

    ``ids`` are the fields that name a request of this kind, in key order; the effect, every
    answering event and the cancel carry them under the same names (``CancelTools`` carries
    ``tool_use_ids``, one request per id). ``readdress`` are the ids a recorded answer is given
    anew when it answers another request of the kind (counterfactual replay): every id but the
    tool_use id, which comes from the model."""

    tag: str
    effect: type
    ids: tuple[str, ...]
    answered_by: tuple[type, ...]
    closed_by: tuple[type, ...]
    withdrawn_by: type | None
    exclusive: bool = False  # opening one withdraws the open one of the same kind
    readdress: tuple[str, ...] = ()


REQUESTS: Final[tuple[RequestKind, ...]] = (
    RequestKind(
        "call_model",
        CallModel,
        ("call_id",),
        (ModelBlockReceived, ModelResponseEnded, ModelCallFailed),
        (ModelResponseEnded, ModelCallFailed),
        CancelModelCall,
        readdress=("call_id",),
    ),
    RequestKind(
        "ask_permission",
        AskPermission,
        ("generation", "tool_use_id"),
        (PermissionAnswered,),
        (PermissionAnswered,),
        CancelTools,
        readdress=("generation",),
    ),
    RequestKind(
        "start_tool",
        StartTool,
        ("generation", "tool_use_id"),
        (ToolFinished,),
        (ToolFinished,),
        CancelTools,
        readdress=("generation",),
    ),
    RequestKind(
        "wait",
        Wait,
        ("wait_id",),
        (WaitElapsed,),
        (WaitElapsed,),
        CancelWait,
        readdress=("wait_id",),
    ),
    RequestKind(
        "compact",
        Compact,
        ("compact_id",),
        (CompactionFinished, CompactionFailed),
        (CompactionFinished, CompactionFailed),
        CancelCompaction,
        readdress=("compact_id",),
    ),
    RequestKind(
        "run_stop_hooks",
        RunStopHooks,
        ("hooks_id",),
        (StopHooksFinished,),
        (StopHooksFinished,),
        CancelStopHooks,
        readdress=("hooks_id",),
    ),
    RequestKind(
        "summarize_tool_use",
        SummarizeToolUse,
        ("summary_id",),
        (ToolUseSummaryReady,),
        (ToolUseSummaryReady,),
        None,
        exclusive=True,
        readdress=("summary_id",),
    ),
    RequestKind(  # [R-REFRESH-1] named by the round's call (one refresh per tool round)
        "refresh_tools",
        RefreshTools,
        ("call_id",),
        (ToolsRefreshed,),
        (ToolsRefreshed,),
        CancelRefreshTools,
        readdress=("call_id",),
    ),
)

UNASKED: Final[tuple[type, ...]] = (Interrupted, CommandQueued, MessagesInserted)
"""The events the world may send unasked: the first two in every phase but ``done``, the
inserted messages while a model call has produced nothing (R-INSERT-1)."""


# ---------------------------------------------------------------------------------------------
# The table, compiled: one function per effect or event class (dict lookups, no isinstance
# chains; the interpreter asks for every effect and event).


def _namer(tag: str, ids: tuple[str, ...]) -> Callable[[Any], Key]:
    if len(ids) == 1:
        get1 = operator.attrgetter(ids[0])
        return lambda x: (tag, get1(x))
    get = operator.attrgetter(*ids)
    return lambda x: (tag, *get(x))


def _tools_namer(tags: tuple[str, ...]) -> Callable[[Any], tuple[Key, ...]]:
    def keys(e: CancelTools) -> tuple[Key, ...]:
        return tuple((tag, e.generation, t) for t in e.tool_use_ids for tag in tags)

    return keys


def _single(name: Callable[[Any], Key]) -> Callable[[Any], tuple[Key, ...]]:
    return lambda e: (name(e),)


_OPENS: dict[type, Callable[[Any], Key]] = {}
_ANSWERS: dict[type, Callable[[Any], Key]] = {}
_CLOSING: set[type] = set()
_WITHDRAWS: dict[type, Callable[[Any], tuple[Key, ...]]] = {}
_KINDS: dict[str, RequestKind] = {}
for _k in REQUESTS:
    _KINDS[_k.tag] = _k
    _OPENS[_k.effect] = _namer(_k.tag, _k.ids)
    for _ev in _k.answered_by:
        _ANSWERS[_ev] = _namer(_k.tag, _k.ids)
    _CLOSING.update(_k.closed_by)
_by_cancel: dict[type, list[RequestKind]] = {}
for _k in REQUESTS:
    if _k.withdrawn_by is not None:
        _by_cancel.setdefault(_k.withdrawn_by, []).append(_k)
for _cancel, _kinds in _by_cancel.items():
    if _cancel is CancelTools:
        _WITHDRAWS[_cancel] = _tools_namer(tuple(k.tag for k in _kinds))
    else:
        (_only,) = _kinds
        _WITHDRAWS[_cancel] = _single(_namer(_only.tag, _only.ids))
_EXCLUSIVE_EFFECTS: frozenset[type] = frozenset(k.effect for k in REQUESTS if k.exclusive)


def opens(effect: Effect) -> Key | None:
    """The request ``effect`` opens; None for an effect that waits for nothing (an Emit, a
    cancel, a persisted result, ...)."""
    name = _OPENS.get(effect.__class__)
    return None if name is None else name(effect)


def withdraws(effect: Effect) -> tuple[Key, ...]:
    """The requests a cancel effect withdraws (empty for every other effect). An exclusive
    request (a summary) is also withdrawn by the next one of its kind: see :func:`withdrawn`."""
    keys = _WITHDRAWS.get(effect.__class__)
    return () if keys is None else keys(effect)


def withdrawn(effect: Effect, key: Key) -> bool:
    """Whether ``effect`` withdraws the request ``key``, were it open: a cancel naming it, or
    the next request of an exclusive kind."""
    cls = effect.__class__
    if cls in _WITHDRAWS:
        return key in _WITHDRAWS[cls](effect)
    if cls in _EXCLUSIVE_EFFECTS:
        new = _OPENS[cls](effect)
        return key[0] == new[0] and key != new
    return False


def not_withdrawn(events: Iterable[Event], effect: Effect) -> list[Event]:
    """``events`` (answers waiting to be stepped) less those that answer a request ``effect``
    withdraws (W-DRIVE-2); events sent unasked stay. The order is kept."""
    return [ev for ev in events if (k := answers(ev)) is None or not withdrawn(effect, k)]


def withdraws_any(effect: Effect) -> bool:
    """Whether ``effect`` can withdraw a request at all (a cancel, or an exclusive request)."""
    return effect.__class__ in _WITHDRAWS or effect.__class__ in _EXCLUSIVE_EFFECTS


def answers(event: Event) -> Key | None:
    """The request ``event`` answers; None for an event the world sends unasked."""
    name = _ANSWERS.get(event.__class__)
    return None if name is None else name(event)


def closes(event: Event) -> bool:
    """Whether ``event`` is the last answer of its request (everything but a model block)."""
    return event.__class__ in _CLOSING


def unasked(event: Event) -> bool:
    """Whether the world may send ``event`` without being asked (an interrupt, a command)."""
    return isinstance(event, UNASKED)


def kind_of(key: Key) -> RequestKind:
    """The row of :data:`REQUESTS` for a request."""
    return _KINDS[key[0]]


def readdress(event: Event, effect: Effect) -> Event:
    """An answer recorded for one request, addressed to the request ``effect`` opens (its ids
    but the tool_use id). Raises ValueError if ``event`` does not answer that kind."""
    key = opens(effect)
    if key is None:
        raise ValueError(f"{type(effect).__name__} opens no request")
    kind = _KINDS[key[0]]
    if event.__class__ not in kind.answered_by:
        raise ValueError(f"{type(event).__name__} does not answer {kind.tag}")
    ids = {name: getattr(effect, name) for name in kind.readdress}
    return evolve(event, **ids)


# ---------------------------------------------------------------------------------------------
# What a state waits for


def awaiting(state: LoopState) -> tuple[Key, ...]:
    """The requests ``state`` still waits for, in a fixed order: the model call, the tool slots
    in slot order (a permission request while the slot is ``asking``, a tool run while it is
    ``running``), the wait, compaction, stop-hook run or tool-list refresh of the phase, the
    summary.

    Each is a request whose answer the machine accepts now as the answer it waits for (an
    answer to anything else is refused or discarded as late). Empty once the turn is done.
    """
    phase = state.phase
    if phase == "done":
        return ()
    r = state.round
    out: list[Key] = []
    if phase == "streaming" and not r.ended:
        out.append(("call_model", r.call_id))
    if phase in ("streaming", "running_tools", "draining"):
        gen = r.generation
        for sl in r.slots:
            if sl.status == "asking":
                out.append(("ask_permission", gen, sl.tool_use_id))
            elif sl.status == "running":
                out.append(("start_tool", gen, sl.tool_use_id))
    elif phase == "waiting_retry":
        out.append(("wait", r.pending_id))
    elif phase in ("compacting", "reactive_compacting"):
        out.append(("compact", r.pending_id))
    elif phase == "stop_hooks":
        out.append(("run_stop_hooks", r.pending_id))
    elif phase == "refreshing_tools":
        out.append(("refresh_tools", r.call_id))
    if state.summary_id and state.summary_text is None:
        out.append(("summarize_tool_use", state.summary_id))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Following a run from outside


class Ledger:
    """The requests of one run, followed from the effects issued and the events delivered.

    :meth:`issue` takes each effect ``step()`` returned, in order; :meth:`deliver` each event
    before it is stepped, and returns what is wrong with delivering it (None: nothing). ``open``
    holds the open requests with the effect that opened each, in the order they were opened;
    ``partial`` the model calls that have streamed part of their answer.
    """

    def __init__(self) -> None:
        self.open: dict[Key, Effect] = {}
        self.partial: set[Key] = set()
        self.withdrawn: set[Key] = set()
        self.closed: set[Key] = set()

    def issue(self, effects: Iterable[Effect]) -> None:
        for e in effects:
            if withdraws_any(e):
                for key in [k for k in self.open if withdrawn(e, k)]:
                    del self.open[key]
                    self.partial.discard(key)
                    self.withdrawn.add(key)
            opened = opens(e)
            if opened is not None:
                self.open[opened] = e

    def deliver(self, event: Event) -> str | None:
        """Record ``event`` as delivered; what is wrong with it, if anything."""
        key = answers(event)
        if key is None:
            return None  # unasked
        if key in self.open:
            if event.__class__ in _CLOSING:
                del self.open[key]
                self.partial.discard(key)
                self.closed.add(key)
            else:
                self.partial.add(key)
            return None
        if key in self.withdrawn:
            return f"answers {_show(key)}, which was withdrawn (a cancel not honoured)"
        if key in self.closed:
            return f"answers {_show(key)} again (it was already answered)"
        return f"answers {_show(key)}, which was never asked for"


def _show(key: Key) -> str:
    return f"{key[0]}({', '.join(repr(x) for x in key[1:])})"
