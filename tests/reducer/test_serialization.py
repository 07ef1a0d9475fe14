"""Serialization of states, events, effects and transitions (specs/rules.md R-SER-1)."""

from __future__ import annotations

import json
import typing
from collections.abc import Callable
from typing import Any

import pytest

import steploop.reducer
from steploop.reducer import LoopConfig, LoopState, Session, claude_code_2_1_88, default, full
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
from tests.reducer.driver import BASH, SAFE, UNSAFE, Driver

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
