"""Death-spiral guards G1..G14 (specs/rules.md, section "Death-spiral guards")."""

from __future__ import annotations

from collections import Counter
from typing import Any

import attrs
import pytest

from steploop.reducer import LoopConfig, claude_code_2_1_88, default
from steploop.reducer.effects import (
    CallModel,
    CancelTools,
    Compact,
    Emit,
    Finish,
    PersistToolResult,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Interrupted,
    ModelCallFailed,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import (
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    StopHookPrevented,
    TokenBudgetContinuation,
)
from tests.reducer.driver import BASH, SAFE, UNSAFE, Driver, usage

FALLBACK = "claude-haiku-4-5"


# --- helpers ---------------------------------------------------------------------------------


def with_gates(cfg: LoopConfig, **gates: bool) -> LoopConfig:
    return attrs.evolve(cfg, gates=attrs.evolve(cfg.gates, **gates))


def fail(d: Driver, kind: str, **kw: Any) -> tuple[Any, ...]:
    return d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, **kw))


def compaction_messages(tag: str, stale_usage: int | None = None) -> tuple[Message, ...]:
    msgs: list[Message] = [
        SystemMessage(id=f"{tag}-b", subtype="compact_boundary", text="Conversation compacted"),
        UserMessage(
            id=f"{tag}-s",
            content=(TextBlock(text="Summary of earlier work"),),
            is_meta=True,
            origin="compact_summary",
        ),
    ]
    if stale_usage is not None:  # a kept assistant message carrying stale input tokens
        msgs.append(
            AssistantMessage(
                id=f"{tag}-k",
                response_id=f"{tag}-kr",
                model="claude-sonnet-4-5",
                content=(TextBlock(text="kept"),),
                usage=Usage(input_tokens=stale_usage),
            )
        )
    return tuple(msgs)


def compact_ok(d: Driver, tag: str = "c", stale_usage: int | None = None) -> tuple[Any, ...]:
    return d.feed(
        CompactionFinished(
            compact_id=d.state.round.pending_id, messages=compaction_messages(tag, stale_usage)
        )
    )


def compact_fail(d: Driver) -> tuple[Any, ...]:
    return d.feed(CompactionFailed(compact_id=d.state.round.pending_id, reason="boom"))


def tool_round(d: Driver, tid: str, u: Usage | None = None, content: str = "ok") -> None:
    """One non-safe tool call: stream, end, allow, finish (-> next_turn)."""
    d.tool_use(tid, "Bash", traits=UNSAFE, command="ls")
    d.end("tool_use", u)
    d.allow(tid)
    d.finish_tool(tid, content)


def block_hooks(d: Driver, *errors: str) -> tuple[Any, ...]:
    return d.feed(
        StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=errors or ("fix it",))
    )


def api_errors(items: list[Any], kind: str | None = None) -> list[AssistantMessage]:
    return [
        m
        for m in items
        if isinstance(m, AssistantMessage)
        and m.api_error is not None
        and (kind is None or m.api_error.kind == kind)
    ]


def error_text(m: AssistantMessage) -> str:
    """The text of an API-error message, which is its first block and a text block."""
    block = m.content[0]
    assert isinstance(block, TextBlock)
    return block.text


def emitted_in(fx: tuple[Any, ...]) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


def of(fx: tuple[Any, ...] | list[Any], kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def assert_finished(d: Driver, terminal: Any) -> None:
    assert isinstance(d.last[-1], Finish)
    assert d.last[-1].terminal == terminal
    assert d.phase == "done"


def assert_pairing(d: Driver) -> None:
    uses: list[str] = []
    results: list[str] = []
    for m in d.state.conversation.messages():
        if isinstance(m, AssistantMessage):
            uses += [b.id for b in m.content if isinstance(b, ToolUseBlock)]
        elif isinstance(m, UserMessage):
            results += [b.tool_use_id for b in m.content if isinstance(b, ToolResultBlock)]
    assert uses, "scenario stored no tool_use"
    assert Counter(results) == Counter(set(uses)), (uses, results)
    assert len(uses) == len(set(uses))


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


# --- G8 --------------------------------------------------------------------------------------


@pytest.mark.spec("G8")
@pytest.mark.parametrize("source", ["compact", "session_memory", "marble_origami"])
def test_g8_recursion_sources_never_auto_compact(source: str) -> None:
    """compact/session_memory/marble_origami sources never emit Compact above the threshold."""
    cfg = default(query_source=source)
    d = Driver(cfg)
    tool_round(d, "t0", usage(cfg.autocompact_threshold + 1_000))
    assert d.state.conversation.token_count() >= cfg.autocompact_threshold
    assert not d.of(Compact)
    assert isinstance(d.last[-1], CallModel)


@pytest.mark.spec("G8")
def test_g8_main_thread_does_auto_compact() -> None:
    """Control: the main thread above the threshold emits Compact(trigger="auto")."""
    cfg = default()
    d = Driver(cfg)
    tool_round(d, "t0", usage(cfg.autocompact_threshold + 1_000))
    assert [c.trigger for c in d.of(Compact)] == ["auto"]


# --- G9 --------------------------------------------------------------------------------------


@pytest.mark.spec("G9")
def test_g9_recovered_prompt_too_long_never_emitted() -> None:
    """A PTL error fixed by reactive compaction is never emitted nor stored."""
    d = Driver(default())
    fx = fail(d, "prompt_too_long")
    assert not api_errors(emitted_in(fx))
    compact_ok(d)
    d.reply()
    d.hooks_pass()
    assert_finished(d, Completed())
    assert not api_errors(d.emitted())
    assert not api_errors(list(d.state.conversation.messages()))


@pytest.mark.spec("G9")
def test_g9_unrecovered_prompt_too_long_emitted_only_at_the_end() -> None:
    """A PTL error is emitted once, in the step where recovery failed."""
    d = Driver(default())
    fail(d, "prompt_too_long")
    assert not api_errors(d.emitted())
    compact_fail(d)
    assert len(api_errors(emitted_in(d.last), "prompt_too_long")) == 1
    assert len(api_errors(d.emitted())) == 1


@pytest.mark.spec("G9")
def test_g9_recovered_media_error_never_emitted() -> None:
    """A media error fixed by reactive compaction is never emitted."""
    d = Driver(default())
    fail(d, "media", message="Image was too large")
    compact_ok(d)
    d.reply()
    d.hooks_pass()
    assert_finished(d, Completed())
    assert not api_errors(d.emitted())


@pytest.mark.spec("G9")
def test_g9_max_output_tokens_withheld_until_exhausted() -> None:
    """MOT errors stay hidden through escalation and 3 nudges; only the exhaustion emits one."""
    d = Driver(default())
    for _ in range(4):
        d.text("partial")
        d.end("max_tokens")
        assert not api_errors(d.emitted())
    d.text("partial")
    d.end("max_tokens")
    assert_finished(d, Completed())
    assert len(api_errors(d.emitted(), "max_output_tokens")) == 1
    assert api_errors(emitted_in(d.last), "max_output_tokens")


# --- G10 -------------------------------------------------------------------------------------


@pytest.mark.spec("G10")
def test_g10_escalation_once_per_turn() -> None:
    """escalate, then nudges 1..3 (no second escalation), then the error surfaces."""
    d = Driver(default())
    seen: list[Any] = []
    max_tokens: list[int] = []
    for _ in range(4):
        d.text("partial")
        d.end("max_tokens")
        seen.append(d.transition)
        max_tokens.append(of(d.last, CallModel)[-1].max_tokens)
    assert seen == [
        MaxOutputTokensEscalate(),
        MaxOutputTokensRecovery(attempt=1),
        MaxOutputTokensRecovery(attempt=2),
        MaxOutputTokensRecovery(attempt=3),
    ]
    assert max_tokens == [64_000, 8_000, 8_000, 8_000]
    d.text("partial")
    d.end("max_tokens")
    assert_finished(d, Completed())


@pytest.mark.spec("G10")
def test_g10_no_escalation_with_env_override() -> None:
    """With an env max-output override in force the ladder starts at the nudge."""
    d = Driver(default(max_output_tokens_env_override=16_000))
    assert d.of(CallModel)[0].max_tokens == 16_000
    d.text("partial")
    d.end("max_tokens")
    assert d.transition == MaxOutputTokensRecovery(attempt=1)
    assert of(d.last, CallModel)[-1].max_tokens == 16_000


@pytest.mark.spec("G10")
def test_g10_next_user_turn_may_escalate_again() -> None:
    """The once-per-turn flag is user-turn scoped: a new turn escalates again."""
    cfg = default()
    d = Driver(cfg)
    d.text("partial")
    d.end("max_tokens")
    assert d.transition == MaxOutputTokensEscalate()
    d.reply()
    d.hooks_pass()
    nxt = Driver(cfg, "again", session=d.state.session())
    nxt.text("partial")
    nxt.end("max_tokens")
    assert nxt.transition == MaxOutputTokensEscalate()


# --- G11 -------------------------------------------------------------------------------------


@pytest.mark.spec("G11")
def test_g11_default_cap_ends_ninth_block() -> None:
    """Default: 8 blocks continue; the 9th ends stop_hook_prevented with the cap notice."""
    d = Driver(default())
    for i in range(8):
        d.reply(f"try {i}")
        assert of(d.last, RunStopHooks)[0].stop_hook_active is (i > 0)
        block_hooks(d, f"error {i}")
        assert d.transition == StopHookBlocking(), i
        assert isinstance(d.last[-1], CallModel)
    d.reply("try 8")
    fx = block_hooks(d, "error 8")
    assert_finished(d, StopHookPrevented())
    notices = [m for m in emitted_in(fx) if isinstance(m, SystemMessage)]
    assert [m.text for m in notices] == [
        "Stop hooks blocked 9 times in this turn; the cap of 8 blocking retries is reached"
    ]
    assert not [m for m in emitted_in(fx) if isinstance(m, UserMessage)]  # no 9th feedback
    assert d.state.stop_hook_blocks == 8


@pytest.mark.spec("G11")
def test_g11_claude_code_has_no_cap() -> None:
    """claude_code_2_1_88: 20 consecutive blocks still continue."""
    d = Driver(claude_code_2_1_88())
    for i in range(20):
        d.reply(f"try {i}")
        block_hooks(d, f"error {i}")
        assert d.transition == StopHookBlocking(), i
        assert isinstance(d.last[-1], CallModel)
    assert not d.of(Finish)
    assert d.state.stop_hook_blocks == 20


# --- G12 -------------------------------------------------------------------------------------


def _running_safe_tool(d: Driver, tid: str = "r1") -> int:
    d.tool_use(tid, "Read", traits=SAFE, file_path="a.py")
    fx = d.allow(tid)
    assert of(fx, StartTool)
    return d.generation


def _late_result_is_noop(d: Driver, gen: int, tid: str = "r1") -> None:
    before = d.state
    fx = d.feed(ToolFinished(generation=gen, tool_use_id=tid, content="late"))
    assert fx == ()
    assert d.state == before


@pytest.mark.spec("G12")
def test_g12_retry_discards_running_tools() -> None:
    """On a retry the running tool is cancelled as discarded; its late result is a no-op."""
    d = Driver(default())
    gen = _running_safe_tool(d)
    fx = fail(d, "server_error", status=500)
    assert CancelTools(generation=gen, tool_use_ids=("r1",), reason="discarded") in fx
    _late_result_is_noop(d, gen)  # while waiting
    d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    assert d.generation > gen
    _late_result_is_noop(d, gen)  # while the next attempt streams
    d.reply()
    d.hooks_pass()
    stored = d.state.conversation.messages()
    assert not [
        b
        for m in stored
        if isinstance(m, (AssistantMessage, UserMessage))
        for b in m.content
        if isinstance(b, (ToolUseBlock, ToolResultBlock))
    ]


@pytest.mark.spec("G12")
def test_g12_stream_fallback_discards_running_tools() -> None:
    """On a broken stream the running tool is discarded; its late result is a no-op."""
    d = Driver(default())
    gen = _running_safe_tool(d)
    fx = fail(d, "stream_broken")
    assert CancelTools(generation=gen, tool_use_ids=("r1",), reason="discarded") in fx
    assert of(fx, CallModel)[0].streaming is False
    _late_result_is_noop(d, gen)


@pytest.mark.spec("G12")
def test_g12_model_fallback_discards_running_tools() -> None:
    """On a model fallback the running tool is cancelled as discarded; late result is a no-op."""
    d = Driver(default(fallback_model=FALLBACK))
    for _ in range(2):
        fail(d, "overloaded", status=529)
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    gen = _running_safe_tool(d)
    fx = fail(d, "overloaded", status=529)
    assert of(fx, CallModel)[0].model == FALLBACK
    _late_result_is_noop(d, gen)
    assert CancelTools(generation=gen, tool_use_ids=("r1",), reason="discarded") in fx


# --- G13 -------------------------------------------------------------------------------------


def _sc_model_error(d: Driver) -> None:
    _running_safe_tool(d, "r1")
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    fail(d, "unknown", message="weird")
    assert isinstance(d.transition, ModelError)


def _sc_hard_interrupt_streaming(d: Driver) -> None:
    _running_safe_tool(d, "r1")
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.feed(Interrupted(kind="hard"))
    assert d.transition == AbortedStreaming()


def _sc_hard_interrupt_tools(d: Driver) -> None:
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.tool_use("u2", "Edit", traits=UNSAFE, file_path="b.py")
    d.end("tool_use")
    d.allow("u1")
    d.feed(Interrupted(kind="hard"))
    assert d.transition == AbortedTools()


def _sc_submit_interrupt_draining(d: Driver) -> None:
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")  # interrupt="block"
    d.tool_use("u2", "Edit", traits=UNSAFE, file_path="b.py")
    d.end("tool_use")
    d.allow("u1")
    d.feed(Interrupted(kind="submit"))
    assert d.phase == "draining"
    d.finish_tool("u1", "edited")
    assert d.transition == AbortedTools()


def _sc_rejected_by_user(d: Driver) -> None:
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.tool_use("u2", "Edit", traits=UNSAFE, file_path="b.py")
    d.end("tool_use")
    d.feed(
        PermissionAnswered(generation=d.generation, tool_use_id="u1", decision="rejected_by_user")
    )
    assert d.transition == AbortedTools()


def _sc_sibling_cancellation(d: Driver) -> None:
    d.tool_use("b1", "Bash", traits=BASH, command="make")
    d.tool_use("r1", "Read", traits=ToolTraits(concurrency_safe=True), file_path="a.py")
    d.tool_use("b2", "Bash", traits=BASH, command="make test")
    d.end("tool_use")
    d.allow("b1")
    d.finish_tool("b1", "exit 2", is_error=True)
    assert d.transition == NextTurn()
    d.reply()
    d.hooks_pass()


def _sc_unknown_tool(d: Driver) -> None:
    d.tool_use("x1", "Frobnicate", traits=ToolTraits(known=False))
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.end("tool_use")
    d.allow("u1")
    d.finish_tool("u1")
    d.reply()
    d.hooks_pass()


def _sc_deny_by_rule(d: Driver) -> None:
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.tool_use("u2", "Edit", traits=UNSAFE, file_path="b.py")
    d.end("tool_use")
    d.feed(
        PermissionAnswered(
            generation=d.generation, tool_use_id="u1", decision="deny_by_rule", reason="no edits"
        )
    )
    d.allow("u2")
    d.finish_tool("u2")
    d.reply()
    d.hooks_pass()


def _sc_image_error(d: Driver) -> None:
    _running_safe_tool(d, "r1")
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    fail(d, "image_client", message="could not resize")
    assert d.transition == ImageError()


def _sc_retry_then_tools(d: Driver) -> None:
    _running_safe_tool(d, "r1")
    fail(d, "server_error")
    d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    _running_safe_tool(d, "r2")
    d.end("tool_use")
    d.finish_tool("r2")
    d.reply()
    d.hooks_pass()


SCENARIOS = {
    "model_error": _sc_model_error,
    "hard_interrupt_streaming": _sc_hard_interrupt_streaming,
    "hard_interrupt_tools": _sc_hard_interrupt_tools,
    "submit_interrupt_draining": _sc_submit_interrupt_draining,
    "rejected_by_user": _sc_rejected_by_user,
    "sibling_cancellation": _sc_sibling_cancellation,
    "unknown_tool": _sc_unknown_tool,
    "deny_by_rule": _sc_deny_by_rule,
    "image_error": _sc_image_error,
    "retry": _sc_retry_then_tools,
}


@pytest.mark.spec("G13")
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_g13_every_tool_use_has_exactly_one_result(name: str) -> None:
    """Every stored tool_use is answered by exactly one tool_result when the turn ends."""
    d = Driver(default())
    SCENARIOS[name](d)
    assert d.phase == "done"
    assert_pairing(d)


@pytest.mark.spec("G13")
def test_g13_sibling_results_name_the_failed_call() -> None:
    """Sibling cancellation gives the unfinished calls the cancellation text, the failed one its own."""
    d = Driver(default())
    _sc_sibling_cancellation(d)
    results = {
        b.tool_use_id: b.content
        for m in d.state.conversation.messages()
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    }
    cancelled = "<tool_use_error>Cancelled: parallel tool call Bash(make) errored</tool_use_error>"
    assert results == {"b1": "exit 2", "r1": cancelled, "b2": cancelled}


# --- G14 -------------------------------------------------------------------------------------


def _result_msg(d: Driver, tid: str) -> UserMessage:
    for m in d.state.conversation.messages():
        if isinstance(m, UserMessage) and any(
            isinstance(b, ToolResultBlock) and b.tool_use_id == tid for b in m.content
        ):
            return m
    raise AssertionError(f"no result for {tid}")


@pytest.mark.spec("G14")
def test_g14_oversized_result_persisted_once_and_frozen() -> None:
    """An oversized result is replaced by a preview once (PersistToolResult) and never rewritten."""
    cfg = default()
    big = "x" * 60_000
    d = Driver(cfg)
    d.tool_use("t1", "Bash", traits=UNSAFE, command="cat big")
    d.end("tool_use")
    d.allow("t1")
    fx = d.finish_tool("t1", big)
    assert of(fx, PersistToolResult) == [PersistToolResult(tool_use_id="t1", content=big)]
    stored = _result_msg(d, "t1")
    block = stored.content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.content.startswith("<persisted-output>")
    assert big[: cfg.preview_chars] in block.content
    assert len(block.content) < cfg.preview_chars + 500
    assert stored in emitted_in(fx)
    tool_round(d, "t2", content="small")
    tool_round(d, "t3", content="y" * 10_000)
    d.reply()
    d.hooks_pass()
    assert_finished(d, Completed())
    assert _result_msg(d, "t1") == stored
    assert [p.tool_use_id for p in d.of(PersistToolResult)] == ["t1"]
    assert _result_msg(d, "t3").content[0] == ToolResultBlock(
        tool_use_id="t3", content="y" * 10_000
    )


@pytest.mark.spec("G14")
def test_g14_round_total_budget_decided_when_written() -> None:
    """Crossing the per-round total replaces only the result that crossed it; earlier ones stay."""
    d = Driver(default())
    tids = [f"s{i}" for i in range(5)]
    for tid in tids:
        d.tool_use(tid, "Grep", traits=ToolTraits(concurrency_safe=True), pattern=tid)
        d.allow(tid)
    d.end("tool_use")
    body = "z" * 45_000
    for tid in tids:
        d.finish_tool(tid, body)
    assert [p.tool_use_id for p in d.of(PersistToolResult)] == ["s4"]
    for tid in tids[:4]:
        assert _result_msg(d, tid).content[0] == ToolResultBlock(tool_use_id=tid, content=body)
    last = _result_msg(d, "s4").content[0]
    assert isinstance(last, ToolResultBlock) and last.content.startswith("<persisted-output>")
    assert d.transition == NextTurn()


@pytest.mark.spec("G14")
def test_g14_unbudgeted_tool_keeps_full_result() -> None:
    """A tool with max_result_chars=None (like Read) is never replaced."""
    d = Driver(default())
    _running_safe_tool(d, "r1")
    d.end("tool_use")
    d.finish_tool("r1", "r" * 80_000)
    assert not d.of(PersistToolResult)
    block = _result_msg(d, "r1").content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.content == "r" * 80_000
