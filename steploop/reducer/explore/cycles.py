"""Cycle and path analysis of the explored graph: progress-free cycles (INV-13) as lassos, and
the longest progress-free path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence

from steploop.reducer.config import LoopConfig
from steploop.reducer.explore.abstraction import abstract_tag
from steploop.reducer.explore.report import Counterexample
from steploop.reducer.explore.state_graph import BLOCKING, PROGRESS, Graph
from steploop.reducer.explore.world import Move, World, moves
from steploop.reducer.machine import step


class Analysis:
    """Cycle and path analysis of the explored abstract graph."""

    def __init__(self, g: Graph, config: LoopConfig, world: World, deep: World | None) -> None:
        self.g = g
        self.config = config
        self.worlds = (world,) if deep is None else (world, deep)
        n = len(g.rep)
        self.np_scc = _tarjan(n, lambda u: [d for d, _, _, f in g.out[u] if not f & PROGRESS])
        self.spinning_edges = sum(
            1 for u in range(n) for _, _, a, f in g.out[u] if a and not f & PROGRESS
        )

    def _cycle(
        self,
        comp: list[int],
        ok: Callable[[int, int, int, int], bool],
        need: Callable[[int, int, int], bool],
        candidates: int = 16,
    ) -> tuple[int, list[str]] | None:
        """The shortest lasso through an SCC: over the ``candidates`` nodes reached first, the
        one whose path plus shortest cycle (through an edge satisfying ``need``) is shortest."""
        g = self.g
        best: tuple[int, int, int, list[str]] | None = None
        for entry in sorted(comp, key=lambda u: (g.depth[u], g.calls[u]))[:candidates]:
            if best is not None and g.depth[entry] >= best[0]:
                break
            cyc = self._cycle_at(comp, entry, ok, need)
            if cyc is None:
                continue
            rank = (g.depth[entry] + len(cyc), g.calls[entry])
            if best is None or rank < (best[0], best[1]):
                best = (rank[0], rank[1], entry, cyc)
        return None if best is None else (best[2], best[3])

    def _cycle_at(
        self,
        comp: list[int],
        entry: int,
        ok: Callable[[int, int, int, int], bool],
        need: Callable[[int, int, int], bool],
    ) -> list[str] | None:
        """The shortest cycle through ``entry`` inside the SCC that uses a ``need`` edge."""
        g = self.g
        members = set(comp)
        # forward BFS from entry, backward BFS to entry, both inside the SCC over ok edges
        fwd: dict[int, tuple[int, str] | None] = {entry: None}
        dist_from: dict[int, int] = {entry: 0}
        q = deque([entry])
        while q:
            u = q.popleft()
            for d, lab, a, f in g.out[u]:
                if d in members and ok(u, d, a, f) and d not in fwd:
                    fwd[d] = (u, lab)
                    dist_from[d] = dist_from[u] + 1
                    q.append(d)
        rev: dict[int, list[tuple[int, str]]] = {}
        for u in comp:
            for d, lab, a, f in g.out[u]:
                if d in members and ok(u, d, a, f):
                    rev.setdefault(d, []).append((u, lab))
        back: dict[int, tuple[int, str] | None] = {entry: None}
        dist_to: dict[int, int] = {entry: 0}
        q = deque([entry])
        while q:
            v = q.popleft()
            for u, lab in rev.get(v, []):
                if u not in back:
                    back[u] = (v, lab)
                    dist_to[u] = dist_to[v] + 1
                    q.append(u)
        best: tuple[int, int, str, int] | None = None
        for u in comp:
            if u not in fwd:
                continue
            for d, lab, a, f in g.out[u]:
                if d in members and ok(u, d, a, f) and need(d, a, f) and d in back:
                    cost = dist_from[u] + 1 + dist_to[d]
                    if best is None or cost < best[0]:
                        best = (cost, u, lab, d)
        if best is None:
            return None
        _, u, lab, d = best
        labels: list[str] = []
        x = u
        while fwd[x] is not None:
            p, lb = fwd[x]  # type: ignore[misc]
            labels.append(lb)
            x = p
        labels.reverse()
        labels.append(lab)
        x = d
        while back[x] is not None:
            nx, lb = back[x]  # type: ignore[misc]
            labels.append(lb)
            x = nx
        return labels

    def progress_free_lasso(self) -> tuple[int, list[str]] | None:
        """The shortest-to-reach progress-free cycle that makes a model call, if any."""
        g = self.g
        found: list[tuple[tuple[int, int], tuple[int, list[str]]]] = []
        for comp in self.np_scc:
            members = set(comp)
            spinning = any(
                d in members and a and not f & PROGRESS for u in comp for d, _, a, f in g.out[u]
            )
            if not spinning:
                continue
            cyc = self._cycle(comp, lambda u, d, a, f: not f & PROGRESS, lambda d, a, f: a > 0)
            if cyc is not None:
                found.append((_rank(g, cyc)[:2], cyc))
        if not found:
            return None
        found.sort(key=lambda x: x[0])
        return found[0][1]

    def blocking_cycle(self) -> tuple[int, list[str]] | None:
        """A cycle through a stop_hook_blocking edge (progress-free ones first)."""
        g = self.g

        def non_progress(u: int, d: int, a: int, f: int) -> bool:
            return not f & PROGRESS

        def any_edge(u: int, d: int, a: int, f: int) -> bool:
            return True

        every = _tarjan(len(g.rep), lambda u: [d for d, _, _, _ in g.out[u]])
        passes: list[tuple[list[list[int]], Callable[[int, int, int, int], bool]]] = [
            (self.np_scc, non_progress),
            (every, any_edge),
        ]
        for sccs, ok in passes:
            best = None
            for comp in sccs:
                members = set(comp)
                if not any(
                    d in members and f & BLOCKING and ok(u, d, a, f)
                    for u in comp
                    for d, _, a, f in g.out[u]
                ):
                    continue
                cyc = self._cycle(comp, ok, lambda d, a, f: bool(f & BLOCKING))
                if cyc is not None and (best is None or _rank(g, cyc) < _rank(g, best)):
                    best = cyc
            if best is not None:
                return best
        return None

    def longest_progress_free(self) -> tuple[int | None, tuple[int, list[str]] | None]:
        """Most model answers on a path without progress; None when a lasso makes it unbounded."""
        g = self.g
        comp_of: dict[int, int] = {}
        for ci, comp in enumerate(self.np_scc):
            for u in comp:
                comp_of[u] = ci
        best: list[int] = [0] * len(self.np_scc)
        choice: list[tuple[int, int, str] | None] = [None] * len(self.np_scc)
        # Tarjan emits SCCs sinks first: successors are final before their predecessors.
        for ci, comp in enumerate(self.np_scc):
            for u in comp:
                for d, lab, a, f in g.out[u]:
                    if f & PROGRESS:
                        continue
                    cd = comp_of[d]
                    if cd == ci:
                        if a:
                            return None, None
                        continue
                    val = a + best[cd]
                    if val > best[ci] or (choice[ci] is None and val == best[ci] and a):
                        best[ci] = val
                        choice[ci] = (u, d, lab)
        if not best:
            return 0, None
        top = max(
            range(len(best)), key=lambda ci: (best[ci], -min(g.depth[u] for u in self.np_scc[ci]))
        )
        if best[top] == 0:
            return 0, None
        # walk the choices, joining them by paths inside each SCC
        start_node = min(self.np_scc[top], key=lambda u: (g.calls[u], g.depth[u]))
        labels: list[str] = []
        cur = start_node
        ci = top
        while choice[ci] is not None:
            u, d, lab = choice[ci]  # type: ignore[misc]
            labels.extend(self._inside(ci, cur, u, comp_of))
            labels.append(lab)
            cur = d
            ci = comp_of[d]
        return best[top], (start_node, labels)

    def _inside(self, ci: int, a: int, b: int, comp_of: dict[int, int]) -> list[str]:
        if a == b:
            return []
        g = self.g
        prev: dict[int, tuple[int, str] | None] = {a: None}
        q = deque([a])
        while q:
            u = q.popleft()
            if u == b:
                break
            for d, lab, _, f in g.out[u]:
                if not f & PROGRESS and comp_of.get(d) == ci and d not in prev:
                    prev[d] = (u, lab)
                    q.append(d)
        out: list[str] = []
        x = b
        while prev.get(x) is not None:
            p, lb = prev[x]  # type: ignore[misc]
            out.append(lb)
            x = p
        out.reverse()
        return out


def _rank(g: Graph, cyc: tuple[int, list[str]]) -> tuple[int, int, int]:
    """Lassos compare by total moves (path + loop), then model calls to the loop."""
    e = cyc[0]
    return (g.depth[e] + len(cyc[1]), g.calls[e], len(cyc[1]))


def _tarjan(n: int, succ: Callable[[int], Iterable[int]]) -> list[list[int]]:
    """Strongly connected components (iterative Tarjan), emitted sinks first."""
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    out: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work: list[tuple[int, Iterable[int]]] = [(root, iter(succ(root)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on[root] = True
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on[w] = True
                    work.append((w, iter(succ(w))))
                    advanced = True
                    break
                if on[w]:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp: list[int] = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def concrete_path(
    a: Analysis,
    node: int,
    labels: Sequence[str],
    inv_id: str,
    text: str,
    loop: bool = False,
) -> Counterexample:
    """Turn an abstract path (node + move labels) into concrete events: the path to the node,
    then each label's move recomputed from the concrete state reached so far (labels name a
    move independently of ids, so the loop of a lasso can be fed again and again)."""
    g = a.g
    prefix = g.path(node)
    s = g.state(node)
    out: list[Move] = []
    for lab in labels:
        mv = None
        for w in a.worlds:
            mv = next((m for m in moves(s, a.config, w) if m.label == lab), None)
            if mv is not None:
                break
        if mv is None:  # pragma: no cover - labels come from the same generator
            break
        for ev in mv.events:
            s, _ = step(s, ev, a.config)
        out.append(mv)
    events = tuple(ev for mv in prefix for ev in mv.events)
    loop_events = tuple(ev for mv in out for ev in mv.events)
    return Counterexample(
        config=a.config,
        request=g.request,
        session=g.session,
        events=events + loop_events,
        labels=tuple(m.label for m in prefix) + tuple(m.label for m in out),
        invariant=inv_id,
        explanation=text,
        loop_start=len(events) if loop else None,
        loop_move=len(prefix) if loop else None,
    )


def lasso_cex(a: Analysis, cyc: tuple[int, list[str]], inv_id: str, lead: str) -> Counterexample:
    node, labels = cyc
    s = a.g.state(node)
    text = (
        f"{lead}from phase {s.phase} (after {abstract_tag(s.transition) or 'start'}) the moves "
        f"{' → '.join(labels)} lead back to the same abstract state"
    )
    return concrete_path(a, node, labels, inv_id, text, loop=True)
