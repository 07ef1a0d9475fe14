"""The message builders and the minimal driver of the transition tests
(tests/reducer/test_transitions*.py): what the machine is expected to write, every event
spelled out at the call site.
"""

from __future__ import annotations

from typing import Any

from steploop.reducer import LoopConfig, Request, start, step
from steploop.reducer.events import (
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    ErrorInfo,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

MODEL = "claude-sonnet-4-5"
SYNTHETIC = "<synthetic>"
U = Usage(input_tokens=100, output_tokens=10)
SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
READ_INPUT = {"file_path": "src/auth/validate.ts"}
PTL_TEXT = "Prompt is too long"


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


def read_use(tid: str = "t1") -> ToolUseBlock:
    return ToolUseBlock(id=tid, name="Read", input=READ_INPUT)


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
