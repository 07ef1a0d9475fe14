"""Writing a turn as a trace, from the steps the driver took (specs/import.md §3, IMP-20).

The driver runs the machine once; :class:`Steps` keeps what the loop's observer saw at each
step (the event, the new state, its effects and the transitions passed: what a
:class:`~steploop.effects.trace.TraceRecorder` records), and :func:`write_trace` hands them to a
recorder once the verdict is known, since the verdict is part of the header's provenance. The
machine is never stepped again to write the trace (it was, through ``record_sequence``, before).
The states share all but what each step changed, so keeping a turn's steps costs little beside
the turn's events, which the driver keeps anyway.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, cast

from steploop.effects.trace import TraceRecorder
from steploop.reducer import LoopConfig, LoopState, Request, Session
from steploop.reducer.effects import Effect
from steploop.reducer.events import Event
from steploop.reducer.transitions import Transition

__all__ = ["Steps", "write_trace"]

Step = tuple[Event | None, LoopState, Sequence[Effect], Sequence[Transition]]


class Steps:
    """An observer (:data:`steploop.reducer.drive.Observer`) that keeps every step."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(
        self,
        event: Event | None,
        state: LoopState,
        effects: Sequence[Effect],
        transitions: Sequence[Transition],
    ) -> None:
        self.steps.append((event, state, effects, transitions))


def write_trace(
    path: Path,
    config: LoopConfig,
    request: Request,
    session: Session | None,
    provenance: Mapping[str, Any],
    steps: Steps,
) -> None:
    """Write the trace of a driven turn: the header, then every step kept, as observed.

    The recorder writes into memory (it flushes its target after every step: on a file, a
    system call a step) and the text goes to the file at once; a turn's trace is the size of
    its steps, which are in memory already."""
    sink = _Sink()
    with TraceRecorder(
        cast(IO[str], sink), config=config, session=session, request=request, provenance=provenance
    ) as rec:
        observe = rec.observe
        for event, state, effects, transitions in steps.steps:
            observe(event, state, effects, transitions)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(sink.parts)


class _Sink:
    """What a recorder writes, kept as the strings it wrote (an ``io.StringIO`` keeps four
    bytes a character)."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> int:
        self.parts.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass
