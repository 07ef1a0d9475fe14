"""Every one of the 17 transitions, reached through start()/step().

Each test drives the machine to the state just before the transition, then pins the whole
step: ``step(prev, event, cfg) == (expected_state, expected_effects)``. Expected states are
``attrs.evolve(prev, ...)`` listing every field the step changes; messages, rounds, slots and
effects are written out explicitly so a change in any of them fails the test.

This file: the Continue transitions, and what each writes (C-RESET-1).
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from attrs import evolve

from steploop.reducer import Session, default, step
from steploop.reducer.context import segments
from steploop.reducer.conversation import Conversation, estimate_message
from steploop.reducer.effects import CallModel, Compact, Emit, TaskBudget
from steploop.reducer.events import (
    CommandQueued,
    CompactionFinished,
    ModelCallFailed,
    ModelResponseEnded,
    StopHooksFinished,
    ToolFinished,
)
from steploop.reducer.messages import (
    AttachmentMessage,
    SystemMessage,
    TextBlock,
    Tombstone,
    Usage,
    UserMessage,
)
from steploop.reducer.state import AutoCompactTracking, BudgetTracker, Ids, LoopState, Round
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
    CollapseDrainRetry,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    NextTurn,
    ReactiveCompactRetry,
    StopHookBlocking,
    TokenBudgetContinuation,
)
from tests.reducer.transitions_kit import MODEL, SAFE, Run, U, prompt, read_use, rec, result

MOT_NUDGE = (
    "Output token limit hit. Resume directly — no apology, no recap of what you were doing. "
    "Pick up mid-thought if that is where the cut happened. Break remaining work into smaller "
    "pieces."
)


def meta(mid: str, text: str, origin: str) -> UserMessage:
    return UserMessage(id=mid, content=(TextBlock(text=text),), is_meta=True, origin=origin)


# =============================================================================================
# Continue transitions
# =============================================================================================


def _call(conv: Conversation, call_id: int, max_tokens: int = 8_000, **kw: Any) -> CallModel:
    return CallModel(
        call_id=call_id,
        model=MODEL,
        conversation=conv,
        max_tokens=max_tokens,
        streaming=True,
        task_budget=kw.pop("task_budget", None),
        query_source="repl_main_thread",
    )


@pytest.mark.spec("C-NEXT-1", "R-CMD-1")
def test_next_turn_commits_results_and_queued_commands() -> None:
    """All tool_uses answered: results and queued commands committed, turn_count + 1, call."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(read_use(), SAFE)
    r.allow()
    r.end("tool_use")
    r(CommandQueued(command_id="c1", text="also run the tests"))
    prev = r.s
    assert prev.queued_commands == (("c1", "also run the tests"),)
    res = result("m3", "t1", "file body")
    att = AttachmentMessage(
        id="m4",
        attachment_type="queued_command",
        data=(("commandId", "c1"), ("prompt", "also run the tests")),
    )
    conv = Conversation.of(
        [prompt("m1", "go"), rec("m2", 1, read_use(), usage=U, stop="tool_use"), res, att]
    )
    e = ToolFinished(generation=1, tool_use_id="t1", content="file body")
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=NextTurn(),
            turn_count=2,
            conversation=conv,
            queued_commands=(),
            consumed_commands=("c1",),
            round=Round(call_id=2, generation=2, max_tokens=8_000),
            ids=Ids(msg=4, call=2, generation=2),
        ),
        (Emit(item=res), Emit(item=att), _call(conv, 2)),
    )


@pytest.mark.spec("C-REACTIVE-1", "R-TASK-1", "G6")
def test_reactive_compact_retry_replaces_conversation_and_resets_tracking() -> None:
    """Compaction after prompt-too-long: messages replace the conversation, tracking reset."""
    cfg = default()
    r = Run(cfg, "go", session=Session(autocompact_failures=1), task_budget=50_000)
    assert r.s.tracking == AutoCompactTracking(consecutive_failures=1)
    r.tool_round("t1", u=Usage(input_tokens=1_000, output_tokens=200))
    fx = r.fail("prompt_too_long", status=400)
    before = Conversation.of(
        [
            prompt("m1", "go"),
            rec(
                "m2",
                1,
                read_use(),
                usage=Usage(input_tokens=1_000, output_tokens=200),
                stop="tool_use",
            ),
            result("m3", "t1", "ok"),
        ]
    )
    # one segment only: the collapse drain has nothing to fold, so reactive compaction runs
    assert fx == (Compact(compact_id=1, conversation=before, trigger="reactive", pre_tokens=1_201),)
    prev = r.s
    assert prev.phase == "reactive_compacting"
    msgs = (
        SystemMessage(id="c1", subtype="compact_boundary", text="Conversation compacted"),
        UserMessage(
            id="c2", content=(TextBlock(text="Summary: read it"),), is_meta=True, origin="summary"
        ),
    )
    conv = Conversation.of(msgs)
    assert step(prev, CompactionFinished(compact_id=1, messages=msgs), cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=ReactiveCompactRetry(),
            conversation=conv,
            has_attempted_reactive_compact=True,
            tracking=AutoCompactTracking(),
            task_budget_remaining=48_800,
            round=Round(call_id=3, generation=3, max_tokens=8_000),
            ids=Ids(msg=4, call=3, generation=3, compact=1),
        ),
        (
            Emit(item=msgs[0]),
            Emit(item=msgs[1]),
            _call(conv, 3, task_budget=TaskBudget(total=50_000, remaining=48_800)),
        ),
    )


@pytest.mark.spec("C-MOT-1", "R-MOT-1", "G9")
def test_max_output_tokens_recovery_nudges_and_keeps_partial() -> None:
    """Escalation off: the partial response is kept, the nudge appended and emitted."""
    cfg = default().with_overrides({"gates.max_tokens_escalation": False})
    r = Run(cfg, "write a lot")
    r.block(TextBlock(text="partial"))
    prev = r.s
    nudge = meta("m4", MOT_NUDGE, "nudge")
    conv = Conversation.of(
        [
            prompt("m1", "write a lot"),
            rec("m2", 1, TextBlock(text="partial"), usage=U, stop="max_tokens"),
            nudge,
        ]
    )
    e = ModelResponseEnded(call_id=1, model=MODEL, stop_reason="max_tokens", usage=U, at_ms=77)
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=MaxOutputTokensRecovery(attempt=1),
            mot_recovery_count=1,
            conversation=conv,
            turn_output_tokens=10,
            last_usage=U,
            last_assistant_at_ms=77,
            round=Round(call_id=2, generation=2, max_tokens=32_000),
            ids=Ids(msg=4, call=2, generation=2),
        ),
        (Emit(item=nudge), _call(conv, 2, 32_000)),
    )


@pytest.mark.spec("C-ESCALATE-1", "G10")
def test_max_output_tokens_escalate_drops_attempt_and_retries_at_64k() -> None:
    """First max_tokens of the turn: the attempt is tombstoned and re-sent with 64,000."""
    cfg = default()
    r = Run(cfg, "write a lot")
    r.block(TextBlock(text="partial"))
    prev = r.s
    e = ModelResponseEnded(call_id=1, model=MODEL, stop_reason="max_tokens", usage=U, at_ms=9)
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=MaxOutputTokensEscalate(),
            max_output_tokens_override=64_000,
            escalated=True,
            turn_output_tokens=10,
            last_usage=U,
            last_assistant_at_ms=9,
            round=Round(call_id=2, generation=2, max_tokens=64_000),
            ids=Ids(msg=3, call=2, generation=2),
        ),
        (
            Emit(item=Tombstone(message_id="m2")),
            _call(Conversation.of([prompt("m1", "write a lot")]), 2, 64_000),
        ),
    )


@pytest.mark.spec("C-COLLAPSE-1", "S-COLLAPSE-2")
def test_collapse_drain_retry_folds_all_but_newest_segment() -> None:
    """Prompt-too-long with 3 tool rounds: 2 segments folded into a stub, retried, no emit."""
    cfg = default()
    body = "x" * 400  # 100 tokens a result, so folding frees more than the stub costs
    r = Run(cfg, "go")
    for i in (1, 2, 3):
        r.tool_round(f"t{i}", content=body)
    prev = r.s
    assert prev.round.call_id == 4
    msgs = prev.conversation.messages()
    head, segs = segments(msgs)
    assert len(segs) == 3 and head == (prompt("m1", "go"),)
    stub = meta(
        "m9", "[Context collapsed: 4 earlier messages folded; tools used: Read]", "collapse"
    )
    conv = Conversation.of([head[0], stub, *segs[2]])
    freed = sum(estimate_message(m) for m in (*segs[0], *segs[1])) - estimate_message(stub)
    assert freed > 0
    assert step(prev, ModelCallFailed(call_id=4, kind="prompt_too_long"), cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=CollapseDrainRetry(committed=2),
            conversation=conv,
            tokens_freed=freed,
            round=Round(call_id=5, generation=5, max_tokens=8_000),
            ids=Ids(msg=9, call=5, generation=5),
        ),
        (_call(conv, 5),),
    )


@pytest.mark.spec("C-BLOCKING-1")
def test_stop_hook_blocking_feeds_errors_back() -> None:
    """Blocking errors become meta feedback messages; stop_hook_active, blocks + 1, retry."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(TextBlock(text="done"))
    r.end()
    prev = r.s
    fb1 = meta("m3", "Stop hook feedback:\nlint: 3 errors", "stop_hook_feedback")
    fb2 = meta("m4", "Stop hook feedback:\ntests fail", "stop_hook_feedback")
    conv = Conversation.of(
        [
            prompt("m1", "go"),
            rec("m2", 1, TextBlock(text="done"), usage=U, stop="end_turn"),
            fb1,
            fb2,
        ]
    )
    e = StopHooksFinished(hooks_id=1, blocking_errors=("lint: 3 errors", "tests fail"))
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=StopHookBlocking(),
            stop_hook_active=True,
            stop_hook_blocks=1,
            conversation=conv,
            round=Round(call_id=2, generation=2, max_tokens=8_000),
            ids=Ids(msg=4, call=2, generation=2, hooks=1),
        ),
        (Emit(item=fb1), Emit(item=fb2), _call(conv, 2)),
    )


@pytest.mark.spec("C-BUDGET-1")
def test_token_budget_continuation_below_90_percent() -> None:
    """Hooks pass at 10% of a 10,000 budget: the nudge is emitted and the tracker advances."""
    cfg = default()
    r = Run(cfg, "go", token_budget=10_000)
    r.block(TextBlock(text="some work"))
    out = Usage(input_tokens=100, output_tokens=1_000)
    r.end("end_turn", out)
    prev = r.s
    nudge = meta(
        "m3",
        "Stopped at 10% of token target (1,000 / 10,000). Keep working — do not summarize.",
        "nudge",
    )
    conv = Conversation.of(
        [
            prompt("m1", "go"),
            rec("m2", 1, TextBlock(text="some work"), usage=out, stop="end_turn"),
            nudge,
        ]
    )
    assert step(prev, StopHooksFinished(hooks_id=1), cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=TokenBudgetContinuation(),
            conversation=conv,
            budget=BudgetTracker(
                continuation_count=1, last_delta_tokens=1_000, last_global_turn_tokens=1_000
            ),
            round=Round(call_id=2, generation=2, max_tokens=8_000),
            ids=Ids(msg=3, call=2, generation=2, hooks=1),
        ),
        (Emit(item=nudge), _call(conv, 2)),
    )


# =============================================================================================
# C-RESET-1: what each Continue writes
# =============================================================================================

KEPT = object()
# field -> value per Continue tag (KEPT: equal to the value before the step) [C-RESET-1]
RESET_TABLE: dict[str, dict[str, Any]] = {
    "next_turn": dict(mot=0, reactive=False, override=None, sha=KEPT, turn=+1, tracking=KEPT),
    "reactive_compact_retry": dict(
        mot=KEPT, reactive=True, override=None, sha=KEPT, turn=0, tracking="reset"
    ),
    "max_output_tokens_recovery": dict(
        mot="attempt", reactive=KEPT, override=None, sha=KEPT, turn=0, tracking=KEPT
    ),
    "max_output_tokens_escalate": dict(
        mot=KEPT, reactive=KEPT, override=64_000, sha=KEPT, turn=0, tracking=KEPT
    ),
    "collapse_drain_retry": dict(
        mot=KEPT, reactive=KEPT, override=None, sha=KEPT, turn=0, tracking=KEPT
    ),
    "stop_hook_blocking": dict(
        mot=0, reactive=KEPT, override=None, sha=True, turn=0, tracking=KEPT
    ),
    "token_budget_continuation": dict(
        mot=0, reactive=False, override=None, sha=KEPT, turn=0, tracking=KEPT
    ),
}


@functools.cache
def _reset_chain() -> tuple[tuple[LoopState, LoopState], ...]:
    """One user turn through every Continue, ordered so that most fields are non-default
    before the Continues that keep or clear them. Returns (before, after) per Continue."""
    cfg = default()
    r = Run(cfg, "go", session=Session(autocompact_failures=1), token_budget=100_000)
    pairs: list[tuple[LoopState, LoopState]] = []

    def cont(kind: type, fn: Any, *args: Any, **kw: Any) -> None:
        before = r.s
        fn(*args, **kw)
        assert isinstance(r.s.transition, kind), (kind, r.s.transition)
        assert r.s.phase == "streaming"
        pairs.append((before, r.s))

    def text_end(stop: str) -> None:
        r.block(TextBlock(text="work"))
        r.end(stop)

    def reactive() -> None:
        r.fail("prompt_too_long")
        assert r.s.phase == "reactive_compacting"
        n = r.s.ids.compact
        msgs = (
            SystemMessage(id=f"b{n}", subtype="compact_boundary", text="compacted"),
            UserMessage(id=f"s{n}", content=(TextBlock(text="summary"),), origin="summary"),
        )
        cont(ReactiveCompactRetry, r, CompactionFinished(compact_id=n, messages=msgs))

    cont(NextTurn, r.tool_round, "t1")
    text_end("end_turn")
    cont(StopHookBlocking, r.hooks, blocking_errors=("fix the lint",))
    cont(MaxOutputTokensEscalate, text_end, "max_tokens")
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")  # override 64,000 before
    cont(CollapseDrainRetry, r.fail, "prompt_too_long")  # mot 1, stop_hook_active before
    reactive()  # tracking has 1 failure (session) before
    cont(NextTurn, r.tool_round, "t2")  # mot 1, reactive attempted, stop_hook_active before
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")
    cont(CollapseDrainRetry, r.fail, "prompt_too_long")
    reactive()
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")
    text_end("end_turn")
    cont(StopHookBlocking, r.hooks, blocking_errors=("still failing",))  # reactive true before
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")
    text_end("end_turn")
    cont(TokenBudgetContinuation, r.hooks)  # mot 1, reactive true, stop_hook_active before
    return tuple(pairs)


@pytest.mark.spec("C-RESET-1", "G3")
@pytest.mark.parametrize("tag", sorted(RESET_TABLE))
def test_reset_table_per_continue(tag: str) -> None:
    """Each Continue writes exactly the C-RESET-1 column for its fields."""
    pairs = [
        (b, a) for b, a in _reset_chain() if a.transition is not None and a.transition.TAG == tag
    ]
    assert pairs, f"the chain never reached {tag}"
    row = RESET_TABLE[tag]
    for before, after in pairs:
        got = dict(
            mot=after.mot_recovery_count,
            reactive=after.has_attempted_reactive_compact,
            override=after.max_output_tokens_override,
            sha=after.stop_hook_active,
            turn=after.turn_count - before.turn_count,
            tracking=after.tracking,
        )
        want = dict(row)
        for field, old in (
            ("mot", before.mot_recovery_count),
            ("reactive", before.has_attempted_reactive_compact),
            ("sha", before.stop_hook_active),
            ("tracking", before.tracking),
        ):
            if want[field] is KEPT:
                want[field] = old
        if want["mot"] == "attempt":
            assert isinstance(after.transition, MaxOutputTokensRecovery)
            want["mot"] = after.transition.attempt
            assert after.transition.attempt == before.mot_recovery_count + 1
        if want["tracking"] == "reset":
            want["tracking"] = AutoCompactTracking()
        assert got == want, (tag, before.transition)


@pytest.mark.spec("C-RESET-1")
def test_reset_chain_makes_the_kept_checks_meaningful() -> None:
    """The chain feeds each Continue a state where what it keeps or clears is not a default."""
    pairs = _reset_chain()
    tags = [a.transition.TAG for _, a in pairs if a.transition is not None]
    assert set(tags) == {t.TAG for t in CONTINUE_TYPES}
    by_tag: dict[str, list[LoopState]] = {}
    for before, after in pairs:
        assert after.transition is not None
        by_tag.setdefault(after.transition.TAG, []).append(before)
    assert any(
        b.mot_recovery_count > 0 and b.has_attempted_reactive_compact for b in by_tag["next_turn"]
    )
    assert any(b.stop_hook_active for b in by_tag["next_turn"])
    assert any(b.tracking.consecutive_failures == 1 for b in by_tag["reactive_compact_retry"])
    assert any(b.mot_recovery_count > 0 for b in by_tag["reactive_compact_retry"])
    assert any(b.max_output_tokens_override == 64_000 for b in by_tag["max_output_tokens_recovery"])
    assert any(b.stop_hook_active for b in by_tag["max_output_tokens_escalate"])
    assert any(
        b.mot_recovery_count > 0 and b.stop_hook_active for b in by_tag["collapse_drain_retry"]
    )
    assert any(
        b.mot_recovery_count > 0 and b.has_attempted_reactive_compact
        for b in by_tag["stop_hook_blocking"]
    )
    assert any(
        b.mot_recovery_count > 0 and b.has_attempted_reactive_compact and b.stop_hook_active
        for b in by_tag["token_budget_continuation"]
    )
