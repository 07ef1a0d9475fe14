"""``steploop show TRACE --html OUT.html``: one trace in the step-through viewer."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from steploop.effects.viewer.data import trace_view
from steploop.effects.viewer.page import ROUND_COLOURS, diagram, page

__all__ = ["save", "trace_data", "write_html"]


def trace_data(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The page's data for one trace (a TraceError for a bad one)."""
    return {"mode": "trace", "trace": trace_view(path).data, "colours": ROUND_COLOURS}


def save(text: str, out: str | os.PathLike[str]) -> Path:
    """Write a page; a CliError (one line) when it cannot be written."""
    from steploop.effects.cli_common import CliError

    target = Path(out)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as e:
        raise CliError(f"{target}: cannot write: {e.strerror or e}") from None
    return target


def write_html(trace: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the page for ``trace`` to ``out``; returns its path.

    Raises:
        TraceError: the trace is malformed (one line naming file and line).
        CliError: ``out`` cannot be written.
    """
    data = trace_data(trace)
    name = data["trace"]["name"]
    machine = (
        '<h2 class="machine">The machine: the path this run took through its table</h2>'
        + diagram(data["trace"]["path"])
    )
    return save(page(f"steploop trace {name}", data, machine), out)
