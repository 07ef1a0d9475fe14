"""Death-spiral guards G1..G14 (specs/rules.md, section "Death-spiral guards").

This file: G8 to G14; G1 to G7 are in test_guards.py.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from steploop.reducer import claude_code_2_1_88, default
from steploop.reducer.effects import (
    CallModel,
    CancelTools,
    Compact,
    Finish,
    PersistToolResult,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    Interrupted,
    PermissionAnswered,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    SystemMessage,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.transitions import (
    AbortedStreaming,
    AbortedTools,
    Completed,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    ModelError,
    NextTurn,
    StopHookBlocking,
    StopHookPrevented,
)
from tests.reducer.driver import BASH, SAFE, UNSAFE, Driver, usage
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

FALLBACK = "claude-haiku-4-5"


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
