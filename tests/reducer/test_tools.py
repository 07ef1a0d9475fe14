"""Tool scheduling, result order, unknown tools, sibling cancellation, late results and
permissions (specs/rules.md R-TOOL-1..8, R-PERM-1..3)."""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import IllegalEvent, default
from steploop.reducer.config import Compat, Gates
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    CancelModelCall,
    CancelTools,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
    Wait,
)
from steploop.reducer.events import (
    CompactionFinished,
    ModelCallFailed,
    PermissionAnswered,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.texts import INTERRUPTED_TOOL_RESULT
from steploop.reducer.transitions import AbortedStreaming, AbortedTools
from tests.reducer.driver import SAFE, UNSAFE, Driver

SAFE_BASH = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)
UNSAFE_BASH = ToolTraits(concurrency_safe=False, interrupt="cancel", cancels_siblings_on_error=True)


def asked(fx: Any) -> list[str]:
    return [e.tool_use_id for e in fx if isinstance(e, AskPermission)]


def started(fx: Any) -> list[str]:
    return [e.tool_use_id for e in fx if isinstance(e, StartTool)]


def emitted_results(fx: Any) -> list[ToolResultBlock]:
    out: list[ToolResultBlock] = []
    for e in fx:
        if isinstance(e, Emit) and isinstance(e.item, UserMessage):
            out.extend(b for b in e.item.content if isinstance(b, ToolResultBlock))
    return out


def conv_results(d: Driver) -> list[ToolResultBlock]:
    out: list[ToolResultBlock] = []
    for m in d.state.conversation.messages():
        if isinstance(m, UserMessage):
            out.extend(b for b in m.content if isinstance(b, ToolResultBlock))
    return out


def conv_tool_uses(d: Driver) -> list[str]:
    return [
        b.id
        for m in d.state.conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]


def finish_of(d: Driver) -> Any:
    f = d.finished()
    assert f is not None
    return f.terminal


# --- R-TOOL-1 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-1", "R-PERM-1")
def test_safe_tools_start_mid_stream_together() -> None:
    """Each safe tool is asked for as soon as its block completes, and both run at once."""
    d = Driver(default())
    assert asked(d.tool_use("t1")) == ["t1"]
    assert started(d.allow("t1")) == ["t1"]
    assert asked(d.tool_use("t2")) == ["t2"]
    assert started(d.allow("t2")) == ["t2"]
    assert d.phase == "streaming"
    assert [sl.status for sl in d.state.round.slots] == ["running", "running"]
    assert not d.of(CallModel)[1:]  # the response has not ended


# --- R-TOOL-2 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-2")
def test_non_safe_tool_waits_and_blocks_later_ones() -> None:
    """A non-safe tool waits for the end and for nothing executing, blocking tools after it."""
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    assert asked(d.tool_use("t2", name="Edit", traits=UNSAFE)) == []
    assert asked(d.tool_use("t3")) == []  # a later safe tool waits behind t2
    fx = d.end("tool_use")
    assert asked(fx) == []  # t1 still executes
    assert d.phase == "running_tools"
    fx = d.finish_tool("t1")
    assert asked(fx) == ["t2"]
    started_t2 = d.allow("t2")
    assert started(started_t2) == ["t2"]
    fx = d.finish_tool("t2")
    assert asked(fx) == ["t3"]


@pytest.mark.spec("R-TOOL-2")
def test_non_safe_tool_alone_at_response_end() -> None:
    """With nothing executing a non-safe tool is asked for right at ModelResponseEnded."""
    d = Driver(default())
    assert asked(d.tool_use("t1", name="Edit", traits=UNSAFE)) == []
    fx = d.end("tool_use")
    assert asked(fx) == ["t1"]


# --- R-TOOL-3 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-3")
def test_no_streaming_execution_gate_off() -> None:
    """Gate off: nothing starts before the end; then safe runs together, non-safe alone."""
    d = Driver(default(gates=Gates(streaming_tool_execution=False)))
    assert asked(d.tool_use("t1")) == []
    assert asked(d.tool_use("t2")) == []
    assert asked(d.tool_use("t3", name="Edit", traits=UNSAFE)) == []
    assert asked(d.tool_use("t4")) == []
    fx = d.end("tool_use")
    assert asked(fx) == ["t1", "t2"]
    d.allow("t1")
    d.allow("t2")
    assert asked(d.finish_tool("t1")) == []
    assert asked(d.finish_tool("t2")) == ["t3"]
    d.allow("t3")
    assert asked(d.finish_tool("t3")) == ["t4"]
    d.allow("t4")
    fx = d.finish_tool("t4")
    assert [r.tool_use_id for r in conv_results(d)] == ["t1", "t2", "t3", "t4"]
    assert isinstance(fx[-1], CallModel)


# --- R-TOOL-4 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-4")
def test_truncated_input_never_emitted_stored_or_run() -> None:
    """input_complete=False: no Emit, no AskPermission, not in the conversation."""
    d = Driver(default())
    d.text("let me look")
    fx = d.block(
        ToolUseBlock(id="t1", name="Read", input={"file_path": "/x"}), tool=SAFE, complete=False
    )
    assert fx == ()
    assert d.state.round.slots == ()
    fx = d.end("max_tokens")
    assert not asked(d.effects) and not started(d.effects)
    assert "t1" not in conv_tool_uses(d)
    for e in d.effects:
        if isinstance(e, Emit) and isinstance(e.item, AssistantMessage):
            assert not any(isinstance(b, ToolUseBlock) for b in e.item.content)


@pytest.mark.spec("R-TOOL-4")
def test_truncated_input_does_not_take_the_tool_path() -> None:
    """A response whose only tool_use was truncated goes down the no-tool-use path."""
    d = Driver(default())
    d.block(ToolUseBlock(id="t1", name="Read", input={}), tool=SAFE, complete=False)
    fx = d.end("end_turn")
    assert any(isinstance(e, RunStopHooks) for e in fx)


# --- R-TOOL-5 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-5")
def test_results_in_tool_use_order_despite_reverse_completion() -> None:
    """ToolFinished in reverse order: nothing is emitted until t1, then t1, t2, t3."""
    d = Driver(default())
    for t in ("t1", "t2", "t3"):
        d.tool_use(t)
        d.allow(t)
    assert emitted_results(d.finish_tool("t3", "three")) == []
    assert emitted_results(d.finish_tool("t2", "two")) == []
    fx = d.finish_tool("t1", "one")
    assert [(r.tool_use_id, r.content) for r in emitted_results(fx)] == [
        ("t1", "one"),
        ("t2", "two"),
        ("t3", "three"),
    ]
    fx = d.end("tool_use")
    assert [r.tool_use_id for r in conv_results(d)] == ["t1", "t2", "t3"]
    sent = next(m for m in fx if isinstance(m, CallModel)).conversation.messages()
    kinds = [type(m).__name__ for m in sent]
    assert kinds == ["UserMessage"] + ["AssistantMessage"] * 3 + ["UserMessage"] * 3


@pytest.mark.spec("R-TOOL-5")
def test_result_emitted_as_soon_as_earlier_ones_have_results() -> None:
    """t1 finishing first is emitted at once; t3 waits for t2."""
    d = Driver(default())
    for t in ("t1", "t2", "t3"):
        d.tool_use(t)
        d.allow(t)
    assert [r.tool_use_id for r in emitted_results(d.finish_tool("t1"))] == ["t1"]
    assert emitted_results(d.finish_tool("t3")) == []
    assert [r.tool_use_id for r in emitted_results(d.finish_tool("t2"))] == ["t2", "t3"]


# --- R-TOOL-6 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-6", "G13")
@pytest.mark.parametrize("traits", [None, ToolTraits(known=False)])
def test_unknown_tool_error_result(traits: ToolTraits | None) -> None:
    """An unknown tool gets the 'No such tool available' error result and never starts."""
    d = Driver(default())
    fx = d.block(ToolUseBlock(id="t1", name="Frobnicate", input={"x": 1}), tool=traits)
    assert asked(fx) == []
    (res,) = emitted_results(fx)
    assert res == ToolResultBlock(
        tool_use_id="t1",
        content="<tool_use_error>Error: No such tool available: Frobnicate</tool_use_error>",
        is_error=True,
    )
    fx = d.end("tool_use")
    assert not started(d.effects)
    assert isinstance(fx[-1], CallModel)
    assert [r.tool_use_id for r in conv_results(d)] == ["t1"]


# --- R-TOOL-7 ---------------------------------------------------------------------------------

SIBLING = "<tool_use_error>Cancelled: parallel tool call Bash(ls -la) errored</tool_use_error>"


@pytest.mark.spec("R-TOOL-7", "G13")
def test_sibling_cancellation() -> None:
    """A sibling-cancelling tool's error cancels running siblings and later calls."""
    d = Driver(default())
    d.tool_use("t1", name="Bash", traits=SAFE_BASH, command="ls -la")
    d.allow("t1")
    d.tool_use("t2")
    d.allow("t2")
    d.tool_use("t3")  # asked, not yet answered
    fx = d.finish_tool("t1", "exit 2", is_error=True)
    (cancel,) = [e for e in fx if isinstance(e, CancelTools)]
    assert cancel.reason == "sibling_error" and cancel.generation == d.generation
    assert "t2" in cancel.tool_use_ids and "t1" not in cancel.tool_use_ids
    results = {r.tool_use_id: r for r in emitted_results(fx)}
    assert results["t1"] == ToolResultBlock(tool_use_id="t1", content="exit 2", is_error=True)
    assert results["t2"].content == SIBLING and results["t2"].is_error
    assert results["t3"].content == SIBLING
    # a later call of the same response is cancelled at once, never asked
    fx = d.tool_use("t4")
    assert asked(fx) == []
    assert [(r.tool_use_id, r.content) for r in emitted_results(fx)] == [("t4", SIBLING)]
    fx = d.end("tool_use")
    assert isinstance(fx[-1], CallModel)
    assert [r.tool_use_id for r in conv_results(d)] == ["t1", "t2", "t3", "t4"]


@pytest.mark.spec("R-TOOL-7")
def test_sibling_cancellation_of_queued_calls_after_the_stream() -> None:
    """A queued call gets the sibling result without CancelTools; an error-free one does not."""
    d = Driver(default())
    d.tool_use("t1", name="Bash", traits=UNSAFE_BASH, command="make")
    d.tool_use("t2")
    d.end("tool_use")
    d.allow("t1")
    fx = d.finish_tool("t1", "failed", is_error=True)
    assert not any(isinstance(e, CancelTools) for e in fx)
    texts = {r.tool_use_id: r.content for r in conv_results(d)}
    assert texts == {
        "t1": "failed",
        "t2": "<tool_use_error>Cancelled: parallel tool call Bash(make) errored</tool_use_error>",
    }
    # a tool without the trait does not cancel its siblings
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    d.tool_use("t2")
    d.allow("t2")
    fx = d.finish_tool("t1", "nope", is_error=True)
    assert not any(isinstance(e, CancelTools) for e in fx)
    assert d.state.round.slots[1].status == "running"


@pytest.mark.spec("R-TOOL-7", "Q-3", "R-RETRY-5")
def test_a_sibling_error_goes_with_the_blocks_q3_drops() -> None:
    """Under Q-3 a later block drops the blocks before it: a sibling error of a dropped call
    goes with them, so the next call is asked and run, and its own error is the round's."""
    d = Driver(default(compat=Compat(sticky_streaming_fallback=True)))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="stream_broken"))
    d.tool_use("t1", name="Bash", traits=SAFE_BASH, command="ls -la")
    d.allow("t1")
    d.finish_tool("t1", "exit 2", is_error=True)
    assert d.state.round.sibling_error is not None
    fx = d.tool_use("t2", name="Bash", traits=SAFE_BASH, command="make")  # t1 dropped
    assert d.state.round.sibling_error is None and asked(fx) == ["t2"]
    d.allow("t2")
    d.finish_tool("t2", "failed", is_error=True)
    assert d.state.round.sibling_error == "Bash(make)"


# --- R-TOOL-8 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TOOL-8", "R-TOOL-7")
def test_late_result_of_cancelled_call_is_noop() -> None:
    """ToolFinished / PermissionAnswered for a call with a synthetic result change nothing."""
    d = Driver(default())
    d.tool_use("t1", name="Bash", traits=SAFE_BASH, command="ls -la")
    d.allow("t1")
    d.tool_use("t2")
    d.allow("t2")
    d.tool_use("t3")
    d.finish_tool("t1", "boom", is_error=True)
    before = d.state
    assert d.finish_tool("t2", "late") == ()
    assert d.state == before
    assert d.allow("t3") == ()
    assert d.state == before


@pytest.mark.spec("R-TOOL-8", "G12")
def test_late_result_of_discarded_generation_is_noop() -> None:
    """After a retry, events of the old generation are no-ops in every phase they reach."""
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    old = d.generation
    d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert d.phase == "waiting_retry"
    before = d.state
    assert d.feed(ToolFinished(generation=old, tool_use_id="t1", content="late")) == ()
    assert d.state == before
    wait = d.of(Wait)[-1]
    d.feed(WaitElapsed(wait_id=wait.wait_id))
    assert d.generation == old + 1
    before = d.state
    assert d.feed(ToolFinished(generation=old, tool_use_id="t1", content="late")) == ()
    assert d.feed(PermissionAnswered(generation=old, tool_use_id="t1", decision="allow")) == ()
    assert d.state == before


@pytest.mark.spec("R-TOOL-8", "M-5")
def test_never_created_generation_raises() -> None:
    """A tool event for a generation never started raises IllegalEvent, in every phase."""
    d = Driver(default())
    d.tool_use("t1")
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=d.generation + 1, tool_use_id="t1", content="x"))
    with pytest.raises(IllegalEvent):
        d.feed(PermissionAnswered(generation=d.generation + 1, tool_use_id="t1", decision="allow"))
    d.allow("t1")
    d.end("tool_use")
    assert d.phase == "running_tools"
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=d.generation + 1, tool_use_id="t1", content="x"))
    d.finish_tool("t1")
    d.reply("done")
    assert d.phase == "stop_hooks"
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=d.generation + 1, tool_use_id="t1", content="x"))


@pytest.mark.spec("R-TOOL-8")
def test_never_created_call_raises_while_streaming_and_running() -> None:
    """A tool event naming a call the round never had raises IllegalEvent."""
    d = Driver(default())
    d.tool_use("t1")
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=d.generation, tool_use_id="nope", content="x"))
    d.allow("t1")
    d.end("tool_use")
    with pytest.raises(IllegalEvent):
        d.feed(PermissionAnswered(generation=d.generation, tool_use_id="nope", decision="allow"))


@pytest.mark.spec("R-TOOL-8")
def test_never_created_call_raises_outside_tool_phases() -> None:
    """In stop_hooks, a current-generation event for a call that never existed raises."""
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    d.end("tool_use")
    d.finish_tool("t1")
    d.reply("done")
    assert d.phase == "stop_hooks"
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=d.generation, tool_use_id="never", content="x"))


@pytest.mark.spec("R-TOOL-8")
def test_late_result_in_compacting_phase_is_noop() -> None:
    """A late result of the previous round arriving while compacting is a no-op."""
    from steploop.reducer.messages import Usage

    d = Driver(
        default(context_window=50_000, gates=Gates(history_snip=False, context_collapse=False))
    )
    d.tool_use("t1", name="Bash", traits=SAFE_BASH, command="ls -la")
    d.allow("t1")
    d.tool_use("t2")
    d.allow("t2")
    d.finish_tool("t1", "boom", is_error=True)
    gen = d.generation
    d.end("tool_use", Usage(input_tokens=30_000))
    assert d.phase == "compacting"
    before = d.state
    assert d.feed(ToolFinished(generation=gen, tool_use_id="t2", content="late")) == ()
    assert d.state == before
    d.feed(CompactionFinished(compact_id=d.state.round.pending_id, messages=()))
    assert d.phase == "streaming"


# --- R-PERM-1..3 ------------------------------------------------------------------------------


@pytest.mark.spec("R-PERM-1")
def test_allow_starts_the_tool() -> None:
    """AskPermission first; PermissionAnswered(allow) emits StartTool with the same input."""
    d = Driver(default())
    fx = d.tool_use("t1", file_path="/a")
    assert [e for e in fx if isinstance(e, AskPermission)] == [
        AskPermission(
            generation=d.generation, tool_use_id="t1", name="Read", input={"file_path": "/a"}
        )
    ]
    assert started(fx) == []
    assert d.allow("t1") == (
        StartTool(
            generation=d.generation, tool_use_id="t1", name="Read", input={"file_path": "/a"}
        ),
    )


@pytest.mark.spec("R-PERM-1", "R-TOOL-2")
def test_asking_counts_as_executing() -> None:
    """A safe tool still being asked about keeps a non-safe tool waiting after the end."""
    d = Driver(default())
    d.tool_use("t1")  # asking, unanswered
    d.tool_use("t2", name="Edit", traits=UNSAFE)
    fx = d.end("tool_use")
    assert asked(fx) == []
    assert asked(d.allow("t1")) == []
    assert asked(d.finish_tool("t1")) == ["t2"]


@pytest.mark.spec("R-PERM-2")
def test_deny_by_rule_gives_error_result_and_round_goes_on() -> None:
    """deny_by_rule: an error result naming the tool and reason; the next round is called."""
    d = Driver(default())
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.tool_use("t2", name="Write", traits=UNSAFE)
    d.end("tool_use")
    fx = d.feed(
        PermissionAnswered(
            generation=d.generation, tool_use_id="t1", decision="deny_by_rule", reason="no edits"
        )
    )
    (res,) = emitted_results(fx)
    assert res.tool_use_id == "t1" and res.is_error
    assert "Edit" in res.content and "no edits" in res.content
    assert not started(fx)
    assert asked(fx) == ["t2"]
    d.allow("t2")
    fx = d.finish_tool("t2")
    assert isinstance(fx[-1], CallModel)
    assert d.finished() is None


@pytest.mark.spec("R-PERM-3", "I-2", "T-ABORT-STREAM-1")
def test_rejection_mid_stream_aborts_streaming() -> None:
    """rejected_by_user while streaming: rejection result, CancelModelCall, aborted_streaming."""
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    d.tool_use("t2")
    fx = d.feed(
        PermissionAnswered(generation=d.generation, tool_use_id="t2", decision="rejected_by_user")
    )
    assert CancelModelCall(call_id=d.call_id) in fx
    assert (
        CancelTools(generation=d.generation, tool_use_ids=("t1",), reason="user_interrupted") in fx
    )
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, AbortedStreaming)
    results = {r.tool_use_id: r for r in conv_results(d)}
    assert results["t1"].content == INTERRUPTED_TOOL_RESULT  # the executor is on (I-2)
    assert results["t2"].is_error and "reject" in results["t2"].content
    assert not started(fx)
    assert any(
        isinstance(e, Emit)
        and isinstance(e.item, UserMessage)
        and e.item.content == (TextBlock(text="[Request interrupted by user]"),)
        for e in fx
    )


@pytest.mark.spec("R-PERM-3", "I-3", "T-ABORT-TOOLS-1")
def test_rejection_after_stream_aborts_tools() -> None:
    """rejected_by_user after the response ended: aborted_tools, no CancelModelCall."""
    d = Driver(default())
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.tool_use("t2", name="Write", traits=UNSAFE)
    d.end("tool_use")
    fx = d.feed(
        PermissionAnswered(generation=d.generation, tool_use_id="t1", decision="rejected_by_user")
    )
    assert not any(isinstance(e, CancelModelCall) for e in fx)
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, AbortedTools)
    results = {r.tool_use_id: r for r in conv_results(d)}
    assert "reject" in results["t1"].content and results["t1"].is_error
    assert results["t2"].content == INTERRUPTED_TOOL_RESULT  # the executor is on (I-2)
    assert any(
        isinstance(e, Emit)
        and isinstance(e.item, UserMessage)
        and e.item.content == (TextBlock(text="[Request interrupted by user for tool use]"),)
        for e in fx
    )
    assert finish_of(d) == AbortedTools()
