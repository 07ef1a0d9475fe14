"""The abstraction key (specs/ ABS-1): states merged by phase, flags, saturated counters, the
token class of the context and the shape of the tool slots.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable

from steploop.reducer.config import QUERY_SOURCES_NO_BLOCKING, LoopConfig
from steploop.reducer.conversation import Conversation
from steploop.reducer.explore.memo import ChainMemo
from steploop.reducer.messages import AssistantMessage
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import CollapseDrainRetry


def _count_response(n: int, c: Conversation) -> int:
    """One more segment when ``c`` adds a model response (a new response id)."""
    prev = c.prev
    m = c.last
    if isinstance(m, AssistantMessage) and (prev is None or m.response_id != prev.run_response_id):
        return n + 1
    return n


# =============================================================================================
# The abstraction key (ABS-1)
# =============================================================================================


def saturate(value: int, bound: int) -> int:
    """``value`` saturated just past ``bound``: exact up to the bound, one bucket beyond."""
    return value if value <= bound else bound + 1


def abstract_tag(t: object) -> str | None:
    return None if t is None else str(getattr(t, "TAG", type(t).__name__))


class Abstraction:
    """The canonical abstraction key of rule ABS-1 for one config.

    Holds a memo table of segment counts per conversation node, so build one per run.
    """

    def __init__(self, config: LoopConfig) -> None:
        self.config = config
        self.thresholds = self.thresholds_of(config)
        g = config.gates
        # the collapse drain commits iff two or more responses are in the conversation
        # (S-COLLAPSE-2); nothing else that changes control flow reads the segment count
        self.segment_cap = 2 if g.context_collapse else 0
        cap = config.stop_hook_block_cap
        self.blocks_bound = cap if cap is not None else 0
        self._segments = ChainMemo(0, _count_response)

    @staticmethod
    def thresholds_of(config: LoopConfig) -> tuple[int, ...]:
        """The context thresholds whose crossing changes what a round does, ascending:
        the auto-compact threshold (when auto-compact runs) and the blocking limit (when the
        blocking check can apply, T-BLOCKING-1). Snip and collapse thresholds change only
        the conversation's content, which the key does not track (see ABS-1)."""
        ths = []
        if config.auto_compact_enabled:
            ths.append(config.autocompact_threshold)
        g = config.gates
        exempt = config.query_source in QUERY_SOURCES_NO_BLOCKING or (
            config.auto_compact_enabled and (g.reactive_compact or g.context_collapse)
        )
        if not exempt:
            ths.append(config.blocking_limit)
        return tuple(sorted(set(ths)))

    def token_class(self, state: LoopState) -> int:
        """How many thresholds the context count has reached (0 = below all)."""
        count = max(0, state.conversation.token_count() - state.tokens_freed)
        return bisect_right(self.thresholds, count)

    def segments(self, conv: Conversation) -> int:
        """Model responses in the conversation (as ``steploop.reducer.context.segments`` counts them)."""
        return self._segments.get(conv)

    def budget_key(self, s: LoopState) -> tuple[int, ...]:
        cfg = self.config
        b = s.token_budget
        if not cfg.gates.token_budget or b is None or b <= 0 or cfg.is_subagent:
            return ()
        thr = -(-b * cfg.budget_completion_pct // 100)  # the first count that stops
        t = s.budget
        return (
            saturate(t.continuation_count, cfg.budget_min_continuations),
            min(s.turn_output_tokens, thr),
            min(t.last_global_turn_tokens, thr),
            int(t.last_delta_tokens < cfg.budget_diminishing_tokens),
        )

    def key(self, s: LoopState) -> tuple[Hashable, ...]:
        """ABS-1: everything a guard or a later round can depend on, nothing else."""
        cfg = self.config
        if s.phase == "done":  # nothing follows a Terminal: only which one matters
            return ("done", abstract_tag(s.transition))
        r = s.round
        slots = tuple(
            (
                sl.traits.concurrency_safe,
                sl.traits.interrupt,
                sl.traits.cancels_siblings_on_error,
                sl.traits.known,
                sl.status,
                sl.synthetic,
                sl.message is not None,
                sl.hook_stopped,
            )
            for sl in r.slots
        )
        # a withheld error next to complete tool calls is dropped unless Q-6 keeps it
        w = r.withheld if not r.slots or cfg.compat.unyielded_nudges else None
        em = r.error_message
        round_key = (
            saturate(r.retry_attempt, cfg.retry.max_retries),
            saturate(r.consecutive_529, cfg.retry.max_consecutive_529),
            r.streaming,
            r.sticky_fallback,
            r.ended,
            # the usage of an ended response decides the next round's token class
            None if r.usage is None else bisect_right(self.thresholds, r.usage.total),
            bool(r.blocks),
            None if w is None or w.api_error is None else w.api_error.kind,
            None if em is None or em.api_error is None else em.api_error.kind,
            r.sibling_error is not None,
            r.hook_stop,
            abstract_tag(r.pending_terminal),
            r.abort_kind,
            r.max_tokens,  # lowered by R-OVERFLOW-1; the world's overflow numbers derive from it
            slots,
        )
        seg = min(self.segments(s.conversation), self.segment_cap) if self.segment_cap else 0
        turns = saturate(s.turn_count, cfg.max_turns) if cfg.max_turns is not None else 0
        return (
            s.phase,
            isinstance(s.transition, CollapseDrainRetry),
            s.has_attempted_reactive_compact,
            s.escalated,
            s.max_output_tokens_override is not None,
            s.compacted_this_round,
            saturate(s.mot_recovery_count, cfg.mot_recovery_limit),
            saturate(s.stop_hook_blocks, self.blocks_bound),
            saturate(s.tracking.consecutive_failures, cfg.max_autocompact_failures),
            saturate(s.pause_resumes, cfg.pause_turn_resumes),  # [S-PAUSE-1] resumes in a row
            turns,
            s.model != cfg.model,
            self.token_class(s),
            seg,
            self.budget_key(s),
            s.summary_id != 0,
            s.summary_text is not None,
            len(s.queued_commands),
            round_key,
        )
