"""Following the parentUuid chains: threads, their paths, branches (IMP-3..IMP-5, IMP-23).

Claude Code links every record to the one before it (``parentUuid``), with exceptions this
module knows: a tool result points at the record holding its ``tool_use`` (so parallel calls fan
out from their response), a compact boundary has no parent but a ``logicalParentUuid`` (2.x),
the compact summary that continues a 1.0.x conversation has neither (it starts a new chain: the
conversation it continues is the one written just before it), and progress records sit in the
chain without being messages.

A file's records fall into **groups**: the main conversation (records with ``isSidechain``
false) and each sidechain (a sub-agent's run, grouped by ``agentId``, or by the root it descends
from when older versions wrote none). A group's records form a tree: rewinding, editing a
prompt, or resuming from an earlier point leaves a record with two continuations. Every leaf of
the tree is imported: a **thread** is the path from a leaf back to the root (through the links
above), with the records that hang off that path as parts of the same responses (sibling blocks,
tool results, progress). The first thread of a group ends at its last message (the conversation
as it was left); each further thread ends at the last message no earlier thread holds and is a
**branch**: it shares the records up to its fork with the thread it forks from, and only its own
turns are imported (each starting from the conversation the transcript holds before it, prefix
included). A path may span several parentUuid **chains** (a compaction starts a new one): each
is listed with how it continues the one before.

Everything here works on the rows of :class:`~steploop.effects.importer.source.Index` (arrays of
ints), so following the chains of a long file costs a few bytes per record.
"""

from __future__ import annotations

import bisect
from array import array
from collections import defaultdict

import attrs

from steploop.effects.importer.source import (
    ASSISTANT,
    COMPACT_SUMMARY,
    PROGRESS,
    RESULTS,
    SIDECHAIN,
    USER,
    SourceFile,
)

__all__ = ["Chain", "Fork", "Thread", "threads"]

#: How a chain of a path continues the chain before it.
LOGICAL = "logicalParentUuid"  # a 2.x compact boundary
CONTINUATION = "compact summary"  # a 1.0.x compact summary with no parent


@attrs.frozen
class Chain:
    """One parentUuid chain of a thread's path: where it starts and how it continues the chain
    before it (``link`` None for the first; ``continues`` the line it continues)."""

    root: int  # the line of its first record
    link: str | None = None
    continues: int | None = None

    def to_json(self) -> dict[str, object]:
        return {"root": self.root, "link": self.link, "continues": self.continues}


@attrs.frozen
class Fork:
    """Where a branch leaves the thread it forks from (``thread`` None: a chain of its own,
    sharing no record with an earlier thread)."""

    thread: str | None
    line: int | None  # the last record the branch shares


@attrs.define
class Thread:
    """One conversation of a file: its rows (records kept), in file order."""

    kind: str  # "main" or "sidechain"
    agent_id: str | None
    session_id: str | None
    rows: array[int]
    versions: tuple[str, ...] = ()
    name: str = "main"  # "main", "main branch 1", "sidechain a881341", "sidechain 2 branch 1"
    tag: str = ""  # in trace names: "", ".b1", ".side2", ".side2.b1"
    own_from: int = 0  # rows[own_from:] are this thread's own; before: shared with earlier ones
    fork: Fork | None = None  # a branch: where it forks
    chains: tuple[Chain, ...] = ()
    restarts: frozenset[int] = frozenset()  # lines where the conversation restarts (1.0.x)
    group: int = 0

    @property
    def first_row(self) -> int:
        return self.rows[0] if self.rows else 0

    @property
    def branch(self) -> bool:
        return self.fork is not None


def _groups(src: SourceFile, skip: set[int]) -> dict[int, array[int]]:
    """Rows by group: 0 is the main conversation; sidechains are grouped by agent id, or by the
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
    """Split ``src`` into threads (IMP-3..IMP-5, IMP-23): every leaf of every group's tree.
    Problems (repeated uuids, a link to a record the file lacks) and notes (branches, chains of
    their own) are added to ``src``."""
    ix = src.index
    skip: set[int] = set()
    for row, first in ix.duplicates():
        uid = src.record(row).get("uuid")
        src.problem(
            ix.line[row],
            f"uuid {uid} was already used at line {ix.line[first]}; this record is skipped",
        )
        skip.add(row)
    n = len(ix)
    group_of = array("i", [-1]) * n
    groups = _groups(src, skip)
    for g, members in groups.items():
        for r in members:
            group_of[r] = g
    walker = _Walker(src, group_of)
    out: list[Thread] = []
    side = 0
    for g, members in sorted(groups.items(), key=lambda kv: (kv[0] != 0, kv[1][0])):
        found = walker.group(g, members)
        if not found:
            continue
        if g != 0:
            side += 1
        for t in found:
            if g != 0:
                t.tag = f".side{side}{t.tag}"
        out.extend(found)
    return out


class _Walker:
    """Walks one file's groups; its arrays are allocated once per file."""

    def __init__(self, src: SourceFile, group_of: array[int]) -> None:
        self.src = src
        self.ix = src.index
        self.group_of = group_of
        n = len(self.ix)
        self.owner = array("i", [-1]) * n  # the thread (of its group) that first kept a row
        self.mark = array("i", [0]) * n  # == stamp: kept by the thread being built
        self.context = array("Q", bytes(8 * n)) if n else array("Q")
        self.stamp = 0
        self.noted: set[int] = set()  # rows whose bridged link was reported
        # each row's children by parentUuid, within its group, as linked lists: a row's
        # first child and each child's next sibling (-1: none); 8 bytes a row
        self.first_child = array("i", [-1]) * n
        self.next_sibling = array("i", [-1]) * n

    # -- links ----------------------------------------------------------------------------------

    def _previous_message(self, members: array[int], row: int) -> int | None:
        """The group's last message row written before ``row``."""
        i = bisect.bisect_left(members, row) - 1
        while i >= 0:
            if self.ix.type[members[i]] != PROGRESS:
                return members[i]
            i -= 1
        return None

    def _up(self, g: int, members: array[int], row: int) -> tuple[int | None, str | None]:
        """The row ``row`` continues (its parent, through the links of the module docstring),
        and how, when that is not its parentUuid (None)."""
        ix = self.ix
        link = ix.parent[row]
        what = "parentUuid"
        kind: str | None = None
        if not link and row in ix.logical:
            link, what, kind = ix.logical[row], "the compact boundary's logicalParentUuid", LOGICAL
        if link:
            found = ix.find(link)
            if found is not None:
                # a link to a record of another group ends the path (a root)
                return (found, kind) if self.group_of[found] == g else (None, None)
            # IMP-4: the link names a record the file lacks (a line that could not be read, a
            # record Claude Code did not write, a fork's parent in another file): continue
            # from the message written just before this record
            prev = self._previous_message(members, row)
            if prev is not None and row not in self.noted:
                self.noted.add(row)
                rec = self.src.record(row)
                text = rec.get("parentUuid") or rec.get("logicalParentUuid")
                self.src.problem(
                    ix.line[row],
                    f"{what} {text} names no record of this file; the chain continues at "
                    f"line {ix.line[prev]}, the message written before it",
                    "note",
                )
            return prev, kind
        if ix.flags[row] & COMPACT_SUMMARY and ix.type[row] == USER:
            # IMP-23: a 1.0.x compaction: the summary starts a new chain, with no link; the
            # conversation it continues is the one written just before it
            prev = self._previous_message(members, row)
            return prev, (CONTINUATION if prev is not None else None)
        return None, None

    def _children(self, g: int, members: array[int]) -> None:
        """Link each row of the group to its parent's children (``first_child``)."""
        ix, first, nxt, group_of = self.ix, self.first_child, self.next_sibling, self.group_of
        for r in members:
            if ix.parent[r]:
                p = ix.find(ix.parent[r])
                if p is not None and group_of[p] == g:
                    nxt[r] = first[p]
                    first[p] = r

    # -- threads --------------------------------------------------------------------------------

    def group(self, g: int, members: array[int]) -> list[Thread]:
        ix = self.ix
        self._children(g, members)
        found: list[Thread] = []
        i = len(members) - 1
        while True:
            while i >= 0 and (self.owner[members[i]] >= 0 or ix.type[members[i]] == PROGRESS):
                i -= 1
            if i < 0:
                break
            found.append(self._thread(g, members, members[i], found))
        return found

    def _thread(self, g: int, members: array[int], leaf: int, earlier: list[Thread]) -> Thread:
        ix = self.ix
        self.stamp += 1
        stamp, mark, owner = self.stamp, self.mark, self.owner
        # the path, leaf to root, and how each row continues the one above it
        path: list[int] = []
        links: list[str | None] = []
        row: int | None = leaf
        fork: int | None = None
        while row is not None and mark[row] != stamp:
            mark[row] = stamp
            path.append(row)
            if fork is None and owner[row] >= 0:
                fork = row
            row, how = self._up(g, members, row)
            links.append(how)
        # the parts of the same responses beside the path (IMP-5), root to leaf
        context = self.context
        kept = list(path)
        for r in reversed(path):
            p = ix.find(ix.parent[r]) if ix.parent[r] else None
            parent_ctx = context[p] if p is not None and mark[p] == stamp else 0
            context[r] = ix.response[r] if ix.type[r] == ASSISTANT else parent_ctx
        stack = list(reversed(path))
        first, nxt = self.first_child, self.next_sibling
        while stack:
            r = stack.pop()
            ctx = context[r]
            c = first[r]
            while c >= 0:
                if mark[c] == stamp:
                    c = nxt[c]
                    continue
                t = ix.type[c]
                if (
                    t == PROGRESS
                    or (t == ASSISTANT and ix.response[c] and ix.response[c] == ctx)
                    or (t == USER and ix.flags[c] & RESULTS and ctx)
                ):
                    mark[c] = stamp
                    context[c] = ix.response[c] if t == ASSISTANT else ctx
                    kept.append(c)
                    stack.append(c)
                c = nxt[c]
        kept.sort()
        rows = array("i", kept)
        me = len(earlier)
        own_from = len(rows)
        for k, r in enumerate(rows):
            if owner[r] < 0:
                owner[r] = me
                own_from = min(own_from, k)
        # the chains of the path, root to leaf
        chains: list[Chain] = []
        restarts: set[int] = set()
        order = list(reversed(path))  # root to leaf
        how_of = list(reversed(links))  # how_of[k]: how order[k] continues order[k - 1]
        for k, r in enumerate(order):
            if k == 0:
                chains.append(Chain(root=ix.line[r]))
            elif how_of[k] in (LOGICAL, CONTINUATION):
                chains.append(
                    Chain(root=ix.line[r], link=how_of[k], continues=ix.line[order[k - 1]])
                )
                if how_of[k] == CONTINUATION:
                    restarts.add(ix.line[r])
        versions = tuple(sorted({v for r in rows if (v := ix.version_of(r)) is not None}))
        agent = next((a for r in rows if (a := ix.agent_of(r)) is not None), None)
        kind = "main" if g == 0 else "sidechain"
        base = "main" if g == 0 else f"sidechain {agent or '(no agent id)'}"
        thread = Thread(
            kind=kind,
            agent_id=agent,
            session_id=ix.session_of(rows[0]),
            rows=rows,
            versions=versions,
            name=base if not earlier else f"{base} branch {me}",
            tag="" if not earlier else f".b{me}",
            own_from=0 if not earlier else own_from,
            chains=tuple(chains),
            restarts=frozenset(restarts),
            group=g,
        )
        if earlier:
            if fork is not None:
                thread.fork = Fork(thread=earlier[owner[fork]].name, line=ix.line[fork])
                what = f"forks from {thread.fork.thread} after line {ix.line[fork]}"
            else:
                thread.fork = Fork(thread=None, line=None)
                what = "shares no record with the threads before it"
            own = [ix.line[r] for r in rows[own_from:] if ix.type[r] != PROGRESS]
            span = f"line {own[0]}" if len(own) == 1 else f"lines {own[0]}-{own[-1]}"
            self.src.problem(
                own[0] if own else None,
                f"{span} ({len(own)} message record{'s' if len(own) != 1 else ''}) "
                f"{'is' if len(own) == 1 else 'are'} a branch that {what}; imported as "
                f"'{thread.name}'",
                "note",
            )
        return thread
