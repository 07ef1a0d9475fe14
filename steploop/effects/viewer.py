"""``steploop show --html OUT.html``: a trace as one self-contained HTML page.

The page has no external resource of any kind (inline CSS, inline JavaScript, inline SVG; no
fonts, images or scripts fetched): it opens from a file, offline, and can be attached to a bug
report. It shows

* the timeline: one bar per round, its height the prompt's size at the round's last model
  response against the context window, with the auto-compact threshold and the blocking limit
  drawn across; the bar's colour says how the round ended (a Continue, ``completed``, another
  Terminal); marks under it count the tool calls; hovering a bar names its transition, tools
  and tokens (the words of ``steploop show`` and ``run``: "tokens in" counts every prompt
  token, cache reads and writes included);
* the machine's diagram: every phase and every phase-to-phase edge the explorer observes
  (the same edges as ``steploop graph``), with the edges this run took highlighted and counted.

The data is embedded as JSON and drawn by the page's script; the diagram is drawn here.
"""

from __future__ import annotations

import functools
import html
import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Any

from steploop.effects.trace import ResumeRecord, StepRecord, TraceReader
from steploop.reducer.effects import CallModel, Compact, StartTool
from steploop.reducer.events import ModelResponseEnded
from steploop.reducer.transitions import CONTINUE_TYPES

__all__ = ["ROUND_COLOURS", "trace_data", "write_html"]

#: Bar colours by how the round ended (the browser test looks for these).
ROUND_COLOURS = {"continue": "#1f77b4", "completed": "#2ca02c", "terminal": "#d62728", "open": "#ff7f0e"}

_CONTINUE_TAGS = frozenset(c.TAG for c in CONTINUE_TYPES)

# Where each phase sits in the diagram (a 1000 x 560 canvas).
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


def trace_data(path: str | os.PathLike[str]) -> dict[str, Any]:
    """What the page shows, read from the trace (a TraceError for a bad one)."""
    reader = TraceReader(path)
    rounds: list[dict[str, Any]] = [_round(1)]
    phases: list[tuple[str, str, str]] = []  # (from phase, to phase, transition tag or "")
    prev_phase = "[*]"
    steps = resumes = 0
    for rec in reader:
        if isinstance(rec, ResumeRecord):
            resumes += 1
            continue
        if not isinstance(rec, StepRecord):
            continue
        steps += 1
        row = rounds[-1]
        if isinstance(rec.event, ModelResponseEnded):
            u = rec.event.usage
            size = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            row["tokens_in"] += size
            row["tokens_out"] += u.output_tokens
            row["context"] = size
        t = rec.transition
        tag = t.TAG if t is not None else ""
        if rec.phase != prev_phase or tag:
            phases.append((prev_phase, rec.phase, tag))
        prev_phase = rec.phase
        if t is not None:
            row["transition"] = tag
            if tag in _CONTINUE_TAGS:
                rounds.append(_round(row["round"] + 1))
        target = rounds[-1]
        for e in rec.effects:
            if isinstance(e, CallModel):
                target["calls"] += 1
            elif isinstance(e, StartTool):
                target["tools"][e.name] = target["tools"].get(e.name, 0) + 1
            elif isinstance(e, Compact):
                target["compactions"] += 1
    header = reader.header
    assert header is not None
    end = reader.end
    if end is not None:
        phases.append(("done", "[end]", ""))
    cfg = header.config
    prompt = header.request.prompt
    for r in rounds:
        tag = r["transition"]
        r["kind"] = (
            "open" if not tag else "continue" if tag in _CONTINUE_TAGS else "completed" if tag == "completed" else "terminal"
        )
    return {
        "name": reader.name,
        "prompt": prompt if isinstance(prompt, str) else "(blocks)",
        "profile": cfg.profile_name,
        "model": cfg.model,
        "created_at": str(header.provenance.get("created_at", "")),
        "context_window": cfg.context_window,
        "autocompact_threshold": cfg.autocompact_threshold if cfg.auto_compact_enabled else None,
        "blocking_limit": cfg.blocking_limit,
        "steps": steps,
        "resumes": resumes,
        "terminal": end.terminal.TAG if end is not None else None,
        "rounds": rounds,
        "path": [list(p) for p in phases],
        "colours": ROUND_COLOURS,
    }


def _round(n: int) -> dict[str, Any]:
    return {"round": n, "transition": "", "calls": 0, "tools": {}, "tokens_in": 0, "tokens_out": 0, "context": 0, "compactions": 0}


@functools.cache
def _machine_edges() -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """(from, to, labels) for every phase edge the explorer observes (as ``steploop graph``)."""
    from steploop.reducer.graph import phase_edges

    grouped: dict[tuple[str, str], set[str]] = {}
    for src, event, dst, tag in phase_edges():
        grouped.setdefault((src, dst), set()).add(tag or event)
    grouped.setdefault(("done", "[end]"), set())
    return tuple((a, b, tuple(sorted(labels))) for (a, b), labels in sorted(grouped.items()))


def _diagram(path: list[list[str]]) -> str:
    """The machine as inline SVG; the edges this run took are highlighted with their count."""
    taken: Counter[tuple[str, str]] = Counter((a, b) for a, b, _ in path)
    tags: dict[tuple[str, str], Counter[str]] = {}
    for a, b, tag in path:
        if tag:
            tags.setdefault((a, b), Counter())[tag] += 1
    visited = {p for a, b, _ in path for p in (a, b)}
    parts = [
        '<svg id="machine" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 1000 540" role="img" '
        'aria-label="the machine: phases and transitions, this run highlighted">',
        "<defs>"
        '<marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#999"/></marker>'
        '<marker id="arrow-taken" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#e45756"/></marker>'
        "</defs>",
    ]
    edges = _machine_edges()
    for a, b, labels in edges:
        if a not in _NODES or b not in _NODES:
            continue
        n = taken.get((a, b), 0)
        cls = "edge taken" if n else "edge"
        title = f"{a} → {b}: {', '.join(labels)}" if labels else f"{a} → {b}"
        if n:
            detail = ", ".join(f"{t} ×{k}" for t, k in sorted(tags.get((a, b), Counter()).items()))
            title += f" — taken {n}×" + (f" ({detail})" if detail else "")
        d, (lx, ly) = _edge_path(a, b)
        marker = "arrow-taken" if n else "arrow"
        parts.append(
            f'<path class="{cls}" d="{d}" marker-end="url(#{marker})"><title>{html.escape(title)}</title></path>'
        )
        if n:
            parts.append(f'<text class="count" x="{lx:.0f}" y="{ly:.0f}">{n}×</text>')
    for name, (x, y) in _NODES.items():
        cls = "node visited" if name in visited else "node"
        label = {"[*]": "start", "[end]": "end"}.get(name, name)
        w = max(70, 9 * len(label) + 24)
        parts.append(
            f'<g class="{cls}"><rect x="{x - w / 2:.0f}" y="{y - 18}" width="{w}" height="36" rx="18"/>'
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


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;background:#fff}
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:24px 0 8px}
.meta{color:#555;margin:0 0 2px}
.scroll{overflow-x:auto;max-width:100%}
#timeline{border:1px solid #ddd;background:#fafafa;display:block}
#timeline .limit{stroke-width:1.5;stroke-dasharray:6 4}
#timeline .limit.compact{stroke:#ff7f0e}#timeline .limit.blocking{stroke:#d62728}#timeline .limit.window{stroke:#777}
#timeline text{font-size:11px;fill:#555}
#timeline .tool{fill:#8c564b}
#legend span{display:inline-block;margin-right:14px}
#legend i{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
#details{min-height:1.4em;color:#333;margin-top:6px;font-family:ui-monospace,Menlo,monospace;font-size:12px}
#machine{max-width:1000px;border:1px solid #ddd;background:#fff}
#machine .edge{fill:none;stroke:#bbb;stroke-width:1.2}
#machine .edge.taken{stroke:#e45756;stroke-width:3}
#machine .node rect{fill:#f2f2f2;stroke:#999}
#machine .node.visited rect{fill:#fde2e1;stroke:#e45756;stroke-width:2}
#machine text{font-size:13px;text-anchor:middle;fill:#222}
#machine .count{font-size:11px;fill:#e45756;font-weight:bold}
table{border-collapse:collapse;font-size:12px}td,th{padding:2px 8px;text-align:right}td:nth-child(2),th:nth-child(2){text-align:left}
"""

_JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("trace-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  function el(name, attrs, parent) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) { e.setAttribute(k, attrs[k]); }
    if (parent) { parent.appendChild(e); }
    return e;
  }
  var rounds = data.rounds, n = rounds.length;
  var left = 116, right = 16, top = 16, height = 240, bottom = 44;
  var bar = n <= 60 ? 18 : n <= 300 ? 4 : 1, gap = n <= 60 ? 8 : n <= 300 ? 2 : 0;
  var width = Math.max(640, left + right + n * (bar + gap));
  var svg = document.getElementById("timeline");
  svg.setAttribute("width", width);
  svg.setAttribute("height", top + height + bottom);
  svg.setAttribute("viewBox", "0 0 " + width + " " + (top + height + bottom));
  var peak = 0;
  rounds.forEach(function (r) { peak = Math.max(peak, r.context); });
  var scaleMax = Math.max(data.context_window || 1, peak, 1);
  function y(tokens) { return top + height - height * tokens / scaleMax; }
  el("line", {x1: left, x2: width - right, y1: top + height, y2: top + height, stroke: "#999"}, svg);
  [["window", data.context_window, "context window"],
   ["compact", data.autocompact_threshold, "auto-compact"],
   ["blocking", data.blocking_limit, "blocking limit"]].forEach(function (l) {
    if (l[1] === null || l[1] === undefined) { return; }
    el("line", {"class": "limit " + l[0], x1: left, x2: width - right, y1: y(l[1]), y2: y(l[1])}, svg);
    var t = el("text", {x: 4, y: y(l[1]) + 4}, svg);
    t.textContent = l[2];
  });
  var details = document.getElementById("details");
  rounds.forEach(function (r, i) {
    var x = left + i * (bar + gap);
    var h = Math.max(6, top + height - y(r.context));
    var rect = el("rect", {"class": "round " + r.kind, x: x, y: top + height - h, width: bar, height: h,
                           fill: data.colours[r.kind], "data-round": r.round}, svg);
    var tools = Object.keys(r.tools).map(function (k) { return k + " ×" + r.tools[k]; }).join(", ");
    var text = "round " + r.round + ": " + (r.transition || "(unfinished)") + " · prompt " +
      r.context.toLocaleString() + " tokens · tokens in/out " + r.tokens_in.toLocaleString() + "/" +
      r.tokens_out.toLocaleString() + " · model calls " + r.calls + " · tools " + (tools || "none") +
      (r.compactions ? " · compactions " + r.compactions : "");
    el("title", {}, rect).textContent = text;
    rect.addEventListener("mouseenter", function () { details.textContent = text; });
    var count = 0;
    Object.keys(r.tools).forEach(function (k) { count += r.tools[k]; });
    for (var k = 0; k < Math.min(count, 6); k++) {
      el("rect", {"class": "tool", x: x, y: top + height + 4 + k * 4, width: Math.max(bar, 1), height: 3}, svg);
    }
    if (n <= 60) {
      el("text", {x: x + bar / 2, y: top + height + 40, "text-anchor": "middle"}, svg).textContent = String(r.round);
    }
  });
  var legend = document.getElementById("legend");
  [["continue", "a Continue (the turn goes on)"], ["completed", "completed"],
   ["terminal", "another Terminal"], ["open", "unfinished (cut off)"]].forEach(function (p) {
    var s = document.createElement("span");
    var i = document.createElement("i");
    i.style.background = data.colours[p[0]];
    s.appendChild(i);
    s.appendChild(document.createTextNode(p[1]));
    legend.appendChild(s);
  });
  document.getElementById("summary").textContent = n + " round(s), " + data.steps + " steps; " +
    (data.terminal ? "terminal " + data.terminal : "no end record (cut off)") +
    (data.resumes ? "; resumed " + data.resumes + "×" : "");
  document.body.setAttribute("data-rounds", String(n));
  console.log("steploop viewer: drew " + n + " rounds");
})();
"""


def write_html(trace: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the page for ``trace`` to ``out``; returns its path.

    Raises:
        TraceError: the trace is malformed (one line naming file and line).
        CliError: ``out`` cannot be written.
    """
    from steploop.effects.cli_common import CliError

    data = trace_data(trace)
    payload = json.dumps(data, ensure_ascii=True).replace("</", "<\\/")
    title = f"steploop trace {data['name']}"
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'">
<title>{html.escape(title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="meta">profile {html.escape(str(data['profile']))} · model {html.escape(str(data['model']))} · recorded {html.escape(data['created_at'])}</p>
<p class="meta">prompt: {html.escape(str(data['prompt'])[:300])}</p>
<p class="meta" id="summary"></p>
<h2>Timeline: the prompt's size per round against the context window</h2>
<div class="scroll"><svg id="timeline" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="one bar per round"></svg></div>
<div id="legend"></div>
<div id="details">hover a bar for its round</div>
<h2>The machine: the path this run took</h2>
{_diagram(data['path'])}
<script type="application/json" id="trace-data">{payload}</script>
<script>{_JS}</script>
</body></html>
"""
    target = Path(out)
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as e:
        raise CliError(f"{target}: cannot write: {e.strerror or e}") from None
    return target
