"""Helpers of the death-spiral guard tests (tests/reducer/test_guards*.py)."""

from __future__ import annotations

from typing import Any

from steploop.reducer.effects import Emit, Finish
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    ModelCallFailed,
    StopHooksFinished,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    TextBlock,
    Usage,
    UserMessage,
)
from tests.reducer.driver import UNSAFE, Driver


def fail(d: Driver, kind: str, **kw: Any) -> tuple[Any, ...]:
    return d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, **kw))


def compaction_messages(tag: str, stale_usage: int | None = None) -> tuple[Message, ...]:
    msgs: list[Message] = [
        SystemMessage(id=f"{tag}-b", subtype="compact_boundary", text="Conversation compacted"),
        UserMessage(
            id=f"{tag}-s",
            content=(TextBlock(text="Summary of earlier work"),),
            is_meta=True,
            origin="compact_summary",
        ),
    ]
    if stale_usage is not None:  # a kept assistant message carrying stale input tokens
        msgs.append(
            AssistantMessage(
                id=f"{tag}-k",
                response_id=f"{tag}-kr",
                model="claude-sonnet-4-5",
                content=(TextBlock(text="kept"),),
                usage=Usage(input_tokens=stale_usage),
            )
        )
    return tuple(msgs)


def compact_ok(d: Driver, tag: str = "c", stale_usage: int | None = None) -> tuple[Any, ...]:
    return d.feed(
        CompactionFinished(
            compact_id=d.state.round.pending_id, messages=compaction_messages(tag, stale_usage)
        )
    )


def compact_fail(d: Driver) -> tuple[Any, ...]:
    return d.feed(CompactionFailed(compact_id=d.state.round.pending_id, reason="boom"))


def tool_round(d: Driver, tid: str, u: Usage | None = None, content: str = "ok") -> None:
    """One non-safe tool call: stream, end, allow, finish (-> next_turn)."""
    d.tool_use(tid, "Bash", traits=UNSAFE, command="ls")
    d.end("tool_use", u)
    d.allow(tid)
    d.finish_tool(tid, content)


def block_hooks(d: Driver, *errors: str) -> tuple[Any, ...]:
    return d.feed(
        StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=errors or ("fix it",))
    )


def api_errors(items: list[Any], kind: str | None = None) -> list[AssistantMessage]:
    return [
        m
        for m in items
        if isinstance(m, AssistantMessage)
        and m.api_error is not None
        and (kind is None or m.api_error.kind == kind)
    ]


def emitted_in(fx: tuple[Any, ...]) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


def of(fx: tuple[Any, ...] | list[Any], kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def assert_finished(d: Driver, terminal: Any) -> None:
    assert isinstance(d.last[-1], Finish)
    assert d.last[-1].terminal == terminal
    assert d.phase == "done"
