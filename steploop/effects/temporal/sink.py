"""The steploop trace of a workflow run, written by the workflow as it steps.

Workflow code runs again whenever a worker rebuilds a workflow from its history (another worker
after a crash, an evicted cache, the Replayer): every step is taken again, and so every trace
line is produced again. The lines are the same bytes each time (``step()`` is deterministic, the
provenance comes with the workflow's input, event times are the workflow's clock), so the sink
compares what it produces with what the file already holds and writes only what comes after:
each step is in the file once, however often the workflow code ran. A line that differs from
the one in the file is a determinism failure of steploop's own, and stops the workflow task
(:class:`TraceDiverged`), as Temporal's check stops it for a command that differs from the
history. A partial last line (a worker killed while writing) is cut and written again.

A run continued as new starts where the last one stopped: ``offset`` is how many bytes of the
file the runs before it produced.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from steploop.reducer import SteploopError

__all__ = ["TraceDiverged", "TraceSink"]


class TraceDiverged(SteploopError):
    """The workflow produced a trace line that differs from the one already recorded."""


class TraceSink:
    """A text file object for :class:`steploop.effects.trace.TraceRecorder` that skips (and checks) the
    bytes the file already holds, and appends the rest (each write opens, appends, closes)."""

    def __init__(self, path: str | os.PathLike[str], offset: int = 0) -> None:
        self.path = Path(path)
        self.produced = offset  # bytes of the file produced so far, by this run and earlier
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            held = self.path.read_bytes()
        except FileNotFoundError:
            held = b""
        whole = held.rfind(b"\n") + 1  # a partial last line is written again
        if whole < len(held):
            with open(self.path, "r+b") as f:
                f.truncate(whole)
        if whole < offset:
            raise TraceDiverged(
                f"{self.path}: holds {whole} bytes, but the runs before produced {offset}"
            )
        self._expected = memoryview(held[offset:whole])

    @property
    def checked(self) -> bool:
        """Whether every byte the file held has been produced again (and matched)."""
        return len(self._expected) == 0

    def write(self, text: str) -> int:
        data = text.encode("utf-8")
        self.produced += len(data)
        if self._expected:
            n = min(len(self._expected), len(data))
            if self._expected[:n] != data[:n]:
                recorded = bytes(self._expected[:n])
                at = next(k for k in range(n) if recorded[k] != data[k])
                lo = max(0, at - 60)
                raise TraceDiverged(
                    f"{self.path}: the workflow produced other trace bytes than the recorded "
                    f"ones at byte {self.produced - len(data) + at}: recorded "
                    f"{recorded[lo : at + 60]!r}, produced {data[lo : at + 60]!r}"
                )
            self._expected = self._expected[n:]
            data = data[n:]
        if data:
            # opened for each write: the workflow may be evicted at any await, and a sink
            # left holding an open file by an evicted workflow would leak it
            with open(self.path, "ab") as f:
                f.write(data)
        return len(text)

    def flush(self) -> None:
        """Every write is flushed (and closed) already."""

    def close(self) -> None:
        """Nothing is held open."""

    def __enter__(self) -> TraceSink:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
