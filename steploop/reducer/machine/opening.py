"""Opening a user turn: the first state and the prompt; the first round begins at once
(:func:`steploop.reducer.machine.table.start` and ``begin`` are the public doors)."""

from __future__ import annotations

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.effects import Emit
from steploop.reducer.errors import MalformedConversation
from steploop.reducer.machine import pipeline
from steploop.reducer.machine.helpers import FX, msg_id
from steploop.reducer.messages import Block, TextBlock, UserMessage
from steploop.reducer.state import AutoCompactTracking, LoopState, Request, Session


def open_turn(
    request: Request, config: LoopConfig, session: Session | None
) -> tuple[LoopState, FX]:
    """The first state of a user turn: the prompt emitted and stored, then the first round.

    Raises:
        MalformedConversation: [M-HIST-1] the prompt is empty or blank, or the session's
            history, or the prompt, holds what the API refuses.
    """
    session = session or Session()
    problem = session.conversation.problem
    if problem is not None:
        raise MalformedConversation(f"the session's conversation cannot be sent: {problem}")
    prompt = request.prompt
    if isinstance(prompt, str):
        if not prompt or prompt.isspace():
            raise MalformedConversation(
                "the prompt is empty or only whitespace: the API refuses a message without text"
            )
        content: tuple[Block, ...] = (TextBlock(text=prompt),)
    else:
        if not prompt:
            raise MalformedConversation("the prompt has no content blocks")
        content = prompt
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
    message = UserMessage(id=mid, content=content, origin="prompt")
    conversation = s.conversation.append(message)
    if conversation.problem is not None:
        raise MalformedConversation(f"the prompt cannot be sent: {conversation.problem}")
    s = evolve(s, conversation=conversation)
    fx = FX((Emit(item=message),))
    return pipeline.begin_round(s, config, fx, request.at_ms), fx
