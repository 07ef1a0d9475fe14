"""Every one of the 17 transitions, reached through start()/step().

Each test drives the machine to the state just before the transition, then pins the whole
step: ``step(prev, event, cfg) == (expected_state, expected_effects)``. Expected states are
``attrs.evolve(prev, ...)`` listing every field the step changes; messages, rounds, slots and
effects are written out explicitly so a change in any of them fails the test.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from attrs import evolve

from steploop.reducer import LoopConfig, Request, Session, claude_code_2_1_88, default, start, step
from steploop.reducer.context import segments
from steploop.reducer.conversation import Conversation, estimate_message
from steploop.reducer.effects import (
    AcknowledgeCommands,
    AskPermission,
    CallModel,
    CancelModelCall,
    CancelTools,
    Compact,
    Emit,
    Finish,
    RefreshTools,
    RunStopHooks,
    StartTool,
    TaskBudget,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFailed,
    CompactionFinished,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    SystemMessage,
    TextBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.state import AutoCompactTracking, BudgetTracker, Ids, LoopState, Round, Slot
from steploop.reducer.texts import INTERRUPTED_TOOL_RESULT
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
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
)

MODEL = "claude-sonnet-4-5"
SYNTHETIC = "<synthetic>"
U = Usage(input_tokens=100, output_tokens=10)
SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
UNSAFE = ToolTraits(concurrency_safe=False)
READ_INPUT = {"file_path": "src/auth/validate.ts"}
EDIT_INPUT = {"file_path": "src/auth/validate.ts", "old_string": "a", "new_string": "b"}
PTL_TEXT = "Prompt is too long"
MOT_NUDGE = (
    "Output token limit hit. Resume directly — no apology, no recap of what you were doing. "
    "Pick up mid-thought if that is where the cut happened. Break remaining work into smaller "
    "pieces."
)


# -- message builders (what the machine is expected to write) -------------------------------


def prompt(mid: str, text: str) -> UserMessage:
    return UserMessage(id=mid, content=(TextBlock(text=text),), origin="prompt")


def rec(
    mid: str,
    call: int,
    block: Any,
    *,
    usage: Usage | None = None,
    stop: str | None = None,
) -> AssistantMessage:
    """One block record of model response ``r<call>``."""
    return AssistantMessage(
        id=mid,
        response_id=f"r{call}",
        model=MODEL,
        content=(block,),
        stop_reason=stop,
        usage=usage,
    )


def result(mid: str, tid: str, content: str, *, is_error: bool = False) -> UserMessage:
    return UserMessage(
        id=mid,
        content=(ToolResultBlock(tool_use_id=tid, content=content, is_error=is_error),),
        origin="tool_result",
    )


def api_error(
    mid: str,
    call: int,
    kind: str,
    text: str,
    status: int | None = None,
    category: str | None = None,
) -> AssistantMessage:
    return AssistantMessage(
        id=mid,
        response_id=f"r{call}",
        model=SYNTHETIC,
        content=(TextBlock(text=text),),
        stop_reason="stop_sequence",
        api_error=ErrorInfo(kind=kind, message=text, status=status, category=category),
    )


def meta(mid: str, text: str, origin: str) -> UserMessage:
    return UserMessage(id=mid, content=(TextBlock(text=text),), is_meta=True, origin=origin)


def read_use(tid: str = "t1") -> ToolUseBlock:
    return ToolUseBlock(id=tid, name="Read", input=READ_INPUT)


def edit_use(tid: str = "t1") -> ToolUseBlock:
    return ToolUseBlock(id=tid, name="Edit", input=EDIT_INPUT)


# -- a minimal driver: every event is spelled out at the call site ----------------------------


class Run:
    def __init__(self, cfg: LoopConfig, text: str = "fix it", **kw: Any) -> None:
        session = kw.pop("session", None)
        self.cfg = cfg
        self.s, self.fx = start(Request(prompt=text, **kw), cfg, session)

    def __call__(self, e: Any) -> tuple[Any, ...]:
        self.s, self.fx = step(self.s, e, self.cfg)
        return self.fx

    def block(self, block: Any, tool: ToolTraits | None = None) -> tuple[Any, ...]:
        return self(ModelBlockReceived(call_id=self.s.round.call_id, block=block, tool=tool))

    def end(self, stop: str = "end_turn", u: Usage = U, at_ms: int = 0) -> tuple[Any, ...]:
        e = ModelResponseEnded(
            call_id=self.s.round.call_id, model=MODEL, stop_reason=stop, usage=u, at_ms=at_ms
        )
        return self(e)

    def allow(self, tid: str = "t1") -> tuple[Any, ...]:
        gen = self.s.round.generation
        return self(PermissionAnswered(generation=gen, tool_use_id=tid, decision="allow"))

    def done(self, tid: str = "t1", content: str = "ok", **kw: Any) -> tuple[Any, ...]:
        gen = self.s.round.generation
        return self(ToolFinished(generation=gen, tool_use_id=tid, content=content, **kw))

    def fail(self, kind: str, **kw: Any) -> tuple[Any, ...]:
        return self(ModelCallFailed(call_id=self.s.round.call_id, kind=kind, **kw))

    def hooks(self, **kw: Any) -> tuple[Any, ...]:
        return self(StopHooksFinished(hooks_id=self.s.round.pending_id, **kw))

    def tool_round(self, tid: str, content: str = "ok", u: Usage = U) -> None:
        """A safe Read asked mid-stream, allowed, finished after the response ended."""
        self.block(read_use(tid), SAFE)
        self.allow(tid)
        self.end("tool_use", u)
        self.done(tid, content)


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


# =============================================================================================
# Continue transitions
# =============================================================================================


def _call(conv: Conversation, call_id: int, max_tokens: int = 8_000, **kw: Any) -> CallModel:
    return CallModel(
        call_id=call_id,
        model=MODEL,
        conversation=conv,
        max_tokens=max_tokens,
        streaming=True,
        task_budget=kw.pop("task_budget", None),
        query_source="repl_main_thread",
    )


@pytest.mark.spec("C-NEXT-1", "R-CMD-1")
def test_next_turn_commits_results_and_queued_commands() -> None:
    """All tool_uses answered: results and queued commands committed, turn_count + 1, call."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(read_use(), SAFE)
    r.allow()
    r.end("tool_use")
    r(CommandQueued(command_id="c1", text="also run the tests"))
    prev = r.s
    assert prev.queued_commands == (("c1", "also run the tests"),)
    res = result("m3", "t1", "file body")
    att = AttachmentMessage(
        id="m4",
        attachment_type="queued_command",
        data=(("commandId", "c1"), ("prompt", "also run the tests")),
    )
    conv = Conversation.of(
        [prompt("m1", "go"), rec("m2", 1, read_use(), usage=U, stop="tool_use"), res, att]
    )
    e = ToolFinished(generation=1, tool_use_id="t1", content="file body")
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=NextTurn(),
            turn_count=2,
            conversation=conv,
            queued_commands=(),
            consumed_commands=("c1",),
            round=Round(call_id=2, generation=2, max_tokens=8_000),
            ids=Ids(msg=4, call=2, generation=2),
        ),
        (Emit(item=res), Emit(item=att), _call(conv, 2)),
    )


@pytest.mark.spec("C-REACTIVE-1", "R-TASK-1", "G6")
def test_reactive_compact_retry_replaces_conversation_and_resets_tracking() -> None:
    """Compaction after prompt-too-long: messages replace the conversation, tracking reset."""
    cfg = default()
    r = Run(cfg, "go", session=Session(autocompact_failures=1), task_budget=50_000)
    assert r.s.tracking == AutoCompactTracking(consecutive_failures=1)
    r.tool_round("t1", u=Usage(input_tokens=1_000, output_tokens=200))
    fx = r.fail("prompt_too_long", status=400)
    before = Conversation.of(
        [
            prompt("m1", "go"),
            rec(
                "m2",
                1,
                read_use(),
                usage=Usage(input_tokens=1_000, output_tokens=200),
                stop="tool_use",
            ),
            result("m3", "t1", "ok"),
        ]
    )
    # one segment only: the collapse drain has nothing to fold, so reactive compaction runs
    assert fx == (Compact(compact_id=1, conversation=before, trigger="reactive", pre_tokens=1_201),)
    prev = r.s
    assert prev.phase == "reactive_compacting"
    msgs = (
        SystemMessage(id="c1", subtype="compact_boundary", text="Conversation compacted"),
        UserMessage(
            id="c2", content=(TextBlock(text="Summary: read it"),), is_meta=True, origin="summary"
        ),
    )
    conv = Conversation.of(msgs)
    assert step(prev, CompactionFinished(compact_id=1, messages=msgs), cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=ReactiveCompactRetry(),
            conversation=conv,
            has_attempted_reactive_compact=True,
            tracking=AutoCompactTracking(),
            task_budget_remaining=48_800,
            round=Round(call_id=3, generation=3, max_tokens=8_000),
            ids=Ids(msg=4, call=3, generation=3, compact=1),
        ),
        (
            Emit(item=msgs[0]),
            Emit(item=msgs[1]),
            _call(conv, 3, task_budget=TaskBudget(total=50_000, remaining=48_800)),
        ),
    )


@pytest.mark.spec("C-MOT-1", "R-MOT-1", "G9")
def test_max_output_tokens_recovery_nudges_and_keeps_partial() -> None:
    """Escalation off: the partial response is kept, the nudge appended and emitted."""
    cfg = default().with_overrides({"gates.max_tokens_escalation": False})
    r = Run(cfg, "write a lot")
    r.block(TextBlock(text="partial"))
    prev = r.s
    nudge = meta("m4", MOT_NUDGE, "nudge")
    conv = Conversation.of(
        [
            prompt("m1", "write a lot"),
            rec("m2", 1, TextBlock(text="partial"), usage=U, stop="max_tokens"),
            nudge,
        ]
    )
    e = ModelResponseEnded(call_id=1, model=MODEL, stop_reason="max_tokens", usage=U, at_ms=77)
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=MaxOutputTokensRecovery(attempt=1),
            mot_recovery_count=1,
            conversation=conv,
            turn_output_tokens=10,
            last_usage=U,
            last_assistant_at_ms=77,
            round=Round(call_id=2, generation=2, max_tokens=32_000),
            ids=Ids(msg=4, call=2, generation=2),
        ),
        (Emit(item=nudge), _call(conv, 2, 32_000)),
    )


@pytest.mark.spec("C-ESCALATE-1", "G10")
def test_max_output_tokens_escalate_drops_attempt_and_retries_at_64k() -> None:
    """First max_tokens of the turn: the attempt is tombstoned and re-sent with 64,000."""
    cfg = default()
    r = Run(cfg, "write a lot")
    r.block(TextBlock(text="partial"))
    prev = r.s
    e = ModelResponseEnded(call_id=1, model=MODEL, stop_reason="max_tokens", usage=U, at_ms=9)
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=MaxOutputTokensEscalate(),
            max_output_tokens_override=64_000,
            escalated=True,
            turn_output_tokens=10,
            last_usage=U,
            last_assistant_at_ms=9,
            round=Round(call_id=2, generation=2, max_tokens=64_000),
            ids=Ids(msg=3, call=2, generation=2),
        ),
        (
            Emit(item=Tombstone(message_id="m2")),
            _call(Conversation.of([prompt("m1", "write a lot")]), 2, 64_000),
        ),
    )


@pytest.mark.spec("C-COLLAPSE-1", "S-COLLAPSE-2")
def test_collapse_drain_retry_folds_all_but_newest_segment() -> None:
    """Prompt-too-long with 3 tool rounds: 2 segments folded into a stub, retried, no emit."""
    cfg = default()
    body = "x" * 400  # 100 tokens a result, so folding frees more than the stub costs
    r = Run(cfg, "go")
    for i in (1, 2, 3):
        r.tool_round(f"t{i}", content=body)
    prev = r.s
    assert prev.round.call_id == 4
    msgs = prev.conversation.messages()
    head, segs = segments(msgs)
    assert len(segs) == 3 and head == (prompt("m1", "go"),)
    stub = meta(
        "m9", "[Context collapsed: 4 earlier messages folded; tools used: Read]", "collapse"
    )
    conv = Conversation.of([head[0], stub, *segs[2]])
    freed = sum(estimate_message(m) for m in (*segs[0], *segs[1])) - estimate_message(stub)
    assert freed > 0
    assert step(prev, ModelCallFailed(call_id=4, kind="prompt_too_long"), cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=CollapseDrainRetry(committed=2),
            conversation=conv,
            tokens_freed=freed,
            round=Round(call_id=5, generation=5, max_tokens=8_000),
            ids=Ids(msg=9, call=5, generation=5),
        ),
        (_call(conv, 5),),
    )


@pytest.mark.spec("C-BLOCKING-1")
def test_stop_hook_blocking_feeds_errors_back() -> None:
    """Blocking errors become meta feedback messages; stop_hook_active, blocks + 1, retry."""
    cfg = default()
    r = Run(cfg, "go")
    r.block(TextBlock(text="done"))
    r.end()
    prev = r.s
    fb1 = meta("m3", "Stop hook feedback:\nlint: 3 errors", "stop_hook_feedback")
    fb2 = meta("m4", "Stop hook feedback:\ntests fail", "stop_hook_feedback")
    conv = Conversation.of(
        [
            prompt("m1", "go"),
            rec("m2", 1, TextBlock(text="done"), usage=U, stop="end_turn"),
            fb1,
            fb2,
        ]
    )
    e = StopHooksFinished(hooks_id=1, blocking_errors=("lint: 3 errors", "tests fail"))
    assert step(prev, e, cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=StopHookBlocking(),
            stop_hook_active=True,
            stop_hook_blocks=1,
            conversation=conv,
            round=Round(call_id=2, generation=2, max_tokens=8_000),
            ids=Ids(msg=4, call=2, generation=2, hooks=1),
        ),
        (Emit(item=fb1), Emit(item=fb2), _call(conv, 2)),
    )


@pytest.mark.spec("C-BUDGET-1")
def test_token_budget_continuation_below_90_percent() -> None:
    """Hooks pass at 10% of a 10,000 budget: the nudge is emitted and the tracker advances."""
    cfg = default()
    r = Run(cfg, "go", token_budget=10_000)
    r.block(TextBlock(text="some work"))
    out = Usage(input_tokens=100, output_tokens=1_000)
    r.end("end_turn", out)
    prev = r.s
    nudge = meta(
        "m3",
        "Stopped at 10% of token target (1,000 / 10,000). Keep working — do not summarize.",
        "nudge",
    )
    conv = Conversation.of(
        [
            prompt("m1", "go"),
            rec("m2", 1, TextBlock(text="some work"), usage=out, stop="end_turn"),
            nudge,
        ]
    )
    assert step(prev, StopHooksFinished(hooks_id=1), cfg) == (
        evolve(
            prev,
            phase="streaming",
            transition=TokenBudgetContinuation(),
            conversation=conv,
            budget=BudgetTracker(
                continuation_count=1, last_delta_tokens=1_000, last_global_turn_tokens=1_000
            ),
            round=Round(call_id=2, generation=2, max_tokens=8_000),
            ids=Ids(msg=3, call=2, generation=2, hooks=1),
        ),
        (Emit(item=nudge), _call(conv, 2)),
    )


# =============================================================================================
# C-RESET-1: what each Continue writes
# =============================================================================================

KEPT = object()
# field -> value per Continue tag (KEPT: equal to the value before the step) [C-RESET-1]
RESET_TABLE: dict[str, dict[str, Any]] = {
    "next_turn": dict(mot=0, reactive=False, override=None, sha=KEPT, turn=+1, tracking=KEPT),
    "reactive_compact_retry": dict(
        mot=KEPT, reactive=True, override=None, sha=KEPT, turn=0, tracking="reset"
    ),
    "max_output_tokens_recovery": dict(
        mot="attempt", reactive=KEPT, override=None, sha=KEPT, turn=0, tracking=KEPT
    ),
    "max_output_tokens_escalate": dict(
        mot=KEPT, reactive=KEPT, override=64_000, sha=KEPT, turn=0, tracking=KEPT
    ),
    "collapse_drain_retry": dict(
        mot=KEPT, reactive=KEPT, override=None, sha=KEPT, turn=0, tracking=KEPT
    ),
    "stop_hook_blocking": dict(
        mot=0, reactive=KEPT, override=None, sha=True, turn=0, tracking=KEPT
    ),
    "token_budget_continuation": dict(
        mot=0, reactive=False, override=None, sha=KEPT, turn=0, tracking=KEPT
    ),
}


@functools.cache
def _reset_chain() -> tuple[tuple[LoopState, LoopState], ...]:
    """One user turn through every Continue, ordered so that most fields are non-default
    before the Continues that keep or clear them. Returns (before, after) per Continue."""
    cfg = default()
    r = Run(cfg, "go", session=Session(autocompact_failures=1), token_budget=100_000)
    pairs: list[tuple[LoopState, LoopState]] = []

    def cont(kind: type, fn: Any, *args: Any, **kw: Any) -> None:
        before = r.s
        fn(*args, **kw)
        assert isinstance(r.s.transition, kind), (kind, r.s.transition)
        assert r.s.phase == "streaming"
        pairs.append((before, r.s))

    def text_end(stop: str) -> None:
        r.block(TextBlock(text="work"))
        r.end(stop)

    def reactive() -> None:
        r.fail("prompt_too_long")
        assert r.s.phase == "reactive_compacting"
        n = r.s.ids.compact
        msgs = (
            SystemMessage(id=f"b{n}", subtype="compact_boundary", text="compacted"),
            UserMessage(id=f"s{n}", content=(TextBlock(text="summary"),), origin="summary"),
        )
        cont(ReactiveCompactRetry, r, CompactionFinished(compact_id=n, messages=msgs))

    cont(NextTurn, r.tool_round, "t1")
    text_end("end_turn")
    cont(StopHookBlocking, r.hooks, blocking_errors=("fix the lint",))
    cont(MaxOutputTokensEscalate, text_end, "max_tokens")
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")  # override 64,000 before
    cont(CollapseDrainRetry, r.fail, "prompt_too_long")  # mot 1, stop_hook_active before
    reactive()  # tracking has 1 failure (session) before
    cont(NextTurn, r.tool_round, "t2")  # mot 1, reactive attempted, stop_hook_active before
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")
    cont(CollapseDrainRetry, r.fail, "prompt_too_long")
    reactive()
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")
    text_end("end_turn")
    cont(StopHookBlocking, r.hooks, blocking_errors=("still failing",))  # reactive true before
    cont(MaxOutputTokensRecovery, text_end, "max_tokens")
    text_end("end_turn")
    cont(TokenBudgetContinuation, r.hooks)  # mot 1, reactive true, stop_hook_active before
    return tuple(pairs)


@pytest.mark.spec("C-RESET-1", "G3")
@pytest.mark.parametrize("tag", sorted(RESET_TABLE))
def test_reset_table_per_continue(tag: str) -> None:
    """Each Continue writes exactly the C-RESET-1 column for its fields."""
    pairs = [
        (b, a) for b, a in _reset_chain() if a.transition is not None and a.transition.TAG == tag
    ]
    assert pairs, f"the chain never reached {tag}"
    row = RESET_TABLE[tag]
    for before, after in pairs:
        got = dict(
            mot=after.mot_recovery_count,
            reactive=after.has_attempted_reactive_compact,
            override=after.max_output_tokens_override,
            sha=after.stop_hook_active,
            turn=after.turn_count - before.turn_count,
            tracking=after.tracking,
        )
        want = dict(row)
        for field, old in (
            ("mot", before.mot_recovery_count),
            ("reactive", before.has_attempted_reactive_compact),
            ("sha", before.stop_hook_active),
            ("tracking", before.tracking),
        ):
            if want[field] is KEPT:
                want[field] = old
        if want["mot"] == "attempt":
            assert isinstance(after.transition, MaxOutputTokensRecovery)
            want["mot"] = after.transition.attempt
            assert after.transition.attempt == before.mot_recovery_count + 1
        if want["tracking"] == "reset":
            want["tracking"] = AutoCompactTracking()
        assert got == want, (tag, before.transition)


@pytest.mark.spec("C-RESET-1")
def test_reset_chain_makes_the_kept_checks_meaningful() -> None:
    """The chain feeds each Continue a state where what it keeps or clears is not a default."""
    pairs = _reset_chain()
    tags = [a.transition.TAG for _, a in pairs if a.transition is not None]
    assert set(tags) == {t.TAG for t in CONTINUE_TYPES}
    by_tag: dict[str, list[LoopState]] = {}
    for before, after in pairs:
        assert after.transition is not None
        by_tag.setdefault(after.transition.TAG, []).append(before)
    assert any(
        b.mot_recovery_count > 0 and b.has_attempted_reactive_compact for b in by_tag["next_turn"]
    )
    assert any(b.stop_hook_active for b in by_tag["next_turn"])
    assert any(b.tracking.consecutive_failures == 1 for b in by_tag["reactive_compact_retry"])
    assert any(b.mot_recovery_count > 0 for b in by_tag["reactive_compact_retry"])
    assert any(b.max_output_tokens_override == 64_000 for b in by_tag["max_output_tokens_recovery"])
    assert any(b.stop_hook_active for b in by_tag["max_output_tokens_escalate"])
    assert any(
        b.mot_recovery_count > 0 and b.stop_hook_active for b in by_tag["collapse_drain_retry"]
    )
    assert any(
        b.mot_recovery_count > 0 and b.has_attempted_reactive_compact
        for b in by_tag["stop_hook_blocking"]
    )
    assert any(
        b.mot_recovery_count > 0 and b.has_attempted_reactive_compact and b.stop_hook_active
        for b in by_tag["token_budget_continuation"]
    )
