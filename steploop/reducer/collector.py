"""The cycle collector, paused over long computations that make no cyclic garbage (R-COST-4).

An exploration keeps every abstract state it reaches, and a replay of a long session keeps its
whole history: hundreds of thousands of objects that live to the end. CPython's cycle collector
walks every tracked object at each full collection and the young ones at each of the thousands
of young collections an allocating loop triggers; at the CI bound of ``steploop check`` that was
about a fifth of the CPU. Yet while these loops run they make no cyclic garbage: what they build
and drop is reclaimed by reference counting (``tests/reducer/test_collector.py`` collects now
and then during the work and finds nothing). What they keep to the end (an explored graph holds
cycles) is let go as a whole when they return, and the collector, given back, finds it.

:func:`paused` turns automatic collection off for a block and back to what it was after it;
:func:`sweep` (called once per unit of work: an expanded node, a replayed record) collects the
youngest generation once :data:`SWEEP_AT` objects have piled up in it, so whatever cycles a
caller's own code makes there are still found, each young object is looked at once, and memory
stays bounded. The pause is process-wide, as the collector is: a thread of the caller's that
runs meanwhile is collected only at the sweeps.

A fast path ("paused_collector" of :mod:`steploop.reducer.fastpaths`, where its figure is):
with it off, :func:`paused` leaves the collector as it is.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from steploop.reducer import fastpaths

__all__ = ["SWEEP_AT", "paused", "sweep"]

SWEEP_AT = 200_000
"""Young tracked objects (allocated less freed since the last collection) that make
:func:`sweep` collect the youngest generation while the collector is paused."""

_get_count = gc.get_count


@contextmanager
def paused() -> Iterator[None]:
    """Automatic collection off for the block (a no-op with the fast path off); the collector
    is enabled again after it only if it was enabled before, so pauses nest."""
    if not fastpaths.on("paused_collector") or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def sweep() -> None:
    """Collect the youngest generation if :data:`SWEEP_AT` objects have piled up in it (only
    while automatic collection is off: otherwise the collector keeps its own pace)."""
    if _get_count()[0] > SWEEP_AT and not gc.isenabled():
        gc.collect(0)
