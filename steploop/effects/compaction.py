"""Compaction through the model: a nested call that summarises the conversation.

:class:`ModelCompactor` answers a ``Compact`` effect with ``CompactionFinished`` (a boundary
marker and the summary, which replace the conversation) or ``CompactionFailed`` (which the
machine's breaker counts, specs/ G6). It never raises for a model failure.
"""

from __future__ import annotations

import attrs

from steploop.effects.protocols import ModelClient
from steploop.reducer.effects import CallModel, Compact
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
)
from steploop.reducer.messages import Message, SystemMessage, TextBlock, UserMessage

__all__ = ["SUMMARY_PREAMBLE", "SUMMARY_PROMPT", "ModelCompactor"]

SUMMARY_PROMPT = (
    "Summarise the conversation so far so that the work can continue from the summary alone: "
    "the user's requests, the decisions taken, the files read and changed (with paths), errors "
    "met and how they were solved, and what remains to be done. Answer with the summary only."
)
SUMMARY_PREAMBLE = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The summary below covers the earlier portion of the conversation.\n\n"
)


@attrs.define
class ModelCompactor:
    """Summarise with ``model`` (a client with its own script or API key).

    Args:
        model: the client used for the nested summary call.
        model_name: the model asked for the summary (default: the loop's current model).
        max_tokens: the summary's output cap (the reference reserves 20,000).
    """

    model: ModelClient
    model_name: str | None = None
    max_tokens: int = 20_000

    async def compact(self, effect: Compact) -> CompactionFinished | CompactionFailed:
        prompt = UserMessage(id=f"c{effect.compact_id}-prompt", content=(TextBlock(text=SUMMARY_PROMPT),), is_meta=True)
        call = CallModel(
            call_id=effect.compact_id,
            model=self.model_name or "claude-sonnet-4-5",
            conversation=effect.conversation.append(prompt),
            max_tokens=self.max_tokens,
            query_source="compact",
        )
        parts: list[str] = []
        stop_reason: str | None = None
        stream = self.model.stream(call)
        try:
            async for event in stream:
                if isinstance(event, ModelBlockReceived) and isinstance(event.block, TextBlock):
                    parts.append(event.block.text)
                elif isinstance(event, ModelCallFailed):
                    return CompactionFailed(compact_id=effect.compact_id, reason=f"summary call failed: {event.kind}: {event.message}")
                elif isinstance(event, ModelResponseEnded):
                    stop_reason = event.stop_reason
                    break
        finally:
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        summary = "".join(parts).strip()
        if not summary:
            return CompactionFailed(compact_id=effect.compact_id, reason="the summary call returned no text")
        if stop_reason == "max_tokens":
            return CompactionFailed(compact_id=effect.compact_id, reason="the summary was cut off at max_tokens")
        messages: tuple[Message, ...] = (
            SystemMessage(
                id=f"c{effect.compact_id}-boundary",
                subtype="compact_boundary",
                text=f"Conversation compacted ({effect.trigger}, {effect.pre_tokens} tokens before)",
            ),
            UserMessage(
                id=f"c{effect.compact_id}-summary",
                content=(TextBlock(text=SUMMARY_PREAMBLE + summary),),
                is_meta=True,
                origin="compact_summary",
            ),
        )
        return CompactionFinished(compact_id=effect.compact_id, messages=messages)
