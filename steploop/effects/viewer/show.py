"""``steploop show TRACE --html OUT.html``: one trace in the step-through viewer, and the pages
of its sub-agents beside it (VIEW-6).

A parent's Agent/Task call links to its child trace's page (:func:`steploop.effects.subagent.
child_traces` finds the children of a live run and of an import); each child's page is written
beside ``OUT`` as ``<OUT without .html>.agent-<id>.html`` (its grandchildren beside it the same
way, at most :data:`MAX_DEPTH` levels down, each trace once) and links back to its parent's.
A link's target is a file name made here from the agent id (letters, digits, ``-`` and ``_``
only), never a string of the trace.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from steploop.effects.subagent import AGENT_TOOL_NAMES, child_traces
from steploop.effects.viewer.data import trace_view
from steploop.effects.viewer.page import ROUND_COLOURS, diagram, page

__all__ = ["MAX_DEPTH", "save", "trace_data", "write_html", "write_pages"]

#: How many levels of sub-agents below the page's trace get pages of their own.
MAX_DEPTH = 8

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


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


def _render(data: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    name = data["trace"]["name"]
    machine = (
        '<h2 class="machine">The machine: the path this run took through its table</h2>'
        + diagram(data["trace"]["path"])
    )
    return save(page(f"steploop trace {name}", data, machine), out)


def write_html(trace: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path:
    """Write the page for ``trace`` to ``out`` (and its sub-agents' pages beside it, VIEW-6);
    returns the page's path.

    Raises:
        TraceError: the trace is malformed (one line naming file and line).
        CliError: ``out`` cannot be written.
    """
    return write_pages(trace, out)[0]


def write_pages(
    trace: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Write the page for ``trace`` to ``out`` and a page for each of its sub-agents' traces
    beside it, each linked from its parent's call and back (VIEW-6); returns the pages written,
    ``out`` first. A child trace that cannot be read is skipped and ``warn`` told (one line).

    Raises:
        TraceError: ``trace`` itself is malformed.
        CliError: a page cannot be written.
    """
    target = Path(out)
    stem = target.name[: -len(".html")] if target.name.endswith(".html") else target.name
    written: list[Path] = []
    seen: set[Path] = set()
    taken: set[str] = {target.name}

    def visit(path: Path, page_name: str, page_stem: str, up: dict[str, Any] | None, depth: int) -> None:
        seen.add(path.resolve())
        data = trace_data(path)
        view = data["trace"]
        view["parent"] = up
        kids: dict[str, list[dict[str, Any]]] = {}
        todo: list[tuple[Path, str, str, dict[str, Any]]] = []
        calls = any(t in AGENT_TOOL_NAMES for r in view["rounds"] for t in r["tools"])
        if calls and depth < MAX_DEPTH:  # a trace without Agent/Task calls is not read again
            links = child_traces(path)
            for w in links.warnings:
                if warn is not None:
                    warn(w)
            for tid, children in links.children.items():
                for child in children:
                    if child.path.resolve() in seen:
                        continue  # a cycle, or a trace already given a page
                    key = _UNSAFE.sub("_", child.agent_id or child.path.stem).strip("_") or "child"
                    name, n = f"{page_stem}.agent-{key}", 2
                    while f"{name}.html" in taken:
                        name, n = f"{page_stem}.agent-{key}-{n}", n + 1
                    taken.add(f"{name}.html")
                    seen.add(child.path.resolve())
                    kids.setdefault(tid, []).append(
                        {
                            "href": f"{name}.html",
                            "name": os.path.relpath(child.path, path.parent),
                            "steps": child.steps,
                            "terminal": child.terminal,
                            "agent_type": child.agent_type,
                        }
                    )
                    back = {"href": page_name, "name": os.path.relpath(path, child.path.parent), "call": tid}
                    todo.append((child.path, f"{name}.html", name, back))
        view["children"] = kids
        written.append(_render(data, target.parent / page_name))
        for child_path, child_page, child_stem, back in todo:
            visit(child_path, child_page, child_stem, back, depth + 1)

    visit(Path(trace), target.name, stem, None, 0)
    return written
