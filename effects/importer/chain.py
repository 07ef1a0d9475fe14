"""Following the parentUuid chain: threads, the path to the last message, branches (IMP-3..IMP-5).

Claude Code links every record to the one before it (``parentUuid``), with three exceptions
this module knows: a tool result points at the record holding its ``tool_use`` (so parallel
calls fan out from their response), a compact boundary has no parent but a
``logicalParentUuid``, and progress records sit in the chain without being messages.

A **thread** is one conversation: the main thread (records with ``isSidechain`` false) or one
sidechain (a sub-agent's run, grouped by ``agentId``, or by root when older versions wrote none).
Its records are those on the path from its last message back to its root, plus the records that
hang off that path as parts of the same responses (sibling blocks of a response, the results of
its tool calls, progress). Anything else is a branch that did not lead to the last message (a
rewind, an edit, a second root): reported, one line per branch, and not imported.
"""

from __future__ import annotations

from collections import defaultdict

import attrs

from effects.importer.source import Entry, Problem, SourceFile

__all__ = ["Thread", "threads"]


@attrs.define
class Thread:
    """One conversation of a file, its records in file order."""

    kind: str  # "main" or "sidechain"
    agent_id: str | None
    session_id: str | None
    entries: list[Entry]
    versions: tuple[str, ...] = ()

    @property
    def first_line(self) -> int:
        return self.entries[0].line if self.entries else 0


def _group_key(e: Entry, roots: dict[str, str]) -> str:
    if not e.sidechain:
        return "main"
    if e.agent_id is not None:
        return f"agent:{e.agent_id}"
    return f"root:{roots[e.uuid or '']}"


def _roots(entries: list[Entry], by_uuid: dict[str, Entry]) -> dict[str, str]:
    """For sidechain records without an agent id: the uuid of the root each one descends from."""
    root: dict[str, str] = {}
    for e in entries:
        if not e.sidechain or e.agent_id is not None or e.uuid is None:
            continue
        p = e.parent
        if p is not None and p in root:
            root[e.uuid] = root[p]
        else:
            root[e.uuid] = e.uuid
    return root


def threads(src: SourceFile) -> list[Thread]:
    """Split ``src`` into threads and keep, in each, the records on the chain (IMP-3..IMP-5).
    Problems (duplicate uuids, branches, a missing logical parent) are added to ``src``."""
    by_uuid: dict[str, Entry] = {}
    entries: list[Entry] = []
    for e in src.entries:
        assert e.uuid is not None
        if e.uuid in by_uuid:
            src.problem(
                e.line,
                f"uuid {e.uuid} was already used at line {by_uuid[e.uuid].line}; this record is skipped",
            )
            continue
        by_uuid[e.uuid] = e
        entries.append(e)
    roots = _roots(entries, by_uuid)
    groups: dict[str, list[Entry]] = defaultdict(list)
    for e in entries:
        groups[_group_key(e, roots)].append(e)
    out: list[Thread] = []
    for key, members in groups.items():
        thread = _follow(src, key, members, by_uuid)
        if thread is not None:
            out.append(thread)
    out.sort(key=lambda t: (t.kind != "main", t.first_line))
    return out


def _follow(
    src: SourceFile, key: str, members: list[Entry], by_uuid: dict[str, Entry]
) -> Thread | None:
    messages = [e for e in members if e.type != "progress"]
    if not messages:
        return None  # progress records alone are not a conversation
    in_group = {e.uuid for e in members}
    index = {e.uuid: i for i, e in enumerate(members)}
    leaf = messages[-1]
    path: set[str] = set()
    e: Entry | None = leaf
    while e is not None and e.uuid not in path:
        assert e.uuid is not None
        path.add(e.uuid)
        nxt: Entry | None = None
        link, what = (
            (e.parent, "parentUuid")
            if e.parent is not None
            else (e.logical_parent, "the compact boundary's logicalParentUuid")
        )
        if link is not None:
            nxt = by_uuid.get(link) if link in in_group else None
            if nxt is None and link not in by_uuid:
                # IMP-4: the link names a record the file lacks (a line that could not be read,
                # a record Claude Code did not write, a fork's parent in another file): continue
                # from the message written just before this record
                before = [m for m in members[: index[e.uuid]] if m.type != "progress"]
                if before:
                    nxt = before[-1]
                    src.problem(
                        e.line,
                        f"{what} {link} names no record of this file; the chain continues at "
                        f"line {nxt.line}, the message written before it",
                        "note",
                    )
        e = nxt
    included = set(path)
    context: dict[str, str | None] = {}  # response id of the nearest assistant at or above
    tool_uses: set[str] = set()
    for m in members:
        if m.uuid in path:
            if m.type == "assistant":
                tool_uses.update(m.tool_use_ids)
    for m in members:
        uid = m.uuid
        assert uid is not None
        parent_ctx = context.get(m.parent) if m.parent is not None else None
        if uid not in included and m.parent in included:
            if (
                m.type == "progress"
                or (
                    m.type == "assistant"
                    and m.response_id is not None
                    and m.response_id == parent_ctx
                )
                or (m.type == "user" and m.tool_result_ids and set(m.tool_result_ids) <= tool_uses)
            ):
                included.add(uid)
                if m.type == "assistant":
                    tool_uses.update(m.tool_use_ids)
        if uid in included:
            context[uid] = m.response_id if m.type == "assistant" else parent_ctx
    _report_left_out(src, members, included)
    kept = [m for m in members if m.uuid in included]
    versions = tuple(sorted({m.version for m in kept if m.version is not None}))
    first = kept[0]
    kind = "main" if key == "main" else "sidechain"
    agent = next((m.agent_id for m in kept if m.agent_id is not None), None)
    return Thread(
        kind=kind,
        agent_id=agent,
        session_id=first.session_id,
        entries=kept,
        versions=versions,
    )


def _report_left_out(src: SourceFile, members: list[Entry], included: set[str]) -> None:
    """One problem per branch (a record left out whose parent is kept) and per detached part."""
    left = [m for m in members if m.uuid not in included]
    if not left:
        return
    children: dict[str, list[Entry]] = defaultdict(list)
    for m in left:
        if m.parent is not None:
            children[m.parent].append(m)
    seen: set[str] = set()
    by_uuid = {m.uuid: m for m in members}

    def subtree(start: Entry) -> list[Entry]:
        out, stack = [], [start]
        while stack:
            x = stack.pop()
            assert x.uuid is not None
            if x.uuid in seen:
                continue
            seen.add(x.uuid)
            out.append(x)
            stack.extend(children.get(x.uuid, ()))
        return out

    for m in left:
        if m.uuid in seen:
            continue
        attached = m.parent is not None and m.parent in included
        if not attached and m.parent is not None and m.parent in by_uuid:
            continue  # reached from its own branch's start (visited when that start is)
        part = subtree(m)
        msgs = sorted(x.line for x in part if x.type != "progress")
        if not msgs:
            continue
        span = f"line {msgs[0]}" if len(msgs) == 1 else f"lines {msgs[0]}-{msgs[-1]}"
        n = f"{len(msgs)} message record{'s' if len(msgs) != 1 else ''}"
        if attached:
            parent = by_uuid[m.parent]
            src.problems.append(
                Problem(
                    src.name,
                    parent.line,
                    f"a branch: this record has another continuation at {span} ({n}) that does "
                    "not lead to the last message; that branch is not imported",
                    "warning",
                )
            )
        else:
            verb = "is" if len(msgs) == 1 else "are"
            src.problems.append(
                Problem(
                    src.name,
                    msgs[0],
                    f"{span} ({n}) {verb} not connected to the chain that ends at the last "
                    "message; not imported",
                    "warning",
                )
            )
