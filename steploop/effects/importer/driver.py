"""Driving the machine through one user turn from its transcript (specs/import.md §6).

:class:`TurnDriver` runs ``start()`` and then ``step()`` with events derived, record by record,
from the turn's transcript: a response's blocks as ``ModelBlockReceived`` (its end as
``ModelResponseEnded`` once the transcript shows the response is over), tool results in their
recorded completion order as ``ToolFinished``, an interrupt marker as ``Interrupted``, a compact
boundary and its summary as ``CompactionFinished``, stop-hook records as ``StopHooksFinished``,
messages the shell inserted as ``MessagesInserted``. What the machine asks for and the
transcript cannot answer is answered by the inference rules (permissions, waits, stop hooks
that left no record, a response that left none) and each such step is listed under its rule.

The transcript is a *world* in the sense of :mod:`steploop.reducer.drive` (a pulled one): the shared
driver loop :func:`steploop.reducer.drive.drive` runs the turn, hands every effect to
:meth:`TurnDriver.perform` (which answers permissions, waits and summaries at once and collects
what the machine emits) and asks :meth:`TurnDriver.next_event` for the next event whenever
nothing is queued. The driver never decides what the machine does: it only answers. When the transcript cannot
answer what the machine waits for (the machine compacts where Claude Code called the model, a
result arrives for a tool the machine has not started, ``step()`` rejects an event), the driver
stops there and says why; the trace then ends without an end record.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Iterable, Iterator
from typing import Any, TypeAlias

import attrs

from steploop.effects.importer.convert import INTERRUPT_TEXTS
from steploop.effects.importer.infer import stop_reason_for, traits_for
from steploop.effects.importer.segment import Item
from steploop.reducer import (
    IllegalEvent,
    LoopConfig,
    LoopState,
    MalformedConversation,
    Request,
    Session,
)
from steploop.reducer.drive import drive
from steploop.reducer.effects import (
    AskPermission,
    CancelModelCall,
    Effect,
    Emit,
    Finish,
    SummarizeToolUse,
    Wait,
)
from steploop.reducer.events import (
    CommandQueued,
    CompactionFinished,
    Event,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolUseSummaryReady,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import Terminal

Fed: TypeAlias = tuple[Event, tuple[str, ...]]
"""An event the transcript implies and the inference rules that supplied it (none: observed)."""

__all__ = ["UNKNOWN_TOOL_PREFIX", "TurnDriver", "api_failure_kind"]

UNKNOWN_TOOL_PREFIX = "<tool_use_error>Error: No such tool available:"
SIBLING_CANCEL_PREFIX = "<tool_use_error>Cancelled: parallel tool call"
#: How Claude Code's synthetic result for a tool the user's interrupt stopped begins.
REJECT_PREFIX = "The user doesn't want to proceed with this tool use"
INTERRUPT_TOOLS = "[Request interrupted by user for tool use]"

#: Claude Code's API-error categories (the record's ``error``) as steploop failure kinds.
_API_ERROR_KINDS = {
    "rate_limit": "rate_limited",
    "overloaded": "overloaded",
    "server_error": "server_error",
    "authentication_failed": "auth",
    "invalid_request": "invalid_request",
    "prompt_too_long": "prompt_too_long",
    "billing_error": "invalid_request",
    "unknown": "unknown",
}


def api_failure_kind(message: AssistantMessage) -> str:
    """IMP-17: the failure kind an API-error record stands for."""
    err = message.api_error
    text = err.message if err is not None else ""
    if text.startswith("Prompt is too long"):
        return "prompt_too_long"
    return _API_ERROR_KINDS.get(err.kind if err is not None else "unknown", "unknown")


@attrs.define
class _Open:
    """The response being streamed: its id, the call it answers, its last record so far."""

    response_id: str
    call_id: int
    last: AssistantMessage
    has_tool_use: bool = False


class TurnDriver:
    """Drives one turn; read the outcome from the attributes once :meth:`run` returned.

    Attributes:
        events: every event fed to ``step()``, in order (the trace's steps 1..n).
        emitted: ``(step, message)`` for every message the machine emitted and did not
            tombstone.
        inferred: rule id -> the steps whose event that rule inferred.
        terminal: the Terminal the turn ended with, or None.
        stuck: why the driver stopped before the end (None when the turn ended), and
            ``stuck_line`` the transcript line it stopped at.
        started: whether ``start()`` took the turn (it refuses a conversation the API
            would refuse, M-HIST-1; there is then no trace to write).
    """

    def __init__(
        self,
        config: LoopConfig,
        request: Request,
        session: Session | None,
        *,
        unknown_tools: frozenset[str] = frozenset(),
        sibling_cancelling: frozenset[str] = frozenset(),
    ) -> None:
        self.config = config
        self.events: list[Event] = []
        self.emitted: list[tuple[int, Message]] = []
        self.inferred: dict[str, list[int]] = defaultdict(list)
        self.terminal: Terminal | None = None
        self.stuck: str | None = None
        self.stuck_line: int | None = None
        self.started = False
        self._unknown = unknown_tools
        self._siblings = sibling_cancelling
        self._interrupted_results: set[int] = set()
        self._hook_stopped: set[int] = set()
        self.last_turn = False
        self._open: _Open | None = None
        self._now = request.at_ms
        self._line: int | None = None
        self._request = request
        self._session = session
        self._script: Generator[Fed, None, None] | None = None
        self._rules: dict[int, tuple[str, ...]] = {}  # id(event) -> the rules that inferred it
        self.state: LoopState

    # -- feeding -------------------------------------------------------------------------------

    @property
    def steps(self) -> int:
        return len(self.events)

    @property
    def active(self) -> bool:
        return self.terminal is None and self.stuck is None

    def _stop(self, why: str) -> None:
        if self.stuck is None and self.terminal is None:
            self.stuck = why
            self.stuck_line = self._line

    def _observe(self, event: Event | None, state: LoopState, *_: Any) -> None:
        self.state = state
        self.started = True
        if event is None:
            return
        self.events.append(event)
        for rule in self._rules.pop(id(event), ()):
            self.inferred[rule].append(len(self.events))

    def _answer(self, event: Event, *rules: str) -> Event:
        if rules:
            self._rules[id(event)] = rules
        return event

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        """The world's side of an effect (:class:`steploop.reducer.drive.World`): what the machine
        emits is collected; permissions, waits and summaries are answered at once."""
        n = len(self.events)
        if isinstance(effect, Emit):
            item = effect.item
            if isinstance(item, Tombstone):  # the writer removes it from the transcript
                self.emitted = [(k, m) for k, m in self.emitted if m.id != item.message_id]
            elif isinstance(item, (UserMessage, AssistantMessage, SystemMessage)) or hasattr(
                item, "attachment_type"
            ):
                self.emitted.append((n, item))  # type: ignore[arg-type]
        elif isinstance(effect, AskPermission):  # IMP-15: every permission was given
            return [
                self._answer(
                    PermissionAnswered(
                        generation=effect.generation,
                        tool_use_id=effect.tool_use_id,
                        decision="allow",
                        at_ms=self._now,
                    ),
                    "IMP-15",
                )
            ]
        elif isinstance(effect, Wait):  # IMP-17: the wait elapsed (retries leave no timing)
            return [self._answer(WaitElapsed(wait_id=effect.wait_id, at_ms=self._now), "IMP-17")]
        elif isinstance(effect, SummarizeToolUse):  # the gate is off in 2.1.88; none recorded
            return [
                self._answer(
                    ToolUseSummaryReady(summary_id=effect.summary_id, summary=None), "IMP-16"
                )
            ]
        elif isinstance(effect, Finish):
            self.terminal = effect.terminal
        elif isinstance(effect, CancelModelCall) and self._open is not None:
            if effect.call_id == self._open.call_id:
                self._open = None
        return None

    def next_event(self, state: LoopState) -> Event | None:
        """The next event the transcript implies (:class:`steploop.reducer.drive.World`); None once the
        turn's records are used up or the driver cannot go on."""
        self.state = state
        if self._script is None or not self.active:
            return None
        fed = next(self._script, None)
        if fed is None:
            return None
        event, rules = fed
        return self._answer(event, *rules)

    # -- what the machine waits for ------------------------------------------------------------

    def _call_waiting(self) -> bool:
        """A model call is outstanding and nothing has answered it yet."""
        s = self.state
        r = s.round
        return s.phase == "streaming" and not r.blocks and not r.ended and r.call_id > 0

    def _waits(self) -> str:
        s = self.state
        r = s.round
        if s.phase == "streaming":
            return f"streaming model call {r.call_id}"
        if s.phase in ("running_tools", "draining"):
            names = [f"{sl.name} {sl.tool_use_id}" for sl in r.slots if sl.status != "done"]
            return f"{s.phase}, waiting for {', '.join(names) or 'nothing'}"
        if s.phase == "compacting":
            return f"compacting (context {s.conversation.token_count():,} tokens)"
        return s.phase

    # -- one method per kind of record ---------------------------------------------------------

    def run(self, items: list[Item], *, may_answer_empty: bool) -> None:
        """Drive the turn through its records (all but the prompt). ``may_answer_empty``: the
        transcript goes on after this turn, so a model call it shows no answer for had an
        empty one."""
        self.prepare(items, may_answer_empty=may_answer_empty)
        try:
            drive(self, self._request, self.config, self._session, observer=self._observe)
        except IllegalEvent as e:
            self._stop(f"step() rejects {type(e.event).__name__}: {e}")
        except MalformedConversation as e:  # M-HIST-1: one the API would refuse
            self._stop(f"the machine refuses the conversation: {e}")
        finally:
            self.release()

    def release(self) -> None:
        """Close the record script. A suspended generator of this driver's own method holds
        the driver (a reference cycle): left open, the turn's state, events and records would
        wait for the cycle collector instead of being freed with the driver."""
        if self._script is not None:
            self._script.close()
            self._script = None

    def prepare(self, items: list[Item], *, may_answer_empty: bool) -> None:
        """Make this world ready to answer a turn of these records, for :meth:`run` or for
        :func:`steploop.reducer.drive.check_world`."""
        self.last_turn = not may_answer_empty
        self._interrupted_results = _interrupted_results(items)
        self._hook_stopped = _hook_stopped_results(items)
        self._script = self._feed_all(items, may_answer_empty)

    def _feed_all(self, items: list[Item], may_answer_empty: bool) -> Generator[Fed, None, None]:
        i = 0
        while i < len(items) and self.active:
            it = items[i]
            self._line = it.line
            if it.at_ms:
                self._now = max(self._now, it.at_ms)
            kind = it.kind
            j = i + 1
            if kind == "block":
                yield from self._block(it)
            elif kind == "result":
                yield from self._result(it)
            elif kind == "interrupt":
                yield from self._interrupt(it)
            elif kind in ("stop_feedback", "stop_summary", "stop_prevent"):
                while j < len(items) and items[j].kind in ("stop_feedback", "stop_prevent"):
                    j += 1
                if j < len(items) and items[j].kind == "stop_summary" and kind != "stop_summary":
                    j += 1
                yield from self._stop_hooks(items[i:j])
            elif kind == "compact":
                while j < len(items) and items[j].kind == "compact_summary":
                    j += 1
                yield from self._compact(items[i:j])
            elif kind == "inserted":
                while j < len(items) and items[j].kind == "inserted":
                    j += 1
                yield from self._insert(items[i:j])
            elif kind == "api_error":
                yield from self._api_error(it, items[j] if j < len(items) else None)
            elif kind == "command":
                yield from self._command(it)
            i = j
        if self.active:
            self._line = items[-1].line if items else self._line
            yield from self._finish(may_answer_empty)

    def _end_response(self, *, mot: bool = False) -> Iterator[Fed]:
        o = self._open
        assert o is not None
        self._open = None
        last = o.last
        reason = stop_reason_for(last.stop_reason, o.has_tool_use, mot)
        rules = ("IMP-14",) if last.stop_reason is None else ()
        yield (
            ModelResponseEnded(
                call_id=o.call_id,
                model=last.model or self.state.model,
                stop_reason=reason,
                usage=last.usage or Usage(),
                at_ms=self._now,
            ),
            rules,
        )

    def _answer_empty(self) -> Iterator[Fed]:
        """IMP-16: a call the transcript shows no answer for had an empty one."""
        yield (
            ModelResponseEnded(
                call_id=self.state.round.call_id,
                model=self.state.model,
                stop_reason="end_turn",
                usage=Usage(),
                at_ms=self._now,
            ),
            ("IMP-16",),
        )

    def _block(self, it: Item) -> Iterator[Fed]:
        m = it.message
        assert isinstance(m, AssistantMessage)
        if self._open is not None and self._open.response_id != m.response_id:
            yield from self._end_response()
        if not self.active:
            return
        if self._open is None:
            if not self._call_waiting():
                self._stop(
                    f"the transcript has a model response here, but the machine does not call "
                    f"the model: it is {self._waits()}"
                )
                return
            self._open = _Open(response_id=m.response_id, call_id=self.state.round.call_id, last=m)
        o = self._open
        for b in m.content:
            traits = None
            rules: tuple[str, ...] = ()
            if isinstance(b, ToolUseBlock):
                traits = traits_for(
                    b.name,
                    b.input,
                    known=b.id not in self._unknown,
                    cancels_siblings=m.response_id in self._siblings,
                )
                rules = ("IMP-12",)
                o.has_tool_use = True
            yield (
                ModelBlockReceived(
                    call_id=o.call_id, block=b, tool=traits, at_ms=it.at_ms or self._now
                ),
                rules,
            )
        o.last = m

    def _slot_status(self, tool_use_id: str) -> str | None:
        for sl in self.state.round.slots:
            if sl.tool_use_id == tool_use_id:
                return sl.status
        return None

    def _result(self, it: Item) -> Iterator[Fed]:
        m = it.message
        assert isinstance(m, UserMessage)
        if it.line in self._interrupted_results:  # IMP-21: the user's interrupt, not the tool
            if self.terminal is None:
                if self._open is not None:
                    yield from self._end_response()
                yield Interrupted(kind="hard", at_ms=it.at_ms or self._now), ("IMP-21",)
            return
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                yield from self._deliver(b, it)
                if not self.active:
                    return

    def _deliver(self, b: ToolResultBlock, it: Item) -> Iterator[Fed]:
        for _ in range(3):
            status = self._slot_status(b.tool_use_id)
            if status is None:
                if any(
                    isinstance(x, UserMessage)
                    and any(
                        isinstance(c, ToolResultBlock) and c.tool_use_id == b.tool_use_id
                        for c in x.content
                    )
                    for _, x in self.emitted
                ):
                    return  # the machine wrote this result itself, earlier
                self._stop(
                    f"a result for tool call {b.tool_use_id}, which the machine has no call "
                    f"for in this round (it is {self._waits()})"
                )
                return
            if status == "done":
                return  # the machine's own result (synthetic, sibling-cancelled, unknown tool)
            if status == "running":
                yield (
                    ToolFinished(
                        generation=self.state.round.generation,
                        tool_use_id=b.tool_use_id,
                        content=b.content,
                        is_error=b.is_error,
                        hook_stopped=it.line in self._hook_stopped,
                        at_ms=it.at_ms or self._now,
                    ),
                    (),
                )
                return
            if status == "asking":  # pragma: no cover - permissions are answered at once
                yield (
                    PermissionAnswered(
                        generation=self.state.round.generation,
                        tool_use_id=b.tool_use_id,
                        decision="allow",
                        at_ms=self._now,
                    ),
                    ("IMP-15",),
                )
                continue
            # queued: the machine has not started it yet
            if self._open is not None:
                yield from self._end_response()
                if not self.active:
                    return
                continue
            break
        name = next(
            (sl.name for sl in self.state.round.slots if sl.tool_use_id == b.tool_use_id), "?"
        )
        self._stop(
            f"the result of {name} {b.tool_use_id} arrives before the machine started it (it "
            f"is {self._waits()})"
        )

    def _interrupt(self, it: Item) -> Iterator[Fed]:
        if self.terminal is not None:
            return
        if it.text == INTERRUPT_TOOLS and self._open is not None:
            yield from self._end_response()
        yield Interrupted(kind="hard", at_ms=it.at_ms or self._now), ()

    def _stop_hooks(self, group: list[Item]) -> Iterator[Fed]:
        if self._open is not None:
            yield from self._end_response()
        if self.active and self._call_waiting():
            yield from self._answer_empty()
        if not self.active:
            return
        if self.state.phase != "stop_hooks":
            self._stop(f"the transcript shows stop hooks here; the machine is {self._waits()}")
            return
        feedback: list[str] = []
        prevent = False
        stop_reason = ""
        hook_count = 0
        for it in group:
            if it.kind == "stop_feedback":
                text = it.text or ""
                feedback.append(text.removeprefix("Stop hook feedback:\n"))
            elif it.kind == "stop_prevent":
                prevent = True
                att = it.record.get("attachment")
                if isinstance(att, dict) and isinstance(att.get("stopReason"), str):
                    stop_reason = att["stopReason"]
            elif it.kind == "stop_summary":
                rec = it.record
                # a summary is written only when hooks ran (steploop/effects/transcript.py writes no count)
                count = rec.get("hookCount")
                hook_count = count if isinstance(count, int) and count > 0 else max(hook_count, 1)
                if rec.get("preventedContinuation") is True:
                    prevent = True
                if isinstance(rec.get("stopReason"), str) and rec["stopReason"]:
                    stop_reason = rec["stopReason"]
        if not hook_count:
            hook_count = max(1, len(feedback)) if (feedback or prevent) else 0
        yield (
            StopHooksFinished(
                hooks_id=self.state.round.pending_id,
                blocking_errors=tuple(feedback),
                prevent=prevent,
                stop_reason=stop_reason,
                hook_count=hook_count,
                at_ms=group[-1].at_ms or self._now,
            ),
            (),
        )

    def _compact(self, group: list[Item]) -> Iterator[Fed]:
        if self._open is not None:
            yield from self._end_response()
        if not self.active:
            return
        if self.state.phase != "compacting":
            meta = group[0].record.get("compactMetadata")
            pre = meta.get("preTokens") if isinstance(meta, dict) else None
            self._stop(
                f"Claude Code auto-compacted here (preTokens {pre}); the machine, counting "
                f"{self.state.conversation.token_count():,} tokens against its threshold "
                f"{self.config.autocompact_threshold:,}, is {self._waits()}"
            )
            return
        messages = tuple(it.message for it in group if it.message is not None)
        yield (
            CompactionFinished(
                compact_id=self.state.round.pending_id,
                messages=messages,
                at_ms=group[0].at_ms or self._now,
            ),
            (),
        )

    def _insert(self, group: list[Item]) -> Iterator[Fed]:
        from steploop.reducer import events as ev

        cls: Any = getattr(ev, "MessagesInserted", None)
        if cls is None:  # pragma: no cover - the event is part of the machine
            self._stop("messages inserted without a model call are not supported")
            return
        if self._open is not None:
            yield from self._end_response()
        yield (
            cls(
                messages=tuple(it.message for it in group if it.message is not None),
                at_ms=group[0].at_ms or self._now,
            ),
            (),
        )

    def _api_error(self, it: Item, after: Item | None) -> Iterator[Fed]:
        m = it.message
        assert isinstance(m, AssistantMessage)
        err = m.api_error
        if err is not None and err.kind == "max_output_tokens":
            if self._open is not None:  # IMP-14: the response before it stopped at max_tokens
                yield from self._end_response(mot=True)
            return  # the machine writes this error itself when recovery is exhausted
        if self._open is not None:
            yield from self._end_response()
        kind = api_failure_kind(m)
        text = err.message.removeprefix("API Error: ") if err is not None else ""
        for _ in range(self.config.retry.max_retries + 2):
            if not self.active or not self._call_waiting():
                break
            yield (
                ModelCallFailed(
                    call_id=self.state.round.call_id,
                    kind=kind,
                    message=text,
                    status=err.status if err is not None else None,
                    at_ms=it.at_ms or self._now,
                ),
                ("IMP-17",),
            )

    def _command(self, it: Item) -> Iterator[Fed]:
        """IMP-18: a queued prompt taken off the queue while the turn ran rode along as a
        queued-command attachment (the session pairs the removal with its enqueue)."""
        assert it.command is not None
        yield CommandQueued(command_id=f"q{it.line}", text=it.command, at_ms=it.at_ms), ("IMP-18",)

    def _finish(self, may_answer_empty: bool) -> Iterator[Fed]:
        if self._open is not None:
            yield from self._end_response()
        for _ in range(64):
            if not self.active:
                return
            phase = self.state.phase
            if phase == "stop_hooks":  # IMP-16: no stop-hook record, so no hook ran
                yield (
                    StopHooksFinished(hooks_id=self.state.round.pending_id, at_ms=self._now),
                    ("IMP-16",),
                )
            elif self._call_waiting() and may_answer_empty:
                yield from self._answer_empty()
            else:
                self._stop(f"the transcript's turn ends here while the machine is {self._waits()}")
                return


def is_interrupt_text(text: str | None) -> bool:
    return text in INTERRUPT_TEXTS


def _result_text(it: Item) -> str | None:
    m = it.message
    if isinstance(m, UserMessage):
        for b in m.content:
            if isinstance(b, ToolResultBlock):
                return b.content
    return None


def _hook_stopped_results(items: list[Item]) -> set[int]:
    """T-HOOK-1: the line of the last result before a tool hook's stop attachment (the hook of
    that tool stopped the turn)."""
    out: set[int] = set()
    for i, it in enumerate(items):
        if it.kind != "hook_stop":
            continue
        for prev in reversed(items[:i]):
            if prev.kind == "result":
                out.add(prev.line)
                break
    return out


def _interrupted_results(items: list[Item]) -> set[int]:
    """IMP-21: the lines of results carrying Claude Code's rejection text that an interrupt
    marker follows before the next response: the first such result is where the user
    interrupted; the machine writes them and the marker itself."""
    out: set[int] = set()
    for i, it in enumerate(items):
        if it.kind != "result" or not (_result_text(it) or "").startswith(REJECT_PREFIX):
            continue
        for nxt in items[i + 1 :]:
            if nxt.kind in ("result", "system_other", "queue", "command", "retry_notice"):
                continue
            if nxt.kind == "interrupt":
                out.add(it.line)
            break
    return out
