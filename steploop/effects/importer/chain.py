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

Everything here works on the rows of :class:`~steploop.effects.importer.source.Index` (arrays of ints),
so following the chain of a long file costs a few bytes per record.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict
from collections.abc import Iterator

import attrs

from steploop.effects.importer.source import (
    ASSISTANT,
    PROGRESS,
    RESULTS,
    SIDECHAIN,
    USER,
    Entry,
    Problem,
    SourceFile,
)

__all__ = ["Thread", "threads"]


@attrs.define
class Thread:
    """One conversation of a file: its rows (records kept), in file order."""

    kind: str  # "main" or "sidechain"
    agent_id: str | None
    session_id: str | None
    rows: array[int]
    versions: tuple[str, ...] = ()

    @property
    def first_row(self) -> int:
        return self.rows[0] if self.rows else 0

    def entries(self, src: SourceFile) -> Iterator[Entry]:
        """The thread's records (for reading them again), in file order."""
        for r in self.rows:
            yield src.entry(r)


def _groups(src: SourceFile, skip: set[int]) -> dict[int, array[int]]:
    """Rows by thread: 0 is the main thread; sidechains are grouped by agent id, or by the
    root they descend from when the records name no agent."""
    ix = src.index
    out: dict[int, array[int]] = defaultdict(lambda: array("i"))
    agentless_root: dict[int, int] = {}  # row -> group of agentless sidechain rows
    next_group = len(ix.agents) + 1
    for row in range(len(ix)):
        if row in skip:
            continue
        if not ix.flags[row] & SIDECHAIN:
            g = 0
        elif ix.agent[row]:
            g = ix.agent[row]
        else:
            p = ix.find(ix.parent[row]) if ix.parent[row] else None
            if p is not None and p in agentless_root:
                g = agentless_root[p]
            else:
                g = next_group
                next_group += 1
            agentless_root[row] = g
        out[g].append(row)
    return out


def threads(src: SourceFile) -> list[Thread]:
    """Split ``src`` into threads and keep, in each, the records on the chain (IMP-3..IMP-5).
    Problems (repeated uuids, branches, a link to a record the file lacks) are added to
    ``src``."""
    ix = src.index
    skip: set[int] = set()
    for row, first in ix.duplicates():
        uid = src.record(row).get("uuid")
        src.problem(
            ix.line[row],
            f"uuid {uid} was already used at line {ix.line[first]}; this record is skipped",
        )
        skip.add(row)
    group_of = array("i", [-1]) * len(ix)
    groups = _groups(src, skip)
    for g, members in groups.items():
        for r in members:
            group_of[r] = g
    out: list[Thread] = []
    for g, members in groups.items():
        thread = _follow(src, g, members, group_of)
        if thread is not None:
            out.append(thread)
    out.sort(key=lambda t: (t.kind != "main", t.first_row))
    return out


def _previous_message(src: SourceFile, members: array[int], row: int) -> int | None:
    """The thread's last message row written before ``row``."""
    i = bisect.bisect_left(members, row) - 1
    while i >= 0:
        if src.index.type[members[i]] != PROGRESS:
            return members[i]
        i -= 1
    return None


def _follow(src: SourceFile, g: int, members: array[int], group_of: array[int]) -> Thread | None:
    ix = src.index
    leaf = next((r for r in reversed(members) if ix.type[r] != PROGRESS), None)
    if leaf is None:
        return None  # progress records alone are not a conversation
    n = len(ix)
    kept = bytearray(n)  # 1: on the path; 2: kept beside it
    row: int | None = leaf
    while row is not None and not kept[row]:
        kept[row] = 1
        nxt: int | None = None
        link = ix.parent[row]
        what = "parentUuid"
        if not link and row in ix.logical:
            link, what = ix.logical[row], "the compact boundary's logicalParentUuid"
        if link:
            found = ix.find(link)
            if found is not None and group_of[found] == g:
                nxt = found
            elif found is None:
                # IMP-4: the link names a record the file lacks (a line that could not be read,
                # a record Claude Code did not write, a fork's parent in another file): continue
                # from the message written just before this record
                nxt = _previous_message(src, members, row)
                if nxt is not None:
                    rec = src.record(row)
                    text = rec.get("parentUuid") or rec.get("logicalParentUuid")
                    src.problem(
                        ix.line[row],
                        f"{what} {text} names no record of this file; the chain continues at "
                        f"line {ix.line[nxt]}, the message written before it",
                        "note",
                    )
        row = nxt
    # the response each kept row belongs to (the nearest assistant at or above it)
    context = array("Q", bytes(8 * n)) if n else array("Q")
    for r in members:
        p = ix.find(ix.parent[r]) if ix.parent[r] else None
        parent_kept = p is not None and group_of[p] == g and kept[p]
        parent_ctx = context[p] if parent_kept and p is not None else 0
        if not kept[r] and parent_kept:
            t = ix.type[r]
            if (
                t == PROGRESS
                or (t == ASSISTANT and ix.response[r] and ix.response[r] == parent_ctx)
                or (t == USER and ix.flags[r] & RESULTS and parent_ctx)
            ):
                kept[r] = 2
        if kept[r]:
            context[r] = ix.response[r] if ix.type[r] == ASSISTANT else parent_ctx
    _report_left_out(src, members, kept, group_of, g)
    rows = array("i", (r for r in members if kept[r]))
    versions = tuple(sorted({v for r in rows if (v := ix.version_of(r)) is not None}))
    agent = next((a for r in rows if (a := ix.agent_of(r)) is not None), None)
    return Thread(
        kind="main" if g == 0 else "sidechain",
        agent_id=agent,
        session_id=ix.session_of(rows[0]),
        rows=rows,
        versions=versions,
    )


def _report_left_out(
    src: SourceFile, members: array[int], kept: bytearray, group_of: array[int], g: int
) -> None:
    """One problem per branch (a record left out whose parent is kept) and per detached part."""
    ix = src.index
    left = [r for r in members if not kept[r]]
    if not left:
        return
    parent_row: dict[int, int | None] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for r in left:
        p = ix.find(ix.parent[r]) if ix.parent[r] else None
        if p is not None and group_of[p] != g:
            p = None
        parent_row[r] = p
        if p is not None:
            children[p].append(r)
    seen: set[int] = set()

    def subtree(start: int) -> list[int]:
        out, stack = [], [start]
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            out.append(x)
            stack.extend(children.get(x, ()))
        return out

    for r in left:
        if r in seen:
            continue
        p = parent_row[r]
        attached = p is not None and bool(kept[p])
        if p is not None and not attached:
            continue  # reached from its own branch's start (visited when that start is)
        part = subtree(r)
        msgs = sorted(ix.line[x] for x in part if ix.type[x] != PROGRESS)
        if not msgs:
            continue
        span = f"line {msgs[0]}" if len(msgs) == 1 else f"lines {msgs[0]}-{msgs[-1]}"
        count = f"{len(msgs)} message record{'s' if len(msgs) != 1 else ''}"
        if attached and p is not None:
            src.problems.append(
                Problem(
                    src.name,
                    ix.line[p],
                    f"a branch: this record has another continuation at {span} ({count}) that "
                    "does not lead to the last message; that branch is not imported",
                    "warning",
                )
            )
        else:
            verb = "is" if len(msgs) == 1 else "are"
            src.problems.append(
                Problem(
                    src.name,
                    msgs[0],
                    f"{span} ({count}) {verb} not connected to the chain that ends at the last "
                    "message; not imported",
                    "warning",
                )
            )
