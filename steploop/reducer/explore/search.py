"""The search: breadth first in (model calls, moves) over the abstract states, two tiers
(specs/ ABS-3), every invariant checked on every transition.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Final

import attrs

from steploop.reducer.config import LoopConfig
from steploop.reducer.errors import IllegalEvent
from steploop.reducer.events import Event, Interrupted, ModelCallFailed, ModelResponseEnded
from steploop.reducer.explore.abstraction import Abstraction
from steploop.reducer.explore.cycles import Analysis, concrete_path, lasso_cex
from steploop.reducer.explore.invariants import (
    Invariant,
    NoProgressFreeCycle,
    NothingAfterFinish,
    StopHookCap,
    catalogue,
    check_step,
    expected_breaks,
    initial_monitors,
)
from steploop.reducer.explore.observation import Observation
from steploop.reducer.explore.report import Counterexample, ExploreProgress, InvariantResult, Report
from steploop.reducer.explore.state_graph import BLOCKING, PROGRESS, Graph
from steploop.reducer.explore.world import Move, World, moves
from steploop.reducer.machine import advance, begin
from steploop.reducer.state import LoopState, Request, Session
from steploop.reducer.transitions import StopHookBlocking

_Checked = tuple[
    LoopState, Observation, tuple[Hashable, ...], "list[tuple[int, bool, str | None]] | None"
]
"""One event's step and checks: (next state, observation, monitors, exercised or broken)."""

DEFAULT_ROUNDS: Final = 3
"""The CI bound: the full alphabet within 3 model calls per path, then the deep tier
(``steploop check`` and the suite use it; specs/ ABS-3)."""

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

    Returns:
        The :class:`Report`: counts, per-invariant results with the shortest counterexample
        of every broken one, and the longest progress-free path.
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

    checks = tuple(inv.check for inv in invs)
    idx = range(len(invs))

    # the start transition
    s0, fx0, passed0 = begin(request, config, session)
    o0 = Observation(config, None, None, fx0, s0, passed0)
    mons0, exs0, bads0 = check_step(invs, initial_monitors(invs, config, request, session), o0)
    root = g.add((absn.key(s0), mons0), s0, mons0, -1, None, len(o0.calls), 0)
    record(exs0, bads0, root, ())

    heap: list[tuple[int, int, int]] = [(g.calls[root], 0, root)]
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
        g.expanded[n] = True
        expanded += 1
        rounds_reached = max(rounds_reached, calls)
        if on_progress is not None and (calls != layer or expanded % progress_every == 0):
            layer = calls
            report_progress(calls, deep)
        s = g.state(n)
        g.rep[n] = None  # rebuilt from the path if a counterexample needs it
        if s.phase == "done":
            _probe_done(config, invs, g.mons[n], s, n, record)
            continue
        mons0 = g.mons[n]
        # fast path: first_event (moves that open with the same event object, the text block of
        # every reply, share its step and its checks; the invariants are counted per move)
        firsts_seen: dict[int, tuple[Event, _Checked]] = {}
        for mv in moves(s, config, alphabet):
            mons = mons0
            cur = s
            answers = 0
            flags = 0
            new_calls = 0
            failed = False
            for k, ev in enumerate(mv.events):
                seen = firsts_seen.get(id(ev)) if k == 0 else None
                if seen is not None:
                    nxt, o, mons, hits = seen[1]
                else:
                    try:
                        nxt, fx, passed = advance(cur, ev, config)
                    except Exception as exc:  # specs/ M-5: only IllegalEvent, and never for these
                        if len(errors) < 20:
                            errors.append(
                                cex(n, [mv], "M-5", f"step() raised {type(exc).__name__}: {exc}")
                            )
                        failed = True
                        break
                    o = Observation(config, cur, ev, fx, nxt, passed)
                    # fast path: fused_check (check_step then record, without per-step tuples)
                    new_mons: list[Hashable] = []
                    hits = None
                    for i, chk, mon in zip(idx, checks, mons, strict=True):
                        m, ex, bad = chk(mon, o)
                        new_mons.append(m)
                        if ex or bad is not None:
                            if hits is None:
                                hits = []
                            hits.append((i, ex, bad))
                    mons = tuple(new_mons)
                    if k == 0:  # the event is kept alive with its result, so its id stays its own
                        firsts_seen[id(ev)] = (ev, (nxt, o, mons, hits))
                if hits is not None:
                    record_hits(hits, n, [mv])
                if o.current_call_event and isinstance(ev, (ModelResponseEnded, ModelCallFailed)):
                    answers += 1
                if o.progress:
                    flags |= PROGRESS
                if isinstance(o.continued, StopHookBlocking):
                    flags |= BLOCKING
                new_calls += len(o.calls)
                cur = nxt
            transitions += 1
            if failed:
                continue
            akey = absn.key(cur)
            key = akey if cur.phase == "done" else (akey, mons)
            dst = g.ids.get(key)
            if dst is None:
                dst = g.add(key, cur, mons, n, mv, calls + new_calls, depth + 1)
                heapq.heappush(heap, (calls + new_calls, depth + 1, dst))
            g.out[n].append((dst, mv.label, answers, flags))
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


def _probe_done(
    config: LoopConfig,
    invs: Sequence[Invariant],
    mons: tuple[Hashable, ...],
    s: LoopState,
    n: int,
    record: Callable[[Iterable[bool], Iterable[str | None], int, Sequence[Move]], None],
) -> None:
    """INV-12: after Finish, step() must refuse even an interrupt (legal in every other phase)."""
    probe = Interrupted(kind="hard")
    try:
        nxt, fx, passed = advance(s, probe, config)
    except IllegalEvent:
        return
    o = Observation(config, s, probe, fx, nxt, passed)
    exs = [False] * len(invs)
    bads: list[str | None] = [None] * len(invs)
    for i, inv in enumerate(invs):
        if isinstance(inv, NothingAfterFinish):
            _, exs[i], bads[i] = inv.check(mons[i], o)
            bads[i] = bads[i] or "step() accepted an event after Finish"
    record(exs, bads, n, [Move("probe:after_finish", (probe,))])
