"""Opening a user turn: the first state and the prompt; the first round begins at once
(:func:`steploop.reducer.machine.table.start` and ``begin`` are the public doors)."""

from __future__ import annotations

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Emit
from steploop.reducer.machine import pipeline
from steploop.reducer.machine.helpers import FX, msg_id
from steploop.reducer.messages import TextBlock, UserMessage
from steploop.reducer.state import AutoCompactTracking, LoopState, Request, Session


def open_turn(
    request: Request, config: LoopConfig, session: Session | None
) -> tuple[LoopState, FX]:
    """The first state of a user turn: the prompt emitted and stored, then the first round."""
    session = session or Session()
    content = (
        (TextBlock(text=request.prompt),) if isinstance(request.prompt, str) else request.prompt
    )
    failures = session.autocompact_failures if config.autocompact_breaker_scope == "session" else 0
    s = LoopState(
        phase="streaming",
        conversation=session.conversation,
        model=session.model or config.model,  # a fallback model is sticky [R-RETRY-2]
        on_fallback=session.model is not None,
        token_budget=request.token_budget,
        task_budget_total=request.task_budget,
        last_assistant_at_ms=session.last_assistant_at_ms,
        tracking=AutoCompactTracking(consecutive_failures=failures),  # [G6] scope
        ids=session.ids,
    )
    s, mid = msg_id(s)
    prompt = UserMessage(id=mid, content=content, origin="prompt")
    s = evolve(s, conversation=s.conversation.append(prompt))
    fx = FX((Emit(item=prompt),))
    return pipeline.begin_round(s, config, fx, request.at_ms), fx
