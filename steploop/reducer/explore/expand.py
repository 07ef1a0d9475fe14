"""One node's expansion: every move of the alphabet stepped and checked (specs/ ABS-3).

:class:`Expander` is what the search does per node, apart from the graph: it steps each move's
events, runs every invariant on every transition and computes the successor's key. It returns
the edges in the alphabet's order and touches nothing shared, so the serial search and the
worker processes of a parallel one (:mod:`steploop.effects.explore_workers`) run the same
code, and the search merges the edges in the same order either way.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import NamedTuple

from steploop.reducer.config import LoopConfig
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import Event, Interrupted, ModelCallFailed, ModelResponseEnded
from steploop.reducer.explore.abstraction import Abstraction
from steploop.reducer.explore.invariants import Invariant, NothingAfterFinish
from steploop.reducer.explore.observation import Observation
from steploop.reducer.explore.state_graph import BLOCKING, PROGRESS
from steploop.reducer.explore.world import Move, World, moves
from steploop.reducer.machine import advance
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import StopHookBlocking

Hits = list[tuple[int, bool, str | None]]
"""The invariants a transition exercised or broke: (index, exercised, violation), in order."""


class Edge(NamedTuple):
    """One move from a node: what the search records and where it leads.

    ``records``: the hits of each of its transitions, in order; ``error``: the text of an
    exception ``step()`` raised (then the rest is empty); ``state``: the successor (None when
    it stays in a worker process, or after an error); ``key``: the successor's node key;
    ``move`` may be None when it comes from a worker and no one needs it (the successor is
    known and nothing broke).
    """

    move: Move | None
    label: str
    records: list[Hits]
    error: str | None
    state: LoopState | None
    key: Hashable
    mons: tuple[Hashable, ...]
    answers: int
    flags: int
    calls: int
    token: int = -1  # a worker's handle on the successor it keeps (parallel search)
    local: int = -1  # a worker's number for the key; the key itself only the first time


_Checked = tuple[LoopState, Observation, tuple[Hashable, ...], Hits | None]
"""One event's step and checks: (next state, observation, monitors, hits)."""


class Expander:
    """Expands nodes for one exploration: the config, the invariants and the key."""

    def __init__(self, config: LoopConfig, invs: Sequence[Invariant], absn: Abstraction) -> None:
        self.config = config
        self.invs = tuple(invs)
        self.absn = absn
        self.checks = tuple(inv.check for inv in self.invs)

    def check(
        self, mons: tuple[Hashable, ...], o: Observation
    ) -> tuple[tuple[Hashable, ...], Hits | None]:
        """Every invariant on one observation: the new monitors and the hits (None: none)."""
        # check_step and record in one loop, without per-step tuples (8% of a transition)
        new_mons: list[Hashable] = []
        hits: Hits | None = None
        i = 0
        for chk, mon in zip(self.checks, mons, strict=True):
            m, ex, bad = chk(mon, o)
            new_mons.append(m)
            if ex or bad is not None:
                if hits is None:
                    hits = []
                hits.append((i, ex, bad))
            i += 1
        return tuple(new_mons), hits

    def expand(self, s: LoopState, mons0: tuple[Hashable, ...], alphabet: World) -> list[Edge]:
        """The edges of the node whose representative is ``s`` (not done), in move order."""
        config = self.config
        key_of = self.absn.key
        out: list[Edge] = []
        # moves that open with the same event object (the text block of
        # every reply, share its step and its checks; the invariants are counted per move)
        firsts_seen: dict[int, tuple[Event, _Checked]] = {}
        for mv in moves(s, config, alphabet):
            mons = mons0
            cur = s
            answers = 0
            flags = 0
            new_calls = 0
            records: list[Hits] = []
            error: str | None = None
            for k, ev in enumerate(mv.events):
                seen = firsts_seen.get(id(ev)) if k == 0 else None
                if seen is not None:
                    nxt, o, mons, hits = seen[1]
                else:
                    try:
                        nxt, fx, passed = advance(cur, ev, config)
                    except Exception as exc:  # specs/ M-5: only IllegalEvent, and never for these
                        error = f"step() raised {type(exc).__name__}: {exc}"
                        break
                    o = Observation(config, cur, ev, fx, nxt, passed)
                    mons, hits = self.check(mons, o)
                    if k == 0:  # the event is kept alive with its result, so its id stays its own
                        firsts_seen[id(ev)] = (ev, (nxt, o, mons, hits))
                if hits is not None:
                    records.append(hits)
                if o.current_call_event and isinstance(ev, (ModelResponseEnded, ModelCallFailed)):
                    answers += 1
                if o.progress:
                    flags |= PROGRESS
                if isinstance(o.continued, StopHookBlocking):
                    flags |= BLOCKING
                new_calls += len(o.calls)
                cur = nxt
            if error is not None:
                out.append(Edge(mv, mv.label, records, error, None, None, (), 0, 0, 0))
                continue
            akey = key_of(cur)
            key = akey if cur.phase == "done" else (akey, mons)
            out.append(Edge(mv, mv.label, records, None, cur, key, mons, answers, flags, new_calls))
        return out

    def probe_done(self, s: LoopState, mons: tuple[Hashable, ...]) -> Hits | None:
        """INV-12: after Finish, step() must refuse even an interrupt (legal in every other
        phase). The hits of the probe (every invariant but INV-12 reads as not exercised)."""
        probe = PROBE.events[0]
        try:
            nxt, fx, passed = advance(s, probe, self.config)
        except IllegalEvent:
            return None
        o = Observation(self.config, s, probe, fx, nxt, passed)
        hits: Hits = []
        for i, inv in enumerate(self.invs):
            if isinstance(inv, NothingAfterFinish):
                _, ex, bad = inv.check(mons[i], o)
                hits.append((i, ex, bad or "step() accepted an event after Finish"))
        return hits


PROBE = Move("probe:after_finish", (Interrupted(kind="hard"),))
"""The move of the INV-12 probe."""


#: What expanding one node gives: its edges, or an error (its text and the invariants hit).
NodeResult = list[Edge] | tuple[str, Hits | None]
