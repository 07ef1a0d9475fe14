"""Observations: what one transition ``(state, event, effects, next_state)`` shows the invariants."""

from __future__ import annotations

from steploop.reducer.config import LoopConfig
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel, Compact, Effect, Emit, Finish, RunStopHooks
from steploop.reducer.events import Event, ModelBlockReceived, ModelCallFailed, ModelResponseEnded
from steploop.reducer.explore.world import MOT_REASONS
from steploop.reducer.messages import AssistantMessage, Message
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
    Continue,
    NextTurn,
    Terminal,
    TokenBudgetContinuation,
    Transition,
)

# =============================================================================================
# Observations: what a transition shows
# =============================================================================================


def _appended(old: Conversation, new: Conversation) -> tuple[Message, ...] | None:
    """The messages ``new`` adds to ``old``; None when ``new`` does not extend ``old``."""
    if new.length < old.length:
        return None
    out: list[Message] = []
    node: Conversation | None = new
    while node is not None and node.length > old.length:
        assert node.last is not None
        out.append(node.last)
        node = node.prev
    if node is None or (node is not old and node != old):  # identity first: no digest needed
        return None
    out.reverse()
    return tuple(out)


_UNSET: object = object()


def is_api_error(m: object) -> bool:
    return isinstance(m, AssistantMessage) and m.api_error is not None


class Observation:
    """One transition ``(state, event, effects, next)`` and what can be read from it.

    ``state`` and ``event`` are None for the transition :func:`steploop.reducer.start` makes. The
    common readings are computed once here and shared by every invariant:

    * ``emitted``, ``api_errors`` (API-error assistant messages emitted), ``calls``
      (CallModel effects), ``compacts``, ``hooks`` (RunStopHooks), ``terminal`` (the
      Terminal of a Finish, if any);
    * ``transitions``: every Continue and Terminal the step passed through, in order (what
      :func:`steploop.reducer.machine.advance` reports); ``continued``: the Continue among them;
    * ``round_began``: a round started in this step (the first one, or after a Continue);
    * ``current_call_event``, ``failure_kind``, ``mot_ladder``: what the model answered;
    * ``progress``: a progress step of INV-13;
    * ``appended`` and ``round_start_count`` on demand.
    """

    def __init__(
        self,
        config: LoopConfig,
        state: LoopState | None,
        event: Event | None,
        effects: tuple[Effect, ...],
        next_state: LoopState,
        transitions: tuple[Transition, ...],
    ) -> None:
        self.config = config
        self.state = state
        self.event = event
        self.effects = effects
        self.next = next_state
        self.transitions = transitions
        self._appended: object = _UNSET
        self._round_start_count: int | None = None
        emitted: list[object] = []
        calls: list[CallModel] = []
        compacts: list[Compact] = []
        hooks: list[RunStopHooks] = []
        terminal: Terminal | None = None
        for eff in effects:
            if isinstance(eff, Emit):
                emitted.append(eff.item)
            elif isinstance(eff, CallModel):
                calls.append(eff)
            elif isinstance(eff, Compact):
                compacts.append(eff)
            elif isinstance(eff, RunStopHooks):
                hooks.append(eff)
            elif isinstance(eff, Finish):
                terminal = eff.terminal
        self.emitted = tuple(emitted)
        self.api_errors = tuple(
            m for m in emitted if isinstance(m, AssistantMessage) and m.api_error is not None
        )
        self.calls = tuple(calls)
        self.compacts = tuple(compacts)
        self.hooks = tuple(hooks)
        self.terminal = terminal
        self.continued = self._continued()
        self.round_began = state is None or self.continued is not None
        e = event
        self.current_call_event = (
            state is not None
            and state.phase == "streaming"
            and isinstance(e, (ModelResponseEnded, ModelCallFailed, ModelBlockReceived))
            and e.call_id == state.round.call_id
        )
        self.failure_kind = (
            e.kind if self.current_call_event and isinstance(e, ModelCallFailed) else None
        )
        self.mot_ladder = (
            self.current_call_event
            and isinstance(e, ModelResponseEnded)
            and e.stop_reason in MOT_REASONS
            and state is not None
            and not state.round.slots
        )
        c = self.continued
        self.progress = isinstance(c, NextTurn) or (
            isinstance(c, TokenBudgetContinuation) and next_state.budget.last_delta_tokens > 0
        )

    def _continued(self) -> Continue | None:
        """The Continue transition this step took, if any (at most one: a Continue starts the
        next round, which waits for the world or ends at once in a Terminal)."""
        for t in self.transitions:
            if isinstance(t, CONTINUE_TYPES):
                return t
        return None

    # the two readings below are computed on demand and kept (a plain attribute, not
    # functools.cached_property, whose lookup costs more than most readings)

    @property
    def appended(self) -> tuple[Message, ...] | None:
        """Messages this step appended to the conversation (None: it was replaced)."""
        v = self._appended
        if v is _UNSET:
            v = (
                None
                if self.state is None
                else _appended(self.state.conversation, self.next.conversation)
            )
            self._appended = v
        return v  # type: ignore[return-value]

    @property
    def round_start_count(self) -> int:
        """The context count the round-start rules compared (auto-compact, blocking)."""
        v = self._round_start_count
        if v is None:
            v = self._round_start()
            self._round_start_count = v
        return v

    def _round_start(self) -> int:
        for c in self.compacts:
            if c.trigger == "auto":
                return c.pre_tokens
        conv = self.calls[-1].conversation if self.calls else self.next.conversation
        return max(0, conv.token_count() - self.next.tokens_freed)
