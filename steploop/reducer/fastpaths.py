"""Every fast path of steploop, in one list, and the one switch that turns them off (issue 22).

A *fast path* is code that exists only to make something cheaper and must return exactly what
a simpler way returns (its *twin*): a compiled structurer beside the general converter, orjson
beside ``json``, a composed digest beside the whole-state encoding. Each is listed in
:data:`REGISTRY` with where it is, the benchmark item it serves and the figure it earns there,
measured with the path on and off side by side in one run (``python -m benchmarks.fastpaths``).
A path that earns less than 10% on its item is removed, not listed. Removed so (2026-12-02):
orjson in the trace reader (1.30x on reading alone, 0.96x and 1.03x on item 3) and the tool
registry's quick check of plain input schemas before jsonschema (1.01x and 1.10x on item 1).

The switch: :func:`disable` (every path, or the named ones), :func:`enable`, and the context
manager :func:`off`. A site asks :func:`on` where it decides (once per call, or once per
reader or digester made); a site that caches tables at import registers a callback with
:func:`watch` and rebuilds them when the switch moves. With every path off, every result is
the same (tests/test_fastpaths.py runs the golden scenarios and a Hypothesis sample both
ways); only the speed differs. The environment variable ``STEPLOOP_NO_FAST_PATHS=1`` is read
by the effects layer (``steploop/effects/__init__.py``) and the test suite's conftest, never
here: this module is pure data and a flag.

Adding a fast path is one entry in :data:`REGISTRY` and one ``on(NAME)`` (or ``watch``) at the
site.

Not fast paths: the explorer's parallel search (``steploop check --processes N``) is an option,
off by default, with the same report (ABS-4); on the shared 2-core machine two processes took
39.3 CPU s and 95.6 s of wall time where one took 24.8 and 59.1 (2026-12-02), so it pays only
where cores are free. The explorer's fused invariant loop and shared first events are its
implementation, with no twin kept.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import attrs

__all__ = ["REGISTRY", "FastPath", "disable", "enable", "names", "off", "on", "watch"]


@attrs.frozen
class FastPath:
    """One fast path: ``name`` (what :func:`on` takes), ``where`` (module and names),
    ``twin`` (what runs when it is off), ``item`` (the benchmark item it serves) and
    ``figure`` (what it earns there, on against off, side by side; the date and the run)."""

    name: str
    where: str
    twin: str
    item: str
    figure: str


# Figures: off/on per repetition, median (q1-q3), CPU time, on the shared 2-core machine (load
# average 6-8): items 2 and 3 `python -m benchmarks.fastpaths --events 10000 --reps 7`
# (2026-12-02 02:34 UTC); item 1 `--items 1 --reps 15 --turns 400` (02:40 UTC).
# fmt: off
REGISTRY: tuple[FastPath, ...] = (
    FastPath("evolve", "steploop/reducer/_replace.py:evolve (also effects/answer.py:stamped)", "attrs.evolve", "1, 2, 3", "item 2: 2.81x (2.42-3.00); item 3: 1.32x (1.27-1.40); item 1: 1.61x (1.51-1.83)"),
    FastPath("canonical_text", "steploop/reducer/canonical.py:_compile_text, _MEMO", "canonical_bytes_reference (json.dumps of to_data)", "3", "item 3: 1.14x (1.07-1.23)"),
    FastPath("incremental_digest", "steploop/reducer/digest.py:StateDigester", "canonical_bytes of the whole state", "3", "item 3: 1.21x (1.16-1.38)"),
    FastPath("fast_structurers", "steploop/reducer/serialize.py:fast_structurer", "the cattrs converter", "3", "item 3: 1.67x (1.38-1.78), the trace decoders' tables included (they are compiled structurers)"),
    FastPath("stamp", "steploop/effects/answer.py:stamped, _stamper", "evolve(event, at_ms=...), which checks every field again", "1", "the stamp of a model event: 0.92 against 2.37 us (CPU, 2026-12-02); about 2% of a tool turn (whole tree, alternating processes: 0.98)"),
    FastPath("idle_runners", "steploop/effects/run.py:_IDLE_RUNNERS, _Runners", "a new task for every handler", "1", "item 1: 1.27x (211.7 against 166.6 us per tool turn, min of 7, 400 turns, 2026-12-01)"),
    FastPath("same_request", "steploop/effects/trace/fingerprints.py:SameRequests.request (counterfactual.py:match)", "comparing the two requests' fingerprints", "8", "with same_address and the release of used requests: counterfactual per event after/before 0.88 at 1,000 rounds, 0.82 at 10,000 (2026-12-02, `benchmarks.counterfactual --baseline 5acec68`); it removed the fingerprints' 14% of the profile"),
    FastPath("same_address", "steploop/effects/trace/counterfactual.py:_readdressed", "readdress (a copy of the recorded answer under the new ids)", "8", "about 4% of the counterfactual replay's profile; measured together with same_request (above)"),
    FastPath("paused_collector", "steploop/reducer/collector.py:paused (explore, replay_exact, replay_counterfactual, the importer's reading)", "the cycle collector left as it is", "6, 8", "item 6 (CI bound, 34,353 states): 1.43x (1.19-1.44); item 8 at 4,000 rounds: counterfactual 1.12x (1.08-1.45), exact replay 1.19x (1.17-1.23) (2026-12-02 08:30 UTC, `benchmarks.fastpaths --items 6,8 --reps 5`, load average about 1)"),
    FastPath("trace_decoders", "steploop/effects/trace/read.py:_FAST_EVENTS, _FAST_EFFECTS, _FAST_MESSAGE, _fast_effect", "_decode_event, _decode_effect, _message's general code", "3", "item 3: 1.29x (1.16-1.44)"),
)
# fmt: on

_NAMES = frozenset(p.name for p in REGISTRY)
_off: set[str] = set()
_watchers: list[Callable[[], None]] = []


def names() -> tuple[str, ...]:
    """The registered fast paths' names, in registry order."""
    return tuple(p.name for p in REGISTRY)


def on(name: str) -> bool:
    """Whether fast path ``name`` is on (every path is, until :func:`disable`)."""
    return name not in _off


def watch(callback: Callable[[], None]) -> None:
    """Call ``callback`` after every change of the switch (a site rebuilds what it cached)."""
    _watchers.append(callback)


def _known(chosen: tuple[str, ...]) -> tuple[str, ...]:
    unknown = sorted(set(chosen) - _NAMES)
    if unknown:
        raise KeyError(f"no fast path named {', '.join(unknown)}; known: {', '.join(names())}")
    return chosen or names()


def _changed() -> None:
    for callback in _watchers:
        callback()


def disable(*chosen: str) -> None:
    """Turn the named fast paths off (no name: every one)."""
    _off.update(_known(chosen))
    _changed()


def enable(*chosen: str) -> None:
    """Turn the named fast paths on again (no name: every one)."""
    _off.difference_update(_known(chosen))
    _changed()


@contextmanager
def off(*chosen: str) -> Iterator[None]:
    """The named fast paths (no name: every one) off inside the block, as they were after."""
    before = set(_off)
    disable(*chosen)
    try:
        yield
    finally:
        _off.clear()
        _off.update(before)
        _changed()
