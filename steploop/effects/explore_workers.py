"""The explorer's parallel search: worker processes expand the nodes, the search merges their
edges in the serial order, so the report is the serial one (specs/ ABS-3, ABS-4).

The search itself is the reducer's (:func:`steploop.reducer.explore.explore`, pure: it starts no
process); this module gives it processes: ``explore(..., workers=process_workers(2))``, as
``steploop check --processes 2`` does.

The search is breadth first in (model calls, moves): every node of the lowest (calls, depth)
layer can be expanded before any node it creates, because a created node lies one move
deeper. :class:`Workers` expands such a layer in the worker processes at once; the search then
takes each node's edges in the order it pops them, exactly as if it had expanded the node
itself (ids, edges, first counterexamples, progress figures: all the same).

A node's representative state stays in the worker that reached it, so states do not cross
processes except to even out a layer: when one worker would hold more than its share of the
nodes of a layer, a state is handed to the other (pickled). Workers are forked (the standard
library's ``multiprocessing``), so they share the config and the invariants of the parent
as they were when the search began.
"""

from __future__ import annotations

import pickle
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from steploop.reducer.collector import sweep
from steploop.reducer.explore.expand import Edge, Expander, NodeResult
from steploop.reducer.explore.search import WorkersFactory
from steploop.reducer.explore.world import World
from steploop.reducer.state import LoopState

if TYPE_CHECKING:  # multiprocessing is imported when a search starts workers (startup time)
    from multiprocessing.connection import Connection

"""A node's edges, or ("done", the hits of the INV-12 probe) for a node after Finish."""

_SLACK = 1
"""How many more nodes of a layer a worker may keep than another before it hands one over."""


def _worker(conn: Connection, expander: Expander, worlds: tuple[World, ...]) -> None:
    """A worker's loop: settle the last layer's successors, expand a layer, repeat."""
    store: dict[int, LoopState] = {}  # node -> representative, for the nodes this worker owns
    cand: dict[int, LoopState] = {}  # token -> successor of the last layer, not yet settled
    local: dict[Hashable, int] = {}  # node keys this worker has reported, numbered in order
    try:
        while True:
            msg = conn.recv()
            if msg[0] == "stop":
                return
            if msg[0] == "settle":
                keep, give = msg[1], msg[2]
                for token, node in keep:
                    store[node] = cand[token]
                out = [pickle.dumps(cand[t], protocol=pickle.HIGHEST_PROTOCOL) for t in give]
                cand.clear()
                conn.send(("ok", out))
                continue
            take, batch = msg[1], msg[2]
            for node, blob in take:
                store[node] = pickle.loads(blob)
            results: list[tuple[int, NodeResult]] = []
            token = 0
            for node, mons, which in batch:
                sweep()  # the search paused the collector before it forked us (R-COST-4)
                s = store.pop(node)
                if s.phase == "done":
                    results.append((node, ("done", expander.probe_done(s, mons))))
                    continue
                edges: list[Edge] = []
                for e in expander.expand(s, mons, worlds[which]):
                    if e.error is not None:
                        edges.append(e)
                        continue
                    lid = local.get(e.key)
                    if lid is None:  # new to this worker: the key, its move and a handle
                        lid = local[e.key] = len(local)
                        cand[token] = e.state  # type: ignore[assignment]
                        edges.append(e._replace(state=None, token=token, local=lid))
                        token += 1
                    else:  # the search knows the key by its number
                        broke = any(bad is not None for hits in e.records for _, _, bad in hits)
                        edges.append(
                            e._replace(
                                state=None,
                                key=None,
                                mons=(),
                                move=e.move if broke else None,
                                local=lid,
                            )
                        )
                results.append((node, edges))
            conn.send(("ok", results))
    except BaseException:  # reported to the parent, which raises it
        import traceback

        conn.send(("error", traceback.format_exc()))


class Workers:
    """The worker processes of one parallel search, and which of them holds which node."""

    def __init__(
        self, expander: Expander, count: int, worlds: tuple[World, ...], root: int, s0: LoopState
    ) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for _ in range(count):
            mine, theirs = ctx.Pipe()
            p = ctx.Process(target=_worker, args=(theirs, expander, worlds), daemon=True)
            p.start()
            theirs.close()
            self.conns.append(mine)
            self.procs.append(p)
        self.owner: dict[int, int] = {root: 0}
        # the last layer's successors each worker reported: (token, node) kept, tokens handed
        self.keep: list[list[tuple[int, int]]] = [[] for _ in range(count)]
        self.give: list[list[tuple[int, int, int]]] = [[] for _ in range(count)]
        self.layer_count: dict[tuple[int, int], list[int]] = {}
        self.take: list[list[tuple[int, bytes]]] = [[] for _ in range(count)]
        self.take[0].append((root, pickle.dumps(s0, protocol=pickle.HIGHEST_PROTOCOL)))
        self.results: dict[int, NodeResult] = {}
        self.from_worker: dict[int, int] = {}  # node -> the worker that expanded it
        # per worker: its key numbers -> node ids (it numbers keys in the order the search
        # merges its edges)
        self.local: list[list[int]] = [[] for _ in range(count)]

    def node_of(self, producer_node: int, e: Edge, known: dict[Hashable, int]) -> int | None:
        """The node ``e`` leads to, None when it is new (then :meth:`adopt` it)."""
        table = self.local[self.from_worker[producer_node]]
        if e.key is None:
            return table[e.local]
        dst = known.get(e.key)
        if dst is not None:
            table.append(dst)
        return dst

    def _ask(self, w: int, msg: tuple[Any, ...]) -> None:
        self.conns[w].send(msg)

    def _answer(self, w: int) -> Any:
        status, payload = self.conns[w].recv()
        if status != "ok":
            raise RuntimeError(f"an explorer worker failed:\n{payload}")
        return payload

    def adopt(self, node: int, producer_node: int, token: int, layer: tuple[int, int]) -> None:
        """``node`` is new: its state is the successor ``token`` of the worker that expanded
        ``producer_node``; keep it there unless that worker holds more than its share of
        ``layer``."""
        w = self.from_worker[producer_node]
        self.local[w].append(node)
        counts = self.layer_count.setdefault(layer, [0] * len(self.conns))
        other = min(range(len(counts)), key=counts.__getitem__)
        if counts[w] > counts[other] + _SLACK - 1:
            self.give[w].append((token, node, other))
            owner = other
        else:
            self.keep[w].append((token, node))
            owner = w
        counts[owner] += 1
        self.owner[node] = owner

    def run_layer(self, batch: Sequence[tuple[int, tuple[Hashable, ...], int]]) -> None:
        """Expand ``batch`` ((node, monitors, alphabet index)) in the workers; the results wait
        in :attr:`results`."""
        n = len(self.conns)
        if any(self.keep) or any(self.give):
            for w in range(n):
                self._ask(w, ("settle", self.keep[w], [t for t, _, _ in self.give[w]]))
            for w in range(n):
                blobs = self._answer(w)
                for (_, node, dest), blob in zip(self.give[w], blobs, strict=True):
                    self.take[dest].append((node, blob))
            self.keep = [[] for _ in range(n)]
            self.give = [[] for _ in range(n)]
        parts: list[list[tuple[int, tuple[Hashable, ...], int]]] = [[] for _ in range(n)]
        for item in batch:
            parts[self.owner.pop(item[0])].append(item)
        for w in range(n):
            self._ask(w, ("expand", self.take[w], parts[w]))
            self.take[w] = []
        for w in range(n):
            for node, result in self._answer(w):
                self.results[node] = result
                self.from_worker[node] = w

    def close(self) -> None:
        for conn in self.conns:
            try:
                conn.send(("stop",))
            except OSError:
                pass
        for p in self.procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        for conn in self.conns:
            conn.close()


def process_workers(count: int) -> WorkersFactory:
    """The parallel search's workers for :func:`~steploop.reducer.explore.explore`: ``count``
    forked processes (the serial search is ``workers=None``)."""

    def make(expander: Expander, worlds: tuple[World, ...], root: int, s0: LoopState) -> Workers:
        return Workers(expander, count, worlds, root, s0)

    return make
