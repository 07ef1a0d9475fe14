"""``steploop show --html``, ``diff --html`` and ``replay --html``: a trace, or two side by side,
as one self-contained HTML page (specs/rules.md VIEW-1 .. VIEW-6; docs/viewer.md), and the pages
of a trace's sub-agents beside it, linked from its Agent/Task calls.

The page steps through a run: the rounds, and for the chosen one the request as the model saw it,
each step's event and effects, the transition and the rules behind it, the tokens each context
layer removed, retries, waits and times; keys, deep links (``#round=72``) and a search over text
and tool names. A comparison aligns two runs by round and names their first divergence. Nothing
is fetched: the page opens from a file, offline, and can be attached to a bug report.

- :mod:`steploop.effects.viewer.data`: what the page shows, read and replayed from a trace;
- :mod:`steploop.effects.viewer.compare`: two traces, and their first divergence;
- :mod:`steploop.effects.viewer.page`: the HTML, its Content-Security-Policy and the diagram;
- ``viewer.js``, ``render.js``, ``app.js``, ``viewer.css``: the page's script and style.
"""

from __future__ import annotations

from steploop.effects.viewer.compare import (
    compare_data,
    write_compare_html,
    write_replay_html,
)
from steploop.effects.viewer.data import TraceView, trace_view
from steploop.effects.viewer.page import ROUND_COLOURS
from steploop.effects.viewer.show import trace_data, write_html, write_pages

__all__ = [
    "ROUND_COLOURS",
    "TraceView",
    "compare_data",
    "trace_data",
    "trace_view",
    "write_compare_html",
    "write_html",
    "write_pages",
    "write_replay_html",
]
