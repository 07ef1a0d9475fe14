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
stops there and says why; the trace then ends without an end record. What it must know of a
turn's records ahead (interrupted results, refused calls, compactions) is found by
:mod:`~steploop.effects.importer.lookahead`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Generator, Iterable, Iterator
from typing import Any, TypeAlias

import attrs

from steploop.effects import answer
from steploop.effects.importer.infer import stop_reason_for, traits_for
from steploop.effects.importer.lookahead import (
    INTERRUPT_TOOLS,
    REJECT_PREFIX,
    SIBLING_CANCEL_PREFIX,
    START_OUTPUT_TOKENS,
    STOPPED_PREFIX,
    UNKNOWN_TOOL_PREFIX,
    Compacted,
    api_failure_kind,
    compacted_responses,
    first_result_id,
    hook_stopped_results,
    interrupted_results,
    rejected_calls,
    switched_model,
)
from steploop.effects.importer.segment import Item
from steploop.reducer import (
    IllegalEvent,
    LoopConfig,
    LoopState,
    MalformedConversation,
    Request,
    Session,
)
from steploop.reducer.conversation import estimate_message
from steploop.reducer.drive import Observer, drive
from steploop.reducer.effects import (
    AskPermission,
    CancelModelCall,
    Effect,
    Emit,
    Finish,
    RefreshTools,
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

# the prefixes and api_failure_kind are defined in lookahead; named here too, as before
__all__ = [
    "REJECT_PREFIX",
    "SIBLING_CANCEL_PREFIX",
    "STOPPED_PREFIX",
    "UNKNOWN_TOOL_PREFIX",
    "TurnDriver",
    "api_failure_kind",
]


@attrs.define
class _Open:
    """The response being streamed: its id, the call it answers, its last record so far, and
    the rough estimate of its blocks (VER-7)."""

    response_id: str
    call_id: int
    last: AssistantMessage
    has_tool_use: bool = False
    records: list[AssistantMessage] = attrs.field(factory=list)

    @property
    def estimate(self) -> int:
        """The rough estimate of the response's blocks (R-TOK-1), computed when asked."""
        return sum(estimate_message(m) for m in self.records)

    @property
    def first_estimate(self) -> int:
        return estimate_message(self.records[0]) if self.records else 0


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
        cut: the driver stopped because the thread's transcript ends inside this turn, with
            the machine waiting for what the transcript never wrote (IMP-22).
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
        self.cut = False  # the thread's transcript ends inside this turn (IMP-22)
        self.started = False
        self._unknown = unknown_tools
        self._siblings = sibling_cancelling
        self._interrupted_results: set[int] = set()
        self._rejected: dict[str, int] = {}  # IMP-21: call -> the line of its rejection
        self._held: set[str] = set()  # calls whose permission waits for their rejection
        self._hook_stopped: set[int] = set()
        self._compacted: dict[str, Compacted] = {}
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
            if effect.tool_use_id in self._rejected:  # IMP-21: but this one, where it stands
                self._held.add(effect.tool_use_id)
                return None
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
        elif isinstance(effect, RefreshTools):  # R-REFRESH-1: no tool list is recorded
            return [answer.tools_refreshed(effect, at_ms=self._now)]
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

    def _count(self) -> int:
        """The context count the machine compares with its thresholds (R-TOK-1, VER-3)."""
        s = self.state
        mode = self.config.legacy.context_count
        return max(0, s.conversation.token_count(mode) - s.tokens_freed)

    def _waits(self) -> str:
        s = self.state
        r = s.round
        if s.phase == "streaming":
            return f"streaming model call {r.call_id}"
        if s.phase in ("running_tools", "draining"):
            names = [f"{sl.name} {sl.tool_use_id}" for sl in r.slots if sl.status != "done"]
            return f"{s.phase}, waiting for {', '.join(names) or 'nothing'}"
        if s.phase == "compacting":
            return f"compacting (context {self._count():,} tokens)"
        return s.phase

    # -- one method per kind of record ---------------------------------------------------------

    def run(
        self, items: list[Item], *, may_answer_empty: bool, observer: Observer | None = None
    ) -> None:
        """Drive the turn through its records (all but the prompt). ``may_answer_empty``: the
        transcript goes on after this turn, so a model call it shows no answer for had an
        empty one. ``observer``: also told every step (the trace writer keeps them)."""
        self.prepare(items, may_answer_empty=may_answer_empty)
        watch: Observer = self._observe if observer is None else _both(self._observe, observer)
        try:
            drive(self, self._request, self.config, self._session, observer=watch)
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
        self._interrupted_results = interrupted_results(items)
        self._rejected = rejected_calls(items, self._interrupted_results)
        self._hook_stopped = hook_stopped_results(items)
        self._compacted = compacted_responses(items)
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
        rules: tuple[str, ...] = ("IMP-14",) if last.stop_reason is None else ()
        usage = last.usage or Usage()
        output = self._final_output(o, usage)
        if output is not None:
            usage = attrs.evolve(usage, output_tokens=output)
            rules = (*rules, "VER-7")
        yield (
            ModelResponseEnded(
                call_id=o.call_id,
                model=last.model or self.state.model,
                stop_reason=reason,
                usage=usage,
                at_ms=self._now,
            ),
            rules,
        )

    def _final_output(self, o: _Open, usage: Usage) -> int | None:
        """VER-7: the response's final output tokens where its records hold message_start's
        usage (at most START_OUTPUT_TOKENS out, while its blocks say more): the count an auto
        compaction right after it recorded (``preTokens``) implies, when that is plausible,
        else the rough estimate of its blocks (not under 2.1.88's count, which anchors at the
        first record and estimates the others). None: the recorded usage stands."""
        if usage.output_tokens > START_OUTPUT_TOKENS:
            return None
        estimate = o.estimate
        if estimate <= usage.output_tokens:
            return None
        comp = self._compacted.get(o.response_id)
        if comp is not None:
            mode = self.config.legacy.context_count
            rest = usage.total - usage.output_tokens
            if mode == "estimate_from_last":
                rest += comp.after
            elif mode == "estimate_from_first":
                rest += comp.after + (estimate - o.first_estimate)
            implied = comp.pre_tokens - rest
            # plausible: at least the recorded count, at most four times the estimate
            if usage.output_tokens <= implied <= 4 * estimate + 1_000:
                return implied
        if self.config.legacy.context_count == "estimate_from_first":
            # 2.1.88 anchors at the first record, whose usage is message_start's, and estimates
            # the later blocks: the count lacks nothing the records hold
            return None
        return estimate

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
            if len(m.content) > 1 and self.state.round.streaming:
                # VER-8: a record holding a whole response is the non-streaming fallback's
                # answer: the streaming attempt broke and the call was made again without it
                yield (
                    ModelCallFailed(
                        call_id=self.state.round.call_id,
                        kind="stream_broken",
                        message="the stream broke; the answer came without streaming",
                        at_ms=it.at_ms or self._now,
                    ),
                    ("VER-8",),
                )
                if not self.active or not self._call_waiting():
                    return
            self._open = _Open(response_id=m.response_id, call_id=self.state.round.call_id, last=m)
        o = self._open
        o.records.append(m)
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
                    call_id=o.call_id,
                    block=b,
                    tool=traits,
                    # R-MODEL-1: the record names the model that served it (message_start)
                    model=m.model or None,
                    at_ms=it.at_ms or self._now,
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
                call = first_result_id(it)
                if call is not None and call in self._held and self.active:
                    # the call the user refused at its permission question
                    self._held.discard(call)
                    yield (
                        PermissionAnswered(
                            generation=self.state.round.generation,
                            tool_use_id=call,
                            decision="rejected_by_user",
                            at_ms=it.at_ms or self._now,
                        ),
                        ("IMP-21",),
                    )
                    return
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
                model = switched_model(it)
                yield (
                    ToolFinished(
                        generation=self.state.round.generation,
                        tool_use_id=b.tool_use_id,
                        content=b.content,
                        is_error=b.is_error,
                        hook_stopped=it.line in self._hook_stopped,
                        model=model,
                        at_ms=it.at_ms or self._now,
                    ),
                    ("VER-9",) if model is not None else (),
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
                f"{self._count():,} tokens against its threshold "
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
                self.cut = self.last_turn and self.stuck is None
                self._stop(f"the transcript's turn ends here while the machine is {self._waits()}")
                return


def _both(first: Observer, second: Observer) -> Observer:
    def both(event: Event | None, state: LoopState, fx: Any, passed: Any) -> None:
        first(event, state, fx, passed)
        second(event, state, fx, passed)

    return both
