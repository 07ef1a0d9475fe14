"""The machine as a picture: a Mermaid state diagram of phases and the 17 transitions.

Two drawings, never by hand:

- observed (:func:`phase_edges`): every (phase, event type) → (phase, transition) the machine
  takes from the start of a user turn under a fixed set of configs (:func:`GRAPH_CONFIGS`), so
  the diagram shows what the machine really does. The explorer (steploop/reducer/explore/)
  plays its world alphabet; from every state it reaches, the recorder also steps once with each
  event the alphabet leaves out because it never changes the course of a search (a queued
  command, a tool-use summary, a late answer of an earlier call or tool generation, messages
  the shell inserts before the model answers), and each config's turn is also started from a
  session whose context is in each token class (below, between and over the thresholds).
  ``steploop graph`` prints it; tests/reducer/test_graph.py snapshot-tests it against
  specs/machine.mmd;
- static (:func:`static_edges`): what the machine's tables allow, read off ``TABLE``,
  ``START``, ``OUTCOMES``, the round-end ladders and ``NEXT_ROUND`` of
  steploop/reducer/machine/table.py, without running anything. ``steploop graph --static``
  prints it; the tests hold the two to be the same edges, but for the few they list with the
  reason the bound does not reach them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from steploop.reducer.config import PROFILES, LoopConfig, claude_code_2_1_88, default, full
from steploop.reducer.conversation import Conversation
from steploop.reducer.events import (
    CommandQueued,
    Event,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    ToolFinished,
    ToolUseSummaryReady,
)
from steploop.reducer.explore import Invariant, Observation, Verdict, World, explore, usage_for
from steploop.reducer.machine import NEXT_ROUND, OUTCOMES, START, TABLE, Rung, advance, begin
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.state import Ids, LoopState, Request, Session
from steploop.reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES

__all__ = ["GRAPH_CONFIGS", "Edge", "mermaid", "phase_edges", "static_edges"]

Edge = tuple[str, str, str, str]  # (from phase, event type, to phase, transition tag or "")


def _tag(t: object) -> str:
    return str(getattr(t, "TAG", "")) if t is not None else ""


_LATE_USAGE = Usage(input_tokens=10, output_tokens=1)
_LARGE = "x" * 4 * 1_000_000  # an inserted attachment of about a million tokens


def _probes(s: LoopState) -> Iterator[Event]:
    """The events the explorer's alphabet leaves out that ``s`` accepts: a queued command; the
    outstanding tool-use summary, or a late copy of the last one; a late event of the previous
    model call and of the previous tool generation; messages inserted before the model answers
    (a short note, and an attachment larger than any context window)."""
    if s.phase == "done":
        return
    r = s.round
    yield CommandQueued(command_id="probe", text="and run the linter")
    if s.summary_id or s.ids.summary:
        yield ToolUseSummaryReady(summary_id=s.summary_id or s.ids.summary, summary="Read a.py")
    if r.call_id >= 2:
        late = r.call_id - 1
        yield ModelBlockReceived(call_id=late, block=TextBlock(text="late"))
        yield ModelResponseEnded(
            call_id=late, model=s.model, stop_reason="end_turn", usage=_LATE_USAGE
        )
        yield ModelCallFailed(call_id=late, kind="overloaded", status=529)
    if r.generation >= 2:
        yield ToolFinished(generation=r.generation - 1, tool_use_id="late", content="late")
        yield PermissionAnswered(generation=r.generation - 1, tool_use_id="late", decision="allow")
    if s.phase == "streaming" and not r.blocks and not r.ended:
        for text in ("a file changed", _LARGE):
            note = UserMessage(id="probe", content=(TextBlock(text=text),), is_meta=True)
            yield MessagesInserted(messages=(note,))


class _Recorder(Invariant):
    """Not a rule: an observer riding on the explorer that records phase edges, and those of
    one step with each of :func:`_probes`' events from every state the explorer reaches."""

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
        s = o.next
        for probe in _probes(s):
            nxt, _, passed = advance(s, probe, o.config)
            tag = _tag(passed[-1] if passed else None)
            self.edges.add((s.phase, type(probe).__name__, nxt.phase, tag))
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
    """The configs whose union of edges is drawn: every profile of ``PROFILES``, and the
    default profile with what its defaults leave out (max_turns and tools a hook stops, a token
    budget, an earlier history to fold with tool-use summaries on), and the 2.1.88 profile on a
    narrow world with max_turns (the refresh, then max_turns), and the full profile on it without
    the tool-list refresh (the blocking limit right after a tool round). Together they reach all 17 transitions."""
    work = Request(prompt="work")
    hooks = World(tool_outcomes=("ok", "error", "hook_stop"))
    summaries = default().with_overrides({"gates.tool_use_summaries": True})
    narrow = World(
        max_tools=1,
        tool_kinds=("safe",),
        failures=(),
        tool_outcomes=("ok",),
        permissions=("allow", "deny_by_rule"),
        stop_hooks=("pass",),
        interrupts=(),
        truncation=False,
        pauses=(),
        refusals=False,
    )
    no_refresh = full().with_overrides({"gates.tool_refresh": False})
    return [
        *((make(), work, World(), None) for make in PROFILES.values()),
        (default(max_turns=2), work, hooks, None),
        (default(), Request(prompt="work", token_budget=4_000), World(), None),
        (summaries, work, World(), _history(3)),
        (claude_code_2_1_88(max_turns=1), work, narrow, None),
        (no_refresh, work, narrow, None),
    ]


def _sized(cfg: LoopConfig, cls: str) -> Session:
    """A session whose context is in token class ``cls`` of ``cfg`` (ABS-2's usage classes)."""
    prompt = UserMessage(id="h0", content=(TextBlock(text="earlier"),))
    reply = AssistantMessage(
        id="h1",
        response_id="h1",
        model=cfg.model,
        content=(TextBlock(text="done"),),
        usage=usage_for(cfg, cls),
    )
    return Session(conversation=Conversation.of([prompt, reply]), ids=Ids(msg=100))


def phase_edges(configs: Iterable[GraphConfig] | None = None, rounds: int = 2) -> set[Edge]:
    """Every edge the machine takes within ``rounds`` model calls under ``configs``: the
    explorer's, the probes' (:func:`_probes`), and those of the turn's start from a session in
    each token class."""
    edges: set[Edge] = set()
    for cfg, req, world, session in configs if configs is not None else GRAPH_CONFIGS():
        for cls in ("low", "mid", "high"):
            s, _, passed = begin(req, cfg, _sized(cfg, cls))
            edges.add(("[*]", "start()", s.phase, _tag(passed[-1] if passed else None)))
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


def _exits(x: object, tag: str = "") -> set[tuple[str, str]]:
    """(phase, transition tag or "") for one entry of OUTCOMES, START or a rung's exits;
    ``tag``: the Continue whose next round the entry is an outcome of."""
    if isinstance(x, str):
        return {(x, tag)}
    if isinstance(x, Rung):  # a rung: every exit of it
        return {e for exit_ in x.exits for e in _exits(exit_, tag)}
    if isinstance(x, tuple):  # a ladder: every exit of its rungs, up to one that always waits
        out: set[tuple[str, str]] = set()
        for rung in x:
            out |= _exits(rung, tag)
            if rung.waits and not rung.gated:
                break
        return out
    if x in CONTINUE_TYPES:  # the next round: where NEXT_ROUND says it may wait or end
        return {e for after in NEXT_ROUND[x] for e in _exits(after, _tag(x))}
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
