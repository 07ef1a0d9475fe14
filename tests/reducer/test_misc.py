"""Summaries, queued commands, stop hooks, ids, sessions, serialization, purity and
determinism (specs/rules.md R-SUM-1, R-CMD-1..2, R-HOOK-1/4, R-ID-1, R-SESSION-1, R-SER-1,
R-PURE-1, M-1)."""

from __future__ import annotations

import ast
import json
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import steploop.reducer
from steploop.reducer import (
    IllegalEvent,
    LoopConfig,
    LoopState,
    Request,
    Session,
    claude_code_2_1_88,
    default,
    full,
    start,
    step,
)
from steploop.reducer.config import Gates
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AcknowledgeCommands,
    AskPermission,
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelRefreshTools,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Effect,
    Emit,
    Finish,
    PersistToolResult,
    RefreshTools,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    TaskBudget,
    Wait,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    MessagesInserted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    ImageBlock,
    Message,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    Usage,
    UserMessage,
)
from steploop.reducer.serialize import SerializationError, structure, unstructure
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
    TERMINAL_TYPES,
    AbortedStreaming,
    AbortedTools,
    BlockingLimit,
    CollapseDrainRetry,
    Completed,
    HookStopped,
    ImageError,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    ModelError,
    NextTurn,
    PromptTooLong,
    ReactiveCompactRetry,
    StopHookBlocking,
    StopHookPrevented,
    TokenBudgetContinuation,
    Transition,
)
from tests.reducer.driver import BASH, SAFE, UNSAFE, Driver, usage

ROOT = Path(__file__).resolve().parents[2]
SUMMARIES = Gates(tool_use_summaries=True)


def summaries_cfg(**kw: Any) -> LoopConfig:
    return default(gates=SUMMARIES, **kw)


def emitted_summaries(fx: Any) -> list[ToolUseSummary]:
    return [e.item for e in fx if isinstance(e, Emit) and isinstance(e.item, ToolUseSummary)]


def tool_round(d: Driver, tid: str, traits: ToolTraits = SAFE, **kw: Any) -> tuple[Effect, ...]:
    d.tool_use(tid, traits=traits)
    if traits.concurrency_safe:
        d.allow(tid)
        d.end("tool_use", **kw)
    else:
        d.end("tool_use", **kw)
        d.allow(tid)
    return d.finish_tool(tid, f"out {tid}")


# --- R-SUM-1 ----------------------------------------------------------------------------------


@pytest.mark.spec("R-SUM-1")
def test_summary_requested_after_tools() -> None:
    """With the gate on, SummarizeToolUse follows the round's tools, before the next call."""
    d = Driver(summaries_cfg())
    fx = tool_round(d, "t1")
    kinds = [type(e) for e in fx]
    assert SummarizeToolUse in kinds and kinds.index(SummarizeToolUse) < kinds.index(CallModel)
    (req,) = [e for e in fx if isinstance(e, SummarizeToolUse)]
    assert req.summary_id == 1
    assert req.tool_use_ids == ("t1",)
    assert req.conversation == d.state.conversation


@pytest.mark.spec("R-SUM-1")
def test_summary_emitted_after_next_response_ends() -> None:
    """A summary ready mid-stream is held until the next response ends, then emitted."""
    d = Driver(summaries_cfg())
    tool_round(d, "t1")
    assert d.feed(ToolUseSummaryReady(summary_id=1, summary="Read a file")) == ()
    assert d.text("done") and not emitted_summaries(d.last)
    fx = d.end("end_turn")
    assert emitted_summaries(fx) == [
        ToolUseSummary(summary="Read a file", preceding_tool_use_ids=("t1",))
    ]
    kinds = [type(e) for e in fx]
    assert kinds.index(Emit) < kinds.index(RunStopHooks)
    d.hooks_pass()
    assert len(emitted_summaries(d.effects)) == 1


@pytest.mark.spec("R-SUM-1")
def test_summary_emitted_at_once_when_response_already_ended() -> None:
    """Ready after the next response ended (stop hooks running): emitted at once."""
    d = Driver(summaries_cfg())
    tool_round(d, "t1")
    d.reply("done")
    assert d.phase == "stop_hooks"
    fx = d.feed(ToolUseSummaryReady(summary_id=1, summary="Read a file"))
    assert emitted_summaries(fx) == [
        ToolUseSummary(summary="Read a file", preceding_tool_use_ids=("t1",))
    ]
    fx = d.hooks_pass()
    assert emitted_summaries(fx) == []


@pytest.mark.spec("R-SUM-1")
def test_failed_summary_emits_nothing() -> None:
    """A summary of None emits nothing, then or later."""
    d = Driver(summaries_cfg())
    tool_round(d, "t1")
    assert d.feed(ToolUseSummaryReady(summary_id=1, summary=None)) == ()
    d.reply("done")
    d.hooks_pass()
    assert emitted_summaries(d.effects) == []
    assert isinstance(d.finished(), Finish)


@pytest.mark.spec("R-SUM-1")
def test_superseded_summary_ignored() -> None:
    """A summary for an earlier request, once a newer one was made, is ignored."""
    d = Driver(summaries_cfg())
    tool_round(d, "t1")
    fx = tool_round(d, "t2")
    assert [e.summary_id for e in fx if isinstance(e, SummarizeToolUse)] == [2]
    before = d.state
    assert d.feed(ToolUseSummaryReady(summary_id=1, summary="old")) == ()
    assert d.state == before
    d.feed(ToolUseSummaryReady(summary_id=2, summary="new"))
    fx = d.reply("done")
    assert emitted_summaries(fx) == [ToolUseSummary(summary="new", preceding_tool_use_ids=("t2",))]
    with pytest.raises(IllegalEvent):
        d.feed(ToolUseSummaryReady(summary_id=9, summary="never requested"))


@pytest.mark.spec("R-SUM-1")
def test_summary_emitted_before_finish_when_no_response_follows() -> None:
    """A summary still held when the turn ends is emitted before Finish (default profile)."""
    d = Driver(summaries_cfg())
    tool_round(d, "t1")
    d.feed(ToolUseSummaryReady(summary_id=1, summary="Read a file"))
    fx = d.feed(Interrupted(kind="hard"))
    assert emitted_summaries(fx) == [
        ToolUseSummary(summary="Read a file", preceding_tool_use_ids=("t1",))
    ]
    assert isinstance(fx[-1], Finish)


@pytest.mark.spec("R-SUM-1")
def test_no_summary_when_gate_off_or_subagent() -> None:
    """Gate off (default) or a sub-agent: no SummarizeToolUse."""
    for cfg in (
        default(),
        summaries_cfg(agent_id="agent-1"),
        summaries_cfg(query_source="agent:x"),
    ):
        d = Driver(cfg)
        tool_round(d, "t1")
        assert not d.of(SummarizeToolUse)


def _phase_with_summary_pending(phase: str) -> Driver:
    small = default(
        context_window=50_000,
        gates=Gates(tool_use_summaries=True, history_snip=False, context_collapse=False),
    )
    d = Driver(small)
    if phase == "compacting":
        tool_round(d, "t1", u=Usage(input_tokens=30_000))
    else:
        tool_round(d, "t1")
    if phase == "waiting_retry":
        d.feed(ModelCallFailed(call_id=d.call_id, kind="rate_limited", status=429))
    elif phase == "running_tools":
        d.tool_use("t2", name="Edit", traits=UNSAFE)
        d.end("tool_use")
    elif phase == "draining":
        d.tool_use("t2", traits=ToolTraits(concurrency_safe=True, interrupt="block"))
        d.allow("t2")
        d.feed(Interrupted(kind="submit"))
    elif phase == "reactive_compacting":
        d.feed(ModelCallFailed(call_id=d.call_id, kind="prompt_too_long"))
    elif phase == "stop_hooks":
        d.reply("done")
    assert d.phase == phase
    return d


NON_TERMINAL = [
    "compacting",
    "streaming",
    "waiting_retry",
    "running_tools",
    "draining",
    "reactive_compacting",
    "stop_hooks",
]


@pytest.mark.spec("R-SUM-1", "M-3")
@pytest.mark.parametrize("phase", NON_TERMINAL)
def test_summary_ready_legal_in_every_non_terminal_phase(phase: str) -> None:
    """ToolUseSummaryReady is accepted in every non-terminal phase."""
    d = _phase_with_summary_pending(phase)
    d.feed(ToolUseSummaryReady(summary_id=1, summary="Read a file"))
    assert d.phase == phase


# --- R-CMD-1 / R-CMD-2 ------------------------------------------------------------------------


@pytest.mark.spec("R-CMD-1")
@pytest.mark.parametrize("phase", NON_TERMINAL)
def test_command_queued_legal_in_every_non_terminal_phase(phase: str) -> None:
    """CommandQueued is accepted (and only recorded) in every non-terminal phase."""
    d = _phase_with_summary_pending(phase)
    fx = d.feed(CommandQueued(command_id="c1", text="also run the tests"))
    assert fx == ()
    assert d.phase == phase


@pytest.mark.spec("R-CMD-1", "R-CMD-2")
def test_queued_commands_attached_on_tool_path_and_acknowledged() -> None:
    """On the tool path commands become queued_command attachments; acked before Finish."""
    d = Driver(default())
    d.tool_use("t1")
    d.feed(CommandQueued(command_id="c1", text="also run the tests"))
    d.feed(CommandQueued(command_id="c2", text="and lint"))
    d.allow("t1")
    d.end("tool_use")
    fx = d.finish_tool("t1")
    atts = [e.item for e in fx if isinstance(e, Emit) and isinstance(e.item, AttachmentMessage)]
    assert [a.attachment_type for a in atts] == ["queued_command", "queued_command"]
    assert [dict(a.data)["prompt"] for a in atts] == ["also run the tests", "and lint"]
    sent = next(e for e in fx if isinstance(e, CallModel)).conversation.messages()
    assert list(sent[-2:]) == atts
    assert not d.of(AcknowledgeCommands)
    d.reply("done")
    fx = d.hooks_pass()
    assert fx[-2:] == (AcknowledgeCommands(command_ids=("c1", "c2")), Finish(terminal=Completed()))


@pytest.mark.spec("R-CMD-2")
def test_acknowledged_on_aborted_terminal() -> None:
    """Consumed commands are acknowledged before Finish on every Terminal, aborts included."""
    d = Driver(default())
    d.feed(CommandQueued(command_id="c1", text="x"))
    tool_round(d, "t1")
    fx = d.feed(Interrupted(kind="hard"))
    assert fx[-2:] == (
        AcknowledgeCommands(command_ids=("c1",)),
        Finish(terminal=AbortedStreaming()),
    )


@pytest.mark.spec("R-CMD-2")
def test_no_acknowledgement_without_finish_or_consumption() -> None:
    """A turn stopped early acknowledges nothing; unconsumed commands are not acknowledged."""
    d = Driver(default())
    d.feed(CommandQueued(command_id="c1", text="x"))
    tool_round(d, "t1")
    assert not d.of(AcknowledgeCommands) and d.finished() is None
    d = Driver(default())
    d.feed(CommandQueued(command_id="c1", text="x"))
    d.reply("done")
    fx = d.hooks_pass()
    assert not any(isinstance(e, AcknowledgeCommands) for e in fx)
    assert isinstance(fx[-1], Finish)


# --- R-HOOK-1 / R-HOOK-4 ----------------------------------------------------------------------


@pytest.mark.spec("R-HOOK-1", "C-BLOCKING-1")
def test_stop_hooks_carry_conversation_and_active_flag() -> None:
    """RunStopHooks carries the conversation including the response and stop_hook_active."""
    d = Driver(default())
    fx = d.reply("first answer")
    (run,) = [e for e in fx if isinstance(e, RunStopHooks)]
    assert run.stop_hook_active is False
    last = run.conversation.messages()[-1]
    assert isinstance(last, AssistantMessage) and last.content == (TextBlock(text="first answer"),)
    assert last.usage == usage()
    assert d.phase == "stop_hooks"
    d.feed(StopHooksFinished(hooks_id=run.hooks_id, blocking_errors=("tests fail",)))
    fx = d.reply("second answer")
    (run2,) = [e for e in fx if isinstance(e, RunStopHooks)]
    assert run2.stop_hook_active is True
    assert run2.hooks_id != run.hooks_id
    texts = [
        b.text
        for m in run2.conversation.messages()
        if isinstance(m, (UserMessage, AssistantMessage))
        for b in m.content
        if isinstance(b, TextBlock)
    ]
    assert texts[-3:] == ["first answer", "Stop hook feedback:\ntests fail", "second answer"]


@pytest.mark.spec("R-HOOK-1")
def test_hook_summary_notice_only_when_hooks_ran() -> None:
    """A summary notice is emitted when hooks ran (hook_count > 0), none otherwise."""
    d = Driver(default())
    d.reply("done")
    fx = d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, hook_count=2))
    notices = [e.item for e in fx if isinstance(e, Emit) and isinstance(e.item, SystemMessage)]
    assert len(notices) == 1
    d = Driver(default())
    d.reply("done")
    fx = d.hooks_pass()
    assert not [e for e in fx if isinstance(e, Emit) and isinstance(e.item, SystemMessage)]


@pytest.mark.spec("R-HOOK-1", "G1")
def test_no_stop_hooks_on_tool_path_or_api_error() -> None:
    """Stop hooks never run on the tool path nor after an emitted API error."""
    d = Driver(default())
    tool_round(d, "t1")
    assert not d.of(RunStopHooks)
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="auth", status=401, message="bad key"))
    assert not d.of(RunStopHooks)
    assert fx[-1] == Finish(terminal=Completed())


@pytest.mark.spec("R-HOOK-4")
def test_failing_hooks_warn_and_continue() -> None:
    """StopHooksFinished(error=...) emits 'Stop hook failed: <error>' and completes."""
    d = Driver(default())
    d.reply("done")
    fx = d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, error="boom"))
    warns = [e.item for e in fx if isinstance(e, Emit) and isinstance(e.item, SystemMessage)]
    assert [w.text for w in warns] == ["Stop hook failed: boom"]
    assert fx[-1] == Finish(terminal=Completed())


# --- R-ID-1 / R-SESSION-1 ---------------------------------------------------------------------


def _message_ids(fx: Any) -> list[str]:
    return [
        e.item.id
        for e in fx
        if isinstance(e, Emit)
        and isinstance(e.item, (UserMessage, AssistantMessage, SystemMessage, AttachmentMessage))
    ]


def _turn(with_retry: bool) -> Driver:
    d = Driver(summaries_cfg())
    tool_round(d, "t1")
    if with_retry:
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        d.feed(WaitElapsed(wait_id=d.of(Wait)[-1].wait_id))
    tool_round(d, "t2")
    d.reply("done")
    d.hooks_pass()
    return d


@pytest.mark.spec("R-ID-1")
def test_ids_per_kind() -> None:
    """Each kind has its own counter; inserting a retry renumbers no other kind."""
    plain = _turn(with_retry=False)
    retried = _turn(with_retry=True)
    assert [c.call_id for c in plain.of(CallModel)] == [1, 2, 3]
    assert [c.call_id for c in retried.of(CallModel)] == [1, 2, 3, 4]
    assert [w.wait_id for w in retried.of(Wait)] == [1]
    for d in (plain, retried):
        assert [s.summary_id for s in d.of(SummarizeToolUse)] == [1, 2]
        assert [h.hooks_id for h in d.of(RunStopHooks)] == [1]
        ids = _message_ids(d.effects)
        assert ids == [f"m{i}" for i in range(1, len(ids) + 1)]
    assert [s.generation for s in plain.of(StartTool)] == [1, 2]
    assert [s.generation for s in retried.of(StartTool)] == [1, 3]


@pytest.mark.spec("R-ID-1", "R-SESSION-1")
def test_ids_continue_across_turns() -> None:
    """Message ids (m1..), call ids and hook ids continue in the next turn of the session."""
    d = _turn(with_retry=False)
    last = len(_message_ids(d.effects))
    d2 = Driver(summaries_cfg(), prompt="next", session=d.state.session())
    (prompt_emit, call) = d2.last
    assert isinstance(prompt_emit, Emit) and prompt_emit.item.id == f"m{last + 1}"  # type: ignore[union-attr]
    assert isinstance(call, CallModel) and call.call_id == 4
    tool_round(d2, "t9")
    assert d2.of(SummarizeToolUse)[0].summary_id == 3
    d2.reply("ok")
    assert d2.of(RunStopHooks)[0].hooks_id == 2


@pytest.mark.spec("R-SESSION-1")
def test_second_turn_keeps_conversation() -> None:
    """start(request, config, state.session()) continues the conversation; prompt appended."""
    d = Driver(default(), prompt="first")
    d.reply("answer", u=usage(100, 10))
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id))
    first = d.state.conversation
    session = d.state.session()
    assert session.conversation == first
    state, fx = start(Request(prompt="second", at_ms=5), default(), session)
    assert isinstance(fx[0], Emit) and isinstance(fx[0].item, UserMessage)
    assert fx[0].item.content == (TextBlock(text="second"),)
    call = fx[-1]
    assert isinstance(call, CallModel)
    assert call.conversation.messages() == (*first.messages(), fx[0].item)
    assert state.conversation.prev is first  # shared, not copied


@pytest.mark.spec("R-SESSION-1", "R-RETRY-2", "G6")
def test_session_carries_model_failures_and_time() -> None:
    """The fallback model, the auto-compact failures and the last response time carry over."""
    cfg = default(
        fallback_model="claude-haiku-4-5",
        context_window=50_000,
        gates=Gates(history_snip=False, context_collapse=False),
    )
    d = Driver(cfg)
    for _ in range(3):
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        if d.phase == "waiting_retry":
            d.feed(WaitElapsed(wait_id=d.of(Wait)[-1].wait_id))
    assert d.of(CallModel)[-1].model == "claude-haiku-4-5"
    tool_round(d, "t1", u=Usage(input_tokens=30_000), at_ms=777)
    d.feed(CompactionFailed(compact_id=d.of(Compact)[-1].compact_id))
    d.reply("done", u=Usage(input_tokens=100))
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id))
    assert isinstance(d.finished(), Finish)
    s = d.state.session()
    assert s.model == "claude-haiku-4-5"
    assert s.autocompact_failures == 1
    state, fx = start(Request(prompt="again"), cfg, s)
    assert isinstance(fx[-1], CallModel) and fx[-1].model == "claude-haiku-4-5"
    assert state.tracking.consecutive_failures == 1
    turn_scoped = attrs.evolve(cfg, autocompact_breaker_scope="turn")
    state, _ = start(Request(prompt="again"), turn_scoped, s)
    assert state.tracking.consecutive_failures == 0
    assert Session().model is None


@pytest.mark.spec("R-SESSION-1")
def test_session_carries_last_response_time() -> None:
    """last_assistant_at_ms is the at_ms of the last ModelResponseEnded."""
    d = Driver(default())
    d.text("done")
    d.end("end_turn", at_ms=123_456)
    d.hooks_pass()
    assert d.state.session().last_assistant_at_ms == 123_456


# --- R-SER-1 ----------------------------------------------------------------------------------


def roundtrip(value: Any, cls: Any) -> None:
    data = unstructure(value)
    text = json.dumps(data)
    back = structure(json.loads(text), cls)
    assert back == value, (value, back)
    assert unstructure(back) == data


def _scenario_states() -> list[LoopState]:
    """The state after every step of a multi-round turn touching most phases."""
    cfg = default(
        context_window=50_000,
        gates=Gates(tool_use_summaries=True, history_snip=False, context_collapse=False),
    )
    d = Driver(cfg, task_budget=90_000, token_budget=1_000_000)
    states = [d.state]
    steps: list[Callable[[], Any]] = [
        lambda: d.text("thinking aloud"),
        lambda: d.block(ThinkingBlock(thinking="hmm", signature="sig")),
        lambda: d.tool_use("t1", file_path="/a", opts={"n": [1, 2]}),
        lambda: d.tool_use("t2", name="Bash", traits=BASH, command="ls"),
        lambda: d.feed(CommandQueued(command_id="c1", text="more")),
        lambda: d.allow("t1"),
        lambda: d.end("tool_use", Usage(input_tokens=30_000, output_tokens=50)),
        lambda: d.finish_tool("t1", "contents"),
        lambda: d.allow("t2"),
        lambda: d.finish_tool("t2", "listing", hook_stopped=False),
        lambda: d.feed(
            CompactionFinished(
                compact_id=d.state.round.pending_id,
                messages=(
                    SystemMessage(id="c1", subtype="compact_boundary", text="compacted"),
                    UserMessage(
                        id="c2",
                        content=(TextBlock(text="summary"),),
                        is_meta=True,
                        origin="compact",
                    ),
                ),
            )
        ),
        lambda: d.feed(ToolUseSummaryReady(summary_id=1, summary="Read and listed")),
        lambda: d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529)),
        lambda: d.feed(WaitElapsed(wait_id=d.state.round.pending_id)),
        lambda: d.text("max"),
        lambda: d.end("max_tokens", Usage(input_tokens=100, output_tokens=8_000)),
        lambda: d.reply("done", Usage(input_tokens=100, output_tokens=10)),
        lambda: d.feed(
            StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("again",))
        ),
        lambda: d.tool_use("t3", name="Edit", traits=UNSAFE),
        lambda: d.end("tool_use"),
        lambda: d.allow("t3"),
        lambda: d.feed(Interrupted(kind="submit")),
        lambda: d.finish_tool("t3", "edited"),
    ]
    for s in steps:
        s()
        states.append(d.state)
    assert d.phase == "done"
    return states


@pytest.mark.spec("R-SER-1")
def test_state_roundtrip_after_every_step() -> None:
    """LoopState after each step of a multi-round turn round-trips unchanged through JSON."""
    states = _scenario_states()
    phases = {s.phase for s in states}
    assert {
        "streaming",
        "running_tools",
        "compacting",
        "waiting_retry",
        "stop_hooks",
        "draining",
        "done",
    } <= phases
    for s in states:
        roundtrip(s, LoopState)
        roundtrip(s.session(), Session)


@pytest.mark.spec("R-SER-1")
def test_session_and_config_roundtrip() -> None:
    """Session and the LoopConfig of each profile round-trip unchanged."""
    roundtrip(Session(), Session)
    for cfg in (default(), claude_code_2_1_88(), full(), default(fallback_model="fb", max_turns=3)):
        roundtrip(cfg, LoopConfig)
    for make in steploop.reducer.PROFILES.values():
        roundtrip(make(), LoopConfig)


def _conv() -> Conversation:
    return Conversation.of(
        [
            UserMessage(
                id="m1",
                content=(TextBlock(text="hi"), ImageBlock(media_type="image/png", data="AAA")),
            ),
            AssistantMessage(
                id="m2",
                response_id="r1",
                model="m",
                content=(ToolUseBlock(id="t1", name="Read", input={"a": {"b": [1, None, True]}}),),
                stop_reason="tool_use",
                usage=Usage(input_tokens=1, output_tokens=2),
            ),
            UserMessage(
                id="m3", content=(ToolResultBlock(tool_use_id="t1", content="x", is_error=True),)
            ),
            AssistantMessage(
                id="m4", response_id="r2", model="m", content=(RedactedThinkingBlock(data="zz"),)
            ),
        ]
    )


EVENTS: list[Any] = [
    ModelBlockReceived(
        call_id=1,
        block=ToolUseBlock(id="t1", name="Read", input={"p": 1}),
        tool=SAFE,
        input_complete=False,
        at_ms=3,
    ),
    ModelResponseEnded(call_id=1, model="m", stop_reason=None, usage=Usage(input_tokens=5)),
    ModelCallFailed(
        call_id=1, kind="rate_limited", message="slow down", status=429, retry_after_ms=100
    ),
    ToolFinished(generation=1, tool_use_id="t1", content="ok", is_error=True, hook_stopped=True),
    PermissionAnswered(generation=1, tool_use_id="t1", decision="deny_by_rule", reason="rule"),
    CompactionFinished(
        compact_id=1, messages=(SystemMessage(id="c1", subtype="compact_boundary", text="x"),)
    ),
    CompactionFailed(compact_id=1, reason="r"),
    StopHooksFinished(
        hooks_id=1,
        blocking_errors=("a", "b"),
        prevent=True,
        stop_reason="s",
        hook_count=2,
        error="e",
    ),
    Interrupted(kind="submit", at_ms=9),
    WaitElapsed(wait_id=1),
    ToolUseSummaryReady(summary_id=1, summary=None),
    CommandQueued(command_id="c1", text="t"),
    MessagesInserted(
        messages=(UserMessage(id="x1", content=(TextBlock(text="expanded"),), is_meta=True),)
    ),
    ToolsRefreshed(call_id=2, tools=("Read", "mcp__s__t"), digest="0123456789abcdef", at_ms=4),
]

EFFECTS: list[Any] = [
    CallModel(
        call_id=1,
        model="m",
        conversation=_conv(),
        max_tokens=8_000,
        streaming=False,
        task_budget=TaskBudget(total=10, remaining=5),
        query_source="sdk",
    ),
    CancelModelCall(call_id=1),
    AskPermission(generation=1, tool_use_id="t1", name="Read", input={"x": [1]}),
    StartTool(generation=1, tool_use_id="t1", name="Read", input={}),
    CancelTools(generation=1, tool_use_ids=("t1", "t2"), reason="sibling_error"),
    Wait(wait_id=1, ms=500),
    CancelWait(wait_id=1),
    Compact(compact_id=1, conversation=_conv(), trigger="reactive", pre_tokens=10),
    CancelCompaction(compact_id=1),
    RunStopHooks(hooks_id=1, conversation=Conversation.empty(), stop_hook_active=True),
    CancelStopHooks(hooks_id=1),
    PersistToolResult(tool_use_id="t1", content="big"),
    SummarizeToolUse(summary_id=1, tool_use_ids=("t1",), conversation=_conv()),
    AcknowledgeCommands(command_ids=("c1",)),
    RefreshTools(call_id=2),
    CancelRefreshTools(call_id=2),
    Emit(item=Tombstone(message_id="m2")),
    Emit(item=ToolUseSummary(summary="s", preceding_tool_use_ids=("t1",))),
    Emit(
        item=AttachmentMessage(
            id="m5",
            attachment_type="max_turns_reached",
            data=(("maxTurns", 1), ("x", None), ("y", True)),
        )
    ),
    Emit(
        item=AssistantMessage(
            id="m6",
            response_id="r3",
            model="<synthetic>",
            content=(TextBlock(text="e"),),
            api_error=ErrorInfo(kind="auth", message="e", status=401),
        )
    ),
    Emit(item=SystemMessage(id="m7", subtype="api_error", text="retry", level="warning")),
    Finish(terminal=ModelError(error=ErrorInfo(kind="unknown", message="?"))),
]

TRANSITIONS: list[Any] = [
    NextTurn(),
    ReactiveCompactRetry(),
    MaxOutputTokensRecovery(attempt=2),
    MaxOutputTokensEscalate(),
    CollapseDrainRetry(committed=3),
    StopHookBlocking(),
    TokenBudgetContinuation(),
    Completed(),
    BlockingLimit(),
    ImageError(),
    ModelError(error=ErrorInfo(kind="unknown", message="m", status=500)),
    AbortedStreaming(),
    AbortedTools(),
    PromptTooLong(),
    StopHookPrevented(),
    HookStopped(),
    MaxTurns(turn_count=4),
]


@pytest.mark.spec("R-SER-1")
def test_every_event_kind_roundtrips() -> None:
    """Each Event kind round-trips through the union, tagged under 'type'."""
    assert {type(e) for e in EVENTS} == set(typing.get_args(Event))
    for e in EVENTS:
        assert unstructure(e)["type"] == type(e).TAG
        roundtrip(e, Event)
        roundtrip(e, type(e))


@pytest.mark.spec("R-SER-1")
def test_every_effect_kind_roundtrips() -> None:
    """Each Effect kind round-trips through the union (conversations rebuilt equal)."""
    assert {type(e) for e in EFFECTS} == set(typing.get_args(Effect))
    for e in EFFECTS:
        assert unstructure(e)["type"] == type(e).TAG
        roundtrip(e, Effect)


@pytest.mark.spec("R-SER-1")
def test_every_transition_roundtrips() -> None:
    """All 7 Continue and 10 Terminal transitions round-trip through the Transition union."""
    assert {type(t) for t in TRANSITIONS} == set(CONTINUE_TYPES) | set(TERMINAL_TYPES)
    for t in TRANSITIONS:
        assert unstructure(t)["type"] == type(t).TAG
        roundtrip(t, Transition)


@pytest.mark.spec("R-SER-1")
def test_message_and_block_kinds_roundtrip() -> None:
    """Every message and block kind round-trips through the Message union."""
    for m in _conv().messages():
        roundtrip(m, Message)
    roundtrip(_conv(), Conversation)


@pytest.mark.spec("R-SER-1")
@pytest.mark.parametrize(
    ("data", "cls"),
    [
        ({"type": "no_such_event", "at_ms": 0}, Event),
        ({"type": "launch_missiles"}, Effect),
        ({"type": "gave_up"}, Transition),
        ({"type": "memo", "id": "m1"}, Message),
    ],
)
def test_unknown_tag_raises(data: dict[str, Any], cls: Any) -> None:
    """An unknown tag raises SerializationError naming the tag."""
    with pytest.raises(SerializationError) as err:
        structure(data, cls)
    assert data["type"] in str(err.value)


@pytest.mark.spec("R-SER-1")
def test_unknown_nested_tag_raises() -> None:
    """An unknown block tag deep inside a state also raises SerializationError naming it."""
    d = Driver(default())
    d.text("hi")
    data = unstructure(d.state)
    msg = data["round"]["blocks"][0]
    msg["content"][0]["type"] = "hologram"
    with pytest.raises(SerializationError) as err:
        structure(json.loads(json.dumps(data)), LoopState)
    assert "hologram" in str(err.value)


# --- R-PURE-1 ---------------------------------------------------------------------------------

FORBIDDEN = {
    "anyio",
    "asyncio",
    "trio",
    "anthropic",
    "httpx2",
    "os",
    "io",
    "time",
    "random",
    "uuid",
    "logging",
    "socket",
    "subprocess",
    "threading",
    "datetime",
    "pathlib",
    "sys",
    "steploop.effects",
}


def _forbidden(modules: set[str]) -> set[str]:
    """The forbidden names among ``modules`` (a name forbids itself and its submodules)."""
    return {f for m in modules for f in FORBIDDEN if m == f or m.startswith(f + ".")}


def _imports(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "__import__"
        ):
            if (
                node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.add(node.args[0].value)
    return found


@pytest.mark.spec("R-PURE-1")
def test_reducer_imports_nothing_impure() -> None:
    """No module of steploop/reducer/ (but steploop/reducer/testing) imports I/O, clocks, randomness or effects."""
    pkg = ROOT / "steploop" / "reducer"
    modules = [p for p in pkg.rglob("*.py") if "testing" not in p.relative_to(pkg).parts]
    assert len(modules) >= 10
    bad: dict[str, set[str]] = {}
    for path in modules:
        hits = _forbidden(_imports(ast.parse(path.read_text(encoding="utf-8"))))
        if hits:
            bad[str(path.relative_to(ROOT))] = hits
    assert not bad, bad


@pytest.mark.spec("R-PURE-1")
def test_purity_scan_detects_forbidden_imports() -> None:
    """The scan itself catches each import form."""
    src = "import os.path\nfrom time import monotonic\nfrom steploop.effects.cli import main\n__import__('random')\n"
    assert _forbidden(_imports(ast.parse(src))) == {"os", "time", "steploop.effects", "random"}
    assert not _forbidden(
        _imports(
            ast.parse("from steploop.reducer.effects import Emit\nfrom .effects import Emit\n")
        )
    )


# --- M-1 --------------------------------------------------------------------------------------


def _run(
    cfg: LoopConfig, events: list[Callable[[LoopState], Event]]
) -> list[tuple[LoopState, tuple[Effect, ...]]]:
    state, fx = start(Request(prompt="go", at_ms=1), cfg, None)
    out = [(state, fx)]
    for make in events:
        state, fx = step(state, make(state), cfg)
        if state.phase == "refreshing_tools":  # [R-REFRESH-1] the list, read at once
            state, more = step(state, ToolsRefreshed(call_id=state.round.call_id), cfg)
            fx = (*fx, *more)
        out.append((state, fx))
    return out


@pytest.mark.spec("M-1")
def test_same_events_same_results() -> None:
    """The same event sequence gives equal states and effects every time."""
    tid = ToolUseBlock(id="t1", name="Read", input={"k": "v"})
    events: list[Callable[[LoopState], Event]] = [
        lambda s: ModelBlockReceived(call_id=s.round.call_id, block=TextBlock(text="a")),
        lambda s: ModelBlockReceived(call_id=s.round.call_id, block=tid, tool=SAFE),
        lambda s: PermissionAnswered(
            generation=s.round.generation, tool_use_id="t1", decision="allow"
        ),
        lambda s: ModelResponseEnded(
            call_id=s.round.call_id, model="m", stop_reason="tool_use", usage=usage(), at_ms=5
        ),
        lambda s: ToolFinished(
            generation=s.round.generation, tool_use_id="t1", content="x", at_ms=6
        ),
        lambda s: ModelCallFailed(call_id=s.round.call_id, kind="server_error", status=500),
        lambda s: WaitElapsed(wait_id=s.round.pending_id, at_ms=600),
        lambda s: ModelBlockReceived(call_id=s.round.call_id, block=TextBlock(text="done")),
        lambda s: ModelResponseEnded(
            call_id=s.round.call_id, model="m", stop_reason="end_turn", usage=usage(), at_ms=700
        ),
        lambda s: StopHooksFinished(hooks_id=s.round.pending_id),
    ]
    for cfg in (default(), claude_code_2_1_88(), full()):
        a = _run(cfg, events)
        b = _run(cfg, events)
        assert a == b
        assert [unstructure(s) for s, _ in a] == [unstructure(s) for s, _ in b]
        assert isinstance(a[-1][1][-1], Finish)
        # stepping the same state with the same event twice gives equal results
        s5 = a[5][0]
        e = events[5](s5)
        assert step(s5, e, cfg) == step(s5, e, cfg)


# The common, turn-extending events are repeated so that sequences reach deep phases; the
# turn-ending and illegal ones appear once.
ALPHABET = [
    *["text", "tool_safe", "tool_unsafe", "end_tool_use", "allow", "finish_ok"] * 4,
    *["end_turn", "end_big", "hooks_pass", "hooks_block", "compact_ok", "wait", "summary"] * 2,
    "tool_bash",
    "tool_unknown",
    "tool_truncated",
    "end_max_tokens",
    "fail_overloaded",
    "fail_ptl",
    "fail_media",
    "fail_auth",
    "fail_stream",
    "fail_unknown",
    "fail_image",
    "deny",
    "reject",
    "finish_err",
    "finish_hook",
    "late_tool",
    "hard",
    "submit",
    "compact_fail",
    "hooks_prevent",
    "hooks_error",
    "command",
    "bogus_generation",
    "bogus_call",
]

CONFIGS = {
    "default": default(context_window=50_000, gates=Gates(tool_use_summaries=True), max_turns=3),
    "cc": claude_code_2_1_88(context_window=50_000, fallback_model="claude-haiku-4-5"),
    "full": full(context_window=50_000),
}


def _pick(s: LoopState, statuses: tuple[str, ...]) -> str:
    for sl in s.round.slots:
        if sl.status in statuses:
            return sl.tool_use_id
    return s.round.slots[0].tool_use_id if s.round.slots else "t0"


def _event(name: str, s: LoopState, n: int, at: int) -> Event:
    r = s.round
    call, gen = r.call_id, r.generation
    big = Usage(input_tokens=31_000, output_tokens=200)
    small_u = Usage(input_tokens=200, output_tokens=20)

    def tool(traits: ToolTraits | None, nm: str = "Read", complete: bool = True) -> Event:
        return ModelBlockReceived(
            call_id=call,
            block=ToolUseBlock(id=f"t{n}", name=nm, input={"command": "ls"}),
            tool=traits,
            input_complete=complete,
            at_ms=at,
        )

    table: dict[str, Callable[[], Event]] = {
        "text": lambda: ModelBlockReceived(call_id=call, block=TextBlock(text="x" * 40), at_ms=at),
        "tool_safe": lambda: tool(SAFE),
        "tool_unsafe": lambda: tool(UNSAFE, "Edit"),
        "tool_bash": lambda: tool(BASH, "Bash"),
        "tool_unknown": lambda: tool(None, "Nope"),
        "tool_truncated": lambda: tool(SAFE, complete=False),
        "end_turn": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="end_turn", usage=small_u, at_ms=at
        ),
        "end_tool_use": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="tool_use", usage=small_u, at_ms=at
        ),
        "end_max_tokens": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="max_tokens", usage=small_u, at_ms=at
        ),
        "end_big": lambda: ModelResponseEnded(
            call_id=call, model=s.model, stop_reason="end_turn", usage=big, at_ms=at
        ),
        "fail_overloaded": lambda: ModelCallFailed(
            call_id=call, kind="overloaded", status=529, at_ms=at
        ),
        "fail_ptl": lambda: ModelCallFailed(
            call_id=call, kind="prompt_too_long", status=400, at_ms=at
        ),
        "fail_media": lambda: ModelCallFailed(call_id=call, kind="media", status=413, at_ms=at),
        "fail_auth": lambda: ModelCallFailed(call_id=call, kind="auth", status=401, at_ms=at),
        "fail_stream": lambda: ModelCallFailed(call_id=call, kind="stream_broken", at_ms=at),
        "fail_unknown": lambda: ModelCallFailed(call_id=call, kind="unknown", at_ms=at),
        "fail_image": lambda: ModelCallFailed(call_id=call, kind="image_client", at_ms=at),
        "allow": lambda: PermissionAnswered(
            generation=gen, tool_use_id=_pick(s, ("asking",)), decision="allow", at_ms=at
        ),
        "deny": lambda: PermissionAnswered(
            generation=gen, tool_use_id=_pick(s, ("asking",)), decision="deny_by_rule", at_ms=at
        ),
        "reject": lambda: PermissionAnswered(
            generation=gen, tool_use_id=_pick(s, ("asking",)), decision="rejected_by_user", at_ms=at
        ),
        "finish_ok": lambda: ToolFinished(
            generation=gen, tool_use_id=_pick(s, ("running",)), content="ok", at_ms=at
        ),
        "finish_err": lambda: ToolFinished(
            generation=gen,
            tool_use_id=_pick(s, ("running",)),
            content="bad",
            is_error=True,
            at_ms=at,
        ),
        "finish_hook": lambda: ToolFinished(
            generation=gen,
            tool_use_id=_pick(s, ("running",)),
            content="ok",
            hook_stopped=True,
            at_ms=at,
        ),
        "late_tool": lambda: ToolFinished(
            generation=max(0, gen - 1), tool_use_id="t0", content="late", at_ms=at
        ),
        "hard": lambda: Interrupted(kind="hard", at_ms=at),
        "submit": lambda: Interrupted(kind="submit", at_ms=at),
        "compact_ok": lambda: CompactionFinished(
            compact_id=r.pending_id,
            messages=(UserMessage(id=f"c{n}", content=(TextBlock(text="summary"),), is_meta=True),),
            at_ms=at,
        ),
        "compact_fail": lambda: CompactionFailed(compact_id=r.pending_id, at_ms=at),
        "wait": lambda: WaitElapsed(wait_id=r.pending_id, at_ms=at),
        "hooks_pass": lambda: StopHooksFinished(hooks_id=r.pending_id, hook_count=1, at_ms=at),
        "hooks_block": lambda: StopHooksFinished(
            hooks_id=r.pending_id, blocking_errors=("no",), at_ms=at
        ),
        "hooks_prevent": lambda: StopHooksFinished(hooks_id=r.pending_id, prevent=True, at_ms=at),
        "hooks_error": lambda: StopHooksFinished(hooks_id=r.pending_id, error="crash", at_ms=at),
        "summary": lambda: ToolUseSummaryReady(
            summary_id=s.summary_id or s.ids.summary, summary="sum", at_ms=at
        ),
        "command": lambda: CommandQueued(command_id=f"c{n}", text="cmd", at_ms=at),
        "bogus_generation": lambda: ToolFinished(
            generation=gen + 7, tool_use_id="t1", content="x", at_ms=at
        ),
        "bogus_call": lambda: ModelResponseEnded(
            call_id=call + 7, model="m", stop_reason="end_turn", usage=small_u, at_ms=at
        ),
    }
    return table[name]()


def _explore(cfg: LoopConfig, names: list[str]) -> tuple[list[Event], list[Any]]:
    """Feed events built from ``names``; returns the events and each step's outcome."""
    state, fx = start(Request(prompt="go", at_ms=0, token_budget=50_000), cfg, None)
    events: list[Event] = []
    outcomes: list[Any] = [(state, fx)]
    for n, name in enumerate(names, 1):
        if state.phase == "done":
            break
        ev = _event(name, state, n, n * 1_000_000)
        events.append(ev)
        try:
            state, fx = step(state, ev, cfg)
        except IllegalEvent as err:
            outcomes.append(("illegal", str(err)))
            continue
        assert all(not isinstance(e, Finish) for e in fx[:-1])  # M-4: Finish is last
        assert (
            isinstance(fx[-1], Finish) == (state.phase == "done") if fx else state.phase != "done"
        )
        outcomes.append((state, fx))
    return events, outcomes


def _replay(cfg: LoopConfig, events: list[Event]) -> list[Any]:
    state, fx = start(Request(prompt="go", at_ms=0, token_budget=50_000), cfg, None)
    outcomes: list[Any] = [(state, fx)]
    for ev in events:
        try:
            state, fx = step(state, ev, cfg)
        except IllegalEvent as err:
            outcomes.append(("illegal", str(err)))
            continue
        outcomes.append((state, fx))
    return outcomes


@pytest.mark.spec("M-1", "M-5", "M-4", "M-2")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    profile=st.sampled_from(sorted(CONFIGS)),
    names=st.lists(st.sampled_from(ALPHABET), min_size=1, max_size=30),
)
def test_random_event_sequences_are_deterministic(profile: str, names: list[str]) -> None:
    """Random event sequences: step raises only IllegalEvent and replays identically."""
    cfg = CONFIGS[profile]
    events, first = _explore(cfg, names)
    assert _replay(cfg, events) == first
    last = [o for o in first if o[0] != "illegal"][-1][0]
    if last.phase == "done":
        with pytest.raises(IllegalEvent):
            step(last, Interrupted(kind="hard"), cfg)
