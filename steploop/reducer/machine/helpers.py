"""Small helpers every part of the machine uses: the effect list ``FX``, message ids
[R-ID-1], the context count [R-TOK-1], the synthetic messages the machine writes, committing a
round's messages to the conversation."""

from __future__ import annotations

from typing import Final

from steploop.reducer._replace import evolve
from steploop.reducer.config import LoopConfig
from steploop.reducer.conversation import SYNTHETIC_MODEL
from steploop.reducer.effects import Effect
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    ErrorInfo,
    Message,
    SystemMessage,
    TextBlock,
    UserMessage,
)
from steploop.reducer.state import LoopState
from steploop.reducer.texts import error_category
from steploop.reducer.transitions import Transition


class FX(list[Effect]):
    """The effects one call of start() or step() returns, in order, and ``passed``: every
    Continue and Terminal that call passed through, in order (a Continue whose next round ends
    at once in ``blocking_limit`` is followed by that Terminal in the same call)."""

    passed: tuple[Transition, ...] = ()


PROMPT_TOO_LONG: Final = "Prompt is too long"


def msg_id(s: LoopState) -> tuple[LoopState, str]:
    """The next message id, from the state's counter (R-ID-1), and the state that counted it."""
    n = s.ids.msg + 1
    return evolve(s, ids=evolve(s.ids, msg=n)), f"m{n}"


def count(s: LoopState, cfg: LoopConfig | None = None) -> int:
    """Context size the thresholds compare against [R-TOK-1], counted as the profile's
    version counted it [VER-3] (``cfg`` None: as 2.1.88 counts)."""
    mode = "estimate_from_first" if cfg is None else cfg.legacy.context_count
    return max(0, s.conversation.token_count(mode) - s.tokens_freed)


def api_error(
    s: LoopState,
    kind: str,
    text: str,
    status: int | None = None,
    *,
    cfg: LoopConfig,
    raw: str = "",
    details: str = "",
) -> tuple[LoopState, AssistantMessage]:
    """A synthetic assistant API-error message (never sent back to the model). ``raw`` is the
    API's own words: they decide the category [R-CATEGORY-1] (a failure with none, or a
    message the machine writes itself, is categorised by its kind and status alone);
    ``details`` what the text leaves out."""
    s, mid = msg_id(s)
    category = error_category(kind, status, raw) if cfg.texts == "claude_code" else None
    if category is not None and cfg.legacy.api_errors_1_0:
        category = ""  # [VER-6] 1.0.x wrote no `error` field
    return s, AssistantMessage(
        id=mid,
        response_id=f"r{s.round.call_id}",
        model=SYNTHETIC_MODEL,
        content=(TextBlock(text=text),),
        stop_reason="stop_sequence",
        api_error=ErrorInfo(
            kind=kind, message=text, status=status, category=category, details=details
        ),
    )


def user(
    s: LoopState, text: str, *, origin: str, meta: bool = False
) -> tuple[LoopState, UserMessage]:
    """A user message the machine writes (a nudge, feedback, the interruption)."""
    s, mid = msg_id(s)
    return s, UserMessage(id=mid, content=(TextBlock(text=text),), is_meta=meta, origin=origin)


def system(
    s: LoopState, subtype: str, text: str, level: str = "info"
) -> tuple[LoopState, SystemMessage]:
    """A system message (a notice; never sent to the model)."""
    s, mid = msg_id(s)
    return s, SystemMessage(id=mid, subtype=subtype, text=text, level=level)


def attachment(
    s: LoopState, kind: str, data: tuple[tuple[str, str | int | bool | None], ...]
) -> tuple[LoopState, AttachmentMessage]:
    """An attachment message of ``kind`` with its ``data``."""
    s, mid = msg_id(s)
    return s, AttachmentMessage(id=mid, attachment_type=kind, data=data)


def round_messages(s: LoopState) -> list[Message]:
    """The attempt's block records (usage stamped on the last) and its emitted results."""
    r = s.round
    out: list[Message] = list(r.blocks)
    if out and r.usage is not None:
        last = out[-1]
        assert isinstance(last, AssistantMessage)
        out[-1] = evolve(last, usage=r.usage, stop_reason=r.stop_reason)
    out.extend(r.results)
    return out


def commit(s: LoopState, extra: list[Message] | tuple[Message, ...] = ()) -> LoopState:
    """Append the round's messages (and ``extra``) to the conversation."""
    conv = s.conversation.extend(round_messages(s)).extend(extra)
    freed = 0 if s.round.usage is not None else s.tokens_freed
    return evolve(s, conversation=conv, tokens_freed=freed)


Rungs = tuple[LoopState, bool]
"""What a rung of a round-end ladder returns: the state, and whether the rung ended the round."""
