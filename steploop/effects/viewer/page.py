"""The page itself: one HTML file with its style, its script and its data inline (VIEW-1, VIEW-2).

The Content-Security-Policy is ``default-src 'none'``: no fetch of any kind, no frame, no form,
no base URL; the one ``<style>`` and the one executable ``<script>`` are allowed by their SHA-256
hashes (no ``'unsafe-inline'``). The data is one ``<script type="application/json">`` block, which
a browser never runs: its JSON escapes ``<``, ``>`` and ``&``, so no string of the trace can end
it. The page's script inserts every string as a text node.

The machine's diagram (VIEW-3) is drawn here, as inline SVG, from the static table
(:func:`steploop.reducer.graph.static_edges`): no state exploration.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import math
from collections import Counter
from importlib import resources
from typing import Any

__all__ = ["ROUND_COLOURS", "diagram", "embed", "page"]

#: Bar colours by how the round ended.
ROUND_COLOURS = {
    "continue": "#1f77b4",
    "completed": "#2ca02c",
    "terminal": "#d62728",
    "open": "#ff7f0e",
}

# Where each phase sits in the diagram (a 1000 x 540 canvas).
_NODES: dict[str, tuple[int, int]] = {
    "[*]": (80, 90),
    "streaming": (330, 90),
    "waiting_retry": (620, 40),
    "reactive_compacting": (620, 160),
    "compacting": (330, 300),
    "running_tools": (620, 300),
    "draining": (880, 300),
    "stop_hooks": (80, 300),
    "done": (500, 470),
    "[end]": (800, 470),
}


_SCRIPTS = ("viewer.js", "render.js", "app.js")  # one inline script, in this order


@functools.cache
def _asset(name: str) -> str:
    return resources.files("steploop.effects.viewer").joinpath(name).read_text(encoding="utf-8")


def _hash(text: str) -> str:
    return (
        "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"
    )


def embed(data: Any) -> str:
    """``data`` as JSON that can sit inside ``<script type="application/json">``: ASCII only
    (a lone surrogate from a trace stays an escape), and no ``<``, ``>`` or ``&``."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def page(title: str, data: Any, body: str = "") -> str:
    """The whole HTML document: ``title`` (escaped here), ``data`` embedded, ``body``: markup
    made here (already escaped) shown after the viewer."""
    css = _asset("viewer.css")
    js = "\n".join(_asset(name) for name in _SCRIPTS)
    csp = f"default-src 'none'; style-src {_hash(css)}; script-src {_hash(js)}; img-src 'none'"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="referrer" content="no-referrer">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(title)}</title>
<style>{css}</style></head>
<body>
<div id="app" aria-live="polite"><p class="loading">loading the trace…</p></div>
{body}
<script type="application/json" id="trace-data">{embed(data)}</script>
<script>{js}</script>
</body></html>
"""


@functools.cache
def _machine_edges() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(from, to, labels) for every phase edge the machine's tables allow (``steploop graph
    --static``): transitions as labels, else the events; a phase staying itself without a
    transition is not drawn."""
    from steploop.reducer.graph import static_edges

    grouped: dict[tuple[str, str], tuple[set[str], set[str]]] = {}
    for src, event, dst, tag in static_edges():
        if src == dst and not tag:
            continue
        events, tags = grouped.setdefault((src, dst), (set(), set()))
        (tags if tag else events).add(tag or event)
    grouped.setdefault(("done", "[end]"), (set(), set()))
    return tuple(
        (a, b, tuple(sorted(tags or events))) for (a, b), (events, tags) in sorted(grouped.items())
    )


def diagram(path: list[list[str]]) -> str:
    """The machine as inline SVG; the edges this run took are highlighted with their count."""
    taken: Counter[tuple[str, str]] = Counter((a, b) for a, b, _ in path)
    tags: dict[tuple[str, str], Counter[str]] = {}
    for a, b, tag in path:
        if tag:
            tags.setdefault((a, b), Counter())[tag] += 1
    visited = {p for a, b, _ in path for p in (a, b)}
    parts = [
        '<svg id="machine" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 540" role="img" '
        'aria-label="the machine: phases and the transitions its table allows, this run '
        'highlighted">',
        "<defs>"
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#999"/></marker>'
        '<marker id="arrow-taken" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#e45756"/></marker>'
        "</defs>",
    ]
    for a, b, labels in _machine_edges():
        if a not in _NODES or b not in _NODES:
            continue
        n = taken.get((a, b), 0)
        title = f"{a} → {b}: {', '.join(labels)}" if labels else f"{a} → {b}"
        if n:
            detail = ", ".join(f"{t} ×{k}" for t, k in sorted(tags.get((a, b), Counter()).items()))
            title += f" — taken {n}×" + (f" ({detail})" if detail else "")
        d, (lx, ly) = _edge_path(a, b)
        parts.append(
            f'<path class="{"edge taken" if n else "edge"}" d="{d}" '
            f'marker-end="url(#{"arrow-taken" if n else "arrow"})">'
            f"<title>{html.escape(title)}</title></path>"
        )
        if n:
            parts.append(f'<text class="count" x="{lx:.0f}" y="{ly:.0f}">{n}×</text>')
    for name, (x, y) in _NODES.items():
        label = {"[*]": "start", "[end]": "end"}.get(name, name)
        w = max(70, 9 * len(label) + 24)
        parts.append(
            f'<g class="{"node visited" if name in visited else "node"}">'
            f'<rect x="{x - w / 2:.0f}" y="{y - 18}" width="{w}" height="36" rx="18"/>'
            f'<text x="{x}" y="{y + 5}">{html.escape(label)}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _edge_path(a: str, b: str) -> tuple[str, tuple[float, float]]:
    (x1, y1), (x2, y2) = _NODES[a], _NODES[b]
    if a == b:  # a self-loop above the node
        d = f"M{x1 - 20},{y1 - 18} C{x1 - 50},{y1 - 75} {x1 + 50},{y1 - 75} {x1 + 20},{y1 - 18}"
        return d, (x1, y1 - 62)
    dx, dy = x2 - x1, y2 - y1
    dist = math.hypot(dx, dy) or 1.0
    ux, uy = dx / dist, dy / dist
    sx, sy = x1 + ux * 40, y1 + uy * 22
    ex, ey = x2 - ux * 40, y2 - uy * 22
    # bend every edge a little to the left of its direction, so A→B and B→A do not overlap
    mx, my = (sx + ex) / 2 - uy * 28, (sy + ey) / 2 + ux * 28
    return f"M{sx:.0f},{sy:.0f} Q{mx:.0f},{my:.0f} {ex:.0f},{ey:.0f}", (mx, my)
