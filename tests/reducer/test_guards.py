"""Death-spiral guards G1..G14 (specs/rules.md, section "Death-spiral guards").

This file: G1 to G7; G8 to G14 are in test_guards_g8_g14.py.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import LoopConfig, claude_code_2_1_88, default
from steploop.reducer.effects import CallModel, Compact, Finish, RunStopHooks
from steploop.reducer.events import WaitElapsed
from steploop.reducer.messages import AssistantMessage, TextBlock, UserMessage
from steploop.reducer.transitions import (
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    ImageError,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    TokenBudgetContinuation,
)
from tests.reducer.driver import Driver, usage
from tests.reducer.guards_kit import (
    api_errors,
    assert_finished,
    block_hooks,
    compact_fail,
    compact_ok,
    emitted_in,
    fail,
    of,
    tool_round,
)

# --- helpers ---------------------------------------------------------------------------------


def with_gates(cfg: LoopConfig, **gates: bool) -> LoopConfig:
    return attrs.evolve(cfg, gates=attrs.evolve(cfg.gates, **gates))


def error_text(m: AssistantMessage) -> str:
    """The text of an API-error message, which is its first block and a text block."""
    block = m.content[0]
    assert isinstance(block, TextBlock)
    return block.text


# --- G1 --------------------------------------------------------------------------------------


@pytest.mark.spec("G1")
def test_g1_auth_error_ends_completed_without_stop_hooks() -> None:
    """An auth failure ends the turn completed with the error emitted and no RunStopHooks."""
    d = Driver(default())
    fail(d, "auth", status=401, message="invalid x-api-key")
    assert_finished(d, Completed())
    assert not d.of(RunStopHooks)
    errs = api_errors(d.emitted(), "auth")
    assert len(errs) == 1
    assert d.state.conversation.messages()[-1] == errs[0]


@pytest.mark.spec("G1")
def test_g1_rate_limit_exhausted_ends_completed_without_stop_hooks() -> None:
    """Rate limits past max_retries give an emitted API error, completed, and no stop hooks."""
    cfg = default()
    d = Driver(cfg)
    for _ in range(cfg.retry.max_retries):
        fail(d, "rate_limited", status=429)
        assert d.phase == "waiting_retry"
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    fail(d, "rate_limited", status=429, message="rate limited")
    assert_finished(d, Completed())
    assert not d.of(RunStopHooks)
    assert len(api_errors(d.emitted(), "rate_limited")) == 1


# --- G2 --------------------------------------------------------------------------------------


@pytest.mark.spec("G2")
def test_g2_unrecovered_prompt_too_long_ends_before_stop_hooks() -> None:
    """A prompt-too-long that reactive compaction cannot fix surfaces as prompt_too_long, no hooks."""
    d = Driver(default())
    fail(d, "prompt_too_long", status=400)
    assert of(d.last, Compact)[0].trigger == "reactive"
    compact_fail(d)
    assert_finished(d, PromptTooLong())
    assert not d.of(RunStopHooks)
    assert [error_text(m) for m in api_errors(emitted_in(d.last))] == ["Prompt is too long"]


@pytest.mark.spec("G2")
def test_g2_prompt_too_long_after_reactive_retry_ends_before_stop_hooks() -> None:
    """A second prompt-too-long after a successful reactive compaction ends without stop hooks."""
    d = Driver(default())
    fail(d, "prompt_too_long")
    compact_ok(d)
    assert d.transition == ReactiveCompactRetry()
    fail(d, "prompt_too_long")
    assert_finished(d, PromptTooLong())
    assert not d.of(RunStopHooks)
    assert len(d.of(Compact)) == 1


@pytest.mark.spec("G2")
def test_g2_unrecovered_media_error_ends_before_stop_hooks() -> None:
    """A media error reactive compaction could not fix ends image_error before the stop hooks."""
    d = Driver(default())
    fail(d, "media", status=413, message="Image was too large")
    compact_fail(d)
    assert_finished(d, ImageError())
    assert not d.of(RunStopHooks)
    assert len(api_errors(emitted_in(d.last), "media")) == 1


# --- G3 --------------------------------------------------------------------------------------


def _reactive_attempted(cfg: LoopConfig | None = None, **request: Any) -> Driver:
    d = Driver(cfg or default(), **request)
    fail(d, "prompt_too_long")
    compact_ok(d)
    assert d.state.has_attempted_reactive_compact is True
    return d


@pytest.mark.spec("G3")
def test_g3_stop_hook_blocking_keeps_reactive_attempt() -> None:
    """After stop_hook_blocking the reactive attempt is remembered: a new PTL surfaces at once."""
    d = _reactive_attempted()
    d.reply()
    block_hooks(d)
    assert d.transition == StopHookBlocking()
    assert d.state.has_attempted_reactive_compact is True
    fail(d, "prompt_too_long")
    assert not of(d.last, Compact)
    assert_finished(d, PromptTooLong())
    assert len(d.of(Compact)) == 1


@pytest.mark.spec("G3")
def test_g3_next_turn_resets_reactive_attempt() -> None:
    """next_turn clears the reactive attempt: a later PTL may compact reactively again."""
    d = _reactive_attempted()
    tool_round(d, "t1")
    assert d.transition == NextTurn()
    assert d.state.has_attempted_reactive_compact is False
    fail(d, "prompt_too_long")
    assert [c.trigger for c in of(d.last, Compact)] == ["reactive"]
    assert d.phase == "reactive_compacting"


@pytest.mark.spec("G3")
def test_g3_token_budget_continuation_resets_reactive_attempt() -> None:
    """token_budget_continuation clears the reactive attempt: a later PTL compacts again."""
    d = _reactive_attempted(token_budget=100_000)
    d.reply("partial", usage(100, 50))
    d.hooks_pass()
    assert d.transition == TokenBudgetContinuation()
    assert d.state.has_attempted_reactive_compact is False
    fail(d, "prompt_too_long")
    assert [c.trigger for c in of(d.last, Compact)] == ["reactive"]


# --- G4 --------------------------------------------------------------------------------------


def _three_segments() -> Driver:
    d = Driver(default())
    for i in range(3):
        tool_round(d, f"t{i}")
    return d


@pytest.mark.spec("G4")
def test_g4_collapse_drain_then_reactive_compaction() -> None:
    """PTL drains collapse once (collapse_drain_retry); a second PTL goes to reactive compaction."""
    d = _three_segments()
    fx = fail(d, "prompt_too_long")
    assert d.transition == CollapseDrainRetry(committed=2)
    assert not emitted_in(fx)  # the drain emits nothing [C-COLLAPSE-1]
    call = of(fx, CallModel)[-1]
    stub = call.conversation.messages()[1]
    assert isinstance(stub, UserMessage) and stub.origin == "collapse"
    fail(d, "prompt_too_long")
    assert [c.trigger for c in of(d.last, Compact)] == ["reactive"]
    assert d.phase == "reactive_compacting"


@pytest.mark.spec("G4")
def test_g4_drain_skipped_even_when_it_could_fold() -> None:
    """Right after collapse_drain_retry the drain is skipped even if segments could be folded."""
    d = _three_segments()
    # a state just after a drain retry, but whose conversation still has foldable segments
    d.state = attrs.evolve(d.state, transition=CollapseDrainRetry(committed=1))
    before = d.state.conversation
    fail(d, "prompt_too_long")
    assert [c.trigger for c in of(d.last, Compact)] == ["reactive"]
    assert of(d.last, Compact)[0].conversation == before
    assert d.state.conversation == before


# --- G5 --------------------------------------------------------------------------------------


@pytest.mark.spec("G5")
def test_g5_media_error_after_reactive_attempt_is_image_error() -> None:
    """A media error after a reactive compaction was attempted surfaces as image_error."""
    d = Driver(default())
    fail(d, "media", message="Image was too large")
    assert [c.trigger for c in of(d.last, Compact)] == ["reactive"]
    compact_ok(d)
    assert isinstance(d.last[-1], CallModel)
    fail(d, "media", message="Image was too large")
    assert_finished(d, ImageError())
    assert len(d.of(Compact)) == 1
    assert len(api_errors(emitted_in(d.last), "media")) == 1


# --- G6 --------------------------------------------------------------------------------------


def _trip_breaker(cfg: LoopConfig) -> Driver:
    big = usage(cfg.autocompact_threshold + 1_000)
    d = Driver(cfg)
    for i in range(cfg.max_autocompact_failures):
        tool_round(d, f"t{i}", big)
        compacts = of(d.last, Compact)
        assert [c.trigger for c in compacts] == ["auto"], f"round {i}"
        assert d.phase == "compacting"
        compact_fail(d)
        assert isinstance(d.last[-1], CallModel)
    assert d.state.tracking.consecutive_failures == 3
    tool_round(d, "t-after", big)
    assert not of(d.last, Compact)
    assert isinstance(d.last[-1], CallModel)
    d.reply("done", big)
    d.hooks_pass()
    assert_finished(d, Completed())
    return d


@pytest.mark.spec("G6")
def test_g6_breaker_trips_after_three_failures_and_holds_for_the_session() -> None:
    """After 3 failed auto-compactions no Compact is emitted, also in the next user turn."""
    cfg = default()
    d = _trip_breaker(cfg)
    nxt = Driver(cfg, "next", session=d.state.session())
    assert nxt.state.conversation.token_count() >= cfg.autocompact_threshold
    assert not nxt.of(Compact)
    assert isinstance(nxt.last[-1], CallModel)


@pytest.mark.spec("G6")
def test_g6_turn_scoped_breaker_tries_again_next_turn() -> None:
    """With autocompact_breaker_scope="turn" the next user turn attempts auto-compact again."""
    cfg = default(autocompact_breaker_scope="turn")
    d = _trip_breaker(cfg)
    nxt = Driver(cfg, "next", session=d.state.session())
    assert [c.trigger for c in nxt.of(Compact)] == ["auto"]
    assert nxt.phase == "compacting"


@pytest.mark.spec("G6")
def test_g6_success_resets_failure_count() -> None:
    """A successful auto-compaction resets consecutive failures to 0."""
    cfg = default()
    big = usage(cfg.autocompact_threshold + 1_000)
    d = Driver(cfg)
    tool_round(d, "t0", big)
    compact_fail(d)
    tool_round(d, "t1", big)
    compact_fail(d)
    assert d.state.tracking.consecutive_failures == 2
    tool_round(d, "t2", big)
    compact_ok(d)
    assert d.state.tracking.consecutive_failures == 0
    assert d.state.tracking.compacted is True


@pytest.mark.spec("G6")
def test_g6_reactive_compaction_resets_failure_count() -> None:
    """A reactive compaction resets the auto-compact failure count."""
    cfg = default()
    big = usage(cfg.autocompact_threshold + 1_000)
    d = Driver(cfg)
    tool_round(d, "t0", big)
    compact_fail(d)
    assert d.state.tracking.consecutive_failures == 1
    fail(d, "prompt_too_long")
    compact_ok(d)
    assert d.state.tracking.consecutive_failures == 0


# --- G7 --------------------------------------------------------------------------------------


@pytest.mark.spec("G7")
@pytest.mark.parametrize(
    ("source", "blocks"),
    [("compact", False), ("session_memory", False), ("marble_origami", True)],
)
def test_g7_compact_sources_never_block(source: str, blocks: bool) -> None:
    """compact/session_memory sources skip the blocking check; other sources do not."""
    cfg = default(query_source=source)
    d = Driver(cfg)
    tool_round(d, "t0", usage(cfg.blocking_limit + 1_000))
    if blocks:
        assert_finished(d, BlockingLimit())
    else:
        assert isinstance(d.last[-1], CallModel)
        assert not d.of(Finish)


@pytest.mark.spec("G7")
def test_g7_blocking_applies_without_exemption() -> None:
    """Control: auto-compact off, main thread, over the limit -> blocking_limit."""
    cfg = with_gates(default(), auto_compact=False)
    d = Driver(cfg)
    tool_round(d, "t0", usage(cfg.blocking_limit + 1_000))
    assert_finished(d, BlockingLimit())
    assert [error_text(m) for m in api_errors(emitted_in(d.last))] == ["Prompt is too long"]


@pytest.mark.spec("G7")
def test_g7_just_compacted_round_skips_blocking_check() -> None:
    """Right after a compaction the blocking check is skipped even with stale large usage."""
    cfg = claude_code_2_1_88()  # blocking always applies with auto-compact on
    over = cfg.blocking_limit + 1_000
    d = Driver(cfg)
    tool_round(d, "t0", usage(over))
    assert d.phase == "compacting"
    compact_ok(d, stale_usage=over)
    assert d.state.conversation.token_count() >= cfg.blocking_limit
    assert isinstance(d.last[-1], CallModel)
    assert not d.of(Finish)


@pytest.mark.spec("G7")
def test_g7_failed_compaction_does_not_exempt() -> None:
    """Control: the same round with a failed compaction is blocked."""
    cfg = claude_code_2_1_88()
    d = Driver(cfg)
    tool_round(d, "t0", usage(cfg.blocking_limit + 1_000))
    compact_fail(d)
    assert_finished(d, BlockingLimit())


@pytest.mark.spec("G7")
def test_g7_reactive_compaction_owns_overflow() -> None:
    """Default (auto + reactive on): over the blocking limit the model is still called."""
    cfg = default()
    d = Driver(cfg)
    tool_round(d, "t0", usage(cfg.blocking_limit + 1_000))
    compact_fail(d)
    assert isinstance(d.last[-1], CallModel)
    assert not d.of(Finish)
