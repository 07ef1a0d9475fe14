"""Summaries, queued commands, stop hooks, ids and sessions (specs/rules.md R-SUM-1, R-CMD-1..2,
R-HOOK-1/4, R-ID-1, R-SESSION-1). Serialization is in test_serialization.py, purity and
determinism in test_purity.py."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import IllegalEvent, LoopConfig, Request, Session, default, start
from steploop.reducer.config import Gates
from steploop.reducer.effects import (
    AcknowledgeCommands,
    CallModel,
    Compact,
    Effect,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    Interrupted,
    ModelCallFailed,
    StopHooksFinished,
    ToolTraits,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    SystemMessage,
    TextBlock,
    ToolUseSummary,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import AbortedStreaming, Completed
from tests.reducer.driver import SAFE, UNSAFE, Driver, usage

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
