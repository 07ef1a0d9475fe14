"""The seed's walk-through ("Пример прохода") as a test.

"Fix the null pointer bug in src/auth/validate.ts": the model reads the file (Read is safe and
starts mid-stream), edits it (Edit is not safe: it waits for the end of the response, and the
user approves the permission prompt), then answers in text. Three model calls, two tool runs,
``completed``.
"""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import default, start, step
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Effect,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
)
from steploop.reducer.events import (
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    ToolUseSummaryReady,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    Usage,
    UserMessage,
)
from steploop.reducer.state import LoopState, Phase, Request
from steploop.reducer.transitions import Completed, NextTurn

MODEL = "claude-sonnet-4-5"
PROMPT = "Fix the null pointer bug in src/auth/validate.ts"
PATH = "src/auth/validate.ts"
READ = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
EDIT = ToolTraits(concurrency_safe=False, interrupt="block")
READ_IN = {"file_path": PATH}
EDIT_IN = {
    "file_path": PATH,
    "old_string": "const user = getUser(userId)",
    "new_string": "if (!userId) return { error: 'unauthorized' }\nconst user = getUser(userId)",
}
FILE_BODY = "41\tfunction validate(userId) {\n42\t  const user = getUser(userId)\n43\t}"
EDIT_OUT = "The file src/auth/validate.ts has been updated."
TEXT1 = "Let me look at the file."
TEXT2 = "I see the bug on line 42 — userId can be null."
TEXT3 = "I've fixed the null pointer bug by adding a guard clause."
U1 = Usage(input_tokens=1_200, output_tokens=40)
U2 = Usage(input_tokens=1_500, output_tokens=90)
U3 = Usage(input_tokens=1_700, output_tokens=20)


def rec(mid: str, call: int, block: Any, **kw: Any) -> AssistantMessage:
    return AssistantMessage(id=mid, response_id=f"r{call}", model=MODEL, content=(block,), **kw)


def res(mid: str, tid: str, content: str) -> UserMessage:
    return UserMessage(
        id=mid,
        content=(ToolResultBlock(tool_use_id=tid, content=content),),
        origin="tool_result",
    )


READ_USE = ToolUseBlock(id="toolu_read", name="Read", input=READ_IN)
EDIT_USE = ToolUseBlock(id="toolu_edit", name="Edit", input=EDIT_IN)

# The conversation the turn must end with, in order.
M1 = UserMessage(id="m1", content=(TextBlock(text=PROMPT),), origin="prompt")
M2 = rec("m2", 1, TextBlock(text=TEXT1))
M3 = rec("m3", 1, READ_USE, stop_reason="tool_use", usage=U1)
M4 = res("m4", "toolu_read", FILE_BODY)
M5 = rec("m5", 2, TextBlock(text=TEXT2))
M6 = rec("m6", 2, EDIT_USE, stop_reason="tool_use", usage=U2)
M7 = res("m7", "toolu_edit", EDIT_OUT)
M8 = rec("m8", 3, TextBlock(text=TEXT3), stop_reason="end_turn", usage=U3)
EXPECTED: tuple[Message, ...] = (M1, M2, M3, M4, M5, M6, M7, M8)


def _call(call_id: int, msgs: tuple[Message, ...]) -> CallModel:
    return CallModel(
        call_id=call_id,
        model=MODEL,
        conversation=Conversation.of(msgs),
        max_tokens=8_000,
        streaming=True,
        task_budget=None,
        query_source="repl_main_thread",
    )


def run_walkthrough() -> tuple[LoopState, list[tuple[str, tuple[Effect, ...]]]]:
    """Drive the turn, checking each step's exact effects; returns the end state and a log
    of (event name, effects) in order."""
    cfg = default()
    log: list[tuple[str, tuple[Effect, ...]]] = []
    s, fx = start(Request(prompt=PROMPT), cfg)
    log.append(("start", fx))
    assert fx == (Emit(item=M1), _call(1, (M1,)))

    def feed(e: Any) -> tuple[Effect, ...]:
        nonlocal s
        s, out = step(s, e, cfg)
        log.append((type(e).__name__, out))
        return out

    def phase() -> Phase:
        # read through a call: feed() rebinds ``s``, which mypy's narrowing of ``s.phase``
        # after an ``assert s.phase == ...`` does not see
        return s.phase

    # -- iteration 1: Read starts mid-stream ---------------------------------------------
    assert feed(ModelBlockReceived(call_id=1, block=TextBlock(text=TEXT1))) == (Emit(item=M2),)
    # the safe Read is asked for right after its block, before the response ends [R-TOOL-1]
    assert feed(ModelBlockReceived(call_id=1, block=READ_USE, tool=READ)) == (
        Emit(item=rec("m3", 1, READ_USE)),
        AskPermission(generation=1, tool_use_id="toolu_read", name="Read", input=READ_IN),
    )
    assert phase() == "streaming"
    assert feed(PermissionAnswered(generation=1, tool_use_id="toolu_read", decision="allow")) == (
        StartTool(generation=1, tool_use_id="toolu_read", name="Read", input=READ_IN),
    )
    # the file content is in memory before the model finishes [R-TOOL-5: emitted in order]
    assert feed(ToolFinished(generation=1, tool_use_id="toolu_read", content=FILE_BODY)) == (
        Emit(item=M4),
    )
    assert phase() == "streaming"
    # response end: every tool_use has a result, next_turn [C-NEXT-1]
    assert feed(ModelResponseEnded(call_id=1, model=MODEL, stop_reason="tool_use", usage=U1)) == (
        _call(2, (M1, M2, M3, M4)),
    )
    assert (s.transition, s.turn_count) == (NextTurn(), 2)

    # -- iteration 2: Edit waits for the end of the response -----------------------------
    assert feed(ModelBlockReceived(call_id=2, block=TextBlock(text=TEXT2))) == (Emit(item=M5),)
    # not safe: emitted, but neither asked nor started mid-stream [R-TOOL-2]
    assert feed(ModelBlockReceived(call_id=2, block=EDIT_USE, tool=EDIT)) == (
        Emit(item=rec("m6", 2, EDIT_USE)),
    )
    assert feed(ModelResponseEnded(call_id=2, model=MODEL, stop_reason="tool_use", usage=U2)) == (
        AskPermission(generation=2, tool_use_id="toolu_edit", name="Edit", input=EDIT_IN),
    )
    assert phase() == "running_tools"
    # the user approves the prompt: only then does the tool start [R-PERM-1]
    assert feed(PermissionAnswered(generation=2, tool_use_id="toolu_edit", decision="allow")) == (
        StartTool(generation=2, tool_use_id="toolu_edit", name="Edit", input=EDIT_IN),
    )
    assert feed(ToolFinished(generation=2, tool_use_id="toolu_edit", content=EDIT_OUT)) == (
        Emit(item=M7),
        _call(3, (M1, M2, M3, M4, M5, M6, M7)),
    )
    assert (s.transition, s.turn_count) == (NextTurn(), 3)

    # -- iteration 3: the final answer ---------------------------------------------------
    assert feed(ModelBlockReceived(call_id=3, block=TextBlock(text=TEXT3))) == (
        Emit(item=rec("m8", 3, TextBlock(text=TEXT3))),
    )
    assert feed(ModelResponseEnded(call_id=3, model=MODEL, stop_reason="end_turn", usage=U3)) == (
        RunStopHooks(hooks_id=1, conversation=Conversation.of(EXPECTED), stop_hook_active=False),
    )
    assert feed(StopHooksFinished(hooks_id=1)) == (Finish(terminal=Completed()),)
    return s, log


@pytest.mark.spec("R-ORDER-1", "R-TOOL-1", "R-TOOL-2", "R-PERM-1")
def test_walkthrough_step_by_step() -> None:
    """The seed's three iterations produce exactly the expected effects at every step."""
    s, _ = run_walkthrough()
    assert s.phase == "done"
    assert s.transition == Completed()
    assert s.turn_count == 3


@pytest.mark.spec("R-ORDER-1")
def test_walkthrough_totals() -> None:
    """Three model calls, two tool runs, two permission asks, one Finish(completed), last."""
    _, log = run_walkthrough()
    effects = [f for _, fx in log for f in fx]
    calls = [f for f in effects if isinstance(f, CallModel)]
    assert [c.call_id for c in calls] == [1, 2, 3]
    starts = [f for f in effects if isinstance(f, StartTool)]
    assert [(t.name, t.tool_use_id) for t in starts] == [
        ("Read", "toolu_read"),
        ("Edit", "toolu_edit"),
    ]
    asks = [f for f in effects if isinstance(f, AskPermission)]
    assert [a.name for a in asks] == ["Read", "Edit"]
    assert effects[-1] == Finish(terminal=Completed())
    assert sum(isinstance(f, Finish) for f in effects) == 1


@pytest.mark.spec("R-TOOL-1", "R-TOOL-2", "R-PERM-1")
def test_read_is_asked_mid_stream_and_edit_after_the_end() -> None:
    """Read's AskPermission directly follows its block, steps before its response ends;
    Edit's comes only in the step of its response's end; StartTool answers each allow."""
    _, log = run_walkthrough()
    flat = [(name, f) for name, fx in log for f in fx]

    def at(pred: Any) -> int:
        return next(i for i, (_, f) in enumerate(flat) if pred(f))

    def emitted(mid: str) -> int:
        return at(lambda f: isinstance(f, Emit) and getattr(f.item, "id", None) == mid)

    def ask(tid: str) -> int:
        return at(lambda f: isinstance(f, AskPermission) and f.tool_use_id == tid)

    def started(tid: str) -> int:
        return at(lambda f: isinstance(f, StartTool) and f.tool_use_id == tid)

    def call(n: int) -> int:
        return at(lambda f: isinstance(f, CallModel) and f.call_id == n)

    ends = [i for i, (name, _) in enumerate(flat) if name == "ModelResponseEnded"]
    # Read: asked right after its block, in the same step; run and answered before call 1 ends
    assert ask("toolu_read") == emitted("m3") + 1
    assert flat[ask("toolu_read")][0] == "ModelBlockReceived"
    assert started("toolu_read") < emitted("m4") < ends[0]
    assert flat[started("toolu_read")][0] == "PermissionAnswered"
    # Edit: emitted mid-stream, asked only when the response ended, started on the allow
    assert emitted("m6") < ask("toolu_edit")
    assert flat[ask("toolu_edit")][0] == "ModelResponseEnded"
    assert flat[started("toolu_edit")][0] == "PermissionAnswered"
    assert ask("toolu_edit") < started("toolu_edit") < emitted("m7") < call(3)


@pytest.mark.spec("R-ORDER-1", "G13")
def test_final_conversation_and_tool_pairing() -> None:
    """The final conversation holds exactly the 8 expected messages in order, and every
    tool_use has exactly one tool_result, after it."""
    s, _ = run_walkthrough()
    msgs = s.conversation.messages()
    assert msgs == EXPECTED
    assert s.conversation == Conversation.of(EXPECTED)
    uses = [
        (i, b.id)
        for i, m in enumerate(msgs)
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    results = [
        (i, b.tool_use_id)
        for i, m in enumerate(msgs)
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [u for _, u in uses] == ["toolu_read", "toolu_edit"]
    for pos, tid in uses:
        matching = [i for i, r in results if r == tid]
        assert len(matching) == 1, tid
        assert matching[0] > pos
    assert sorted(r for _, r in results) == sorted(u for _, u in uses)


@pytest.mark.spec("R-SUM-1", "R-ORDER-1")
def test_walkthrough_with_the_haiku_summary() -> None:
    """With tool-use summaries on, iteration 1's summary resolves while iteration 2 streams
    and is emitted right after that response ends, before the Edit is asked for."""
    cfg = default().with_overrides({"gates.tool_use_summaries": True})
    s, _ = start(Request(prompt=PROMPT), cfg)

    def feed(e: Any) -> tuple[Effect, ...]:
        nonlocal s
        s, out = step(s, e, cfg)
        return out

    feed(ModelBlockReceived(call_id=1, block=TextBlock(text=TEXT1)))
    feed(ModelBlockReceived(call_id=1, block=READ_USE, tool=READ))
    feed(PermissionAnswered(generation=1, tool_use_id="toolu_read", decision="allow"))
    feed(ToolFinished(generation=1, tool_use_id="toolu_read", content=FILE_BODY))
    round1 = Conversation.of((M1, M2, M3, M4))
    assert feed(ModelResponseEnded(call_id=1, model=MODEL, stop_reason="tool_use", usage=U1)) == (
        SummarizeToolUse(summary_id=1, tool_use_ids=("toolu_read",), conversation=round1),
        _call(2, (M1, M2, M3, M4)),
    )
    feed(ModelBlockReceived(call_id=2, block=TextBlock(text=TEXT2)))
    # the summary arrives mid-stream: held until the response ends
    assert feed(ToolUseSummaryReady(summary_id=1, summary="Read validate.ts")) == ()
    feed(ModelBlockReceived(call_id=2, block=EDIT_USE, tool=EDIT))
    assert feed(ModelResponseEnded(call_id=2, model=MODEL, stop_reason="tool_use", usage=U2)) == (
        Emit(
            item=ToolUseSummary(summary="Read validate.ts", preceding_tool_use_ids=("toolu_read",))
        ),
        AskPermission(generation=2, tool_use_id="toolu_edit", name="Edit", input=EDIT_IN),
    )
    feed(PermissionAnswered(generation=2, tool_use_id="toolu_edit", decision="allow"))
    assert feed(ToolFinished(generation=2, tool_use_id="toolu_edit", content=EDIT_OUT)) == (
        Emit(item=M7),
        SummarizeToolUse(
            summary_id=2,
            tool_use_ids=("toolu_edit",),
            conversation=Conversation.of(EXPECTED[:7]),
        ),
        _call(3, EXPECTED[:7]),
    )
    feed(ModelBlockReceived(call_id=3, block=TextBlock(text=TEXT3)))
    feed(ModelResponseEnded(call_id=3, model=MODEL, stop_reason="end_turn", usage=U3))
    assert feed(StopHooksFinished(hooks_id=1)) == (Finish(terminal=Completed()),)
    # summaries are shown, never stored: the conversation is the same as without them
    assert s.conversation.messages() == EXPECTED
