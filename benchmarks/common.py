"""Helpers shared by the benchmarks: the machine label, summaries of samples, profiles, progress."""

from __future__ import annotations

import cProfile
import io
import os
import platform
import pstats
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "Profiler",
    "Summary",
    "machine",
    "profile_top",
    "progress",
    "ratio_summary",
    "summarize",
]

Summary = dict[str, float | int]
"""``median``, ``min``, ``max``, quartiles ``q1`` and ``q3``, ``spread_pct`` ((max-min)/median)
and ``n`` of some samples."""


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine() -> dict[str, Any]:
    """What absolute times are labelled with: platform, CPU, cores, Python, load."""
    try:
        load: list[float] | None = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        load = None
    return {
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "loadavg_1_5_15": load,
        "date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def summarize(samples: Sequence[float], digits: int = 3) -> Summary:
    """Median and spread of ``samples`` (at least one)."""
    med = statistics.median(samples)
    lo, hi = min(samples), max(samples)
    if len(samples) >= 2:
        q1, _q2, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    else:
        q1 = q3 = med
    return {
        "median": round(med, digits),
        "min": round(lo, digits),
        "max": round(hi, digits),
        "q1": round(q1, digits),
        "q3": round(q3, digits),
        "spread_pct": round(100 * (hi - lo) / med, 1) if med else 0.0,
        "n": len(samples),
    }


def ratio_summary(num: Sequence[float], den: Sequence[float], digits: int = 3) -> Summary:
    """The ratio num/den per repetition (pairs measured side by side), summarized."""
    return summarize([a / b for a, b in zip(num, den, strict=True)], digits)


class Profiler:
    """cProfile as a context manager; :meth:`report` gives the top functions by own time."""

    def __init__(self) -> None:
        self._prof = cProfile.Profile()

    def __enter__(self) -> Profiler:
        self._prof.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        self._prof.disable()

    def report(self, *, limit: int = 15, focus: Sequence[str] = ()) -> dict[str, Any]:
        """The top ``limit`` functions by own time, and the cumulative share of ``focus``.

        ``focus`` names functions as ``"path/file.py:function"`` (a suffix of the file name),
        e.g. ``"steploop/reducer/machine/table.py:step"``: how much of the profiled time is spent inside them.
        """
        stats = pstats.Stats(self._prof, stream=io.StringIO())
        raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
        total = float(stats.total_tt)  # type: ignore[attr-defined]
        rows = []
        for (filename, line, name), (_cc, ncalls, tottime, cumtime, _callers) in raw.items():
            rows.append((tottime, cumtime, ncalls, f"{_short(filename)}:{line}({name})"))
        rows.sort(reverse=True)
        shares: dict[str, float] = {}
        for want in focus:
            path, _, func = want.rpartition(":")
            best = 0.0
            for (filename, _line, name), (_cc, _n, _tt, cumtime, _c) in raw.items():
                if name == func and filename.endswith(path):
                    best = max(best, cumtime)
            shares[want] = round(100 * best / total, 1) if total else 0.0
        return {
            "total_s": round(total, 4),
            "top_by_tottime": [
                {
                    "function": where,
                    "ncalls": ncalls,
                    "tottime_s": round(tt, 4),
                    "cumtime_s": round(ct, 4),
                    "tottime_pct": round(100 * tt / total, 1) if total else 0.0,
                }
                for tt, ct, ncalls, where in rows[:limit]
            ],
            "cumulative_share_pct": shares,
        }


def profile_top(
    fn: Callable[[], object], *, limit: int = 15, focus: Sequence[str] = ()
) -> dict[str, Any]:
    """Run ``fn`` under cProfile and report it (see :meth:`Profiler.report`)."""
    with Profiler() as prof:
        fn()
    return prof.report(limit=limit, focus=focus)


_ROOT = str(Path(__file__).resolve().parent.parent) + "/"


def _short(filename: str) -> str:
    """A file name without the prefixes that say nothing: site-packages, stdlib, this repo."""
    for marker in ("/site-packages/",):
        if marker in filename:
            return filename.split(marker, 1)[1]
    stdlib = re.search(r"/lib/python3\.\d+/", filename)
    if stdlib:
        return "stdlib/" + filename[stdlib.end() :]
    if filename.startswith(_ROOT):
        return filename[len(_ROOT) :]
    return filename


_T0 = time.perf_counter()


def progress(message: str) -> None:
    """One progress line on stderr, stamped with the seconds since the suite started."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)
