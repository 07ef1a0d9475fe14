"""The machine as a picture: a Mermaid state diagram of phases and the 17 transitions.

Two drawings, never by hand:

- observed (:func:`phase_edges`): every (phase, event type) → (phase, transition) the explorer
  (steploop/reducer/explore/) sees from the start of a user turn under a fixed set of configs, so the
  diagram shows what the machine really does. ``steploop graph`` prints it;
  tests/reducer/test_graph.py snapshot-tests it against specs/machine.mmd;
- static (:func:`static_edges`): what the machine's tables allow, read off ``TABLE``,
  ``OUTCOMES`` and the round-end ladders of steploop/reducer/machine.py, without running anything.
  ``steploop graph --static`` prints it; the tests hold every observed edge to be one of its.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from steploop.reducer.config import LoopConfig, claude_code_2_1_88, default, full
from steploop.reducer.conversation import Conversation
from steploop.reducer.explore import Invariant, Observation, Verdict, World, explore
from steploop.reducer.machine import OUTCOMES, START, TABLE
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.state import Ids, Request, Session
from steploop.reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES, BlockingLimit

__all__ = ["GRAPH_CONFIGS", "Edge", "mermaid", "phase_edges", "static_edges"]

Edge = tuple[str, str, str, str]  # (from phase, event type, to phase, transition tag or "")


def _tag(t: object) -> str:
    return str(getattr(t, "TAG", "")) if t is not None else ""


class _Recorder(Invariant):
    """Not a rule: an observer riding on the explorer that records phase edges."""

    id = "GRAPH"
    title = "record the phase graph"

    def __init__(self, edges: set[Edge]) -> None:
        self.edges = edges

    def check(self, mon: Any, o: Observation) -> Verdict:
        before = o.state.phase if o.state is not None else "[*]"
        event = type(o.event).__name__ if o.event is not None else "start()"
        # the step's last transition (a Continue followed by blocking_limit is drawn as that)
        last = o.transitions[-1] if o.transitions else None
        self.edges.add((before, event, o.next.phase, _tag(last)))
        return mon, True, None


def _history(rounds: int) -> Session:
    """A session with ``rounds`` earlier tool rounds, so a collapse drain has something to fold."""
    msgs: list[Message] = [UserMessage(id="h0", content=(TextBlock(text="earlier"),))]
    for i in range(1, rounds + 1):
        use = ToolUseBlock(id=f"h{i}", name="Read", input={"file_path": "a.py"})
        msgs.append(AssistantMessage(id=f"h{i}a", response_id=f"h{i}", model="m", content=(use,)))
        msgs.append(
            UserMessage(id=f"h{i}u", content=(ToolResultBlock(tool_use_id=f"h{i}", content="x"),))
        )
    return Session(conversation=Conversation.of(msgs), ids=Ids(msg=100))


GraphConfig = tuple[LoopConfig, Request, World, Session | None]


def GRAPH_CONFIGS() -> list[GraphConfig]:
    """The configs whose union of edges is drawn (together they reach all 17 transitions)."""
    work = Request(prompt="work")
    hooks = World(tool_outcomes=("ok", "error", "hook_stop"))
    return [
        (default(max_turns=2), work, hooks, None),
        (default(), Request(prompt="work", token_budget=4_000), World(), None),
        (default(), work, World(), _history(3)),
        (claude_code_2_1_88(), work, World(), None),
        (full(), work, World(), None),
    ]


def phase_edges(configs: Iterable[GraphConfig] | None = None, rounds: int = 2) -> set[Edge]:
    """Every edge the explorer observes within ``rounds`` model calls under ``configs``."""
    edges: set[Edge] = set()
    for cfg, req, world, session in configs if configs is not None else GRAPH_CONFIGS():
        explore(
            cfg,
            rounds=rounds,
            deep_world=None,
            request=req,
            world=world,
            session=session,
            invariants=(_Recorder(edges),),
        )
    return edges


def _exits(x: object) -> set[tuple[str, str]]:
    """(phase, transition tag or "") for one entry of OUTCOMES or of a rung's exits."""
    if isinstance(x, str):
        return {(x, "")}
    if isinstance(x, tuple):  # a ladder: every exit of its rungs, up to one that waits
        out: set[tuple[str, str]] = set()
        for rung in x:
            for exit_ in rung.exits:
                out |= _exits(exit_)
            if rung.waits:
                break
        return out
    if x in CONTINUE_TYPES:  # the next round waits for compaction or the model, or blocks
        tag = _tag(x)
        return {("compacting", tag), ("streaming", tag), ("done", BlockingLimit.TAG)}
    if x in TERMINAL_TYPES:
        return {("done", _tag(x))}
    raise TypeError(f"not an outcome: {x!r}")


def static_edges() -> set[Edge]:
    """Every edge the machine's tables allow: start(), then each (phase, event type) of
    ``TABLE`` to the outcomes ``OUTCOMES`` lists for it (staying in the phase when it lists
    none)."""
    edges: set[Edge] = {("[*]", "start()", b, t) for x in START for b, t in _exits(x)}
    for phase, row in TABLE.items():
        outcomes = OUTCOMES.get(phase, {})
        for event in row:
            for x in outcomes.get(event, (phase,)):
                edges.update((phase, event.__name__, b, t) for b, t in _exits(x))
    return edges


def mermaid(edges: set[Edge]) -> str:
    """Render edges as a Mermaid ``stateDiagram-v2``: one arrow per (phase, phase) pair, labelled
    with the transitions taken on it (or, for arrows that take none, the event types)."""
    pairs: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for a, ev, b, t in edges:
        if a == b and not t:
            continue  # staying in a phase without a transition: not drawn
        evs, ts = pairs.setdefault((a, b), (set(), set()))
        (ts if t else evs).add(t or ev)
    order = {t.TAG: i for i, t in enumerate((*CONTINUE_TYPES, *TERMINAL_TYPES))}
    lines = ["stateDiagram-v2"]
    for (a, b), (evs, ts) in sorted(pairs.items()):
        label = (
            ", ".join(sorted(ts, key=lambda x: order.get(x, 99))) if ts else ", ".join(sorted(evs))
        )
        lines.append(f"    {a} --> {b}: {label}")
    lines.append("    done --> [*]")
    seen = {t for *_, t in edges if t}
    lines.append("    note right of done")
    lines.append("        Continue: " + ", ".join(t.TAG for t in CONTINUE_TYPES))
    lines.append("        Terminal: " + ", ".join(t.TAG for t in TERMINAL_TYPES))
    lines.append(f"        drawn: {len(seen)} of 17 transitions")
    lines.append("    end note")
    return "\n".join(lines) + "\n"
