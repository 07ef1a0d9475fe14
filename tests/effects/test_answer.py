"""The answering layer (steploop/effects/answer.py, specs/ W-ANSWER-1): what a handler's output
becomes, the one place every world takes it from; counterfactual replay's scripted policy
answers through it too, and no world module builds a handler's answer event itself."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from steploop.effects import answer
from steploop.effects.answer import PermissionPolicy
from steploop.effects.scripted import reply, response, tool_use
from steploop.effects.tools import ToolOutput
from steploop.effects.trace import record_driver, replay_counterfactual
from steploop.reducer import Request, default, start
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    RunStopHooks,
    StartTool,
    SummarizeToolUse,
)
from steploop.reducer.events import (
    CompactionFailed,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    StopHooksFinished,
    ToolFinished,
    ToolUseSummaryReady,
)
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage
from tests.effects.trace_kit import FIXED, scripted_world

ROOT = Path(__file__).resolve().parents[2]
CALL = CallModel(call_id=3, model="m", conversation=Conversation.of(()), max_tokens=100)
TOOL = StartTool(generation=2, tool_use_id="t1", name="Hooked", input={})
COMPACT = Compact(compact_id=4, trigger="auto", conversation=Conversation.of(()), pre_tokens=1)
HOOKS = RunStopHooks(hooks_id=5, conversation=Conversation.of(()), stop_hook_active=False)
SUMMARY = SummarizeToolUse(summary_id=6, tool_use_ids=("t1",), conversation=Conversation.of(()))


@pytest.mark.spec("W-ANSWER-1", "E-HOOK-1", "B-TOOL-1")
def test_a_tool_output_becomes_its_tool_finished() -> None:
    """A hook stop keeps its hook and cleaned reason; a malformed one or a non-ToolOutput is an
    error result naming it; a call that stopped nothing carries no hook fields."""
    stop = ToolOutput(
        content="x\ud800", hook_stopped=True, hook_event="PreToolUse", hook_stop_reason="r\udfff"
    )
    assert answer.tool(TOOL, stop, 7) == ToolFinished(
        generation=2,
        tool_use_id="t1",
        content="x\ufffd",
        hook_stopped=True,
        hook_event="PreToolUse",
        hook_stop_reason="r\ufffd",
        at_ms=7,
    )
    bad = ToolOutput(content="x", hook_stopped=True)
    object.__setattr__(bad, "hook_event", "Stop")
    got = answer.tool(TOOL, bad)
    assert got.is_error and not got.hook_stopped and "hook_event must be" in got.content
    assert "returned int, not a ToolOutput" in answer.tool(TOOL, 3).content
    quiet = ToolOutput(content="ok", hook_event="PreToolUse", hook_stop_reason="why")
    assert (answer.tool(TOOL, quiet).hook_event, answer.tool(TOOL, quiet).hook_stop_reason) == (
        "PostToolUse",
        "",
    )


@pytest.mark.spec("W-ANSWER-1", "B-MODEL-1", "B-TEXT-1")
def test_a_model_stream_is_checked_event_by_event() -> None:
    """Blocks are cleaned; a repeated id, another call's event or a non-event refuses the call
    with a model error; a stream without an end is stream_broken."""
    checked = answer.ModelStream(CALL)
    block = ModelBlockReceived(call_id=3, block=TextBlock(text="a\ud800"))
    assert checked.check(block) == ModelBlockReceived(call_id=3, block=TextBlock(text="a\ufffd"))
    use = ModelBlockReceived(call_id=3, block=ToolUseBlock(id="t", name="Read", input={}))
    assert checked.check(use) is use and not checked.refused
    again = checked.check(use)
    assert isinstance(again, ModelCallFailed) and again.kind == "unknown" and checked.refused
    assert "appears twice in one response" in again.message
    for raw in (ModelResponseEnded(call_id=9, model="m", stop_reason=None, usage=Usage()), "x"):
        other = answer.ModelStream(CALL)
        failed = other.check(raw)
        assert isinstance(failed, ModelCallFailed) and "produced malformed data" in failed.message
    assert answer.ModelStream(CALL).ran_dry().kind == "stream_broken"


@pytest.mark.spec("W-ANSWER-1")
def test_results_of_the_wrong_kind_are_malformed_data() -> None:
    """A compaction or stop-hook result of the wrong type or for another request is named as
    malformed data; a summary that is not a str is none."""
    got = answer.compaction(COMPACT, CompactionFailed(compact_id=99))
    assert isinstance(got, CompactionFailed) and "returned malformed data" in got.reason
    assert answer.compaction(COMPACT, CompactionFailed(compact_id=4, reason="r\ud800")) == (
        CompactionFailed(compact_id=4, reason="r\ufffd")
    )
    hooks = answer.stop_hooks(HOOKS, None)
    assert hooks.hooks_id == 5 and "stop hooks returned malformed data" in (hooks.error or "")
    assert answer.summary(SUMMARY, 3) == ToolUseSummaryReady(summary_id=6, summary=None)
    assert answer.summary(SUMMARY, "s\ud800").summary == "s\ufffd"


@pytest.mark.spec("W-ANSWER-1")
@pytest.mark.parametrize(
    ("effect", "raised", "gave_up"),
    [
        (CALL, ModelCallFailed(call_id=3, kind="unknown", message="OSError: x"),
         ModelCallFailed(call_id=3, kind="stream_broken", message="late")),
        (TOOL, ToolFinished(generation=2, tool_use_id="t1", is_error=True,
                            content="<tool_use_error>Error calling tool Hooked: OSError: x"
                            "</tool_use_error>"),
         ToolFinished(generation=2, tool_use_id="t1", content="late", is_error=True)),
        (COMPACT, CompactionFailed(compact_id=4, reason="OSError: x"),
         CompactionFailed(compact_id=4, reason="late")),
        (HOOKS, StopHooksFinished(hooks_id=5, error="OSError: x"),
         StopHooksFinished(hooks_id=5, error="late")),
        (SUMMARY, ToolUseSummaryReady(summary_id=6, summary=None),
         ToolUseSummaryReady(summary_id=6, summary=None)),
    ],
    ids=["model", "tool", "compact", "hooks", "summary"],
)  # fmt: skip
def test_a_handler_that_fails_gets_the_failure_the_machine_expects(
    effect: Any, raised: Any, gave_up: Any
) -> None:
    """One answer per request kind for a handler that raised, and for one that gave none."""
    assert answer.raised(effect, OSError("x")) == raised
    assert answer.gave_up(effect, "late") == gave_up


@pytest.mark.spec("W-ANSWER-1")
def test_unhandled_requests_and_the_policy_answer() -> None:
    """No compactor fails the compaction, no hooks stop nothing, no summarizer gives none; the
    policy denies by rule, allows, or leaves the question open."""
    assert answer.unhandled(COMPACT) == CompactionFailed(
        compact_id=4, reason="no compactor configured"
    )
    assert answer.unhandled(HOOKS) == StopHooksFinished(hooks_id=5)
    ask = AskPermission(generation=1, tool_use_id="t", name="Write", input={})
    policy = PermissionPolicy(deny=frozenset({"Write"}), allow=frozenset({"Read"}))
    denied = policy.answer(ask, 9)
    assert denied is not None and (denied.decision, denied.at_ms) == ("deny_by_rule", 9)
    read = policy.answer(AskPermission(generation=1, tool_use_id="t", name="Read", input={}))
    assert read is not None and read.decision == "allow" and read.reason == ""
    assert policy.answer(AskPermission(generation=1, tool_use_id="t", name="X", input={})) is None


@pytest.mark.spec("W-ANSWER-1")
def test_usage_counts_only_the_call_the_machine_waits_for() -> None:
    """The end of the call the state waits for adds its usage; a late call's end adds none."""
    state, _ = start(Request(prompt="go"), default())
    waited = state.round.call_id
    used = Usage(input_tokens=10, output_tokens=2, cache_read_input_tokens=5)
    end = ModelResponseEnded(call_id=waited, model="m", stop_reason="end_turn", usage=used)
    total = answer.counted(Usage(input_tokens=1), end, state)
    assert total == Usage(input_tokens=11, output_tokens=2, cache_read_input_tokens=5)
    late = ModelResponseEnded(call_id=waited + 1, model="m", stop_reason=None, usage=used)
    assert answer.counted(total, late, state) is total
    assert answer.counted(total, end, None) is total


@pytest.mark.spec("W-ANSWER-1", "B-MODEL-1")
def test_a_counterfactual_scripted_answer_goes_through_the_layer(tmp_path: Path) -> None:
    """Counterfactual replay answers what the recording lacks from the script through the same
    layer: a scripted tool call whose input is not JSON data ends the call as a model error
    (before, it reached the machine and the run asked for a permission nothing answers)."""
    path = tmp_path / "grow.jsonl"
    record_driver(
        path, default(), Request(prompt="Read them all"), scripted_world(), provenance=FIXED
    )
    bad = response(tool_use("Read", {"file_path": float("nan")}, "t9"), stop_reason="tool_use")
    report = replay_counterfactual(
        path, {"autocompact_buffer": 185_000}, "scripted", [reply("A summary."), bad]
    )
    assert report.status == "finished", report.describe()
    assert report.terminal is not None and report.terminal.TAG == "model_error"
    assert report.by_policy == {"compact": 1, "call_model": 1}
    assert "the model sent a malformed response" in str(report.state.conversation.messages())


WORLDS = (
    "steploop/effects/run.py",
    "steploop/effects/temporal/activities.py",
    "steploop/effects/temporal/turn.py",
    "steploop/effects/temporal/workflow.py",
    "steploop/effects/trace/counterfactual.py",
    "steploop/effects/trace/resume.py",
)
ANSWERS = {
    "ModelCallFailed",
    "ToolFinished",
    "CompactionFailed",
    "CompactionFinished",
    "StopHooksFinished",
    "ToolUseSummaryReady",
    "PermissionAnswered",
}


@pytest.mark.spec("W-ANSWER-1")
@pytest.mark.parametrize("module", WORLDS)
def test_no_world_builds_a_handlers_answer_itself(module: str) -> None:
    """The worlds build none of the events a handler's output becomes, nor add up usage (no
    usage field read): they take them from steploop/effects/answer.py."""
    source = (ROOT / module).read_text(encoding="utf-8")
    assert "cache_creation_input_tokens" not in source
    tree = ast.parse(source)
    built = sorted(
        {
            node.func.id if isinstance(node.func, ast.Name) else node.func.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, (ast.Name, ast.Attribute))
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) in ANSWERS
        }
    )
    assert built == []


def _one_of_each_event() -> list[Any]:
    from steploop.reducer import events as ev

    return [
        ModelBlockReceived(
            call_id=1,
            block=ToolUseBlock(id="t", name="Read", input={"file_path": "a.py", "n": [1]}),
            tool=ev.ToolTraits(concurrency_safe=True, max_result_chars=None),
        ),
        ModelResponseEnded(call_id=1, model="m", stop_reason="end_turn", usage=Usage()),
        ModelCallFailed(call_id=2, kind="unknown", message="x"),
        ToolFinished(generation=1, tool_use_id="t", content="ok", is_error=True),
        ev.PermissionAnswered(generation=1, tool_use_id="t", decision="allow"),
        ev.WaitElapsed(wait_id=3),
        ev.Interrupted(kind="hard"),
        StopHooksFinished(hooks_id=1),
        CompactionFailed(compact_id=1, reason="r"),
        ev.CommandQueued(command_id="c", text="t"),
        ev.ToolsRefreshed(call_id=1, tools=("Read",), digest="d"),
    ]


@pytest.mark.spec("W-ANSWER-1")
def test_the_stamp_fast_path_gives_what_evolve_gives() -> None:
    """stamped() (a slot copy) equals the evolve twin for every event kind, and a stamp that
    is not an int fares as it does through evolve (a checked event refuses it)."""
    from steploop.reducer._replace import evolve
    from steploop.reducer.errors import WrongType

    for event in _one_of_each_event():
        fast, slow = (
            answer.stamped(event, 1_700_000_000_123),
            evolve(event, at_ms=1_700_000_000_123),
        )
        assert type(fast) is type(slow) and fast == slow and repr(fast) == repr(slow)
        assert event.at_ms == 0 and fast is not event
        for bad in (1.5, True, "1"):
            try:
                slow = evolve(event, at_ms=bad)
            except WrongType:
                with pytest.raises(WrongType):
                    answer.stamped(event, bad)  # type: ignore[arg-type]
            else:
                assert answer.stamped(event, bad) == slow  # type: ignore[arg-type]
