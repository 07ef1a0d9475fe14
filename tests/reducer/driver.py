"""A tiny synchronous driver for reducer tests: feed events, collect effects.

Every event goes through :func:`steploop.reducer.machine.advance` (the stepping API that reports the
transitions a step passed through) and is checked against the world protocol
(:class:`steploop.reducer.protocol.Ledger`, W-PROTO-5): an event that answers a request the effects so far
never opened, withdrew or already closed may be fed (tests feed late answers on purpose), but the
machine must refuse it (``IllegalEvent``) or ignore it (the same state, no effect); a machine that
acts on it fails the test that fed it.

A ``RefreshTools`` (R-REFRESH-1, the 2.1.88 and full profiles) is answered at once, as a world
with a fixed tool list does (``auto_refresh=False`` leaves it to the test): the effects of the
answer's step follow the refresh in what :meth:`Driver.feed` returns.
"""

from __future__ import annotations

from typing import Any

from steploop.reducer import LoopConfig, LoopState, Request, Session
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    Emit,
    Finish,
    RefreshTools,
    RunStopHooks,
    StartTool,
    Wait,
)
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolsRefreshed,
    ToolTraits,
)
from steploop.reducer.machine import advance, begin
from steploop.reducer.messages import Emitted, TextBlock, ToolUseBlock, Usage
from steploop.reducer.protocol import Ledger
from steploop.reducer.transitions import Transition

SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
UNSAFE = ToolTraits(concurrency_safe=False)
BASH = ToolTraits(concurrency_safe=False, interrupt="cancel", cancels_siblings_on_error=True)


def usage(inp: int = 100, out: int = 10) -> Usage:
    return Usage(input_tokens=inp, output_tokens=out)


def _copy(ledger: Ledger) -> Ledger:
    out = Ledger()
    out.open = dict(ledger.open)
    out.partial = set(ledger.partial)
    out.withdrawn = set(ledger.withdrawn)
    out.closed = set(ledger.closed)
    return out


class Driver:
    """Starts a turn and keeps the latest state, every effect returned so far and every
    transition passed (``transitions``); ``ledger`` follows the requests the effects opened,
    ``late`` lists the events fed that answered none open, each with what was wrong."""

    def __init__(
        self,
        cfg: LoopConfig,
        prompt: str = "do the thing",
        session: Session | None = None,
        auto_refresh: bool = True,
        **request: Any,
    ) -> None:
        self.cfg = cfg
        self.auto_refresh = auto_refresh
        self.state, fx, passed = begin(Request(prompt=prompt, **request), cfg, session)
        self.effects: list[Effect] = list(fx)
        self.last: tuple[Effect, ...] = fx
        self.transitions: list[Transition] = list(passed)
        self.ledger = Ledger()
        self.ledger.issue(fx)
        self.late: list[tuple[Event, str]] = []

    def feed(self, event: Event) -> tuple[Effect, ...]:
        before = _copy(self.ledger)
        problem = self.ledger.deliver(event)
        try:
            state, fx, passed = advance(self.state, event, self.cfg)
        except Exception:
            self.ledger = before  # refused: it was never delivered
            raise
        if problem is not None:
            assert not fx and state == self.state, (
                f"the machine acted on {type(event).__name__}, which {problem}: {fx!r}"
            )
            self.late.append((event, problem))
        self.ledger.issue(fx)
        self.state = state
        self.effects.extend(fx)
        self.transitions.extend(passed)
        self.last = fx
        if self.auto_refresh:
            for effect in fx:
                if isinstance(effect, RefreshTools):  # the tool list, read at once
                    fx = (*fx, *self.feed(ToolsRefreshed(call_id=effect.call_id)))
                    self.last = fx
        return fx

    # --- convenience -------------------------------------------------------------------
    @property
    def call_id(self) -> int:
        return self.state.round.call_id

    @property
    def generation(self) -> int:
        return self.state.round.generation

    def block(self, block: Any, tool: ToolTraits | None = None, complete: bool = True) -> tuple[Effect, ...]:
        return self.feed(ModelBlockReceived(call_id=self.call_id, block=block, tool=tool, input_complete=complete))

    def text(self, text: str) -> tuple[Effect, ...]:
        return self.block(TextBlock(text=text))

    def tool_use(self, tid: str, name: str = "Read", traits: ToolTraits = SAFE, **inp: Any) -> tuple[Effect, ...]:
        return self.block(ToolUseBlock(id=tid, name=name, input=dict(inp)), tool=traits)

    def end(self, stop_reason: str = "end_turn", u: Usage | None = None, at_ms: int = 0) -> tuple[Effect, ...]:
        return self.feed(
            ModelResponseEnded(call_id=self.call_id, model=self.state.model, stop_reason=stop_reason, usage=u or usage(), at_ms=at_ms)
        )

    def allow(self, tid: str) -> tuple[Effect, ...]:
        return self.feed(PermissionAnswered(generation=self.generation, tool_use_id=tid, decision="allow"))

    def finish_tool(self, tid: str, content: str = "ok", is_error: bool = False, **kw: Any) -> tuple[Effect, ...]:
        return self.feed(ToolFinished(generation=self.generation, tool_use_id=tid, content=content, is_error=is_error, **kw))

    def hooks_pass(self) -> tuple[Effect, ...]:
        return self.feed(StopHooksFinished(hooks_id=self.state.round.pending_id))

    def reply(self, text: str = "done", u: Usage | None = None) -> tuple[Effect, ...]:
        self.text(text)
        return self.end("end_turn", u)

    # --- queries -----------------------------------------------------------------------
    def emitted(self) -> list[Emitted]:
        return [e.item for e in self.effects if isinstance(e, Emit)]

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.effects if isinstance(e, kind)]

    @property
    def phase(self) -> str:
        return self.state.phase

    @property
    def transition(self) -> Any:
        return self.state.transition

    def finished(self) -> Finish | None:
        fins = self.of(Finish)
        return fins[-1] if fins else None


__all__ = [
    "BASH", "SAFE", "UNSAFE", "AskPermission", "CallModel", "Compact", "Driver", "Emit", "Finish",
    "LoopState", "RunStopHooks", "StartTool", "Wait", "usage",
]
