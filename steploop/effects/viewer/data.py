"""What the viewer's page shows, read from a trace and replayed (specs/rules.md VIEW-4).

The trace is walked through the machine (:class:`steploop.effects.trace.replay.Walk`, the
fold exact replay makes), so every model request is the real conversation this steploop
computes, not the length and digest the file keeps. Everything goes into one JSON-ready dict:

- ``msgs``: each message once (the canonical form, :func:`steploop.reducer.serialize.unstructure`);
  ``strs``: long tool results once (a message or an event refers to one as ``{"s": index}``);
- ``steps``: each step's event and effects (messages as ``{"ref": index}``; a model call as its
  request, ``{"req": index}``), which step answered each request and which request each event
  answers;
- ``reqs``: each model request as *runs* over the previous request: ``[0, a, b]`` keeps
  messages ``a..b-1`` of it, ``[1, m, ...]`` adds messages; a request that only appends is two
  runs, whatever the history's length, and the page rebuilds a whole conversation on demand;
- ``rounds``: per round its steps, transition and the rules behind it, tokens (the recorded
  usage and the machine's count, R-TOK-1), what each context layer removed, model calls,
  retries, waits, tools, hook blocks, times.

What each context layer removed is the estimated tokens (R-TOK-1's estimate of each message's
content) it took off the request, measured with the machine itself: at a step whose request was
rebuilt (not the previous conversation with messages appended), the same step is taken again
with none of snip, microcompact and collapse, then snip alone, then snip and microcompact (the
pipeline's order, R-ORDER-1): each layer's share is what the conversation lost when it was
switched on. The tool-result budget is counted from the results it replaced
(``PersistToolResult``: the full text against its preview), compaction from the conversation
before and after it. (The machine's own count, the ``est`` of a round, anchors on the last
usage the API reported, so a cleared result shows there only after the next response.)
"""

from __future__ import annotations

import functools
import os
from collections.abc import Collection, Iterator
from typing import Any

import attrs

from steploop.effects.trace import (
    EndRecord,
    ResumeRecord,
    StepRecord,
    TraceHeader,
    TraceReader,
)
from steploop.effects.trace.replay import Walk
from steploop.reducer import LoopConfig, LoopState, SteploopError, start, step
from steploop.reducer.context import persisted_preview
from steploop.reducer.conversation import Conversation, estimate_text
from steploop.reducer.effects import (
    CallModel,
    Compact,
    Effect,
    Emit,
    PersistToolResult,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    StopHooksFinished,
    ToolFinished,
)
from steploop.reducer.machine import RESETS, ROUND_END, TOOL_ROUND_END
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    Message,
    SystemMessage,
    ToolResultBlock,
    UserMessage,
)
from steploop.reducer.protocol import answers, opens
from steploop.reducer.serialize import unstructure
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
    BlockingLimit,
    CollapseDrainRetry,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ReactiveCompactRetry,
    StopHookBlocking,
    Transition,
)

__all__ = ["DEFINING_RULES", "LONG_TEXT", "TraceView", "rules_for", "trace_view"]

#: A tool result at least this long is kept once in ``strs`` (the event and the message share it).
LONG_TEXT = 512

#: The rule of specs/rules.md that defines each transition (tests/effects/test_viewer_data.py
#: holds it to the headings there).
DEFINING_RULES: dict[str, str] = {
    **{r.transition.TAG: r.rule for r in RESETS},
    "completed": "T-COMPLETED-1",
    "blocking_limit": "T-BLOCKING-1",
    "image_error": "T-IMAGE-1",
    "model_error": "T-MODEL-1",
    "aborted_streaming": "T-ABORT-STREAM-1",
    "aborted_tools": "T-ABORT-TOOLS-1",
    "prompt_too_long": "T-PTL-1",
    "stop_hook_prevented": "T-PREVENT-1",
    "hook_stopped": "T-HOOK-1",
    "max_turns": "T-MAXTURNS-1",
}

_CONTINUE_TAGS = frozenset(c.TAG for c in CONTINUE_TYPES)
_MESSAGES = (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage)
_RECOVERIES = frozenset(
    c.TAG
    for c in (
        ReactiveCompactRetry,
        MaxOutputTokensRecovery,
        MaxOutputTokensEscalate,
        CollapseDrainRetry,
    )
)
#: The layers measured by stepping again, in pipeline order, with the gate that switches each.
_PIPELINE = (
    ("snip", "history_snip"),
    ("microcompact", "time_based_microcompact"),
    ("collapse", "context_collapse"),
)


@functools.cache
def rules_for(tag: str) -> tuple[str, ...]:
    """The rules behind a transition: the one that defines it, then the round-end ladder rungs
    (``ROUND_END``, ``TOOL_ROUND_END``) that can end a round in it."""
    out = [DEFINING_RULES[tag]] if tag in DEFINING_RULES else []
    for rung in (*ROUND_END, *TOOL_ROUND_END):
        for x in rung.exits:
            if getattr(x, "TAG", None) == tag and rung.rule not in out:
                out.append(rung.rule)
    return tuple(out)


@attrs.define
class TraceView:
    """The page's data for one trace, and the real effects of the steps asked for."""

    data: dict[str, Any]
    effects_at: dict[int, tuple[Effect, ...]]  # step index -> the effects step() returned
    header: TraceHeader


def trace_view(
    path: str | os.PathLike[str],
    *,
    keep: Collection[int] = (),
    name: str | None = None,
    exact: bool = False,
) -> TraceView:
    """Read and replay ``path`` into the page's data; ``keep``: step indices whose real effects
    (with their conversations) are returned too (a comparison names what changed a request).

    Each step's effects are compared with the recorded ones, a conversation by its length;
    ``exact`` compares conversations by digest too (as exact replay does; it encodes every
    message once more). A trace that this steploop cannot step through (``step()`` rejects a
    recorded event) is shown as recorded, without conversations, and says so.

    Raises:
        TraceError: the trace is malformed (one line naming file and line).
    """
    from steploop.effects.trace import TraceError

    try:
        return _Builder(path, keep, replay=True, name=name, exact=exact).build()
    except TraceError as walked:
        view = _Builder(
            path, keep, replay=False, name=name, exact=exact
        ).build()  # a bad file raises again
        view.data["replay"] = {"ok": False, "step": None, "note": str(walked)}
        return view


class _Builder:
    def __init__(
        self,
        path: str | os.PathLike[str],
        keep: Collection[int],
        *,
        replay: bool,
        name: str | None,
        exact: bool,
    ) -> None:
        self.reader = TraceReader(path)
        self.same = _same_effects if not exact else _equal
        self.keep = frozenset(keep)
        self.replay = replay
        self.name = name
        self.msgs: list[Any] = []
        self.msg_index: dict[int, int] = {}
        self.alive: list[Message] = []  # keeps every tabled message (its id() stays unique)
        self.block_msg: dict[int, int] = {}  # id(block) -> the message that holds it
        self.strs: list[str] = []
        self.str_index: dict[str, int] = {}
        self.steps: list[dict[str, Any]] = []
        self.reqs: list[dict[str, Any]] = []
        self.prev_req: Conversation | None = None
        self.opened: dict[Any, tuple[int, int]] = {}  # request key -> (step pos, effect index)
        self.rounds: list[dict[str, Any]] = [_round(1, 0)]
        self.path: list[tuple[str, str, str]] = []
        self.effects_at: dict[int, tuple[Effect, ...]] = {}
        self.pending_compact: Compact | None = None
        self.freed = 0  # the state's tokens_freed after the step being encoded
        self.real = False  # the effects being encoded are step()'s, with real conversations
        self.first_mismatch: int | None = None

    # -- tables ------------------------------------------------------------------------------

    def text(self, s: str) -> Any:
        if len(s) < LONG_TEXT:
            return s
        k = self.str_index.get(s)
        if k is None:
            k = self.str_index[s] = len(self.strs)
            self.strs.append(s)
        return {"s": k}

    def message(self, m: Message) -> int:
        k = self.msg_index.get(id(m))
        if k is not None:
            return k
        d = unstructure(m)
        for b, block in zip(d.get("content", ()), getattr(m, "content", ()), strict=False):
            if isinstance(block, ToolResultBlock):
                b["content"] = self.text(block.content)
            self.block_msg.setdefault(id(block), len(self.msgs))
        k = self.msg_index[id(m)] = len(self.msgs)
        self.msgs.append(d)
        self.alive.append(m)
        return k

    # -- encoding ----------------------------------------------------------------------------

    def event(self, ev: Event) -> dict[str, Any]:
        if isinstance(ev, ModelBlockReceived):
            k = self.block_msg.get(id(ev.block))
            if k is not None:  # the block is shown once, in its message
                d: dict[str, Any] = unstructure(ev)
                d["block"] = {"msg": k}
                return d
        if isinstance(ev, (CompactionFinished, MessagesInserted)):
            dm: dict[str, Any] = unstructure(ev)
            dm["messages"] = [{"ref": self.message(m)} for m in ev.messages]
            return dm
        de: dict[str, Any] = unstructure(ev)
        if isinstance(ev, ToolFinished):
            de["content"] = self.text(ev.content)
        return de

    def effect(self, e: Effect, pos: int) -> dict[str, Any]:
        if isinstance(e, Emit):
            item = e.item
            if isinstance(item, _MESSAGES):
                return {"type": "emit", "item": {"ref": self.message(item)}}
            return {"type": "emit", "item": unstructure(item)}
        if isinstance(e, CallModel):
            return {
                "type": e.TAG,
                "call_id": e.call_id,
                "model": e.model,
                "max_tokens": e.max_tokens,
                "streaming": e.streaming,
                "query_source": e.query_source,
                "length": e.conversation.length,
                "req": self.request(e.conversation, pos) if self.real else None,
            }
        if isinstance(e, _CONV_EFFECTS):  # every field but the conversation, which is long
            d: dict[str, Any] = {"type": e.TAG, "length": e.conversation.length}
            for f in _fields(type(e)):
                if f != "conversation":
                    v = getattr(e, f)
                    d[f] = list(v) if isinstance(v, tuple) else v
            return d
        if isinstance(e, PersistToolResult):
            return {"type": e.TAG, "tool_use_id": e.tool_use_id, "content": self.text(e.content)}
        out: dict[str, Any] = unstructure(e)
        return out

    def request(self, conv: Conversation, pos: int) -> int:
        """The request's runs over the previous request (see the module docstring)."""
        prev = self.prev_req
        runs: list[list[int]]
        if prev is not None and conv is prev:
            runs = [[0, 0, prev.length]]
        elif prev is not None and _extends(conv, prev):
            added: list[int] = []
            node: Conversation | None = conv
            while node is not None and node is not prev:
                assert node.last is not None
                added.append(self.message(node.last))
                node = node.prev
            added.reverse()
            runs = [[0, 0, prev.length], [1, *added]] if prev.length else [[1, *added]]
        else:
            runs = self._rebuilt(conv)
        self.prev_req = conv
        k = len(self.reqs)
        self.reqs.append(
            {
                "pos": pos,
                "n": conv.length,
                "est": max(0, conv.token_count() - self.freed),  # the machine's count, R-TOK-1
                "base": k - 1,  # what the runs [0, a, b] keep from (-1: none)
                "runs": runs,
            }
        )
        return k

    def _rebuilt(self, conv: Conversation) -> list[list[int]]:
        """Runs over the previous request by message identity (a rebuilt conversation)."""
        items = [self.message(m) for m in conv.messages()]
        before: dict[int, int] = {}
        if self.prev_req is not None:
            for i, m in enumerate(self.prev_req.messages()):
                before.setdefault(self.message(m), i)
        runs: list[list[int]] = []
        for k in items:
            at = before.get(k)
            last = runs[-1] if runs else None
            if at is not None:
                if last is not None and last[0] == 0 and last[2] == at:
                    last[2] = at + 1
                else:
                    runs.append([0, at, at + 1])
            elif last is not None and last[0] == 1:
                last.append(k)
            else:
                runs.append([1, k])
        return runs

    # -- the walk ----------------------------------------------------------------------------

    def records(self) -> Iterator[tuple[Any, LoopState | None, tuple[Effect, ...], Any]]:
        """(record, state before it, the effects to show, the walk) for each record."""
        if not self.replay:
            for rec in self.reader:
                yield rec, None, rec.effects if isinstance(rec, StepRecord) else (), None
            return
        walk = Walk(self.reader)
        before: LoopState | None = None
        for rec in walk:
            if isinstance(rec, StepRecord):
                shown = walk.effects
                if self.first_mismatch is None and not self.same(rec.effects, walk.effects):
                    self.first_mismatch = rec.i
                if self.first_mismatch is not None:
                    shown = rec.effects
                yield rec, before, shown, walk
                before = walk.state
            else:
                yield rec, before, (), walk

    def build(self) -> TraceView:
        prev_phase = "[*]"
        step_count = resumes = 0
        for rec, before, effects, walk in self.records():
            if isinstance(rec, ResumeRecord):
                resumes += 1
                self.steps.append({"resume": rec.after})
                continue
            if not isinstance(rec, StepRecord):
                continue
            step_count += 1
            pos = len(self.steps)
            if rec.i in self.keep and walk is not None:
                self.effects_at[rec.i] = walk.effects
            t = rec.transition
            tag = t.TAG if t is not None else ""
            if rec.phase != prev_phase or tag:
                self.path.append((prev_phase, rec.phase, tag))
            prev_phase = rec.phase
            entry: dict[str, Any] = {"i": rec.i, "ph": rec.phase}
            if walk is not None and walk.state is not None:
                self.freed = walk.state.tokens_freed
            # the effects first: the messages they emit are tabled before the event names them
            self.real = walk is not None and effects is walk.effects
            fx = [self.effect(e, pos) for e in effects]
            entry["ev"] = self.event(rec.event) if rec.event is not None else None
            entry["fx"] = fx
            if t is not None:
                entry["tr"] = _transition(t)
            self.steps.append(entry)
            self._link(rec.event, effects, pos)
            self._count(rec, effects, pos, before, walk)
        header = self.reader.header
        assert header is not None
        end = self.reader.end
        if end is not None:
            self.path.append(("done", "[end]", ""))
        return TraceView(self._data(header, end, step_count, resumes), self.effects_at, header)

    def _link(self, event: Event | None, effects: tuple[Effect, ...], pos: int) -> None:
        """Which request each event answers, and which steps answered each request."""
        if event is not None:
            key = answers(event)
            opener = self.opened.get(key) if key is not None else None
            if opener is not None:
                self.steps[pos]["re"] = list(opener)
                at, k = opener
                self.steps[at].setdefault("ans", {}).setdefault(str(k), []).append(pos)
        for k, e in enumerate(effects):
            key = opens(e)
            if key is not None:
                self.opened[key] = (pos, k)

    # -- rounds ------------------------------------------------------------------------------

    def _count(
        self,
        rec: StepRecord,
        effects: tuple[Effect, ...],
        pos: int,
        before: LoopState | None,
        walk: Walk | None,
    ) -> None:
        row = self.rounds[-1]
        row["s1"] = pos
        ev = rec.event
        at = getattr(ev, "at_ms", 0) if ev is not None else 0
        if at:
            row["t0"] = at if row["t0"] is None else min(row["t0"], at)
            row["t1"] = at if row["t1"] is None else max(row["t1"], at)
        if isinstance(ev, ModelResponseEnded):
            u = ev.usage
            size = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            row["tin"] += size
            row["tout"] += u.output_tokens
            row["ctx"] = size
        elif isinstance(ev, ModelCallFailed):
            row["retry"] += 1
        elif isinstance(ev, StopHooksFinished) and (ev.blocking_errors or ev.prevent):
            row["hooks"] += 1
        elif isinstance(ev, ToolFinished) and ev.hook_stopped:
            row["hooks"] += 1
        elif isinstance(ev, CompactionFinished) and walk is not None and walk.state is not None:
            pending = self.pending_compact
            if pending is not None:
                removed = pending.conversation.est_total - _content(walk.state)
                _add(row["lay"], "compaction", removed)
        t = rec.transition
        if t is not None:
            tag = t.TAG
            row["tr"] = tag
            row["rules"] = list(rules_for(tag))
            if tag in _RECOVERIES:
                row["recov"] += 1
            if isinstance(t, StopHookBlocking):
                row["hooks"] += 1
            if tag in _CONTINUE_TAGS:
                self.rounds.append(_round(row["n"] + 1, pos + 1))
                if at:  # the next round starts with the event that ended this one
                    self.rounds[-1]["t0"] = self.rounds[-1]["t1"] = at
        target = self.rounds[-1]
        first_request = True
        shown = self.steps[pos]["fx"]
        for k, e in enumerate(effects):
            if isinstance(e, CallModel):
                target["calls"] += 1
                req = shown[k].get("req")
                if req is not None:
                    target["req"] = req
                    target["est"] = self.reqs[req]["est"]
                if first_request and target["calls"] == 1 and walk is not None:
                    self._layers(target, rec, before, e.conversation, walk)
                first_request = False
            elif isinstance(e, Compact):
                target["comp"] += 1
                if target["cat"] is None:
                    target["cat"] = e.pre_tokens  # the machine's count when it compacted
                self.pending_compact = e
                if first_request and walk is not None:
                    self._layers(target, rec, before, e.conversation, walk)
                first_request = False
            elif isinstance(e, StartTool):
                target["tools"][e.name] = target["tools"].get(e.name, 0) + 1
            elif isinstance(e, Wait):
                target["waits"] += 1
                target["wms"] += e.ms
            elif isinstance(e, PersistToolResult) and walk is not None:
                header = walk.header  # the result of this round's tool, replaced by a preview
                assert header is not None
                preview = persisted_preview(e.tool_use_id, e.content, header.config.preview_chars)
                _add(row["lay"], "budget", estimate_text(e.content) - estimate_text(preview))

    def _layers(
        self,
        row: dict[str, Any],
        rec: StepRecord,
        before: LoopState | None,
        sent: Conversation,
        walk: Walk,
    ) -> None:
        """Snip, microcompact and collapse's shares of a rebuilt request (module docstring)."""
        header = walk.header
        assert header is not None
        cfg = header.config
        base = before.conversation if before is not None else _session_conversation(header)
        if _extends(sent, base):
            return  # nothing rebuilt: no layer fired
        gates = cfg.gates
        on = [name for name, gate in _PIPELINE if getattr(gates, gate)]
        if not on:
            return
        counts: list[int] = []
        for n in range(len(_PIPELINE)):  # the first n layers on, the rest off
            enabled = {gate for _, gate in _PIPELINE[:n]}
            off = {f"gates.{gate}": False for _, gate in _PIPELINE if gate not in enabled}
            try:
                stepped = _step_with(cfg.with_overrides(off), header, before, rec.event)
                counts.append(_content(stepped[0]))
            except SteploopError:  # the step is illegal without them: nothing to measure
                return
        assert walk.state is not None
        counts.append(_content(walk.state))
        for (name, _), a, b in zip(_PIPELINE, counts, counts[1:], strict=False):
            _add(row["lay"], name, a - b)

    def _data(
        self, header: TraceHeader, end: EndRecord | None, steps: int, resumes: int
    ) -> dict[str, Any]:
        cfg = header.config
        prompt = header.request.prompt
        for r in self.rounds:
            tag = r["tr"]
            r["kind"] = (
                "open"
                if not tag
                else "continue"
                if tag in _CONTINUE_TAGS
                else "completed"
                if tag == "completed"
                else "terminal"
            )
        note = None
        if self.first_mismatch is not None:
            note = (
                f"this steploop computes other effects than the recorded ones from step "
                f"{self.first_mismatch} on (the trace does not replay exactly): the steps show the "
                "recorded effects, the requests this steploop's"
            )
        return {
            "name": self.name or self.reader.name,
            "prompt": prompt if isinstance(prompt, str) else [unstructure(b) for b in prompt],
            "profile": cfg.profile_name,
            "model": cfg.model,
            "provenance": dict(header.provenance),
            "steploop": header.steploop,
            "version": header.version,
            "config": {
                "context_window": cfg.context_window,
                "autocompact_threshold": cfg.autocompact_threshold
                if cfg.auto_compact_enabled
                else None,
                "blocking_limit": cfg.blocking_limit,
                "snip_threshold": cfg.snip_threshold if cfg.gates.history_snip else None,
                "collapse_threshold": cfg.collapse_threshold
                if cfg.gates.context_collapse
                else None,
                "max_turns": cfg.max_turns,
            },
            "steps_total": steps,
            # the trace's first event time: times are shown from it (None: no event has one)
            "t_start": min((r["t0"] for r in self.rounds if r["t0"] is not None), default=None),
            "resumes": resumes,
            "terminal": end.terminal.TAG if end is not None else None,
            "replay": {
                "ok": self.first_mismatch is None,
                "step": self.first_mismatch,
                "note": note,
            },
            "rounds": self.rounds,
            "steps": self.steps,
            "reqs": self.reqs,
            "msgs": self.msgs,
            "strs": self.strs,
            "path": [list(p) for p in self.path],
        }


def _round(n: int, first: int) -> dict[str, Any]:
    return {
        "n": n,
        "s0": first,
        "s1": first - 1,
        "tr": "",
        "rules": [],
        "calls": 0,
        "tools": {},
        "tin": 0,
        "tout": 0,
        "ctx": 0,
        "est": None,
        "req": None,
        "comp": 0,
        "cat": None,
        "retry": 0,
        "waits": 0,
        "wms": 0,
        "hooks": 0,
        "recov": 0,
        "lay": {},
        "t0": None,
        "t1": None,
    }


def _add(layers: dict[str, int], name: str, n: int) -> None:
    if n > 0:
        layers[name] = layers.get(name, 0) + n


def _transition(t: Transition) -> dict[str, Any]:
    d: dict[str, Any] = unstructure(t)
    d["rules"] = list(rules_for(t.TAG))
    return d


def _equal(a: tuple[Effect, ...], b: tuple[Effect, ...]) -> bool:
    return a == b


def _same_effects(a: tuple[Effect, ...], b: tuple[Effect, ...]) -> bool:
    """``a == b``, but a conversation compared by its length (no digest to compute)."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if type(x) is not type(y):
            return False
        if not isinstance(x, _CONV_EFFECTS):
            if x != y:
                return False
            continue
        for f in _fields(type(x)):
            vx, vy = getattr(x, f), getattr(y, f)
            if f == "conversation":
                if vx.length != vy.length:
                    return False
            elif vx != vy:
                return False
    return True


_CONV_EFFECTS = (CallModel, Compact, RunStopHooks, SummarizeToolUse)
_FIELDS: dict[type, tuple[str, ...]] = {}


def _fields(cls: type) -> tuple[str, ...]:
    got = _FIELDS.get(cls)
    if got is None:
        got = _FIELDS[cls] = tuple(f.name for f in attrs.fields(cls))
    return got


def _extends(conv: Conversation, base: Conversation) -> bool:
    """Whether ``conv`` is ``base`` with messages appended (the same nodes, by identity)."""
    node: Conversation | None = conv
    while node is not None and node.length > base.length:
        node = node.prev
    return node is base


def _session_conversation(header: TraceHeader) -> Conversation:
    return header.session.conversation if header.session is not None else Conversation.empty()


def _step_with(
    cfg: LoopConfig, header: TraceHeader, before: LoopState | None, event: Event | None
) -> tuple[LoopState, tuple[Effect, ...]]:
    if before is None or event is None:
        return start(header.request, cfg, header.session)
    return step(before, event, cfg)


def _content(state: LoopState) -> int:
    """The estimated tokens of the conversation's content (R-TOK-1's estimate of each message,
    whatever the last usage said): what a layer takes off shows here at once. A round that
    ended at the blocking limit is counted without the error it appended."""
    conv = state.conversation
    if isinstance(state.transition, BlockingLimit) and conv.prev is not None:
        conv = conv.prev
    return conv.est_total
