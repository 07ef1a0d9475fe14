"""What a workflow's history holds of a steploop turn: its runs in order, its trace, and the
determinism check both ways (``steploop temporal check``, specs/temporal.md TEMPORAL-CHECK-1).

**The trace from the history.** Each new part of a turn's trace is the input of a trace activity
(``steploop.trace``: turn id, path, offset, text; see :mod:`steploop.effects.temporal.turn`),
and the history keeps every scheduled activity's input. :func:`turn_traces` reads the parts of
every turn from the histories of its runs, in order, following continue-as-new, and checks that
they join (each starts where the last ended).

**Two checks, one command.** :func:`check_histories` fails when either fails:

1. *Temporal's*: the ``Replayer`` runs the workflow code against each history; a command that
   differs from the recorded one (another activity, another activity id) fails it. The trace
   activity's id carries a digest of the trace up to it, so a decision of the machine that
   differs from the recorded one in any byte fails it too.
2. *steploop's*: the recorded trace of each turn is replayed exactly
   (:func:`steploop.effects.trace.replay_exact`): ``step()`` is fed the recorded events from the
   recorded start, and each effect and state digest it makes now is compared with the recorded
   one; a mismatch names the step.

The first says the workflow code still drives this history; the second says which decision of
the machine changed, and holds even for a turn recorded by a workflow of one's own.
"""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter
from temporalio.worker import Replayer

from steploop.effects.temporal.activities import ACTIVITY_NAMES

__all__ = ["CheckReport", "TurnTrace", "check_histories", "runs_in_order", "turn_traces"]


@attrs.frozen
class TurnTrace:
    """The trace of one turn as its workflow's histories hold it."""

    workflow_id: str
    turn_id: str
    text: str
    parts: int
    problem: str | None  # None: the parts join from byte 0 on


@attrs.frozen
class CheckReport:
    """What :func:`check_histories` found; ``problems`` empty: both checks passed."""

    histories: int
    turns: int
    steps: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def _started(history: WorkflowHistory) -> Any:
    first = history.events[0] if history.events else None
    if first is None or not first.HasField("workflow_execution_started_event_attributes"):
        raise ValueError(f"{history.workflow_id}: a history must start with its workflow's start")
    return first.workflow_execution_started_event_attributes


def runs_in_order(histories: Iterable[WorkflowHistory]) -> list[list[WorkflowHistory]]:
    """The histories grouped by the workflow execution chain they belong to (the runs one
    continue-as-new led to the next), each group in run order. A run whose predecessor is not
    given starts a group of its own."""
    by_run: dict[str, WorkflowHistory] = {}
    after: dict[str, str] = {}
    for h in histories:
        attrs_ = _started(h)
        run = attrs_.original_execution_run_id or f"?{id(h)}"
        by_run[run] = h
        if attrs_.continued_execution_run_id:
            after[attrs_.continued_execution_run_id] = run
    heads = [r for r, h in by_run.items() if _started(h).continued_execution_run_id not in by_run]
    chains = []
    for head in heads:
        chain, run = [], head
        while run is not None and run in by_run:
            chain.append(by_run.pop(run))
            run = after.get(run)
        chains.append(chain)
    return chains


def _is_trace(event: HistoryEvent) -> bool:
    return event.HasField("activity_task_scheduled_event_attributes") and (
        event.activity_task_scheduled_event_attributes.activity_type.name == ACTIVITY_NAMES["trace"]
    )


async def turn_traces(
    histories: Iterable[WorkflowHistory], data_converter: DataConverter
) -> list[TurnTrace]:
    """The trace of every steploop turn in these histories (the runs of one workflow joined
    in order); ``problem`` says when the parts do not join up from the first byte (a run's
    history missing)."""
    out = []
    for chain in runs_in_order(histories):
        wid = chain[0].workflow_id
        first_is_first = not _started(chain[0]).continued_execution_run_id
        texts: dict[str, list[str]] = {}
        sizes: dict[str, int] = {}
        parts: dict[str, int] = {}
        problems: dict[str, str] = {}
        for history in chain:
            for event in history.events:
                if not _is_trace(event):
                    continue
                payloads = event.activity_task_scheduled_event_attributes.input.payloads
                turn, _path, offset, text = await data_converter.decode(
                    payloads, [str, Any, int, str]
                )
                have = sizes.get(turn, 0)
                if turn not in texts and offset != 0 and turn not in problems:
                    problems[turn] = (
                        f"the trace of turn {turn} starts at byte {offset}: the runs before "
                        "it are not given" if not first_is_first else f"starts at byte {offset}"
                    )
                elif turn in texts and offset != have and turn not in problems:
                    problems[turn] = f"a part at byte {offset} follows {have} bytes"
                texts.setdefault(turn, []).append(text)
                sizes[turn] = offset + len(text.encode("utf-8"))
                parts[turn] = parts.get(turn, 0) + 1
        for turn, chunks in texts.items():
            out.append(TurnTrace(wid, turn, "".join(chunks), parts[turn], problems.get(turn)))
    return out


async def check_histories(
    histories: Sequence[WorkflowHistory],
    *,
    data_converter: DataConverter,
    workflows: Sequence[type] = (),
    replayer: Replayer | None = None,
) -> CheckReport:
    """Temporal's Replayer over every history, and steploop's exact replay over every turn's
    recorded trace (see the module docstring). ``workflows``: workflow classes of one's own
    that ran steploop turns, besides the ready-made one; ``replayer``: one made already (its
    data converter must be ``data_converter``)."""
    from steploop.effects.temporal.client import replayer as make_replayer
    from steploop.effects.trace import replay_exact

    problems: list[str] = []
    rp = replayer or make_replayer(data_converter=data_converter, workflows=workflows)
    async def each() -> AsyncIterator[WorkflowHistory]:
        for h in histories:
            yield h

    async with rp.workflow_replay_iterator(each()) as results:
        async for result in results:
            if result.replay_failure is not None:
                failure = " ".join(str(result.replay_failure).split())
                problems.append(f"{result.history.workflow_id}: Temporal's replay: {failure}")
    steps = 0
    traces = await turn_traces(histories, data_converter)
    with tempfile.TemporaryDirectory(prefix="steploop-check-") as tmp:
        for k, t in enumerate(traces):
            where = f"{t.workflow_id} turn {t.turn_id}"
            if t.problem is not None:
                problems.append(f"{where}: steploop's replay: cannot: {t.problem}")
                continue
            path = Path(tmp) / f"{k}.jsonl"
            path.write_text(t.text, encoding="utf-8")
            try:
                report = replay_exact(path)
            except Exception as exc:  # a trace that cannot be read is a failed check
                problems.append(f"{where}: steploop's replay: {type(exc).__name__}: {exc}")
                continue
            steps += report.steps
            if not report.ok:
                shown = report.describe().replace(str(path), "the trace")
                problems.append(f"{where}: steploop's replay: {shown}")
    return CheckReport(len(histories), len(traces), steps, tuple(problems))
