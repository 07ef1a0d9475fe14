"""Two traces side by side (VIEW-5): ``steploop diff --html OUT A B`` and ``steploop replay
--html OUT`` (a recording against its counterfactual run).

Both traces are read and replayed as for one (:func:`steploop.effects.viewer.data.trace_view`);
the page aligns them by round and names their first divergence (:func:`diff_traces`): the step,
the round on each side, what differs (the events, the effects, the request's messages and the
context layer that changed them, :func:`steploop.effects.trace.layers.compare_requests`), the
transitions of the rounds there and the terminals. A counterfactual replay's own report is shown
with it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from steploop.effects.trace import CounterfactualReport
from steploop.effects.trace.layers import compare_requests
from steploop.effects.trace_diff import TraceDiff, diff_traces
from steploop.effects.viewer.data import TraceView, trace_view
from steploop.effects.viewer.page import ROUND_COLOURS, page
from steploop.effects.viewer.show import save
from steploop.reducer.effects import CallModel

__all__ = ["compare_data", "round_of_step", "write_compare_html", "write_replay_html"]


def round_of_step(view: TraceView, step: int) -> int | None:
    """The index of the round that holds step ``step`` (None: the trace has no such step)."""
    steps = view.data["steps"]
    pos = next((k for k, s in enumerate(steps) if s.get("i") == step), None)
    if pos is None:
        return None
    rounds = view.data["rounds"]
    found = 0
    for k, r in enumerate(rounds):
        if r["s0"] <= pos:
            found = k
    return found


def _request_change(a: TraceView, b: TraceView, found: TraceDiff) -> tuple[str | None, list[str]]:
    """What differs between the model requests at the divergent step, and the layers."""
    if found.what != "effects" or found.step is None:
        return None, []
    fa, fb = a.effects_at.get(found.step, ()), b.effects_at.get(found.step, ())
    calls_a = [e for e in fa if isinstance(e, CallModel)]
    calls_b = [e for e in fb if isinstance(e, CallModel)]
    for ca, cb in zip(calls_a, calls_b, strict=False):
        change = compare_requests(ca, cb)
        if not change.same:
            return change.describe("A's", "B's"), list(change.layers)
    return None, []


def compare_data(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    *,
    diff: TraceDiff | None = None,
    report: CounterfactualReport | None = None,
    title: str | None = None,
    names: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The page's data for two traces and their first divergence.

    Raises:
        TraceError: a trace is malformed.
    """
    found = diff if diff is not None else diff_traces(a, b)
    keep = {found.step} if found.step is not None else set()
    va = trace_view(a, keep=keep, name=names[0] if names else None)
    vb = trace_view(b, keep=keep, name=names[1] if names else None)
    change, layers = _request_change(va, vb, found)
    ra = round_of_step(va, found.step) if found.step is not None else None
    rb = round_of_step(vb, found.step) if found.step is not None else None
    if found.what == "length" and found.step is not None:  # the shorter one: its last round
        ra = ra if ra is not None else len(va.data["rounds"]) - 1
        rb = rb if rb is not None else len(vb.data["rounds"]) - 1
    what = {
        "length": "one trace ends first",
        "events": "the events differ (the world answered otherwise)",
        "effects": "the same event, other effects (the machine asked for something else)",
        "digest": "the state digests differ",
        "terminal": "the terminals differ",
        "headers": "the headers differ",
        "identical": "no divergence",
    }[found.what]
    parts = [what if found.step is not None else found.lines[-1]]
    if change is not None:
        parts.append("the request: " + change)
    if ra is not None and rb is not None:
        ta, tb = va.data["rounds"][ra]["tr"], vb.data["rounds"][rb]["tr"]
        if ta != tb:
            parts.append(f"the round ends {ta or '(unfinished)'} in A, {tb or '(unfinished)'} in B")
    ea, eb = va.data["terminal"], vb.data["terminal"]
    if ea != eb:
        parts.append(f"terminals: A {ea or 'no end record'}, B {eb or 'no end record'}")
    return {
        "mode": "compare",
        "title": title or f"steploop diff: {va.data['name']} and {vb.data['name']}",
        "a": va.data,
        "b": vb.data,
        "divergence": {
            "what": found.what,
            "step": found.step,
            "round_a": ra,
            "round_b": rb,
            "summary": "; ".join(parts),
            "lines": list(found.lines),
            "layers": layers,
            "report": report.describe() if report is not None else None,
        },
        "colours": ROUND_COLOURS,
    }


def write_compare_html(
    a: str | os.PathLike[str],
    b: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    diff: TraceDiff | None = None,
) -> Path:
    """``steploop diff --html``: A and B side by side, written to ``out``.

    Raises:
        TraceError: a trace is malformed. CliError: ``out`` cannot be written.
    """
    data = compare_data(a, b, diff=diff)
    return save(page(data["title"], data), out)


def write_replay_html(
    recording: str | os.PathLike[str],
    new_run: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    report: CounterfactualReport,
    title: str,
) -> Path:
    """``steploop replay --html``: the recording (A) and its counterfactual run (B, the trace
    ``record=`` wrote) side by side, with the replay's report.

    Raises:
        TraceError: a trace is malformed. CliError: ``out`` cannot be written.
    """
    names = (f"{recording} (recorded)", "the counterfactual run")
    data = compare_data(recording, new_run, report=report, title=title, names=names)
    return save(page(title, data), out)
