"""Each thread's place in its session (IMP-23): branches, chains, and the sub-agent calls
that started sidechains, in the report and in every trace's provenance.

A file's threads (:mod:`~steploop.effects.importer.chain`) are each reported with where they
stand: a branch with the thread and line it forks from, a path with the chains it spans (how a
compaction's chain continues the one before it), a sidechain with the session and the
Task/Agent call that started it (:mod:`~steploop.effects.importer.links` finds it). A session's
own file lists, beside each of its sub-agent calls, the sidechain the call started and its
traces: sidechains of the same file (1.0.x) directly, those of sub-agent files through
:class:`Children`, which keeps them from the sub-agent files imported before (an import reads a
session's sub-agent files before the session's own file, :func:`source_order`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from steploop.effects.importer.chain import Thread
from steploop.effects.importer.links import ParentRef, agent_of_call, resolve_parent
from steploop.effects.importer.source import SourceFile

__all__ = [
    "Children",
    "ThreadReport",
    "children_of",
    "link_sidechains",
    "place_provenance",
    "source_order",
    "thread_report",
]


@attrs.define
class ThreadReport:
    """One thread of a file (IMP-23): its place in the session, its turns and traces."""

    name: str
    kind: str
    agent_id: str | None
    session_id: str | None
    lines: tuple[int, int]  # its first and last record (a branch's shared prefix included)
    own: int | None  # its first record of its own (a branch shares those before it)
    fork: dict[str, Any] | None  # a branch: {"thread": ..., "line": ...}
    chains: list[dict[str, object]]
    parent: dict[str, object] | None  # a sidechain: the call that started it (ParentRef)
    turns: list[int] = attrs.field(factory=list)
    traces: list[str] = attrs.field(factory=list)

    def to_json(self) -> dict[str, Any]:
        d = attrs.asdict(self, recurse=False)
        d["lines"] = list(self.lines)
        return d


def link_sidechains(src: SourceFile, ths: list[Thread]) -> dict[int, ParentRef]:
    """IMP-23: for each sidechain thread (by its index in ``ths``), the call that started it."""
    out: dict[int, ParentRef] = {}
    taken: set[str] = set()
    ix = src.index
    for k, th in enumerate(ths):
        if th.kind != "sidechain" or th.branch or not th.rows:
            continue
        root = th.rows[0]
        out[k] = resolve_parent(
            src.links,
            src.path,
            src.name,
            th.agent_id,
            th.session_id,
            root,
            ix.line[root],
            taken,
        )
    return out


def thread_report(src: SourceFile, th: Thread, parent: ParentRef | None) -> ThreadReport:
    ix = src.index
    own = ix.line[th.rows[th.own_from]] if th.own_from < len(th.rows) else None
    return ThreadReport(
        name=th.name,
        kind=th.kind,
        agent_id=th.agent_id,
        session_id=th.session_id,
        lines=(ix.line[th.rows[0]], ix.line[th.rows[-1]]) if th.rows else (0, 0),
        own=own,
        fork=None if th.fork is None else {"thread": th.fork.thread, "line": th.fork.line},
        chains=[c.to_json() for c in th.chains],
        parent=None if parent is None else parent.to_json(),
    )


def place_provenance(info: ThreadReport) -> dict[str, str | None]:
    """The thread's place as provenance keys of its traces (plain scalars, IMP-20)."""
    out: dict[str, str | None] = {}
    if info.fork is not None:
        fork = info.fork
        out["forks_from"] = (
            f"{fork['thread']} after line {fork['line']}"
            if fork["thread"] is not None
            else "none (a chain of its own)"
        )
    if info.parent is not None:
        p = info.parent
        for key, field in (
            ("parent_session", "session_id"),
            ("parent_tool_use_id", "tool_use_id"),
            ("parent_source", "file"),
            ("parent_link", "how"),
        ):
            value = p.get(field)
            out[key] = value if isinstance(value, str) else None
    return out


class Children:
    """Sidechain threads of sub-agent files, by the session they belong to, until the session's
    own file is imported (one small entry per sidechain, never its turns)."""

    def __init__(self) -> None:
        self.by_session: dict[str, list[dict[str, Any]]] = {}

    def add(self, file: str, info: ThreadReport) -> None:
        if info.session_id is None or info.parent is None:
            return
        self.by_session.setdefault(info.session_id, []).append(
            {
                "agent_id": info.agent_id,
                "tool_use_id": info.parent.get("tool_use_id"),
                "file": file,
                "thread": info.name,
                "traces": list(info.traces),
            }
        )

    def take(self, session_id: str | None) -> list[dict[str, Any]]:
        if session_id is None:
            return []
        return self.by_session.pop(session_id, [])


def children_of(
    src: SourceFile, infos: list[ThreadReport], children: Children | None
) -> list[dict[str, Any]]:
    """IMP-23: the sub-agent calls of the file's conversations, each with the sidechain it
    started (a thread of this file, or of a sub-agent file imported before) and its traces,
    then the sidechains of sub-agent files that no call of this file names."""
    agents = agent_of_call(src.links)
    here = {
        str(i.parent["tool_use_id"]): i
        for i in infos
        if i.parent is not None and i.parent.get("tool_use_id") and i.parent.get("file") is None
    }
    sessions = {i.session_id for i in infos if i.kind == "main" and i.session_id is not None}
    others: list[dict[str, Any]] = []
    if children is not None:
        for sid in sorted(sessions):
            others.extend(children.take(sid))
    by_call = {str(o["tool_use_id"]): o for o in others if o.get("tool_use_id")}
    by_agent = {str(o["agent_id"]): o for o in others if o.get("agent_id")}
    out: list[dict[str, Any]] = []
    used: set[int] = set()
    for call in src.links.tasks:
        entry: dict[str, Any] = {
            "tool_use_id": call.tool_use_id,
            "line": call.line,
            "tool": call.name,
            "agent_id": agents.get(call.tool_use_id),
            "file": None,
            "thread": None,
            "traces": [],
        }
        info = here.get(call.tool_use_id)
        other = by_call.get(call.tool_use_id) or (
            by_agent.get(entry["agent_id"]) if entry["agent_id"] else None
        )
        if info is not None:
            entry.update(agent_id=info.agent_id or entry["agent_id"], thread=info.name)
            entry["traces"] = list(info.traces)
        elif other is not None:
            used.add(id(other))
            entry.update(file=other["file"], thread=other["thread"], traces=other["traces"])
        out.append(entry)
    for other in others:
        if id(other) not in used:  # a compaction fork, a warm-up agent: no call of this file
            out.append({"tool_use_id": None, "line": None, "tool": None, **other})
    return out


def source_order(path: Path, root: Path) -> tuple[tuple[str, ...], int, str]:
    """The order an import reads ``path`` (a file found under ``root``): a session's sub-agent
    files (``<session>/subagents/agent-*.jsonl``, or ``agent-*.jsonl`` beside the session file)
    before the session files of their folder, so that a session's report can list them."""
    rel = path.relative_to(root) if path.is_relative_to(root) else path
    parts = rel.parts
    if len(parts) >= 3 and parts[-2] == "subagents":
        folder = parts[:-3]
        return (tuple(folder), 0, os.path.join(parts[-3], parts[-1]))
    folder = parts[:-1]
    return (tuple(folder), 0 if parts[-1].startswith("agent-") else 1, parts[-1])
