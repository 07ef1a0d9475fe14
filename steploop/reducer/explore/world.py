"""The world alphabet (specs/ ABS-2): the finite set of answers the explorer gives the machine,
as :class:`Move` objects computed from a state (:func:`moves`).
"""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from typing import Final

import attrs

from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Effect
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.explore.abstraction import Abstraction
from steploop.reducer.machine import step
from steploop.reducer.messages import (
    Message,
    SystemMessage,
    TextBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.protocol import awaiting
from steploop.reducer.state import LoopState

MOT_REASONS: Final = frozenset({"max_tokens", "model_context_window_exceeded"})
RECOVERABLE: Final = frozenset({"prompt_too_long", "media", "max_output_tokens"})
STATUS: Final = {"overloaded": 529, "rate_limited": 429, "prompt_too_long": 400}
REFUSAL_DETAILS: Final = '{"category":"cyber","explanation":"The request asks for malware."}'
SAFE_TOOL: Final = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
UNSAFE_TOOL: Final = ToolTraits(
    concurrency_safe=False, interrupt="block", cancels_siblings_on_error=True
)

# =============================================================================================
# The world alphabet
# =============================================================================================


@attrs.frozen(kw_only=True)
class World:
    """The finite alphabet of world answers (specs/ ABS-2).

    Every tuple can be narrowed to make a search cheaper; the defaults are the full alphabet.
    ``output_tokens`` is the output usage of every response (the token budget counts it).

    ``failures`` are failure kinds of ``ModelCallFailed``, and two names for the context
    overflow of R-OVERFLOW-1: ``context_overflow`` is over the limit by one token (the call is
    retried with a lowered cap when the room left reaches the output floor),
    ``context_overflow_full`` leaves less room than the floor (the error stands).
    ``pauses``: the usage classes of a reply that ends with ``pause_turn`` (S-PAUSE-1);
    ``pause_runs_only``: a pause is offered only while the responses before it in a row were
    paused and resumed (the deep tier follows a run of pauses the full tier began up to the cap
    of S-PAUSE-1, and starts none); ``refusals``: a reply, and the end of a tool response, that
    ends with ``refusal`` (R-REFUSAL-1).
    """

    max_tools: int = 2
    tool_kinds: tuple[str, ...] = ("safe", "unsafe")
    usage_classes: tuple[str, ...] = ("low", "mid", "high")
    failures: tuple[str, ...] = (
        "prompt_too_long",
        "media",
        "image_client",
        "overloaded",
        "rate_limited",
        "stream_broken",
        "auth",
        "unknown",
        "context_overflow",
        "context_overflow_full",
    )
    tool_outcomes: tuple[str, ...] = ("ok", "error")  # add "hook_stop" for T-HOOK-1
    permissions: tuple[str, ...] = ("allow", "deny_by_rule", "rejected_by_user")
    stop_hooks: tuple[str, ...] = ("pass", "block", "prevent")
    interrupts: tuple[str, ...] = ("hard", "submit")
    truncation: bool = True  # max_tokens replies and truncated tool inputs
    pauses: tuple[str, ...] = ("low", "mid", "high")  # pause_turn replies [S-PAUSE-1]
    pause_runs_only: bool = False
    refusals: bool = True  # refusal replies and tool responses [R-REFUSAL-1]
    output_tokens: int = 400


@attrs.frozen
class Move:
    """One answer of the world: a label that names it independently of ids (``finish:0:ok``
    is "the first tool slot finishes"), and the events that make it, computed from a state."""

    label: str
    events: tuple[Event, ...]


def usage_for(cfg: LoopConfig, cls: str, output_tokens: int = 400) -> Usage:
    """A usage whose total lands in token class ``cls`` of ``cfg``: ``low`` below every
    threshold, ``mid`` between the auto-compact threshold and the blocking limit, ``high``
    over the blocking limit (specs/ ABS-2)."""
    blocking = cfg.blocking_limit
    if cls == "low":
        positive = [t for t in Abstraction.thresholds_of(cfg) if t > 0]
        total = max(1, min(positive, default=blocking) // 4)
    elif cls == "mid":
        total = (cfg.autocompact_threshold + blocking) // 2
    elif cls == "high":
        total = blocking + max(1, (cfg.context_window - blocking) // 2)
    else:
        raise ValueError(f"unknown usage class {cls!r}; expected low, mid or high")
    out = min(output_tokens, total)
    return Usage(input_tokens=total - out, output_tokens=out)


@lru_cache(maxsize=64)
def _usages(config: LoopConfig, world: World) -> tuple[tuple[str, Usage], ...]:
    """The world's usage classes, one per band of the thresholds that matter in ``config``
    (classes that land in the same band behave alike and are tried once)."""
    ths = Abstraction.thresholds_of(config)
    out: list[tuple[str, Usage]] = []
    seen: set[int] = set()
    for c in world.usage_classes:
        u = usage_for(config, c, world.output_tokens)
        band = bisect_right(ths, u.total)
        if band not in seen:
            seen.add(band)
            out.append((c, u))
    return tuple(out)


def _compacted(compact_id: int) -> tuple[Message, ...]:
    return (
        SystemMessage(
            id=f"c{compact_id}.b", subtype="compact_boundary", text="Conversation compacted"
        ),
        UserMessage(
            id=f"c{compact_id}.s",
            content=(TextBlock(text="Summary of the work so far."),),
            is_meta=True,
            origin="compact_summary",
        ),
    )


def moves(state: LoopState, config: LoopConfig, world: World | None = None) -> tuple[Move, ...]:
    """Every answer of the world alphabet to what ``state`` waits for, then the interrupts
    (none once it is done).

    The requests come from :func:`steploop.reducer.protocol.awaiting`, in its order: the model call,
    the tool slots (a permission request or a tool run), the wait, compaction or stop hooks.
    The alphabet has no answer for a summary, which therefore stays outstanding.
    """
    w = world or World()
    if state.phase == "done":
        return ()
    r = state.round
    out: list[Move] = []
    slots = {sl.tool_use_id: i for i, sl in enumerate(r.slots)}
    for key in awaiting(state):
        kind = key[0]
        if kind == "call_model":
            out.extend(_model_moves(state, config, w, key[1]))
        elif kind == "ask_permission":
            gen, tid = key[1], key[2]
            for d in w.permissions:
                ev: Event = PermissionAnswered(
                    generation=gen,
                    tool_use_id=tid,
                    decision=d,  # type: ignore[arg-type]
                )
                out.append(Move(f"permission:{slots[tid]}:{d}", (ev,)))
        elif kind == "start_tool":
            gen, tid = key[1], key[2]
            for o in w.tool_outcomes:
                ev = ToolFinished(
                    generation=gen,
                    tool_use_id=tid,
                    content="ok" if o != "error" else "failed",
                    is_error=o == "error",
                    hook_stopped=o == "hook_stop",
                )
                out.append(Move(f"finish:{slots[tid]}:{o}", (ev,)))
        elif kind == "compact":
            pid = key[1]
            out.append(
                Move("compact:ok", (CompactionFinished(compact_id=pid, messages=_compacted(pid)),))
            )
            out.append(Move("compact:fail", (CompactionFailed(compact_id=pid, reason="failed"),)))
        elif kind == "wait":
            out.append(Move("wait:elapsed", (WaitElapsed(wait_id=key[1]),)))
        elif kind == "run_stop_hooks":
            pid = key[1]
            answers = {
                "pass": StopHooksFinished(hooks_id=pid, hook_count=1),
                "block": StopHooksFinished(
                    hooks_id=pid, blocking_errors=("fix the test",), hook_count=1
                ),
                "prevent": StopHooksFinished(
                    hooks_id=pid, prevent=True, stop_reason="halt", hook_count=1
                ),
            }
            for a in w.stop_hooks:
                out.append(Move(f"hooks:{a}", (answers[a],)))
        elif (
            kind == "refresh_tools"
        ):  # [R-REFRESH-1] the list as it is (its names the machine keeps not)
            out.append(
                Move("refresh:read", (ToolsRefreshed(call_id=key[1], tools=("Read", "Edit")),))
            )
    for kind in w.interrupts:
        out.append(Move(f"interrupt:{kind}", (Interrupted(kind=kind),)))  # type: ignore[arg-type]
    return tuple(out)


def _model_moves(state: LoopState, config: LoopConfig, w: World, cid: int) -> list[Move]:
    """The answers to model call ``cid``: replies at each usage class, truncations, a tool
    call of each kind while there is room, the end of a tool response, the failures."""
    r = state.round
    out: list[Move] = []
    usages = _usages(config, w)
    model = state.model
    k = len(r.blocks) + 1

    def end(reason: str, u: Usage) -> ModelResponseEnded:
        details = REFUSAL_DETAILS if reason == "refusal" else None
        return ModelResponseEnded(
            call_id=cid, model=model, stop_reason=reason, usage=u, stop_details=details
        )

    def tool(kind: str) -> ModelBlockReceived:
        name, traits = ("Read", SAFE_TOOL) if kind == "safe" else ("Edit", UNSAFE_TOOL)
        block = ToolUseBlock(id=f"t{cid}.{k}", name=name, input={"file_path": "a.py"})
        return ModelBlockReceived(call_id=cid, block=block, tool=traits)

    if not r.blocks:
        text = ModelBlockReceived(call_id=cid, block=TextBlock(text="Done."))
        for c, u in usages:
            out.append(Move(f"reply:{c}", (text, end("end_turn", u))))
        if w.truncation:
            cut = ToolUseBlock(id=f"t{cid}.cut", name="Edit", input={"file_path": "a"})
            cut_ev = ModelBlockReceived(
                call_id=cid, block=cut, tool=UNSAFE_TOOL, input_complete=False
            )
            for c, u in usages:
                out.append(Move(f"max_tokens:{c}", (text, end("max_tokens", u))))
                out.append(Move(f"cut_tool:{c}", (cut_ev, end("max_tokens", u))))
        pausing = not w.pause_runs_only or state.pause_resumes > 0
        for c, u in usages:
            if pausing and c in w.pauses:
                out.append(Move(f"pause:{c}", (text, end("pause_turn", u))))
        if w.refusals:
            out.append(Move("refusal", (text, end("refusal", usages[0][1]))))
    if len(r.slots) < w.max_tools:
        for kind in w.tool_kinds:
            out.append(Move(f"tool:{kind}", (tool(kind),)))
    if r.slots:
        for c, u in usages:
            out.append(Move(f"end_tools:{c}", (end("tool_use", u),)))
        if w.truncation:
            out.append(Move("end_tools:max_tokens", (end("max_tokens", usages[0][1]),)))
        if w.refusals:
            out.append(Move("end_tools:refusal", (end("refusal", usages[0][1]),)))
    for kind in w.failures:
        out.append(Move(f"fail:{kind}", (_failure(state, config, cid, kind),)))
    return out


def _failure(state: LoopState, config: LoopConfig, cid: int, kind: str) -> ModelCallFailed:
    """The failure ``kind`` of call ``cid``. The two context overflows carry the numbers of the
    API's message ``A + B > C`` for the call's own cap B (R-OVERFLOW-1): over the limit by one
    token (``context_overflow``: room for B - 1 - the safety buffer, retried when that reaches
    the output floor), or with less room than the floor (``context_overflow_full``)."""
    if kind in ("context_overflow", "context_overflow_full"):
        limit = config.context_window
        cap = state.round.max_tokens or config.default_max_tokens
        used = limit - cap + 1
        if kind == "context_overflow_full":
            used = max(used, limit - config.overflow_safety_buffer - config.floor_output_tokens + 1)
        return ModelCallFailed(
            call_id=cid,
            kind="context_overflow",
            status=400,
            message=f"input length and `max_tokens` exceed context limit: {used} + {cap} > {limit}",
            input_tokens=used,
            context_limit=limit,
        )
    return ModelCallFailed(call_id=cid, kind=kind, status=STATUS.get(kind))


def apply_move(
    state: LoopState, move: Move, config: LoopConfig
) -> list[tuple[LoopState, Event, tuple[Effect, ...], LoopState]]:
    """Feed a move's events; returns each transition ``(state, event, effects, next)``."""
    out = []
    s = state
    for ev in move.events:
        nxt, fx = step(s, ev, config)
        out.append((s, ev, fx, nxt))
        s = nxt
    return out
