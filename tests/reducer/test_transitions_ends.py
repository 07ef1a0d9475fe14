"""Every one of the 17 transitions, reached through start()/step().

Each test drives the machine to the state just before the transition, then pins the whole
step: ``step(prev, event, cfg) == (expected_state, expected_effects)``. Expected states are
``attrs.evolve(prev, ...)`` listing every field the step changes; messages, rounds, slots and
effects are written out explicitly so a change in any of them fails the test.

This file: the terminal transitions Aborted (streaming, tools), PromptTooLong,
StopHookPrevented, HookStopped and MaxTurns.
"""

from __future__ import annotations

from typing import Any

import pytest
from attrs import evolve

from steploop.reducer import LoopConfig, default, step
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AskPermission,
    CancelModelCall,
    CancelTools,
    Compact,
    Emit,
    Finish,
    StartTool,
)
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Interrupted,
    ModelCallFailed,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import (
    AttachmentMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.state import Ids, Round, Slot
from steploop.reducer.texts import INTERRUPTED_TOOL_RESULT
from steploop.reducer.transitions import (
    AbortedStreaming,
    AbortedTools,
    HookStopped,
    MaxTurns,
    PromptTooLong,
    StopHookPrevented,
)
from tests.reducer.transitions_kit import (
    PTL_TEXT,
    READ_INPUT,
    SAFE,
    Run,
    U,
    api_error,
    prompt,
    read_use,
    rec,
    result,
)

UNSAFE = ToolTraits(concurrency_safe=False)
EDIT_INPUT = {"file_path": "src/auth/validate.ts", "old_string": "a", "new_string": "b"}


def edit_use(tid: str = "t1") -> ToolUseBlock:
    return ToolUseBlock(id=tid, name="Edit", input=EDIT_INPUT)


@pytest.mark.spec("T-ABORT-STREAM-1", "I-2")
def test_aborted_streaming_on_hard_interrupt() -> None:
    """A hard interrupt mid-stream cancels the call and tools, answers them, ends aborted."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(TextBlock(text="Reading."))
    r.block(read_use(), SAFE)
    r.allow()
    prev = r.s
    blocks = (rec("m2", 1, TextBlock(text="Reading.")), rec("m3", 1, read_use()))
    res = result("m4", "t1", INTERRUPTED_TOOL_RESULT, is_error=True)
    note = UserMessage(
        id="m5", content=(TextBlock(text="[Request interrupted by user]"),), origin="interrupt"
    )
    assert step(prev, Interrupted(kind="hard"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=AbortedStreaming(),
            conversation=prev.conversation.extend([*blocks, res, note]),
            round=Round(
                call_id=1,
                generation=1,
                max_tokens=8_000,
                blocks=blocks,
                slots=(
                    Slot(
                        tool_use_id="t1",
                        name="Read",
                        input=READ_INPUT,
                        traits=SAFE,
                        status="done",
                        result=ToolResultBlock(
                            tool_use_id="t1", content=INTERRUPTED_TOOL_RESULT, is_error=True
                        ),
                        synthetic=True,
                        message=res,
                    ),
                ),
                results=(res,),
                ended=True,
                abort_kind="hard",
            ),
            ids=Ids(msg=5, call=1, generation=1),
        ),
        (
            CancelModelCall(call_id=1),
            CancelTools(generation=1, tool_use_ids=("t1",), reason="user_interrupted"),
            Emit(item=res),
            Emit(item=note),
            Finish(terminal=AbortedStreaming()),
        ),
    )


def _edit_running(cfg: LoopConfig) -> Run:
    """A non-safe Edit asked after the response ended, allowed and running."""
    r = Run(cfg, "go")
    r.block(edit_use(), UNSAFE)
    fx = r.end("tool_use")
    assert fx == (AskPermission(generation=1, tool_use_id="t1", name="Edit", input=EDIT_INPUT),)
    assert r.allow() == (StartTool(generation=1, tool_use_id="t1", name="Edit", input=EDIT_INPUT),)
    assert r.s.phase == "running_tools"
    return r


def _edit_round(slot: Slot, res: UserMessage, **kw: Any) -> Round:
    return Round(
        call_id=1,
        generation=1,
        max_tokens=8_000,
        blocks=(rec("m2", 1, edit_use()),),
        slots=(slot,),
        results=(res,),
        ended=True,
        stop_reason="tool_use",
        usage=U,
        **kw,
    )


@pytest.mark.spec("T-ABORT-TOOLS-1", "I-3")
def test_aborted_tools_on_hard_interrupt() -> None:
    """A hard interrupt while tools run answers them and ends aborted_tools with its message."""
    cfg = default()
    r = _edit_running(cfg)
    prev = r.s
    res = result("m3", "t1", INTERRUPTED_TOOL_RESULT, is_error=True)
    note = UserMessage(
        id="m4",
        content=(TextBlock(text="[Request interrupted by user for tool use]"),),
        origin="interrupt",
    )
    slot = Slot(
        tool_use_id="t1",
        name="Edit",
        input=EDIT_INPUT,
        traits=UNSAFE,
        status="done",
        result=ToolResultBlock(tool_use_id="t1", content=INTERRUPTED_TOOL_RESULT, is_error=True),
        synthetic=True,
        message=res,
    )
    assert step(prev, Interrupted(kind="hard"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=AbortedTools(),
            conversation=prev.conversation.extend(
                [rec("m2", 1, edit_use(), usage=U, stop="tool_use"), res, note]
            ),
            round=_edit_round(slot, res, abort_kind="hard"),
            ids=Ids(msg=4, call=1, generation=1),
        ),
        (
            CancelTools(generation=1, tool_use_ids=("t1",), reason="user_interrupted"),
            Emit(item=res),
            Emit(item=note),
            Finish(terminal=AbortedTools()),
        ),
    )


@pytest.mark.spec("T-ABORT-TOOLS-1", "I-3")
def test_aborted_tools_emits_max_turns_reached_when_due() -> None:
    """With max_turns=1, aborting the tools also emits max_turns_reached {1, 2}."""
    cfg = LoopConfig(max_turns=1)
    r = _edit_running(cfg)
    prev = r.s
    res = result("m3", "t1", INTERRUPTED_TOOL_RESULT, is_error=True)
    note = UserMessage(
        id="m4",
        content=(TextBlock(text="[Request interrupted by user for tool use]"),),
        origin="interrupt",
    )
    att = AttachmentMessage(
        id="m5", attachment_type="max_turns_reached", data=(("maxTurns", 1), ("turnCount", 2))
    )
    slot = Slot(
        tool_use_id="t1",
        name="Edit",
        input=EDIT_INPUT,
        traits=UNSAFE,
        status="done",
        result=ToolResultBlock(tool_use_id="t1", content=INTERRUPTED_TOOL_RESULT, is_error=True),
        synthetic=True,
        message=res,
    )
    assert step(prev, Interrupted(kind="hard"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=AbortedTools(),
            conversation=prev.conversation.extend(
                [rec("m2", 1, edit_use(), usage=U, stop="tool_use"), res, note, att]
            ),
            round=_edit_round(slot, res, abort_kind="hard"),
            ids=Ids(msg=5, call=1, generation=1),
        ),
        (
            CancelTools(generation=1, tool_use_ids=("t1",), reason="user_interrupted"),
            Emit(item=res),
            Emit(item=note),
            Emit(item=att),
            Finish(terminal=AbortedTools()),
        ),
    )


@pytest.mark.spec("T-PTL-1", "R-PTL-1", "G2")
def test_prompt_too_long_after_failed_reactive_compaction() -> None:
    """Collapse off, reactive on: the compaction fails, the withheld error ends the turn."""
    cfg = default().with_overrides({"gates.context_collapse": False})
    r = Run(cfg, "huge")
    assert r.fail("prompt_too_long", status=400) == (
        Compact(
            compact_id=1,
            conversation=Conversation.of([prompt("m1", "huge")]),
            trigger="reactive",
            pre_tokens=1,
        ),
    )
    prev = r.s
    err = api_error("m2", 1, "prompt_too_long", PTL_TEXT, 400)
    assert prev.round.withheld == err
    assert step(prev, CompactionFailed(compact_id=1), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=PromptTooLong(),
            conversation=prev.conversation.append(err),
        ),
        (Emit(item=err), Finish(terminal=PromptTooLong())),
    )


@pytest.mark.spec("T-PTL-1", "G2", "C-COLLAPSE-1")
def test_prompt_too_long_when_reactive_already_attempted() -> None:
    """default(): a second prompt-too-long after a reactive retry (nothing to drain) surfaces."""
    cfg = default()
    r = Run(cfg, "huge")
    r.fail("prompt_too_long")
    summary = (
        SystemMessage(id="c1", subtype="compact_boundary", text="Conversation compacted"),
        UserMessage(
            id="c2", content=(TextBlock(text="Summary: huge"),), is_meta=True, origin="summary"
        ),
    )
    r(CompactionFinished(compact_id=1, messages=summary))
    assert r.s.has_attempted_reactive_compact
    prev = r.s
    err = api_error("m3", 2, "prompt_too_long", PTL_TEXT)
    assert step(prev, ModelCallFailed(call_id=2, kind="prompt_too_long"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=PromptTooLong(),
            conversation=Conversation.of([*summary, err]),
            round=Round(call_id=2, generation=3, max_tokens=8_000, ended=True, withheld=err),
            ids=Ids(msg=3, call=2, generation=2, compact=1),
        ),
        (Emit(item=err), Finish(terminal=PromptTooLong())),
    )


@pytest.mark.spec("T-PREVENT-1")
def test_stop_hook_prevented() -> None:
    """prevent: a hook_stopped_continuation attachment is emitted and the turn ends."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(TextBlock(text="done"))
    r.end()
    prev = r.s
    att = AttachmentMessage(
        id="m3",
        attachment_type="hook_stopped_continuation",
        data=(("hookName", "Stop"), ("stopReason", "policy says stop")),
    )
    e = StopHooksFinished(hooks_id=1, prevent=True, stop_reason="policy says stop")
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="done",
            transition=StopHookPrevented(),
            conversation=prev.conversation.extend(
                [rec("m2", 1, TextBlock(text="done"), usage=U, stop="end_turn"), att]
            ),
            ids=Ids(msg=3, call=1, generation=1, hooks=1),
        ),
        (Emit(item=att), Finish(terminal=StopHookPrevented())),
    )


@pytest.mark.spec("T-HOOK-1")
def test_hook_stopped_after_round_results() -> None:
    """A result carrying hook_stopped: results committed, attachment emitted, turn ends."""
    cfg = default()
    r = _edit_running(cfg)
    prev = r.s
    res = result("m3", "t1", "blocked by PostToolUse hook")
    att = AttachmentMessage(
        id="m4",
        attachment_type="hook_stopped_continuation",
        data=(  # the reference's attachment (issue 15, defect 2)
            ("message", "Execution stopped by PostToolUse hook"),
            ("hookName", "PostToolUse:Edit"),
            ("toolUseID", "t1"),
            ("hookEvent", "PostToolUse"),
        ),
    )
    slot = Slot(
        tool_use_id="t1",
        name="Edit",
        input=EDIT_INPUT,
        traits=UNSAFE,
        status="done",
        result=ToolResultBlock(tool_use_id="t1", content="blocked by PostToolUse hook"),
        hook_stopped=True,
        hook_event="PostToolUse",
        message=res,
    )
    e = ToolFinished(
        generation=1, tool_use_id="t1", content="blocked by PostToolUse hook", hook_stopped=True
    )
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="done",
            transition=HookStopped(),
            conversation=prev.conversation.extend(
                [rec("m2", 1, edit_use(), usage=U, stop="tool_use"), res, att]
            ),
            round=_edit_round(slot, res, hook_stop=True),
            ids=Ids(msg=4, call=1, generation=1),
        ),
        (Emit(item=res), Emit(item=att), Finish(terminal=HookStopped())),
    )


@pytest.mark.spec("T-MAXTURNS-1")
def test_max_turns_on_the_tool_path() -> None:
    """max_turns=1: after the results, max_turns_reached {1, 2} and MaxTurns(turn_count=2)."""
    cfg = LoopConfig(max_turns=1)
    r = _edit_running(cfg)
    prev = r.s
    res = result("m3", "t1", "edited")
    att = AttachmentMessage(
        id="m4", attachment_type="max_turns_reached", data=(("maxTurns", 1), ("turnCount", 2))
    )
    slot = Slot(
        tool_use_id="t1",
        name="Edit",
        input=EDIT_INPUT,
        traits=UNSAFE,
        status="done",
        result=ToolResultBlock(tool_use_id="t1", content="edited"),
        message=res,
    )
    assert step(prev, ToolFinished(generation=1, tool_use_id="t1", content="edited"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=MaxTurns(turn_count=2),
            conversation=prev.conversation.extend(
                [rec("m2", 1, edit_use(), usage=U, stop="tool_use"), res, att]
            ),
            round=_edit_round(slot, res),
            ids=Ids(msg=4, call=1, generation=1),
        ),
        (Emit(item=res), Emit(item=att), Finish(terminal=MaxTurns(turn_count=2))),
    )
