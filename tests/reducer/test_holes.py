"""Holes an independent mutation run found (issue 12): behaviours the code had right but no test
pinned. Each test names the mutant it kills in a comment; all go through start()/step() only.

This file: orphan synthesis, the stop-hook cap, the token budget, ids, gates and resets;
interrupts, context and the rest are in test_holes_interrupts.py.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import Gates, LoopConfig, Session, default, full
from steploop.reducer.effects import CallModel, Compact, Finish, RunStopHooks
from steploop.reducer.events import CompactionFinished, StopHooksFinished, WaitElapsed
from steploop.reducer.messages import (
    AssistantMessage,
    SystemMessage,
    TextBlock,
    Tombstone,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import (
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    StopHookPrevented,
    TokenBudgetContinuation,
)
from tests.reducer.driver import SAFE, Driver
from tests.reducer.holes_kit import (
    FALLBACK,
    _budget_round,
    emitted,
    fail,
    of,
    results_in,
    rounds,
    small,
    tool_round,
)


def block_hooks(d: Driver, text: str = "not yet") -> tuple[Any, ...]:
    return d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=(text,)))


# --- orphan synthesis [G13], [G12] --------------------------------------------------------------


@pytest.mark.spec("G13", "T-MODEL-1", "T-IMAGE-1")
@pytest.mark.parametrize("kind", ["unknown", "image_client"])
def test_a_finished_unreleased_result_survives_the_orphan_repair(kind: str) -> None:
    """A result that finished but waits behind a running call keeps its real content on model_error/image_error (G13)."""
    # kills: `if sl.status != "done"` in the orphan repair forced true
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.tool_use("t2", "Read", SAFE, file_path="b")
    d.allow("t2")
    d.finish_tool("t2", "real b")  # done, held back behind the running t1 [R-TOOL-5]
    fx = fail(d, kind, message="boom")
    assert results_in(emitted(fx)) == [("t1", "boom"), ("t2", "real b")]
    assert results_in(d.state.conversation.messages()) == [("t1", "boom"), ("t2", "real b")]
    assert isinstance(d.finished().terminal, (ModelError, ImageError))  # type: ignore[union-attr]


@pytest.mark.spec("G12", "R-RETRY-2")
def test_model_fallback_never_emits_a_released_result_twice() -> None:
    """On model fallback only calls without an emitted result get the fallback result, each once (G12)."""
    # kills: the `sl.message is None` operand dropped in the fallback's emit-only orphan repair
    d = Driver(default(fallback_model=FALLBACK))
    for _ in range(2):
        fail(d, "overloaded", status=529)
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.finish_tool("t1", "real a")  # released at once
    d.tool_use("t2", "Read", SAFE, file_path="b")
    d.allow("t2")
    fx = fail(d, "overloaded", status=529)
    assert of(fx, CallModel)[0].model == FALLBACK
    assert results_in(emitted(fx)) == [("t2", "Model fallback triggered")]
    assert results_in(d.emitted()) == [("t1", "real a"), ("t2", "Model fallback triggered")]


# --- the stop-hook cap [G11] -------------------------------------------------------------------


@pytest.mark.spec("G11", "T-PREVENT-1")
def test_the_response_that_hits_the_stop_hook_cap_is_committed() -> None:
    """When the cap ends the turn, the final response is in the conversation the next turn starts from (G11)."""
    # kills: the commit deleted from the cap branch of on_stop_hooks
    d = Driver(default(stop_hook_block_cap=1))
    d.reply("first")
    block_hooks(d)
    assert d.transition == StopHookBlocking()
    d.reply("final answer")
    block_hooks(d)
    assert d.transition == StopHookPrevented()
    final = [
        b.text
        for m in d.state.session().conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, TextBlock)
    ]
    assert final == ["first", "final answer"]


@pytest.mark.spec("C-BUDGET-1")
def test_token_budget_gate_off_never_continues() -> None:
    """With gates.token_budget off a turn far below its budget completes (C-BUDGET-1)."""
    # kills: the `cfg.gates.token_budget` operand dropped
    d = Driver(default(gates=Gates(token_budget=False)), token_budget=10_000)
    _budget_round(d, 100)
    assert d.transition == Completed()


@pytest.mark.spec("C-BUDGET-1")
@pytest.mark.parametrize(
    "cfg", [default(agent_id="agent-7"), default(query_source="agent:explore")], ids=["id", "source"]
)
def test_sub_agents_get_no_budget_continuation(cfg: LoopConfig) -> None:
    """A sub-agent (agent id or agent: source) completes below its budget (C-BUDGET-1)."""
    # kills: the `not cfg.is_subagent` operand dropped
    d = Driver(cfg, token_budget=10_000)
    _budget_round(d, 100)
    assert d.transition == Completed()


@pytest.mark.spec("C-BUDGET-1")
@pytest.mark.parametrize(
    ("out", "continues"), [(8_999, True), (9_000, False)], ids=["89.99%", "90%"]
)
def test_budget_threshold_is_exactly_90_percent(out: int, continues: bool) -> None:
    """8,999 of 10,000 tokens continues, 9,000 completes: the threshold is exactly 90% (C-BUDGET-1)."""
    # kills: `turn * 100` moved to 99 or 101 (90.9% / 89.1%), `<` to `<=`, 90 moved by one
    d = Driver(default(), token_budget=10_000)
    _budget_round(d, out)
    assert d.transition == (TokenBudgetContinuation() if continues else Completed())


@pytest.mark.spec("C-BUDGET-1")
@pytest.mark.parametrize("deltas", [(100, 500), (500, 100)], ids=["delta-500", "previous-500"])
def test_a_delta_of_exactly_500_tokens_is_not_diminishing(deltas: tuple[int, int]) -> None:
    """After 3 continuations a delta of exactly 500 tokens (now or before) is not diminishing (C-BUDGET-1)."""
    # kills: either `< cfg.budget_diminishing_tokens` turned into `<=`
    d = Driver(default(), token_budget=100_000)
    for out in (10_000, 10_000, 10_000, *deltas):
        _budget_round(d, out)
        assert d.transition == TokenBudgetContinuation()
    _budget_round(d, 100)
    assert d.transition == (Completed() if deltas == (500, 100) else TokenBudgetContinuation())


# --- ids [R-ID-1] ------------------------------------------------------------------------------------


def _assert_ids_unique(d: Driver) -> None:
    """No two different messages (emitted or stored) share an id [R-ID-1]. A stored record may
    differ from its emitted one only by the usage stamped on it, so messages are told apart by
    kind and content."""
    seen: dict[str, tuple[str, Any]] = {}
    stored = list(d.state.conversation.messages())
    for m in [*emitted(d.effects), *stored]:
        if isinstance(m, Tombstone) or not hasattr(m, "id"):
            continue
        body = getattr(m, "content", None) or getattr(m, "text", None) or getattr(m, "data", None)
        key = (type(m).__name__, body)
        assert seen.setdefault(m.id, key) == key, f"id {m.id} names two messages"


@pytest.mark.spec("R-ID-1", "S-SNIP-1")
def test_the_snip_boundary_takes_its_own_message_id() -> None:
    """The snip boundary's id is never given to the next message (R-ID-1)."""
    # kills: the snip commit not advancing the message counter
    d = Driver(small(context_collapse=False, auto_compact=False))
    fx = rounds(d, 6, 21_500)
    (boundary,) = [m for m in emitted(fx) if isinstance(m, SystemMessage)]
    assert boundary.subtype == "snip_boundary"
    d.reply("after the snip")
    _assert_ids_unique(d)


@pytest.mark.spec("R-ID-1", "S-COLLAPSE-1")
def test_the_collapse_stub_takes_its_own_message_id() -> None:
    """The collapse stub's id is never given to the next message (R-ID-1)."""
    # kills: the collapse commit not advancing the message counter
    d = Driver(small(history_snip=False, auto_compact=False))
    fx = rounds(d, 5, 36_500)
    sent = of(fx, CallModel)[0].conversation.messages()
    assert any(isinstance(m, UserMessage) and m.origin == "collapse" for m in sent)
    d.reply("after the collapse")
    _assert_ids_unique(d)


@pytest.mark.spec("R-ID-1", "S-COLLAPSE-2")
def test_the_drain_stub_takes_its_own_message_id() -> None:
    """The collapse drain's stub id is never given to the next message (R-ID-1)."""
    # kills: the drain not advancing the message counter
    d = Driver(small(history_snip=False, auto_compact=False))
    rounds(d, 4, 1_000)
    fail(d, "prompt_too_long", status=400)
    assert d.transition == CollapseDrainRetry(committed=3)
    d.reply("after the drain")
    _assert_ids_unique(d)


# --- gates -------------------------------------------------------------------------------------------


@pytest.mark.spec("T-BLOCKING-1", "G7", "G6")
def test_collapse_owns_overflow_after_the_breaker_tripped_with_reactive_off() -> None:
    """Reactive off, collapse on, breaker tripped: no blocking_limit, the call is made (T-BLOCKING-1)."""
    # kills: the `cfg.gates.context_collapse` operand dropped from the blocking exemption
    cfg = small(reactive_compact=False, history_snip=False)
    d = Driver(cfg, prompt="x" * 170_000, session=Session(autocompact_failures=3))
    assert d.state.conversation.token_count() >= cfg.blocking_limit
    assert not of(d.effects, Finish)
    assert of(d.effects, CallModel) and not of(d.effects, Compact)
    # the same turn with collapse off too is a blocking_limit
    d = Driver(
        small(reactive_compact=False, history_snip=False, context_collapse=False),
        prompt="x" * 170_000,
        session=Session(autocompact_failures=3),
    )
    assert d.finished().terminal == BlockingLimit()  # type: ignore[union-attr]


@pytest.mark.spec("C-COLLAPSE-1", "S-COLLAPSE-2", "C-REACTIVE-1")
def test_no_collapse_drain_with_the_collapse_gate_off() -> None:
    """With collapse off a withheld prompt-too-long goes to reactive compaction, never a drain (C-COLLAPSE-1)."""
    # kills: the `cfg.gates.context_collapse` operand dropped from the drain
    d = Driver(small(history_snip=False, auto_compact=False, context_collapse=False))
    rounds(d, 4, 1_000)
    fx = fail(d, "prompt_too_long", status=400)
    assert [c.trigger for c in of(fx, Compact)] == ["reactive"]
    assert d.phase == "reactive_compacting"
    assert not any(
        isinstance(m, UserMessage) and m.origin == "collapse"
        for m in d.state.conversation.messages()
    )


@pytest.mark.spec("C-REACTIVE-1", "T-PTL-1")
def test_no_reactive_compaction_with_its_gate_off() -> None:
    """Reactive off, collapse on, nothing to drain: the withheld prompt-too-long ends the turn (C-REACTIVE-1)."""
    # kills: the `cfg.gates.reactive_compact` operand dropped from the PTL ladder
    d = Driver(default(gates=Gates(reactive_compact=False)))
    fx = fail(d, "prompt_too_long", status=400)
    assert not of(fx, Compact)
    assert d.finished().terminal == PromptTooLong()  # type: ignore[union-attr]


# --- resets [C-RESET-1], [Q-11] --------------------------------------------------------------------


@pytest.mark.spec("C-RESET-1", "C-BLOCKING-1", "C-ESCALATE-1")
def test_stop_hook_blocking_drops_the_escalated_max_tokens() -> None:
    """After an escalation, a stop-hook blocking retry calls with the default max_tokens again (C-RESET-1)."""
    # kills: `max_output_tokens_override=None` removed from the stop_hook_blocking reset
    cfg = default()
    d = Driver(cfg)
    d.text("cut")
    fx = d.end("max_tokens")
    assert d.transition == MaxOutputTokensEscalate()
    assert of(fx, CallModel)[0].max_tokens == cfg.escalated_max_output_tokens
    d.reply("whole answer")
    fx = block_hooks(d)
    assert d.transition == StopHookBlocking()
    assert of(fx, CallModel)[0].max_tokens == cfg.default_max_tokens


def _q11(flagged: bool, recover: Any) -> LoopConfig:
    """full() (every gate on) with Q-11 as given; the reactive case runs without collapse (no
    drain comes first), the recovery case without escalation (no escalation comes first)."""
    cfg = full(context_window=50_000)
    return attrs.evolve(
        cfg,
        gates=attrs.evolve(
            cfg.gates,
            context_collapse=recover is not _via_reactive,
            max_tokens_escalation=recover is not _via_recovery,
        ),
        compat=attrs.evolve(cfg.compat, stop_hook_active_cleared_by_recovery=flagged),
    )


def _via_reactive(d: Driver) -> None:
    fail(d, "prompt_too_long", status=400)
    (c,) = of(d.last, Compact)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    d.feed(CompactionFinished(compact_id=c.compact_id, messages=summary))
    assert d.transition == ReactiveCompactRetry()


def _via_escalate(d: Driver) -> None:
    d.text("cut")
    d.end("max_tokens")
    assert d.transition == MaxOutputTokensEscalate()


def _via_recovery(d: Driver) -> None:
    d.text("cut")
    d.end("max_tokens")
    assert d.transition == MaxOutputTokensRecovery(attempt=1)


def _via_drain(d: Driver) -> None:
    fail(d, "prompt_too_long", status=400)
    assert isinstance(d.transition, CollapseDrainRetry)


def _via_budget(d: Driver) -> None:
    d.reply("some work", Usage(input_tokens=1_000, output_tokens=100))
    d.hooks_pass()
    assert d.transition == TokenBudgetContinuation()


@pytest.mark.spec("Q-11", "C-RESET-1")
@pytest.mark.parametrize("flagged", [False, True], ids=["default", "Q-11"])
@pytest.mark.parametrize(
    "recover",
    [_via_reactive, _via_escalate, _via_recovery, _via_drain, _via_budget],
    ids=["reactive", "escalate", "recovery", "drain", "budget"],
)
def test_q11_every_recovery_clears_stop_hook_active(recover: Any, flagged: bool) -> None:
    """Under Q-11 each recovery Continue clears stop_hook_active; without it the flag stays set (Q-11)."""
    # kills: the `stop_hook_active=...` reset removed from any of the five recovery Continues
    d = Driver(_q11(flagged, recover), token_budget=100_000)
    tool_round(d, "t0", "ok", Usage(input_tokens=1_000, output_tokens=0))  # a segment to drain
    d.reply("first", Usage(input_tokens=1_000, output_tokens=100))
    block_hooks(d)
    assert d.transition == StopHookBlocking() and d.state.stop_hook_active
    recover(d)
    d.reply("after", Usage(input_tokens=1_000, output_tokens=100))
    (hooks,) = of(d.last, RunStopHooks)
    assert hooks.stop_hook_active is (not flagged)
