"""Compatibility flags Q-1..Q-13 (default vs flipped) and the profiles P-* (specs/rules.md)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import (
    ConfigError,
    Gates,
    LoopConfig,
    RetryPolicy,
    claude_code_2_1_88,
    default,
    full,
)
from steploop.reducer.config import Compat
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    CancelTools,
    Compact,
    Emit,
    Finish,
    RunStopHooks,
    SummarizeToolUse,
)
from steploop.reducer.events import (
    CompactionFailed,
    Interrupted,
    ModelCallFailed,
    StopHooksFinished,
    ToolUseSummaryReady,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    SystemMessage,
    TextBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    UserMessage,
)
from steploop.reducer.transitions import (
    AbortedStreaming,
    BlockingLimit,
    HookStopped,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    NextTurn,
    StopHookBlocking,
    TokenBudgetContinuation,
)
from tests.reducer.driver import SAFE, UNSAFE, Driver, usage

MOT_NUDGE_PREFIX = "Output token limit hit. Resume directly"


# --- helpers ---------------------------------------------------------------------------------


def flip(cfg: LoopConfig, flag: str) -> LoopConfig:
    """The same config with exactly one compatibility flag switched on."""
    return attrs.evolve(cfg, compat=attrs.evolve(cfg.compat, **{flag: True}))


def with_gates(cfg: LoopConfig, **gates: bool) -> LoopConfig:
    return attrs.evolve(cfg, gates=attrs.evolve(cfg.gates, **gates))


def both(cfg: LoopConfig, flag: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize(
        ("flagged", "config"), [(False, cfg), (True, flip(cfg, flag))], ids=["default", flag]
    )


def fail(d: Driver, kind: str, **kw: Any) -> tuple[Any, ...]:
    return d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, **kw))


def of(fx: tuple[Any, ...] | list[Any], kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def emitted_in(fx: tuple[Any, ...]) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


def texts(items: Any) -> list[str]:
    out = []
    for m in items:
        if isinstance(m, (UserMessage, AssistantMessage)):
            out += [b.text for b in m.content if isinstance(b, TextBlock)]
    return out


def mot(d: Driver, text: str = "partial") -> tuple[Any, ...]:
    d.text(text)
    return d.end("max_tokens")


def result_ids(messages: Any) -> list[str]:
    return [
        b.tool_use_id
        for m in messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


def test_flip_changes_exactly_one_flag() -> None:
    """The helper switches only the named flag."""
    cfg = flip(default(), "unyielded_nudges")
    on = [f.name for f in attrs.fields(Compat) if getattr(cfg.compat, f.name)]
    assert on == ["unyielded_nudges"]
    assert attrs.evolve(cfg, compat=Compat()) == default()


# --- Q-1 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-1")
@both(default(), "reescalate_after_recovery")
def test_q1_reescalate_after_recovery(flagged: bool, config: LoopConfig) -> None:
    """escalate, recovery 1, then default: recovery 2; flag: escalate again."""
    d = Driver(config)
    mot(d)
    assert d.transition == MaxOutputTokensEscalate()
    mot(d)
    assert d.transition == MaxOutputTokensRecovery(attempt=1)
    assert of(d.last, CallModel)[-1].max_tokens == 8_000
    mot(d)
    if flagged:
        assert d.transition == MaxOutputTokensEscalate()
        assert of(d.last, CallModel)[-1].max_tokens == 64_000
    else:
        assert d.transition == MaxOutputTokensRecovery(attempt=2)
        assert of(d.last, CallModel)[-1].max_tokens == 8_000


@pytest.mark.spec("Q-1")
def test_q1_flag_allows_four_escalations_and_three_nudges() -> None:
    """Under the flag one turn makes 4 escalations and 3 nudges before the error surfaces."""
    d = Driver(flip(default(), "reescalate_after_recovery"))
    seen = []
    while d.phase != "done":
        mot(d)
        seen.append(type(d.transition).__name__)
    assert seen.count("MaxOutputTokensEscalate") == 4
    assert seen.count("MaxOutputTokensRecovery") == 3
    assert seen[-1] == "Completed"


# --- Q-2 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-2")
@both(default(), "ignore_midstream_hook_stop")
def test_q2_midstream_hook_stop(flagged: bool, config: LoopConfig) -> None:
    """hook_stopped from a tool finishing mid-stream: default ends hook_stopped; flag ignores it."""
    d = Driver(config)
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.py")
    d.allow("r1")
    d.finish_tool("r1", "text", hook_stopped=True)
    d.end("tool_use")
    if flagged:
        assert d.transition == NextTurn()
        assert isinstance(d.last[-1], CallModel)
    else:
        assert d.transition == HookStopped()
        assert isinstance(d.last[-1], Finish)


@pytest.mark.spec("Q-2")
@both(default(), "ignore_midstream_hook_stop")
def test_q2_hook_stop_after_the_stream_always_counts(flagged: bool, config: LoopConfig) -> None:
    """A hook stop from a tool finishing after the response ended stops the turn in both modes."""
    d = Driver(config)
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.end("tool_use")
    d.allow("u1")
    d.finish_tool("u1", "edited", hook_stopped=True)
    assert d.transition == HookStopped()


# --- Q-3 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-3")
@both(default(), "sticky_streaming_fallback")
def test_q3_sticky_streaming_fallback(flagged: bool, config: LoopConfig) -> None:
    """After a stream fallback, default keeps later blocks; flag tombstones the earlier ones."""
    d = Driver(config)
    d.text("a")
    fx = fail(d, "stream_broken")
    assert of(fx, CallModel)[0].streaming is False
    d.text("b")
    b_id = d.state.round.blocks[-1].id
    fx = d.text("c")
    tombs = [i for i in emitted_in(fx) if isinstance(i, Tombstone)]
    if flagged:
        assert tombs == [Tombstone(message_id=b_id)]
        assert [texts([m]) for m in d.state.round.blocks] == [["c"]]
    else:
        assert tombs == []
        assert [texts([m]) for m in d.state.round.blocks] == [["b"], ["c"]]
    d.end()
    hooks = of(d.last, RunStopHooks)[0]
    assert texts(hooks.conversation.messages()[1:]) == (["c"] if flagged else ["b", "c"])


# --- Q-4 -------------------------------------------------------------------------------------


Q4_BASE = with_gates(default(), reactive_compact=False, context_collapse=False)


@pytest.mark.spec("Q-4")
@both(Q4_BASE, "blocking_limit_with_auto_compact")
def test_q4_blocking_limit_with_auto_compact(flagged: bool, config: LoopConfig) -> None:
    """Over the limit after a failed auto-compact: default calls the model; flag blocks."""
    d = Driver(config)
    d.tool_use("u1", "Bash", traits=UNSAFE, command="ls")
    d.end("tool_use", usage(config.blocking_limit + 1_000))
    d.allow("u1")
    d.finish_tool("u1")
    assert [c.trigger for c in of(d.last, Compact)] == ["auto"]
    d.feed(CompactionFailed(compact_id=d.state.round.pending_id))
    if flagged:
        assert isinstance(d.last[-1], Finish) and d.last[-1].terminal == BlockingLimit()
    else:
        assert isinstance(d.last[-1], CallModel)
        assert d.state.tracking.consecutive_failures == 1


# --- Q-5 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-5")
@both(default(), "out_of_order_safe_results")
def test_q5_out_of_order_safe_results(flagged: bool, config: LoopConfig) -> None:
    """A finished safe tool overtakes an executing safe one only under the flag."""
    d = Driver(config)
    for tid in ("r1", "r2"):
        d.tool_use(tid, "Read", traits=SAFE, file_path=f"{tid}.py")
        d.allow(tid)
    fx = d.finish_tool("r2", "two")
    assert result_ids(emitted_in(fx)) == (["r2"] if flagged else [])
    fx = d.finish_tool("r1", "one")
    assert result_ids(emitted_in(fx)) == (["r1"] if flagged else ["r1", "r2"])
    d.end("tool_use")
    assert d.transition == NextTurn()
    stored = result_ids(d.state.conversation.messages())
    assert stored == (["r2", "r1"] if flagged else ["r1", "r2"])


@pytest.mark.spec("Q-5")
@both(default(), "out_of_order_safe_results")
def test_q5_never_overtakes_non_safe(flagged: bool, config: LoopConfig) -> None:
    """Even under the flag a result never overtakes an executing non-safe tool."""
    d = Driver(config)
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.tool_use("r1", "Read", traits=SAFE, file_path="b.py")
    d.end("tool_use")
    d.allow("u1")
    d.finish_tool("u1")
    d.allow("r1")
    d.finish_tool("r1")
    assert result_ids(d.state.conversation.messages()) == ["u1", "r1"]


# --- Q-12 ------------------------------------------------------------------------------------


@pytest.mark.spec("Q-12", "R-TOOL-2")
@both(default(), "nonsafe_tools_start_mid_stream")
def test_q12_nonsafe_tool_starts_mid_stream_when_nothing_executes(
    flagged: bool, config: LoopConfig
) -> None:
    """A non-safe tool is asked for as soon as its block completes under the flag (nothing else
    executes); without it, only once the response has ended (R-TOOL-2)."""
    d = Driver(config)
    fx = d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    assert [e.tool_use_id for e in of(fx, AskPermission)] == (["u1"] if flagged else [])
    if flagged:
        d.allow("u1")
        fx = d.tool_use("u2", "Write", traits=UNSAFE, file_path="b.py")
        assert of(fx, AskPermission) == []  # u1 executes: a second non-safe tool waits
        fx = d.tool_use("r1", "Read", traits=SAFE, file_path="c.py")
        assert of(fx, AskPermission) == []  # and blocks everything after it
        fx = d.finish_tool("u1")
        assert [e.tool_use_id for e in of(fx, AskPermission)] == ["u2"]
    else:
        fx = d.end("tool_use")
        assert [e.tool_use_id for e in of(fx, AskPermission)] == ["u1"]


@pytest.mark.spec("Q-12")
def test_q12_nonsafe_tool_waits_for_running_safe_tools() -> None:
    """Even under the flag a non-safe tool never starts beside an executing one."""
    d = Driver(flip(default(), "nonsafe_tools_start_mid_stream"))
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.py")
    d.allow("r1")
    fx = d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    assert of(fx, AskPermission) == []
    fx = d.finish_tool("r1")
    assert [e.tool_use_id for e in of(fx, AskPermission)] == ["u1"]


@pytest.mark.spec("Q-12")
def test_q12_is_on_in_the_shipped_profile_only() -> None:
    assert claude_code_2_1_88().compat.nonsafe_tools_start_mid_stream
    assert not default().compat.nonsafe_tools_start_mid_stream


# --- Q-13 ------------------------------------------------------------------------------------


def _emitted_kinds(fx: tuple[Any, ...]) -> list[str]:
    out = []
    for m in emitted_in(fx):
        if isinstance(m, SystemMessage):
            out.append(m.subtype)
        elif isinstance(m, AttachmentMessage):
            out.append(m.attachment_type)
        elif isinstance(m, UserMessage):
            out.append(m.origin)
    return out


@pytest.mark.spec("Q-13", "C-BLOCKING-1")
@both(default(), "stop_hook_summary_last")
def test_q13_feedback_before_the_summary(flagged: bool, config: LoopConfig) -> None:
    """A blocking hook: the default machine emits the summary, then the feedback; under the
    flag the feedback comes first, as Claude Code writes it. Message ids follow the order."""
    d = Driver(config)
    d.reply("first answer")
    fx = d.feed(
        StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("a", "b"), hook_count=1)
    )
    order = ["stop_hook_feedback", "stop_hook_feedback", "stop_hook_summary"]
    assert _emitted_kinds(fx) == (order if flagged else [order[2], *order[:2]])
    ids = [m.id for m in emitted_in(fx)]
    assert ids == sorted(ids, key=lambda i: int(i[1:]))
    assert d.transition == StopHookBlocking()


@pytest.mark.spec("Q-13", "T-PREVENT-1")
@both(default(), "stop_hook_summary_last")
def test_q13_prevent_attachment_before_the_summary(flagged: bool, config: LoopConfig) -> None:
    d = Driver(config)
    d.reply()
    fx = d.feed(
        StopHooksFinished(hooks_id=d.state.round.pending_id, prevent=True, stop_reason="halt", hook_count=2)
    )
    order = ["hook_stopped_continuation", "stop_hook_summary"]
    assert _emitted_kinds(fx) == (order if flagged else order[::-1])


@pytest.mark.spec("Q-13")
@both(default(), "stop_hook_summary_last")
def test_q13_same_order_where_the_hooks_write_nothing(flagged: bool, config: LoopConfig) -> None:
    """Hooks that pass, and the cap's notice (steploop's, not a hook's): the summary first either
    way."""
    d = Driver(config)
    d.reply()
    fx = d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, hook_count=1))
    assert _emitted_kinds(fx) == ["stop_hook_summary"]
    capped = Driver(attrs.evolve(config, stop_hook_block_cap=1))
    capped.reply()
    capped.feed(StopHooksFinished(hooks_id=capped.state.round.pending_id, blocking_errors=("x",)))
    capped.reply()  # the second block meets the cap
    fx = capped.feed(
        StopHooksFinished(hooks_id=capped.state.round.pending_id, blocking_errors=("x",), hook_count=1)
    )
    assert _emitted_kinds(fx) == ["stop_hook_summary", "stop_hook_cap"]


@pytest.mark.spec("Q-13")
def test_q13_is_on_in_the_shipped_profiles_only() -> None:
    assert claude_code_2_1_88().compat.stop_hook_summary_last
    assert full().compat.stop_hook_summary_last
    assert not default().compat.stop_hook_summary_last


# --- Q-6 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-6")
@both(default(), "unyielded_nudges")
def test_q6_mot_nudge_and_error(flagged: bool, config: LoopConfig) -> None:
    """MOT nudge: default emits it; flag stores nudge and withheld error without emitting."""
    d = Driver(config)
    mot(d)  # escalate
    fx = mot(d)  # recovery 1
    assert d.transition == MaxOutputTokensRecovery(attempt=1)
    nudges_emitted = [t for t in texts(emitted_in(fx)) if t.startswith(MOT_NUDGE_PREFIX)]
    assert len(nudges_emitted) == (0 if flagged else 1)
    sent = of(fx, CallModel)[-1].conversation.messages()
    assert [t for t in texts(sent) if t.startswith(MOT_NUDGE_PREFIX)]
    errs = [m for m in sent if isinstance(m, AssistantMessage) and m.api_error is not None]
    assert len(errs) == (1 if flagged else 0)
    assert not [m for m in d.emitted() if isinstance(m, AssistantMessage) and m.api_error]


@pytest.mark.spec("Q-6")
@both(default(), "unyielded_nudges")
def test_q6_token_budget_nudge(flagged: bool, config: LoopConfig) -> None:
    """Token-budget nudge: default emits it; flag only stores it."""
    d = Driver(config, token_budget=10_000)
    d.reply("some", usage(100, 100))
    fx = d.hooks_pass()
    assert d.transition == TokenBudgetContinuation()
    nudge = "Stopped at 1% of token target (100 / 10,000). Keep working — do not summarize."
    assert texts(emitted_in(fx)) == ([] if flagged else [nudge])
    assert texts(of(fx, CallModel)[-1].conversation.messages())[-1] == nudge


@pytest.mark.spec("Q-6")
@both(default(), "unyielded_nudges")
def test_q6_mot_error_followed_by_tool_use(flagged: bool, config: LoopConfig) -> None:
    """A MOT error with a complete tool_use: flag keeps it in state; never emitted in both."""
    d = Driver(config)
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.end("max_tokens")
    d.allow("u1")
    d.finish_tool("u1")
    assert d.transition == NextTurn()
    stored = [
        m
        for m in d.state.conversation.messages()
        if isinstance(m, AssistantMessage) and m.api_error is not None
    ]
    assert len(stored) == (1 if flagged else 0)
    assert not [m for m in d.emitted() if isinstance(m, AssistantMessage) and m.api_error]


# --- Q-7 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-7")
@both(default(), "no_tombstone_on_escalate")
def test_q7_no_tombstone_on_escalate(flagged: bool, config: LoopConfig) -> None:
    """Escalation tombstones the truncated blocks by default; the flag drops them silently."""
    d = Driver(config)
    d.text("partial")
    pid = d.state.round.blocks[0].id
    fx = d.end("max_tokens")
    assert d.transition == MaxOutputTokensEscalate()
    tombs = [i for i in emitted_in(fx) if isinstance(i, Tombstone)]
    assert tombs == ([] if flagged else [Tombstone(message_id=pid)])
    assert "partial" not in texts(of(fx, CallModel)[-1].conversation.messages())


# --- Q-8 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-8")
@both(default(), "image_error_skips_orphan_repair")
def test_q8_image_error_orphan_repair(flagged: bool, config: LoopConfig) -> None:
    """image_client error: default answers the attempt's tool_uses; flag leaves them unanswered."""
    d = Driver(config)
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    fx = fail(d, "image_client", message="could not resize")
    assert isinstance(fx[-1], Finish)
    stored = d.state.conversation.messages()
    uses = [
        b.id
        for m in stored
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    assert uses == ["u1"]
    assert result_ids(stored) == ([] if flagged else ["u1"])
    assert result_ids(emitted_in(fx)) == ([] if flagged else ["u1"])


@pytest.mark.spec("Q-8", "T-IMAGE-1")
@both(default(), "image_error_skips_orphan_repair")
def test_q8_running_tools_cancelled_in_both_modes(flagged: bool, config: LoopConfig) -> None:
    """image_client error cancels running tools whether or not the orphan repair is skipped."""
    d = Driver(config)
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.png")
    d.allow("r1")
    gen = d.generation
    fx = fail(d, "image_client", message="could not resize")
    cancels = of(fx, CancelTools)
    assert [(c.generation, c.tool_use_ids) for c in cancels] == [(gen, ("r1",))]


# --- Q-9 -------------------------------------------------------------------------------------


@pytest.mark.spec("Q-9")
@both(default(), "model_error_leaves_tools_running")
def test_q9_model_error_cancels_running_tools(flagged: bool, config: LoopConfig) -> None:
    """model_error cancels running tools by default; the flag leaves them running."""
    d = Driver(config)
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.py")
    d.allow("r1")
    gen = d.generation
    fx = fail(d, "unknown", message="weird")
    cancels = of(fx, CancelTools)
    if flagged:
        assert cancels == []
    else:
        assert cancels == [CancelTools(generation=gen, tool_use_ids=("r1",), reason="model_error")]
    assert result_ids(d.state.conversation.messages()) == ["r1"]


# --- Q-10 ------------------------------------------------------------------------------------


Q10_BASE = with_gates(default(), tool_use_summaries=True)


@pytest.mark.spec("Q-10")
@both(Q10_BASE, "summary_dropped_on_abort")
def test_q10_summary_dropped_on_abort(flagged: bool, config: LoopConfig) -> None:
    """A ready summary is emitted before Finish on an abort by default; dropped under the flag."""
    d = Driver(config)
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.end("tool_use")
    d.allow("u1")
    d.finish_tool("u1")
    (summ,) = of(d.last, SummarizeToolUse)
    d.feed(ToolUseSummaryReady(summary_id=summ.summary_id, summary="Edited a.py"))
    fx = d.feed(Interrupted(kind="hard"))
    assert isinstance(fx[-1], Finish) and fx[-1].terminal == AbortedStreaming()
    summaries = [i for i in emitted_in(fx) if isinstance(i, ToolUseSummary)]
    if flagged:
        assert summaries == []
    else:
        assert summaries == [ToolUseSummary(summary="Edited a.py", preceding_tool_use_ids=("u1",))]


# --- Q-11 ------------------------------------------------------------------------------------


@pytest.mark.spec("Q-11")
@both(default(), "stop_hook_active_cleared_by_recovery")
def test_q11_stop_hook_active_after_recovery(flagged: bool, config: LoopConfig) -> None:
    """After stop_hook_blocking then an escalation, stop_hook_active is kept (flag: cleared)."""
    d = Driver(config)
    d.reply()
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("no",)))
    assert d.transition == StopHookBlocking()
    assert d.state.stop_hook_active is True
    mot(d)
    assert d.transition == MaxOutputTokensEscalate()
    d.reply()
    assert of(d.last, RunStopHooks)[0].stop_hook_active is (not flagged)


@pytest.mark.spec("Q-11")
@both(default(), "stop_hook_active_cleared_by_recovery")
def test_q11_next_turn_keeps_stop_hook_active(flagged: bool, config: LoopConfig) -> None:
    """next_turn keeps stop_hook_active in both modes."""
    d = Driver(config)
    d.reply()
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("no",)))
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.end("tool_use")
    d.allow("u1")
    d.finish_tool("u1")
    assert d.transition == NextTurn()
    d.reply()
    assert of(d.last, RunStopHooks)[0].stop_hook_active is True


# --- profiles --------------------------------------------------------------------------------


@pytest.mark.spec("P-DEFAULT-1")
def test_p_default_values() -> None:
    """default(): every gate but summaries and the tool-list refresh on, 8k cap, session breaker,
    cap 8, stripping, no flags."""
    cfg = default()
    gates = attrs.asdict(cfg.gates)
    assert {k for k, v in gates.items() if not v} == {"tool_use_summaries", "tool_refresh"}
    assert cfg.default_max_tokens == 8_000
    assert cfg.escalated_max_output_tokens == 64_000
    assert cfg.autocompact_breaker_scope == "session"
    assert cfg.stop_hook_block_cap == 8
    assert cfg.strip_signatures_on_fallback is True
    assert not any(attrs.asdict(cfg.compat).values())
    assert cfg.auto_compact_enabled is True
    assert (cfg.autocompact_threshold, cfg.blocking_limit) == (179_000, 189_000)


@pytest.mark.spec("P-CC-1")
def test_p_claude_code_values() -> None:
    """claude_code_2_1_88(): shipped gates, turn breaker, no cap, no stripping, every flag on."""
    cfg = claude_code_2_1_88()
    gates = attrs.asdict(cfg.gates)
    off = {
        "history_snip",
        "time_based_microcompact",
        "context_collapse",
        "reactive_compact",
        "max_tokens_escalation",
        "tool_use_summaries",
    }
    assert {k for k, v in gates.items() if not v} == off
    assert cfg.autocompact_breaker_scope == "turn"
    assert cfg.stop_hook_block_cap is None
    assert cfg.strip_signatures_on_fallback is False
    assert all(attrs.asdict(cfg.compat).values())
    assert cfg.default_max_tokens == 32_000
    assert cfg.auto_compact_enabled is True
    assert cfg.profile_name == "claude_code_2_1_88"


@pytest.mark.spec("P-CC-1")
def test_p_claude_code_first_call_uses_model_default_max_tokens() -> None:
    """With escalation off the shipped build calls the model with its default max_tokens."""
    d = Driver(claude_code_2_1_88())
    assert d.of(CallModel)[0].max_tokens == 32_000
    d.text("cut")
    d.end("max_tokens")
    assert d.transition == MaxOutputTokensRecovery(attempt=1)


@pytest.mark.spec("P-FULL-1")
def test_p_full_values() -> None:
    """full(): every gate on, every flag on, auto-compact off because collapse owns overflow."""
    cfg = full()
    assert all(attrs.asdict(cfg.gates).values())
    assert all(attrs.asdict(cfg.compat).values())
    assert cfg.collapse_disables_auto_compact is True
    assert cfg.auto_compact_enabled is False
    assert cfg.profile_name == "full"


@pytest.mark.spec("P-FULL-1")
def test_p_full_never_auto_compacts_above_threshold() -> None:
    """full(): above the auto-compact threshold no Compact is emitted; the model is called."""
    cfg = full()
    d = Driver(cfg)
    d.tool_use("u1", "Bash", traits=UNSAFE, command="ls")
    d.end("tool_use", usage(cfg.autocompact_threshold + 1_000))
    d.allow("u1")
    d.finish_tool("u1")
    assert d.state.conversation.token_count() >= cfg.autocompact_threshold
    assert not d.of(Compact)
    assert isinstance(d.last[-1], CallModel)


@pytest.mark.spec("P-FULL-1")
def test_p_full_without_collapse_auto_compacts() -> None:
    """Control: full() with collapse off does auto-compact at the same count."""
    cfg = with_gates(full(), context_collapse=False)
    d = Driver(cfg)
    d.tool_use("u1", "Bash", traits=UNSAFE, command="ls")
    d.end("tool_use", usage(cfg.autocompact_threshold + 1_000))
    d.allow("u1")
    d.finish_tool("u1")
    assert [c.trigger for c in d.of(Compact)] == ["auto"]


@pytest.mark.spec("P-CONFIG-1")
@pytest.mark.parametrize(
    "build",
    [
        pytest.param(lambda: default(context_window=-1), id="negative-window"),
        pytest.param(lambda: default(context_window=0), id="zero-window"),
        pytest.param(lambda: default(max_output_tokens=-5), id="negative-max-output"),
        pytest.param(lambda: default(snip_keep_rounds=0), id="zero-keep-rounds"),
        pytest.param(lambda: default(stop_hook_block_cap=-1), id="negative-cap"),
        pytest.param(lambda: RetryPolicy(max_retries=-1), id="negative-retries"),
        pytest.param(lambda: default(autocompact_breaker_scope="forever"), id="breaker-scope"),
        pytest.param(lambda: default(context_window=20_000), id="window-below-buffers"),
        pytest.param(lambda: default(fallback_model="claude-sonnet-4-5"), id="fallback-eq-model"),
        pytest.param(lambda: default().with_overrides({"gates.nope": True}), id="unknown-key"),
        pytest.param(lambda: default().with_overrides({"bogus": 1}), id="unknown-top-key"),
        pytest.param(lambda: default().with_overrides({"gates": Gates()}), id="group-key"),
        pytest.param(lambda: default().with_overrides({"context_window": 0}), id="bad-value"),
        pytest.param(
            lambda: default().with_overrides({"autocompact_breaker_scope": "x"}),
            id="override-scope",
        ),
    ],
)
def test_p_config_invalid_raises(build: Any) -> None:
    """Invalid configuration values raise ConfigError when the config is built."""
    with pytest.raises(ConfigError):
        build()


@pytest.mark.spec("P-CONFIG-1")
def test_p_config_valid_overrides_apply() -> None:
    """Control: a known dotted key is applied and leaves the rest untouched."""
    cfg = default().with_overrides({"gates.reactive_compact": False, "retry.max_retries": 2})
    assert cfg.gates.reactive_compact is False
    assert cfg.retry.max_retries == 2
    assert attrs.evolve(cfg, gates=Gates(), retry=RetryPolicy()) == default()
