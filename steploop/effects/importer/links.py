"""Which Task/Agent call started a sidechain (specs/import.md, IMP-23).

A sub-agent's run is a sidechain: 1.0.x writes its records into the session's own file
(``isSidechain`` true, no ``agentId``), 2.x into ``<session>/subagents/agent-<id>.jsonl`` (or
``agent-<id>.jsonl`` beside the session file, 2.0.x), every record carrying ``agentId`` and the
parent's ``sessionId``. What links a sidechain to the call that started it, by what the files
offer:

* the Task/Agent tool result's ``toolUseResult.agentId`` (2.0.x and later) names the agent the
  ``tool_use_id`` of that result started;
* a raw log's ``agent_progress`` progress records (2.1.x) carry ``data.agentId`` and, as
  ``parentToolUseID``, the call's id;
* 1.0.x writes neither: the sidechain's first record is a user record whose text is the call's
  ``input.prompt``, written after the call.

The first pass (:mod:`~steploop.effects.importer.source`) notes each of these with
:meth:`Links.note` as it reads the records; :func:`scan_links` reads them from another file (the
parent session of a sub-agent's file), one pass over its lines, parsing only those that name an
agent.
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import attrs

from steploop.effects.importer.keys import key

__all__ = [
    "AgentLink",
    "Links",
    "ParentLinks",
    "ParentRef",
    "TaskCall",
    "agent_of_call",
    "match_prompt",
    "parent_file",
    "resolve_parent",
    "scan_links",
]

#: Tools whose call starts a sub-agent (Task, renamed Agent in 2.1.x).
AGENT_TOOLS = frozenset({"Task", "Agent"})


@attrs.define(slots=True)
class TaskCall:
    """A Task/Agent tool call: its id, line, and a key of its prompt (0: none)."""

    tool_use_id: str
    line: int
    prompt: int
    name: str


@attrs.define(slots=True)
class AgentLink:
    """An agent id and the call that started it, with what showed it."""

    agent_id: str
    tool_use_id: str
    line: int
    how: str


def _text_key(content: Any) -> int:
    """A key of a user record's text (a string, or its text blocks joined)."""
    if isinstance(content, str):
        return key(content) if content else 0
    if isinstance(content, list):
        texts = [
            b["text"]
            for b in content
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        ]
        return key("\n".join(texts)) if texts else 0
    return 0


@attrs.define
class Links:
    """What one file says about sub-agent calls (the first pass fills it)."""

    tasks: list[TaskCall] = attrs.field(factory=list)
    agents: dict[str, AgentLink] = attrs.field(factory=dict)
    #: index rows of sidechain records without a parent (a sidechain's first record), and a
    #: key of its text
    roots: dict[int, int] = attrs.field(factory=dict)

    def note(self, obj: dict[str, Any], kind: str, line: int, row: int | None) -> None:
        """Read what ``obj`` (a record of type ``kind`` at ``line``; ``row`` its index row, or
        None) says about sub-agents."""
        if kind == "assistant":
            msg = obj.get("message")
            content = msg.get("content") if isinstance(msg, dict) else None
            if isinstance(content, list):
                for b in content:
                    if (
                        isinstance(b, dict)
                        and b.get("type") == "tool_use"
                        and isinstance(b.get("name"), str)
                        and b["name"] in AGENT_TOOLS
                        and isinstance(b.get("id"), str)
                    ):
                        inp = b.get("input")
                        prompt = inp.get("prompt") if isinstance(inp, dict) else None
                        self.tasks.append(
                            TaskCall(
                                tool_use_id=b["id"],
                                line=line,
                                prompt=key(prompt) if isinstance(prompt, str) and prompt else 0,
                                name=b["name"],
                            )
                        )
        elif kind == "user":
            result = obj.get("toolUseResult")
            if isinstance(result, dict) and isinstance(result.get("agentId"), str):
                msg = obj.get("message")
                content = msg.get("content") if isinstance(msg, dict) else None
                tool_use_id = next(
                    (
                        b["tool_use_id"]
                        for b in (content if isinstance(content, list) else [])
                        if isinstance(b, dict) and isinstance(b.get("tool_use_id"), str)
                    ),
                    None,
                )
                if tool_use_id is not None:
                    self._agent(
                        result["agentId"], tool_use_id, line, "the call's toolUseResult.agentId"
                    )
            if row is not None and obj.get("isSidechain") is True and obj.get("parentUuid") is None:
                msg = obj.get("message")
                self.roots[row] = _text_key(msg.get("content") if isinstance(msg, dict) else None)
        elif kind == "progress":
            data = obj.get("data")
            if (
                isinstance(data, dict)
                and data.get("type") == "agent_progress"
                and isinstance(data.get("agentId"), str)
                and isinstance(obj.get("parentToolUseID"), str)
            ):
                self._agent(
                    data["agentId"], obj["parentToolUseID"], line, "an agent_progress record"
                )

    def _agent(self, agent_id: str, tool_use_id: str, line: int, how: str) -> None:
        if agent_id and agent_id not in self.agents:
            self.agents[agent_id] = AgentLink(agent_id, tool_use_id, line, how)


@attrs.frozen
class ParentLinks:
    """The sub-agent links a session file holds, read by :func:`scan_links`."""

    file: Path
    agents: dict[str, AgentLink]


def parent_file(child: Path, session_id: str) -> Path | None:
    """The session file a sub-agent's file belongs to: ``<project>/<session>.jsonl`` beside it
    (2.0.x) or two folders up (``<project>/<session>/subagents/agent-*.jsonl``, 2.1.x)."""
    name = f"{session_id}.jsonl"
    for folder in (child.parent, child.parent.parent.parent):
        candidate = folder / name
        if candidate != child and candidate.is_file():
            return candidate
    return None


_SCANNED: OrderedDict[Path, ParentLinks] = OrderedDict()
_SCANNED_MAX = 8


def scan_links(path: Path) -> ParentLinks | None:
    """The links ``path`` holds (None when it cannot be read): one pass over its lines, parsing
    only the lines that name an agent. The last few files scanned are kept (a session's
    sub-agent files ask for the same parent)."""
    key_path = path.resolve()
    held = _SCANNED.get(key_path)
    if held is not None:
        _SCANNED.move_to_end(key_path)
        return held
    links = Links()
    try:
        with open(path, "rb") as f:
            for line_no, raw in enumerate(f, 1):
                if b'"agentId"' not in raw:
                    continue
                try:
                    obj = json.loads(raw)
                except (ValueError, RecursionError):
                    continue
                if isinstance(obj, dict) and isinstance(obj.get("type"), str):
                    links.note(obj, obj["type"], line_no, None)
    except OSError:
        return None
    found = ParentLinks(file=path, agents=links.agents)
    _SCANNED[key_path] = found
    while len(_SCANNED) > _SCANNED_MAX:
        _SCANNED.popitem(last=False)
    return found


@attrs.frozen
class ParentRef:
    """Where a sidechain thread comes from: the parent session, the Task/Agent call that started
    it (``tool_use_id``, its ``line`` in ``file``; ``file`` None: this file) and ``how`` that was
    found, or why it was not."""

    session_id: str | None
    tool_use_id: str | None
    line: int | None
    file: str | None
    how: str

    def to_json(self) -> dict[str, object]:
        return attrs.asdict(self)


def match_prompt(links: Links, root_row: int, root_line: int, taken: set[str]) -> TaskCall | None:
    """1.0.x: the Task call whose prompt is the sidechain's first record's text, the nearest
    one written before it and not taken by another sidechain."""
    want = links.roots.get(root_row, 0)
    if not want:
        return None
    best: TaskCall | None = None
    for t in links.tasks:
        if t.prompt == want and t.line < root_line and t.tool_use_id not in taken:
            best = t  # tasks are in file order: the last one before the root wins
    return best


def agent_of_call(links: Links) -> dict[str, str]:
    """tool_use_id -> the agent id it started, as this file shows it."""
    return {a.tool_use_id: a.agent_id for a in links.agents.values()}


def resolve_parent(
    links: Links,
    here: Path,
    name: str,
    agent_id: str | None,
    session_id: str | None,
    root_row: int,
    root_line: int,
    taken: set[str],
) -> ParentRef:
    """IMP-23: the call that started a sidechain thread of the file ``here`` (reported as
    ``name``), by the first link the data offers."""
    if agent_id is not None and agent_id.startswith("acompact"):
        return ParentRef(session_id, None, None, None, "a compaction fork: no Task call starts it")
    if agent_id is not None:
        found = links.agents.get(agent_id)
        if found is not None:
            taken.add(found.tool_use_id)
            return ParentRef(session_id, found.tool_use_id, found.line, None, found.how)
        parent = parent_file(here, session_id) if session_id else None
        if parent is None:
            return ParentRef(
                session_id,
                None,
                None,
                None,
                f"the session file {session_id}.jsonl is not beside it",
            )
        scanned = scan_links(parent)
        found = scanned.agents.get(agent_id) if scanned is not None else None
        where = _relative(parent, here, name)
        if found is None:
            return ParentRef(
                session_id, None, None, where, f"{where} names no call for agent {agent_id}"
            )
        return ParentRef(session_id, found.tool_use_id, found.line, where, found.how)
    task = match_prompt(links, root_row, root_line, taken)
    if task is None:
        return ParentRef(session_id, None, None, None, "no Task call of this file has its prompt")
    taken.add(task.tool_use_id)
    return ParentRef(
        session_id,
        task.tool_use_id,
        task.line,
        None,
        "the call's prompt is its first record's text",
    )


def _relative(target: Path, here: Path, name: str) -> str:
    """``target`` named as ``here`` is named (``name``): relative to the same folder."""
    return os.path.normpath(
        os.path.join(os.path.dirname(name), os.path.relpath(target, here.parent))
    )
