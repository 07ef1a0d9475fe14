"""``steploop show TRACE``: a trace's timeline, one row per round, or its totals (``--summary``),
or one self-contained HTML page (``--html``, :mod:`steploop.effects.viewer`).

A round ends with the transition a step records (a Continue starts the next one), so ``show``
counts rounds as the live display of ``run`` does; "tokens in" counts every prompt token,
cache reads and writes included, as ``run``'s result line and the viewer do. Every text from
the trace is printed with its secrets hidden and its control characters escaped.

Under the rows, each Agent/Task call with a child trace names it (E-AGENT-6): its path from the
parent's folder, its steps and its terminal, by round; a child that cannot be read, or a live
call whose child trace is missing, is a warning on stderr (``show`` still shows the parent).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TextIO

import attrs

from steploop.effects.cli_common import console_for, for_terminal, short
from steploop.effects.redaction import Redactor
from steploop.effects.subagent import AGENT_TOOL_NAMES, SubagentLinks, child_traces
from steploop.effects.trace import EndRecord, ResumeRecord, StepRecord, TraceHeader, TraceReader
from steploop.reducer.canonical import to_data
from steploop.reducer.effects import CallModel, Compact, Effect, StartTool
from steploop.reducer.events import ModelResponseEnded
from steploop.reducer.transitions import CONTINUE_TYPES

__all__ = ["SHOW_ALL_UP_TO", "SHOW_ENDS", "cmd_show", "timeline"]


@attrs.define
class _Row:
    round: int
    transition: str = "(unfinished)"
    tag: str = "(unfinished)"
    calls: int = 0
    tools: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    compactions: int = 0
    tool_names: Counter[str] = attrs.field(factory=Counter)
    context: int = 0  # the prompt's size at the round's last response (input + cache tokens)
    agent_calls: list[tuple[str, str]] = attrs.field(factory=list)  # (tool_use id, tool name)


def _count_effects(row: _Row, effects: Sequence[Effect]) -> None:
    for e in effects:
        if isinstance(e, CallModel):
            row.calls += 1
        elif isinstance(e, StartTool):
            row.tools += 1
            row.tool_names[e.name] += 1
            if e.name in AGENT_TOOL_NAMES:
                row.agent_calls.append((e.tool_use_id, e.name))
        elif isinstance(e, Compact):
            row.compactions += 1


def _payload(t: Any) -> str:
    data = {k: v for k, v in to_data(t).items() if k != "type"}
    if not data:
        return ""
    if "error" in data and isinstance(data["error"], dict):
        data["error"] = data["error"].get("message", "")
    return " (" + ", ".join(f"{k}={v}" for k, v in data.items()) + ")"


def timeline(reader: TraceReader) -> tuple[TraceHeader, list[_Row], EndRecord | None, int, int]:
    """Rounds of a trace: a step that records a Continue ends its round with its event, and
    its effects (the next round's model call) count for the next round.

    Returns:
        The header, the rows, the end record (None when cut off), steps and resumes.
    """
    rows = [_Row(round=1)]
    steps = resumes = 0
    for rec in reader:
        if isinstance(rec, ResumeRecord):
            resumes += 1
        if not isinstance(rec, StepRecord):
            continue
        steps += 1
        row = rows[-1]
        if isinstance(rec.event, ModelResponseEnded):
            u = rec.event.usage
            size = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            row.tokens_in += size
            row.tokens_out += u.output_tokens
            row.context = size
        t = rec.transition
        if t is not None:
            row.transition = t.TAG + _payload(t)
            row.tag = t.TAG
            if isinstance(t, CONTINUE_TYPES):
                rows.append(_Row(round=row.round + 1))
        _count_effects(rows[-1], rec.effects)
    assert reader.header is not None
    return reader.header, rows, reader.end, steps, resumes


#: ``show`` prints every round up to this many; beyond, the first and last few (``--all``).
SHOW_ALL_UP_TO = 40
SHOW_ENDS = 10


def _status_style(tag: str) -> str:
    if tag == "completed":
        return "green"
    if tag in ("(unfinished)",):
        return "yellow"
    if tag in {c.TAG for c in CONTINUE_TYPES}:
        return ""
    return "red"


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    from rich.table import Table
    from rich.text import Text

    if args.html:
        from steploop.effects.viewer import write_pages

        paths = write_pages(args.trace, args.html, warn=_warn)
        print(f"wrote {paths[0]} (one self-contained file: open it in a browser)", file=out)
        if len(paths) > 1:
            names = ", ".join(for_terminal(p.name) for p in paths[1:])
            print(f"  and its sub-agents' pages beside it, linked from it: {names}", file=out)
        return 0
    reader = TraceReader(args.trace)
    header, rows, end, steps, resumes = timeline(reader)
    console = console_for(out)
    cfg, prov = header.config, header.provenance
    prompt = header.request.prompt
    text = prompt if isinstance(prompt, str) else "(blocks)"
    redactor = Redactor()

    def safe(text: str) -> str:  # every text below comes from the trace
        return for_terminal(text, redactor)

    console.print(Text(safe(f"trace {reader.name}"), style="bold"))
    console.print(
        Text(
            safe(
                f"  profile {cfg.profile_name} · model {cfg.model} · recorded "
                f"{prov.get('created_at', '?')} with {prov.get('client') or 'no model client'}"
            )
        )
    )
    console.print(Text(safe(f"  prompt: {short(redactor.text(text), 90)}")))  # hidden, then cut
    if not args.summary:
        table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
        for name, justify in (
            ("round", "right"),
            ("transition", "left"),
            ("model calls", "right"),
            ("tools run", "right"),
            ("tokens in/out", "right"),
            ("compactions", "right"),
        ):
            table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        shown: list[_Row | None] = list(rows)
        hidden = 0
        if len(rows) > SHOW_ALL_UP_TO and not args.all:
            shown = [*rows[:SHOW_ENDS], None, *rows[-SHOW_ENDS:]]
            hidden = len(rows) - 2 * SHOW_ENDS
        for r in shown:
            if r is None:  # the gap: one "…" a column, so that no column widens for it
                table.add_row(*(Text("…", style="dim") for _ in range(6)))
                continue
            table.add_row(
                str(r.round),
                Text(safe(r.transition), style=_status_style(r.tag)),
                str(r.calls),
                str(r.tools),
                f"{r.tokens_in:,}/{r.tokens_out:,}",
                str(r.compactions),
            )
        console.print(table)
        if hidden:
            console.print(
                Text(
                    f"… {hidden:,} rounds not shown (--all shows them, --summary totals them)",
                    style="dim",
                )
            )
    if args.summary or len(rows) > SHOW_ALL_UP_TO:
        _print_summary(console, rows)
    if any(r.agent_calls for r in rows):
        links = child_traces(args.trace)
        for w in links.warnings:
            _warn(w)
        _print_children(console, rows, links, os.path.dirname(os.fspath(args.trace)), safe)
    ended = f"terminal {end.terminal.TAG}" if end is not None else "no end record (cut off)"
    resumed = f"; resumed {resumes}x" if resumes else ""
    line = Text(f"{steps} steps, {len(rows)} round(s); ")
    line.append(ended, style=_status_style(end.terminal.TAG if end is not None else "(unfinished)"))
    line.append(resumed)
    console.print(line)
    return 0


def _warn(text: str) -> None:
    print(f"steploop: warning: {for_terminal(text)}", file=sys.stderr)


def _print_children(
    console: Any,
    rows: Sequence[_Row],
    links: SubagentLinks,
    folder: str,
    safe: Callable[[str], str],
) -> None:
    """Each Agent/Task call with a child trace, by round: the child's path from the parent's
    folder, its steps and its terminal (E-AGENT-6)."""
    from rich.text import Text

    if not links.children:
        return
    console.print(Text("sub-agents (the Agent/Task calls with a trace of their own):"))
    for r in rows:
        for tid, name in r.agent_calls:
            for child in links.children.get(tid, ()):
                rel = os.path.relpath(child.path, folder or ".")
                ended = f"terminal {child.terminal}" if child.terminal else "no end record (cut off)"
                line = Text(safe(f"  round {r.round} · {name} {tid} → {rel}: {child.steps} steps, "))
                line.append(safe(ended), style=_status_style(child.terminal or "(unfinished)"))
                console.print(line)


def _print_summary(console: Any, rows: Sequence[_Row]) -> None:
    """Totals per round kind (the transition that ended it), tools by name, tokens."""
    from rich.table import Table
    from rich.text import Text

    kinds: dict[str, list[_Row]] = {}
    for r in rows:
        kinds.setdefault(r.tag, []).append(r)
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0), title=None)
    for name, justify in (
        ("rounds ended by", "left"),
        ("rounds", "right"),
        ("model calls", "right"),
        ("tools run", "right"),
        ("tokens in/out", "right"),
        ("compactions", "right"),
    ):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for tag, rs in sorted(kinds.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        table.add_row(
            Text(tag, style=_status_style(tag)),
            f"{len(rs):,}",
            f"{sum(r.calls for r in rs):,}",
            f"{sum(r.tools for r in rs):,}",
            f"{sum(r.tokens_in for r in rs):,}/{sum(r.tokens_out for r in rs):,}",
            f"{sum(r.compactions for r in rs):,}",
        )
    table.add_row(
        Text("total", style="bold"),
        f"{len(rows):,}",
        f"{sum(r.calls for r in rows):,}",
        f"{sum(r.tools for r in rows):,}",
        f"{sum(r.tokens_in for r in rows):,}/{sum(r.tokens_out for r in rows):,}",
        f"{sum(r.compactions for r in rows):,}",
    )
    console.print(table)
    tools: Counter[str] = Counter()
    for r in rows:
        tools.update(r.tool_names)
    shown = ", ".join(f"{name} {n:,}" for name, n in sorted(tools.items(), key=lambda kv: (-kv[1], kv[0])))
    console.print(Text(for_terminal(f"tools by name: {shown or 'none'}")))
    peak = max((r.context for r in rows), default=0)
    console.print(Text(f"largest prompt: {peak:,} tokens"))
