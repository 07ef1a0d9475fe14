"""The search: breadth first in (model calls, moves) over the abstract states, two tiers
(specs/ ABS-3), every invariant checked on every transition.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Final, Protocol, TypeAlias

import attrs

from steploop.reducer import collector
from steploop.reducer.config import LoopConfig
from steploop.reducer.explore.abstraction import Abstraction
from steploop.reducer.explore.cycles import Analysis, concrete_path, lasso_cex
from steploop.reducer.explore.expand import PROBE, Edge, Expander, NodeResult
from steploop.reducer.explore.invariants import (
    Invariant,
    NoProgressFreeCycle,
    StopHookCap,
    catalogue,
    check_step,
    expected_breaks,
    initial_monitors,
)
from steploop.reducer.explore.observation import Observation
from steploop.reducer.explore.report import Counterexample, ExploreProgress, InvariantResult, Report
from steploop.reducer.explore.state_graph import Graph
from steploop.reducer.explore.world import Move, World
from steploop.reducer.machine import begin
from steploop.reducer.state import LoopState, Request, Session

_Checked = tuple[
    LoopState, Observation, tuple[Hashable, ...], "list[tuple[int, bool, str | None]] | None"
]
"""One event's step and checks: (next state, observation, monitors, exercised or broken)."""

DEFAULT_ROUNDS: Final = 3
"""The CI bound: the full alphabet within 3 model calls per path, then the deep tier
(``steploop check`` and the suite use it; specs/ ABS-3)."""

LAYER_BATCH: Final = 512
"""The most nodes a parallel search hands its workers at once (specs/ ABS-4)."""


class Workers(Protocol):
    """Who expands a parallel search's nodes (:func:`explore`'s ``workers``): the process pool
    of :mod:`steploop.effects.explore_workers`, or one of a runtime's own. ``run_layer``
    expands a batch of one (calls, depth) layer, each node's result then in ``results``;
    ``node_of`` finds where an edge leads (None: a new node, then ``adopt``-ed)."""

    results: dict[int, NodeResult]

    def run_layer(self, batch: Sequence[tuple[int, tuple[Hashable, ...], int]]) -> None: ...

    def node_of(self, producer_node: int, e: Edge, known: dict[Hashable, int]) -> int | None: ...

    def adopt(self, node: int, producer_node: int, token: int, layer: tuple[int, int]) -> None: ...

    def close(self) -> None: ...


WorkersFactory: TypeAlias = Callable[[Expander, tuple[World, ...], int, LoopState], Workers]
"""Makes the :class:`Workers` of one search: (expander, the two tiers' alphabets, the root
node, its state)."""

DEFAULT_REQUEST: Final = Request(prompt="Fix the failing test")
"""The explorer's user turn. Pass a request with a ``token_budget`` to explore budget
continuations too (the suite does, at a smaller bound)."""

# =============================================================================================
# The search
# =============================================================================================

DEEP_WORLD: Final = World(
    max_tools=1,
    tool_kinds=("unsafe",),
    tool_outcomes=("ok",),
    permissions=("allow",),
    failures=("prompt_too_long", "media"),
    interrupts=(),
    pauses=("low",),
    pause_runs_only=True,
    refusals=False,
)
"""The deep tier's alphabet (specs/ ABS-3): the answers that move the round-level counters
(replies at every usage class, truncations, prompt-too-long and media errors, one tool call
that leads to next_turn, compaction and stop-hook outcomes). Retries, interrupts, permission
outcomes and tool interleavings, which play out inside a round, are left to the first tier."""

RETRY_DEEP_WORLD: Final = attrs.evolve(
    DEEP_WORLD, failures=("prompt_too_long", "media", "rate_limited", "stream_broken")
)
"""The deep alphabet with retries (the slow run): every retry chain in every round context."""


@collector.paused()
def explore(
    config: LoopConfig,
    *,
    rounds: int | None = DEFAULT_ROUNDS,
    deep_world: World | None = DEEP_WORLD,
    deep_rounds: int | None = None,
    request: Request | None = None,
    session: Session | None = None,
    world: World | None = None,
    invariants: Sequence[Invariant] | None = None,
    max_states: int | None = None,
    on_progress: Callable[[ExploreProgress], None] | None = None,
    progress_every: int = 2_000,
    workers: WorkersFactory | None = None,
) -> Report:
    """Explore every abstract state reachable from ``start(request, config, session)``.

    Two tiers (specs/ ABS-3): a state reached within ``rounds`` model calls is expanded with
    the full alphabet ``world``; a state reached later, with ``deep_world`` up to
    ``deep_rounds`` model calls. ``rounds=None`` uses the full alphabet everywhere with no
    bound (the whole graph; affordable only for small alphabets); ``deep_world=None`` stops at
    ``rounds``.

    Args:
        config: the machine's config.
        rounds: the bound on model calls per path for the full alphabet.
        deep_world: the alphabet beyond ``rounds`` (default :data:`DEEP_WORLD`).
        deep_rounds: the bound on model calls for the deep tier (None: none).
        request: the user turn (default :data:`DEFAULT_REQUEST`).
        session: the session the turn continues (default a new one).
        world: the full alphabet (default :class:`World`).
        invariants: the checks (default a fresh :func:`catalogue`).
        max_states: stop after this many abstract states (the report says it is incomplete).
        on_progress: called with an :class:`ExploreProgress` now and then.
        progress_every: expansions between two progress calls.
        workers: who expands the nodes besides this search (None: it does, alone); the
            report is the same either way (ABS-4). The process pool of
            :func:`steploop.effects.explore_workers.process_workers` is one: the reducer
            itself starts no process.

    Returns:
        The :class:`Report`: counts, per-invariant results with the shortest counterexample
        of every broken one, and the longest progress-free path.

    The cycle collector is paused while it runs (specs/ R-COST-4,
    :func:`steploop.reducer.collector.paused`): the graph it keeps is all long-lived.
    """
    request = request or DEFAULT_REQUEST
    world = world or World()
    invs = tuple(invariants) if invariants is not None else catalogue()
    applicable = tuple(inv.applies(config) for inv in invs)
    absn = Abstraction(config)
    g = Graph(config, request, session)
    exercised = [0] * len(invs)
    violations = [0] * len(invs)
    firsts: list[Counterexample | None] = [None] * len(invs)
    errors: list[Counterexample] = []
    transitions = 0

    def cex(node: int, extra: Sequence[Move], inv_id: str, text: str) -> Counterexample:
        path = [*g.path(node), *extra]
        return Counterexample(
            config=config,
            request=request,
            session=session,
            events=tuple(ev for mv in path for ev in mv.events),
            labels=tuple(mv.label for mv in path),
            invariant=inv_id,
            explanation=text,
        )

    def record(
        exs: Iterable[bool], bads: Iterable[str | None], node: int, extra: Sequence[Move]
    ) -> None:
        for i, (ex, bad) in enumerate(zip(exs, bads, strict=True)):
            if not applicable[i]:
                continue
            if ex:
                exercised[i] += 1
            if bad is not None:
                violations[i] += 1
                if firsts[i] is None:
                    firsts[i] = cex(node, extra, invs[i].id, bad)

    def record_hits(
        hits: list[tuple[int, bool, str | None]], node: int, extra: Sequence[Move]
    ) -> None:
        """:func:`record` for the invariants that were exercised or broken, in catalogue order."""
        for i, ex, bad in hits:
            if not applicable[i]:
                continue
            if ex:
                exercised[i] += 1
            if bad is not None:
                violations[i] += 1
                if firsts[i] is None:
                    firsts[i] = cex(node, extra, invs[i].id, bad)

    # the start transition
    s0, fx0, passed0 = begin(request, config, session)
    o0 = Observation(config, None, None, fx0, s0, passed0)
    mons0, exs0, bads0 = check_step(invs, initial_monitors(invs, config, request, session), o0)
    root = g.add((absn.key(s0), mons0), s0, mons0, -1, None, len(o0.calls), 0)
    record(exs0, bads0, root, ())

    heap: list[tuple[int, int, int]] = [(g.calls[root], 0, root)]
    expander = Expander(config, invs, absn)
    pool = workers(expander, (world, deep_world or world), root, s0) if workers else None

    def layer_batch(
        calls: int, depth: int, n: int, full: bool
    ) -> list[tuple[int, tuple[Hashable, ...], int]]:
        """``n`` and the next nodes of its (calls, depth) layer the search will expand, in
        the order it pops them (a layer shares its tier and its bound), at most
        ``LAYER_BATCH`` (a search cut by ``max_states`` wastes no more)."""
        same = sorted(m for c, d, m in heap if c == calls and d == depth and not g.expanded[m])
        return [(m, g.mons[m], 0 if full else 1) for m in [n, *same[: LAYER_BATCH - 1]]]

    rounds_reached = 0
    cut = False
    expanded = 0
    layer = -1

    def report_progress(calls: int, deep: bool) -> None:
        assert on_progress is not None
        on_progress(
            ExploreProgress(
                states=len(g.rep),
                transitions=transitions,
                expanded=expanded,
                frontier=len(heap),
                rounds=calls,
                bound=deep_rounds if deep else rounds,
                deep=deep,
            )
        )

    try:
        while heap:
            calls, depth, n = heapq.heappop(heap)
            if g.expanded[n]:
                continue
            deep = rounds is not None and calls > rounds
            if deep and (deep_world is None or (deep_rounds is not None and calls > deep_rounds)):
                cut = True
                continue
            if max_states is not None and len(g.rep) >= max_states:
                cut = True
                break
            alphabet = deep_world if deep and deep_world is not None else world
            collector.sweep()
            g.expanded[n] = True
            expanded += 1
            rounds_reached = max(rounds_reached, calls)
            if on_progress is not None and (calls != layer or expanded % progress_every == 0):
                layer = calls
                report_progress(calls, deep)
            if pool is None:
                s = g.state(n)
                g.rep[n] = None  # rebuilt from the path if a counterexample needs it
                result: NodeResult = (
                    ("done", expander.probe_done(s, g.mons[n]))
                    if s.phase == "done"
                    else expander.expand(s, g.mons[n], alphabet)
                )
            else:  # the workers expand it (ABS-4: the serial branch above computes the same)
                if n not in pool.results:
                    pool.run_layer(layer_batch(calls, depth, n, alphabet is world))
                result = pool.results.pop(n)
            if isinstance(result, tuple):
                if result[1]:
                    record_hits(result[1], n, [PROBE])
                continue
            for e in result:
                for hits in e.records:
                    record_hits(hits, n, [e.move] if e.move is not None else [])
                transitions += 1
                if e.error is not None:
                    if len(errors) < 20:
                        assert e.move is not None
                        errors.append(cex(n, [e.move], "M-5", e.error))
                    continue
                dst = g.ids.get(e.key) if pool is None else pool.node_of(n, e, g.ids)
                if dst is None:
                    assert e.move is not None
                    dst = g.add(e.key, e.state, e.mons, n, e.move, calls + e.calls, depth + 1)
                    heapq.heappush(heap, (calls + e.calls, depth + 1, dst))
                    if pool is not None:
                        pool.adopt(dst, n, e.token, (calls + e.calls, depth + 1))
                g.out[n].append((dst, e.label, e.answers, e.flags))
    finally:
        if pool is not None:
            pool.close()
    complete = not cut and not heap
    if on_progress is not None:
        report_progress(rounds_reached, rounds is not None and rounds_reached > rounds)

    # --- graph checks: progress-free cycles (INV-13), unbounded stop-hook blocking (INV-7) ----
    analysis = Analysis(g, config, world, deep_world)
    lasso = analysis.progress_free_lasso()
    longest, witness_path = analysis.longest_progress_free()
    for i, inv in enumerate(invs):
        if not applicable[i]:
            continue
        if isinstance(inv, NoProgressFreeCycle):
            exercised[i] += analysis.spinning_edges
            if lasso is not None:
                violations[i] += 1
                firsts[i] = firsts[i] or lasso_cex(
                    analysis, lasso, inv.id, "a cycle without progress: "
                )
        if isinstance(inv, StopHookCap) and config.stop_hook_block_cap is None:
            loop = analysis.blocking_cycle()
            if loop is not None:
                violations[i] += 1
                firsts[i] = firsts[i] or lasso_cex(
                    analysis, loop, inv.id, "stop-hook blocking without a cap repeats forever: "
                )
    witness = None
    if witness_path is not None:
        start_node, labels = witness_path
        witness = concrete_path(
            analysis,
            start_node,
            labels,
            "longest",
            f"the longest progress-free path: {longest} model answers without progress",
        )
    known = expected_breaks(config)
    results = tuple(
        InvariantResult(
            id=inv.id,
            title=inv.title,
            applicable=applicable[i],
            exercised=exercised[i],
            violations=violations[i],
            counterexample=firsts[i],
            expected=known.get(inv.id),
        )
        for i, inv in enumerate(invs)
    )
    return Report(
        config=config,
        request=request,
        rounds_bound=rounds,
        deep_rounds_bound=deep_rounds,
        deep=rounds is not None and deep_world is not None,
        states=len(g.rep),
        transitions=transitions,
        expanded=expanded,
        rounds_reached=rounds_reached,
        complete=complete,
        results=results,
        errors=tuple(errors),
        longest_progress_free=longest,
        longest_progress_free_witness=witness,
    )
