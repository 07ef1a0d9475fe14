"""Interrupts in every phase (specs/rules.md I-1..I-6, T-ABORT-STREAM-1, T-ABORT-TOOLS-1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from steploop.reducer import IllegalEvent, LoopConfig, default
from steploop.reducer.config import Gates
from steploop.reducer.effects import (
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelStopHooks,
    CancelTools,
    CancelWait,
    Compact,
    Emit,
    Finish,
    RunStopHooks,
    Wait,
)
from steploop.reducer.events import Interrupted, ModelCallFailed, ToolTraits
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    TextBlock,
    ToolResultBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.texts import INTERRUPTED_TOOL_RESULT
from steploop.reducer.transitions import AbortedStreaming, AbortedTools, StopHookPrevented
from tests.reducer.driver import SAFE, UNSAFE, Driver

HARD = "[Request interrupted by user]"
HARD_TOOLS = "[Request interrupted by user for tool use]"
# the result of a call an interrupt stopped, with the streaming executor (I-2, R-TEXTS-1)
INTERRUPTED = INTERRUPTED_TOOL_RESULT
SAFE_BLOCK = ToolTraits(concurrency_safe=True, interrupt="block")


def small() -> LoopConfig:
    return default(context_window=50_000, gates=Gates(history_snip=False, context_collapse=False))


def texts_emitted(fx: Any) -> list[str]:
    out: list[str] = []
    for e in fx:
        if isinstance(e, Emit) and isinstance(e.item, (UserMessage, AssistantMessage)):
            out.extend(b.text for b in e.item.content if isinstance(b, TextBlock))
    return out


def interrupt_messages(fx: Any) -> list[str]:
    return [t for t in texts_emitted(fx) if t in (HARD, HARD_TOOLS)]


def results(d: Driver) -> dict[str, ToolResultBlock]:
    out: dict[str, ToolResultBlock] = {}
    for m in d.state.conversation.messages():
        if isinstance(m, UserMessage):
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    out[b.tool_use_id] = b
    return out


def assert_finished(fx: Any, terminal: Any) -> None:
    assert isinstance(fx[-1], Finish), fx
    assert fx[-1].terminal == terminal
    assert sum(isinstance(e, Finish) for e in fx) == 1


# --- reaching each phase ---------------------------------------------------------------------


def in_compacting() -> Driver:
    d = Driver(small())
    d.tool_use("t1")
    d.allow("t1")
    d.end("tool_use", Usage(input_tokens=30_000))
    d.finish_tool("t1")
    assert d.phase == "compacting"
    return d


def in_waiting() -> Driver:
    d = Driver(default())
    d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert d.phase == "waiting_retry"
    return d


def in_streaming() -> Driver:
    d = Driver(default())
    d.text("working")
    return d


def in_running_tools() -> Driver:
    d = Driver(default())
    d.tool_use("t1", name="Edit", traits=ToolTraits(concurrency_safe=False, interrupt="cancel"))
    d.end("tool_use")
    d.allow("t1")
    assert d.phase == "running_tools"
    return d


def in_reactive() -> Driver:
    d = Driver(default())
    d.feed(ModelCallFailed(call_id=d.call_id, kind="prompt_too_long", status=400))
    assert d.phase == "reactive_compacting"
    return d


def in_stop_hooks() -> Driver:
    d = Driver(default())
    d.reply("all done")
    assert d.phase == "stop_hooks"
    return d


def in_draining() -> Driver:
    d = Driver(default())
    d.tool_use("t1", traits=SAFE_BLOCK)
    d.allow("t1")
    d.feed(Interrupted(kind="submit"))
    assert d.phase == "draining"
    return d


PHASES: dict[str, Callable[[], Driver]] = {
    "compacting": in_compacting,
    "waiting_retry": in_waiting,
    "streaming": in_streaming,
    "running_tools": in_running_tools,
    "draining": in_draining,
    "reactive_compacting": in_reactive,
    "stop_hooks": in_stop_hooks,
}


@pytest.mark.spec("M-3", "M-4", "T-ABORT-STREAM-1", "T-ABORT-TOOLS-1", "I-6")
@pytest.mark.parametrize(
    ("phase", "terminal"),
    [
        ("compacting", AbortedStreaming()),
        ("waiting_retry", AbortedStreaming()),
        ("streaming", AbortedStreaming()),
        ("reactive_compacting", AbortedStreaming()),
        ("draining", AbortedStreaming()),
        ("running_tools", AbortedTools()),
        ("stop_hooks", StopHookPrevented()),
    ],
)
def test_hard_interrupt_terminal_per_phase(phase: str, terminal: Any) -> None:
    """Every non-terminal phase accepts a hard interrupt and ends with its terminal, last."""
    d = PHASES[phase]()
    fx = d.feed(Interrupted(kind="hard"))
    assert_finished(fx, terminal)
    assert d.phase == "done"
    assert d.transition == terminal
    with pytest.raises(IllegalEvent):
        d.feed(Interrupted(kind="hard"))


# --- I-1 --------------------------------------------------------------------------------------


@pytest.mark.spec("I-1", "T-ABORT-STREAM-1")
def test_interrupt_while_compacting() -> None:
    """CancelCompaction, aborted_streaming; hard emits the interruption message."""
    d = in_compacting()
    cid = d.of(Compact)[-1].compact_id
    fx = d.feed(Interrupted(kind="hard"))
    assert CancelCompaction(compact_id=cid) in fx
    assert interrupt_messages(fx) == [HARD]
    assert_finished(fx, AbortedStreaming())
    assert not any(isinstance(e, CallModel) for e in fx)
    d = in_compacting()
    fx = d.feed(Interrupted(kind="submit"))
    assert CancelCompaction(compact_id=cid) in fx
    assert interrupt_messages(fx) == []
    assert_finished(fx, AbortedStreaming())


@pytest.mark.spec("I-1", "T-ABORT-STREAM-1")
def test_interrupt_while_waiting_to_retry() -> None:
    """CancelWait, aborted_streaming; hard emits the message, submit does not."""
    d = in_waiting()
    wid = d.of(Wait)[-1].wait_id
    fx = d.feed(Interrupted(kind="hard"))
    assert CancelWait(wait_id=wid) in fx
    assert not any(isinstance(e, CancelCompaction) for e in fx)
    assert interrupt_messages(fx) == [HARD]
    assert_finished(fx, AbortedStreaming())
    assert d.state.conversation.messages()[-1].content == (TextBlock(text=HARD),)  # type: ignore[union-attr]
    d = in_waiting()
    fx = d.feed(Interrupted(kind="submit"))
    assert CancelWait(wait_id=wid) in fx
    assert interrupt_messages(fx) == []
    assert_finished(fx, AbortedStreaming())


# --- I-2 --------------------------------------------------------------------------------------


@pytest.mark.spec("I-2", "T-ABORT-STREAM-1", "G13")
def test_hard_interrupt_while_streaming() -> None:
    """CancelModelCall; unfinished calls get the interrupted-call text; blocks are committed."""
    d = Driver(default())
    d.text("reading")
    d.tool_use("t1")
    d.allow("t1")  # running (cancel)
    d.tool_use("t2")  # asking
    d.tool_use("t3", name="Edit", traits=UNSAFE)  # queued (block, but not running)
    d.tool_use("t4")  # queued behind t3
    fx = d.feed(Interrupted(kind="hard"))
    assert CancelModelCall(call_id=d.call_id) in fx
    cancel = [e for e in fx if isinstance(e, CancelTools)]
    assert len(cancel) == 1 and cancel[0].reason == "user_interrupted"
    assert "t1" in cancel[0].tool_use_ids
    res = results(d)
    assert sorted(res) == ["t1", "t2", "t3", "t4"]
    assert all(r.content == INTERRUPTED and r.is_error for r in res.values())
    assert interrupt_messages(fx) == [HARD]
    assert_finished(fx, AbortedStreaming())
    msgs = d.state.conversation.messages()
    assert any(
        isinstance(m, AssistantMessage) and m.content == (TextBlock(text="reading"),) for m in msgs
    )
    assert msgs[-1].content == (TextBlock(text=HARD),)  # type: ignore[union-attr]


@pytest.mark.spec("I-2", "T-ABORT-STREAM-1")
def test_submit_interrupt_while_streaming_without_block_tools() -> None:
    """Submit with only cancel-type tools: same as hard but no interruption message."""
    d = Driver(default())
    d.tool_use("t1")
    d.allow("t1")
    fx = d.feed(Interrupted(kind="submit"))
    assert CancelModelCall(call_id=d.call_id) in fx
    assert (
        CancelTools(generation=d.generation, tool_use_ids=("t1",), reason="user_interrupted") in fx
    )
    assert interrupt_messages(fx) == []
    assert results(d)["t1"].content == INTERRUPTED
    assert_finished(fx, AbortedStreaming())


@pytest.mark.spec("I-2", "I-4", "T-ABORT-STREAM-1")
def test_submit_interrupt_while_streaming_drains_block_tools() -> None:
    """Running block tools keep running (draining); their result is kept; then Finish."""
    d = Driver(default())
    d.tool_use("t1", traits=SAFE_BLOCK)
    d.allow("t1")
    d.tool_use("t2")
    d.allow("t2")  # cancel-type: cancelled at once
    fx = d.feed(Interrupted(kind="submit"))
    assert CancelModelCall(call_id=d.call_id) in fx
    assert (
        CancelTools(generation=d.generation, tool_use_ids=("t2",), reason="user_interrupted") in fx
    )
    assert not any(isinstance(e, Finish) for e in fx)
    assert d.phase == "draining"
    fx = d.finish_tool("t1", "real output")
    res = results(d)
    assert res["t1"] == ToolResultBlock(tool_use_id="t1", content="real output")
    assert res["t2"].content == INTERRUPTED
    assert interrupt_messages(d.effects) == []
    assert_finished(fx, AbortedStreaming())
    assert not any(isinstance(e, CallModel) for e in fx)


# --- I-3 --------------------------------------------------------------------------------------


@pytest.mark.spec("I-3", "T-ABORT-TOOLS-1")
def test_hard_interrupt_while_tools_run() -> None:
    """No CancelModelCall; tools cancelled; the tool-use message; aborted_tools."""
    d = Driver(default())
    d.tool_use("t1", name="Edit", traits=ToolTraits(concurrency_safe=False, interrupt="cancel"))
    d.tool_use("t2", name="Write", traits=UNSAFE)
    d.end("tool_use")
    d.allow("t1")
    fx = d.feed(Interrupted(kind="hard"))
    assert not any(isinstance(e, CancelModelCall) for e in fx)
    (cancel,) = [e for e in fx if isinstance(e, CancelTools)]
    assert cancel.reason == "user_interrupted" and "t1" in cancel.tool_use_ids
    assert {k: v.content for k, v in results(d).items()} == {"t1": INTERRUPTED, "t2": INTERRUPTED}
    assert interrupt_messages(fx) == [HARD_TOOLS]
    assert_finished(fx, AbortedTools())


@pytest.mark.spec("I-3", "I-4", "T-ABORT-TOOLS-1")
def test_submit_interrupt_while_tools_run_drains() -> None:
    """A running block tool drains after a submit; its result is kept; aborted_tools."""
    d = Driver(default())
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.tool_use("t2", name="Write", traits=UNSAFE)
    d.end("tool_use")
    d.allow("t1")
    fx = d.feed(Interrupted(kind="submit"))
    assert d.phase == "draining"
    assert not any(isinstance(e, (Finish, CancelModelCall)) for e in fx)
    fx = d.finish_tool("t1", "edited")
    assert {k: v.content for k, v in results(d).items()} == {"t1": "edited", "t2": INTERRUPTED}
    assert interrupt_messages(d.effects) == []
    assert_finished(fx, AbortedTools())


# --- I-4 --------------------------------------------------------------------------------------


@pytest.mark.spec("I-4")
def test_second_submit_while_draining_is_noop() -> None:
    """A second submit-interrupt while draining changes nothing."""
    d = in_draining()
    before = d.state
    assert d.feed(Interrupted(kind="submit")) == ()
    assert d.state == before


@pytest.mark.spec("I-4", "T-ABORT-STREAM-1")
def test_hard_interrupt_while_draining_cancels_at_once() -> None:
    """A hard interrupt while draining cancels the block tools and ends the turn."""
    d = in_draining()
    fx = d.feed(Interrupted(kind="hard"))
    assert (
        CancelTools(generation=d.generation, tool_use_ids=("t1",), reason="user_interrupted") in fx
    )
    assert results(d)["t1"].content == INTERRUPTED
    assert_finished(fx, AbortedStreaming())
    # the block tool's late result is ignored: the turn is over
    with pytest.raises(IllegalEvent):
        d.finish_tool("t1", "late")


@pytest.mark.spec("I-4")
def test_draining_waits_for_every_block_tool() -> None:
    """With two block tools draining, the turn ends only when the last one finishes."""
    d = Driver(default())
    for t in ("t1", "t2"):
        d.tool_use(t, traits=SAFE_BLOCK)
        d.allow(t)
    d.feed(Interrupted(kind="submit"))
    fx = d.finish_tool("t2", "two")
    assert not any(isinstance(e, Finish) for e in fx)
    assert d.phase == "draining"
    fx = d.finish_tool("t1", "one")
    assert_finished(fx, AbortedStreaming())
    assert {k: v.content for k, v in results(d).items()} == {"t1": "one", "t2": "two"}


# --- I-5 --------------------------------------------------------------------------------------


@pytest.mark.spec("I-5", "T-ABORT-STREAM-1", "G9")
@pytest.mark.parametrize("kind", ["hard", "submit"])
def test_interrupt_while_reactive_compacting(kind: str) -> None:
    """CancelCompaction; aborted_streaming; the withheld error is never emitted."""
    d = in_reactive()
    cid = d.of(Compact)[-1].compact_id
    fx = d.feed(Interrupted(kind=kind))  # type: ignore[arg-type]
    assert CancelCompaction(compact_id=cid) in fx
    assert_finished(fx, AbortedStreaming())
    assert interrupt_messages(fx) == ([HARD] if kind == "hard" else [])
    assert "Prompt is too long" not in texts_emitted(d.effects)
    assert not any(
        isinstance(m, AssistantMessage) and m.api_error is not None
        for m in d.state.conversation.messages()
    )


# --- I-6 --------------------------------------------------------------------------------------


@pytest.mark.spec("I-6", "T-PREVENT-1")
@pytest.mark.parametrize("kind", ["hard", "submit"])
def test_interrupt_during_stop_hooks(kind: str) -> None:
    """CancelStopHooks; the response is kept; hard emits the message; stop_hook_prevented."""
    d = in_stop_hooks()
    hid = d.of(RunStopHooks)[-1].hooks_id
    fx = d.feed(Interrupted(kind=kind))  # type: ignore[arg-type]
    assert CancelStopHooks(hooks_id=hid) in fx
    assert interrupt_messages(fx) == ([HARD] if kind == "hard" else [])
    assert_finished(fx, StopHookPrevented())
    msgs = d.state.conversation.messages()
    assert any(
        isinstance(m, AssistantMessage) and m.content == (TextBlock(text="all done"),) for m in msgs
    )


# --- T-ABORT-TOOLS-1: max turns ---------------------------------------------------------------


def _max_turns_attachments(fx: Any) -> list[AttachmentMessage]:
    return [
        e.item
        for e in fx
        if isinstance(e, Emit)
        and isinstance(e.item, AttachmentMessage)
        and e.item.attachment_type == "max_turns_reached"
    ]


@pytest.mark.spec("T-ABORT-TOOLS-1", "I-3")
def test_aborted_tools_emits_max_turns_reached_when_due() -> None:
    """aborted_tools emits max_turns_reached when turn_count + 1 > max_turns."""
    d = Driver(default(max_turns=1))
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.end("tool_use")
    fx = d.feed(Interrupted(kind="hard"))
    (att,) = _max_turns_attachments(fx)
    assert dict(att.data) == {"maxTurns": 1, "turnCount": 2}
    assert_finished(fx, AbortedTools())
    assert d.state.conversation.messages()[-1] == att


@pytest.mark.spec("T-ABORT-TOOLS-1")
def test_aborted_tools_no_max_turns_when_not_due() -> None:
    """With room left (or no max_turns) no max_turns_reached is emitted."""
    for cfg in (default(max_turns=2), default()):
        d = Driver(cfg)
        d.tool_use("t1", name="Edit", traits=UNSAFE)
        d.end("tool_use")
        fx = d.feed(Interrupted(kind="hard"))
        assert _max_turns_attachments(fx) == []
        assert_finished(fx, AbortedTools())


@pytest.mark.spec("T-ABORT-STREAM-1")
def test_aborted_streaming_never_emits_max_turns() -> None:
    """An interrupt while streaming ends aborted_streaming without max_turns_reached."""
    d = Driver(default(max_turns=1))
    d.tool_use("t1", traits=SAFE)
    fx = d.feed(Interrupted(kind="hard"))
    assert _max_turns_attachments(fx) == []
    assert_finished(fx, AbortedStreaming())
