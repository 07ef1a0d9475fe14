"""The explored abstract graph: nodes (one concrete representative each) and labelled edges."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final

from steploop.reducer.config import LoopConfig
from steploop.reducer.explore.world import Move
from steploop.reducer.machine import start, step
from steploop.reducer.state import LoopState, Request, Session

# edge flags
PROGRESS: Final = 1
BLOCKING: Final = 2


class Graph:
    """Nodes (abstract states, one concrete representative each) and labelled edges.

    A representative is dropped once its node is expanded (memory), and a parallel search
    keeps it in the worker that reached it (None here); :meth:`state` rebuilds it from the
    path, which is why every node keeps the move that first reached it.
    """

    def __init__(self, config: LoopConfig, request: Request, session: Session | None) -> None:
        self.config = config
        self.request = request
        self.session = session
        self.ids: dict[Hashable, int] = {}
        self.rep: list[LoopState | None] = []
        self.mons: list[tuple[Hashable, ...]] = []
        self.parent: list[int] = []
        self.via: list[Move | None] = []
        self.calls: list[int] = []
        self.depth: list[int] = []
        self.expanded: list[bool] = []
        # out edges per node: (dst, label, model answers, flags)
        self.out: list[list[tuple[int, str, int, int]]] = []

    def add(
        self,
        key: Hashable,
        s: LoopState | None,
        mons: tuple[Hashable, ...],
        parent: int,
        via: Move | None,
        calls: int,
        depth: int,
    ) -> int:
        n = len(self.rep)
        self.ids[key] = n
        self.rep.append(s)
        self.mons.append(mons)
        self.parent.append(parent)
        self.via.append(via)
        self.calls.append(calls)
        self.depth.append(depth)
        self.expanded.append(False)
        self.out.append([])
        return n

    def path(self, n: int) -> list[Move]:
        out: list[Move] = []
        while n >= 0 and self.via[n] is not None:
            mv = self.via[n]
            assert mv is not None
            out.append(mv)
            n = self.parent[n]
        out.reverse()
        return out

    def state(self, n: int) -> LoopState:
        s = self.rep[n]
        if s is not None:
            return s
        s, _ = start(self.request, self.config, self.session)
        for mv in self.path(n):
            for ev in mv.events:
                s, _ = step(s, ev, self.config)
        return s
