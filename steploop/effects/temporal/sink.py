"""The trace file a worker writes: each part once, at its place, however often it is sent.

The workflow never writes a file (specs/temporal.md, TEMPORAL-IO-1): it sends each new part of
the trace, with the number of bytes before it, to the trace activity, whose input the history
keeps. The activity may run more than once (a retry) and the parts of one turn may reach
different hosts; :func:`append_at` appends a part where it belongs, skips what the file holds
already (checking it is the same bytes) and cuts a partial last line (a worker killed while
writing) before writing it again. A file that lacks the bytes before a part (the part before
went to another host) is left as it is (:class:`TraceGap`); the whole trace comes from the
history (``steploop temporal trace``).
"""

from __future__ import annotations

from pathlib import Path

from steploop.reducer import SteploopError

__all__ = ["TraceDiverged", "TraceGap", "append_at"]


class TraceGap(SteploopError):
    """The file cannot take this part of the trace where it belongs."""


class TraceDiverged(TraceGap):
    """The file holds other bytes where this part goes."""


def append_at(path: Path, offset: int, text: str) -> None:
    """Write ``text`` at byte ``offset`` of ``path``: what the file already holds there must
    be the same bytes (a retried part); the rest is appended."""
    data = text.encode("utf-8")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as f:
        f.seek(0)
        held = f.read()
        whole = held.rfind(b"\n") + 1  # a partial last line is written again
        if whole < len(held):
            f.truncate(whole)
        if whole < offset:
            raise TraceGap(
                f"{path} holds {whole} bytes but this part starts at byte {offset} (the part "
                "before went elsewhere: `steploop temporal trace WORKFLOW_ID` writes it whole)"
            )
        there = held[offset : min(whole, offset + len(data))]
        if there != data[: len(there)]:
            at = next(k for k in range(len(there)) if there[k] != data[k])
            lo = max(0, at - 60)
            raise TraceDiverged(
                f"{path}: holds other bytes than this part at byte {offset + at}: held "
                f"{there[lo : at + 60]!r}, sent {data[lo : at + 60]!r}"
            )
        if offset + len(data) > whole:
            f.seek(0, 2)
            f.write(data[whole - offset :])
