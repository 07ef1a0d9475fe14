"""Every one of the 17 transitions, reached through start()/step().

Each test drives the machine to the state just before the transition, then pins the whole
step: ``step(prev, event, cfg) == (expected_state, expected_effects)``. Expected states are
``attrs.evolve(prev, ...)`` listing every field the step changes; messages, rounds, slots and
effects are written out explicitly so a change in any of them fails the test.

This file: the terminal transitions Completed, BlockingLimit, ImageError and ModelError; the
other terminal ones are in test_transitions_ends.py, the Continue transitions and what each
writes (C-RESET-1) in test_transitions_continue.py.
"""

from __future__ import annotations

import pytest
from attrs import evolve

from steploop.reducer import claude_code_2_1_88, default, step
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AcknowledgeCommands,
    CancelTools,
    Compact,
    Emit,
    Finish,
    RefreshTools,
    RunStopHooks,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    ModelCallFailed,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
)
from steploop.reducer.messages import ErrorInfo, TextBlock, ToolResultBlock, Usage
from steploop.reducer.state import AutoCompactTracking, Ids, Round, Slot
from steploop.reducer.transitions import BlockingLimit, Completed, ImageError, ModelError
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

# =============================================================================================
# Terminal transitions
# =============================================================================================


@pytest.mark.spec("T-COMPLETED-1", "R-HOOK-1")
def test_completed_after_stop_hooks_pass() -> None:
    """No tool use, hooks pass, no budget: the response is committed and the turn completes."""
    cfg = default()
    r = Run(cfg, "say hi")
    r.block(TextBlock(text="hello"))
    fx = r.end("end_turn", at_ms=5)
    answer = rec("m2", 1, TextBlock(text="hello"), usage=U, stop="end_turn")
    assert fx == (
        RunStopHooks(
            hooks_id=1,
            conversation=Conversation.of([prompt("m1", "say hi"), answer]),
            stop_hook_active=False,
        ),
    )
    prev = r.s
    assert prev.phase == "stop_hooks"
    assert step(prev, StopHooksFinished(hooks_id=1), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=Completed(),
            conversation=Conversation.of([prompt("m1", "say hi"), answer]),
        ),
        (Finish(terminal=Completed()),),
    )


@pytest.mark.spec("T-COMPLETED-1", "R-AUTH-1", "G1")
def test_completed_on_emitted_api_error_without_stop_hooks() -> None:
    """An auth failure is emitted at once and ends the turn completed, no stop hooks (G1)."""
    cfg = default()
    r = Run(cfg, "hi")
    prev = r.s
    err = api_error("m2", 1, "auth", "API Error: invalid x-api-key", 401)
    e = ModelCallFailed(call_id=1, kind="auth", message="invalid x-api-key", status=401)
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="done",
            transition=Completed(),
            conversation=Conversation.of([prompt("m1", "hi"), err]),
            # the discarded attempt's slots are stale: the round moves to the next generation
            round=Round(call_id=1, generation=2, max_tokens=8_000, ended=True, error_message=err),
            ids=Ids(msg=2, call=1, generation=1),
        ),
        (Emit(item=err), Finish(terminal=Completed())),
    )


@pytest.mark.spec("T-COMPLETED-1", "R-CMD-2")
def test_completed_acknowledges_consumed_commands_before_finish() -> None:
    """Commands consumed on the tool path are acknowledged just before Finish(completed)."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(read_use(), SAFE)
    r.allow()
    r(CommandQueued(command_id="c1", text="and the docs"))
    r.end("tool_use")
    r.done("t1")
    assert r.s.consumed_commands == ("c1",)
    r.block(TextBlock(text="all done"))
    r.end()
    prev = r.s
    assert step(prev, StopHooksFinished(hooks_id=1), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=Completed(),
            conversation=prev.conversation.append(
                rec("m5", 2, TextBlock(text="all done"), usage=U, stop="end_turn")
            ),
        ),
        (AcknowledgeCommands(command_ids=("c1",)), Finish(terminal=Completed())),
    )


@pytest.mark.spec("T-BLOCKING-1", "Q-4", "R-CTX-4")
def test_blocking_limit_after_failed_auto_compact_in_2_1_88() -> None:
    """2.1.88 (Q-4 on): a failed auto-compact over the blocking limit ends blocking_limit."""
    cfg = claude_code_2_1_88()
    # effective window 180,000 (no escalation cap): threshold 167,000, blocking limit 177,000
    assert (cfg.autocompact_threshold, cfg.blocking_limit) == (167_000, 177_000)
    big = Usage(input_tokens=178_000, output_tokens=10)
    r = Run(cfg, "go")
    r.tool_round("t1", u=big)
    conv = Conversation.of(
        [
            prompt("m1", "go"),
            rec("m2", 1, read_use(), usage=big, stop="tool_use"),
            result("m3", "t1", "ok"),
        ]
    )
    # the 2.1.88 profile reads the tool list at the end of the tool round [R-REFRESH-1]
    assert r.fx == (Emit(item=result("m3", "t1", "ok")), RefreshTools(call_id=1))
    assert r(ToolsRefreshed(call_id=1, tools=("Read",))) == (
        Compact(compact_id=1, conversation=conv, trigger="auto", pre_tokens=178_011),
    )
    prev = r.s
    assert prev.phase == "compacting"
    # Claude Code's category for it (R-CATEGORY-1): the 2.1.88 profile uses its texts
    err = api_error("m4", 1, "blocking_limit", PTL_TEXT, category="invalid_request")
    assert step(prev, CompactionFailed(compact_id=1, reason="summary failed"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=BlockingLimit(),
            tracking=AutoCompactTracking(consecutive_failures=1),
            conversation=conv.append(err),
            round=Round(call_id=1, generation=2),  # no call was made; nothing outstanding
            ids=Ids(msg=4, call=1, generation=1, compact=1),
        ),
        (Emit(item=err), Finish(terminal=BlockingLimit())),
    )


@pytest.mark.spec("T-BLOCKING-1", "G7")
def test_blocking_limit_with_auto_compact_off() -> None:
    """Auto-compact off: the next round's blocking check ends the turn before CallModel."""
    cfg = default().with_overrides({"gates.auto_compact": False})
    assert cfg.blocking_limit == 189_000
    big = Usage(input_tokens=190_000, output_tokens=10)
    r = Run(cfg, "go")
    r.block(read_use(), SAFE)
    r.allow()
    r.end("tool_use", big)
    prev = r.s
    assert prev.phase == "running_tools"
    res = result("m3", "t1", "ok")
    err = api_error("m4", 1, "blocking_limit", PTL_TEXT)
    conv = Conversation.of(
        [prompt("m1", "go"), rec("m2", 1, read_use(), usage=big, stop="tool_use"), res, err]
    )
    assert step(prev, ToolFinished(generation=1, tool_use_id="t1", content="ok"), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=BlockingLimit(),
            turn_count=2,
            conversation=conv,
            # the round was reset for the next call (its generation), which the check stopped
            round=Round(call_id=1, generation=2),
            ids=Ids(msg=4, call=1, generation=1),
        ),
        (Emit(item=res), Emit(item=err), Finish(terminal=BlockingLimit())),
    )


@pytest.mark.spec("T-IMAGE-1")
def test_image_error_from_client_image_failure() -> None:
    """image_client: tool_uses get error results, running tools are cancelled, error emitted."""
    cfg = default()
    r = Run(cfg, "look at this")
    r.block(TextBlock(text="Let me look."))
    r.block(read_use(), SAFE)
    r.allow()
    prev = r.s
    assert prev.round.slots[0].status == "running"
    res = result("m4", "t1", "Could not process image", is_error=True)
    err = api_error("m5", 1, "image_client", "Could not process image")
    blocks = (rec("m2", 1, TextBlock(text="Let me look.")), rec("m3", 1, read_use()))
    e = ModelCallFailed(call_id=1, kind="image_client", message="Could not process image")
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="done",
            transition=ImageError(),
            conversation=prev.conversation.extend([*blocks, res, err]),
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
                            tool_use_id="t1", content="Could not process image", is_error=True
                        ),
                        synthetic=True,
                        message=res,
                    ),
                ),
                results=(res,),
            ),
            ids=Ids(msg=5, call=1, generation=1),
        ),
        (
            CancelTools(generation=1, tool_use_ids=("t1",), reason="model_error"),
            Emit(item=res),
            Emit(item=err),
            Finish(terminal=ImageError()),
        ),
    )


@pytest.mark.spec("T-IMAGE-1", "R-MEDIA-1", "G5", "G2")
def test_image_error_when_reactive_compaction_fails_on_media_error() -> None:
    """A withheld media error whose reactive compaction failed is emitted: image_error."""
    cfg = default()
    r = Run(cfg, "describe")
    fx = r.fail("media", message="image exceeds 5 MB", status=413)
    assert fx == (
        Compact(
            compact_id=1,
            conversation=Conversation.of([prompt("m1", "describe")]),
            trigger="reactive",
            pre_tokens=2,
        ),
    )
    prev = r.s
    assert prev.phase == "reactive_compacting"
    err = api_error("m2", 1, "media", "API Error: image exceeds 5 MB", 413)
    assert step(prev, CompactionFailed(compact_id=1), cfg) == (
        evolve(
            prev,
            phase="done",
            transition=ImageError(),
            conversation=prev.conversation.append(err),
        ),
        (Emit(item=err), Finish(terminal=ImageError())),
    )


@pytest.mark.spec("T-MODEL-1", "G13")
def test_model_error_cancels_tools_answers_tool_uses_and_freezes_error() -> None:
    """unknown: running tools cancelled, tool_uses answered, error emitted, ErrorInfo frozen."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(read_use(), SAFE)
    r.allow()
    prev = r.s
    res = result("m3", "t1", "socket hang up", is_error=True)
    err = api_error("m4", 1, "unknown", "API Error: socket hang up", 599)
    e = ModelCallFailed(call_id=1, kind="unknown", message="socket hang up", status=599)
    terminal = ModelError(error=ErrorInfo(kind="unknown", message="socket hang up", status=599))
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="done",
            transition=terminal,
            conversation=prev.conversation.extend([rec("m2", 1, read_use()), res, err]),
            round=Round(
                call_id=1,
                generation=1,
                max_tokens=8_000,
                blocks=(rec("m2", 1, read_use()),),
                slots=(
                    Slot(
                        tool_use_id="t1",
                        name="Read",
                        input=READ_INPUT,
                        traits=SAFE,
                        status="done",
                        result=ToolResultBlock(
                            tool_use_id="t1", content="socket hang up", is_error=True
                        ),
                        synthetic=True,
                        message=res,
                    ),
                ),
                results=(res,),
            ),
            ids=Ids(msg=4, call=1, generation=1),
        ),
        (
            CancelTools(generation=1, tool_use_ids=("t1",), reason="model_error"),
            Emit(item=res),
            Emit(item=err),
            Finish(terminal=terminal),
        ),
    )
