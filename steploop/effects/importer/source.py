"""Reading a Claude Code session file: one pass that indexes every line (specs/import.md §2).

A session file is JSONL as Claude Code writes it under ``~/.claude/projects/<project>/``. This
module reads it once, line by line, and keeps a small row per record (line number, byte offset,
type, uuid, parent links, sidechain and agent ids, the response id); the first
:data:`PARSED_BUDGET` bytes of message records are kept parsed for their turns (each parsed
once), the others stay on disk and are read again, record by record, when their turn is
reconstructed (:meth:`SourceFile.load_many`). Memory therefore grows with the number of records,
by about 70 bytes each (the columns and the uuid lookup table), and with their content only up to
that bound.

Everything that cannot be read becomes a :class:`Problem` (``FILE:LINE: what``): a line that is
not JSON, a truncated last line, a record that is not an object, a record type the importer does
not know, a Claude Code version newer than the importer knows, a file that is not a transcript.
Nothing is dropped without one.
"""

from __future__ import annotations

import json
import os
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs

from steploop.effects.importer.keys import key
from steploop.effects.importer.links import Links
from steploop.reducer import collector

__all__ = [
    "CHAIN_TYPES",
    "COMPACT_SUMMARY",
    "KNOWN_MAX_VERSION",
    "MESSAGE_TYPES",
    "METADATA_TYPES",
    "Entry",
    "Problem",
    "SourceFile",
    "parse_version",
    "read_source",
]

Severity: TypeAlias = Literal["error", "warning", "note"]

#: Record types that are conversation messages (Claude Code's TranscriptMessage).
MESSAGE_TYPES = frozenset({"user", "assistant", "system", "attachment"})
#: Record types that take part in the parentUuid chain but are not messages (ephemeral UI state).
CHAIN_TYPES = frozenset({"progress"})
#: Metadata records: known, not conversation, counted in the report (IMP-2).
METADATA_TYPES = frozenset(
    {
        "summary",
        "custom-title",
        "ai-title",
        "last-prompt",
        "task-summary",
        "tag",
        "agent-name",
        "agent-color",
        "agent-setting",
        "pr-link",
        "mode",
        "worktree-state",
        "file-history-snapshot",
        "attribution-snapshot",
        "queue-operation",
        "speculation-accept",
        "content-replacement",
        "marble-origami-commit",
        "marble-origami-snapshot",
    }
)
#: How many bytes of message records the first pass keeps parsed for the turns (the rest are
#: parsed again when their turn is read): a session of up to about this size is parsed once,
#: and the memory this takes is bounded whatever the file's size.
PARSED_BUDGET = 4 << 20
#: A UTF-8 byte-order mark, which some editors write at the start of a file.
BOM = b"\xef\xbb\xbf"
#: The newest Claude Code version whose transcript format the importer was written against.
KNOWN_MAX_VERSION = "2.1.88"


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"2.1.39"`` -> ``(2, 1, 39)``; None when it is not dotted integers."""
    parts = text.split(".")
    try:
        return tuple(int(p) for p in parts)
    except ValueError:
        return None


@attrs.frozen
class Problem:
    """One line of the import report: ``FILE:LINE: message`` (``FILE: message`` without a line)."""

    file: str
    line: int | None
    message: str
    severity: Severity = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


@attrs.define(slots=True)
class Entry:
    """One record to read again: where it is and what it is (queue operations keep theirs)."""

    line: int
    offset: int
    type: str
    session_id: str | None = None
    operation: str | None = None  # queue-operation: enqueue, remove, dequeue, ...
    row: int = -1  # its index row (-1: not indexed, a queue operation)


#: Record type codes of the index.
USER, ASSISTANT, SYSTEM, ATTACHMENT, PROGRESS = range(5)
TYPE_NAMES = ("user", "assistant", "system", "attachment", "progress")
_TYPE_CODES = {name: k for k, name in enumerate(TYPE_NAMES)}
SIDECHAIN = 1  # flag: isSidechain
RESULTS = 2  # flag: a user record holding tool results
COMPACT_SUMMARY = 4  # flag: a user record with isCompactSummary


class Index:
    """The first pass's columns, one row per message or progress record, in file order.

    Per row: the line, the byte offset, the type code, flags, the keys of its uuid, parent and
    response id, and small-table indexes of its agent id, session id and version (44 bytes a
    row, whatever the record holds). ``logical`` maps the rows of compact boundaries to their
    logicalParentUuid's key. :meth:`find` looks a uuid's key up in an open-addressing table of
    two flat arrays, at most half full (24 bytes a row, built once, with no per-row Python
    object: a sort of the keys would briefly hold about 80 bytes a row of them)."""

    def __init__(self) -> None:
        self.line = array("I")
        self.offset = array("q")
        self.type = bytearray()
        self.flags = bytearray()
        self.uuid = array("Q")
        self.parent = array("Q")
        self.response = array("Q")
        self.agent = array("H")  # 0: none; else agents[k - 1]
        self.session = array("H")  # 0: none; else sessions[k - 1]
        self.version = array("H")  # 0: none; else versions[k - 1]
        self.logical: dict[int, int] = {}
        self.agents: list[str] = []
        self.sessions: list[str] = []
        self.versions: list[str] = []
        self._tables: dict[int, dict[str, int]] = {0: {}, 1: {}, 2: {}}
        self._keys: array[int] | None = None  # the lookup table: a key per slot (0: empty)
        self._rows: array[int] | None = None  # and the row holding it first
        self._dups: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.line)

    def _code(self, table: int, value: str | None, names: list[str]) -> int:
        if value is None:
            return 0
        codes = self._tables[table]
        code = codes.get(value)
        if code is None:
            if len(names) >= 0xFFFF:  # the column holds 16 bits; beyond that, unnamed
                return 0
            names.append(value)
            code = codes[value] = len(names)
        return code

    def add(self, obj: dict[str, Any], line: int, offset: int, kind: str) -> None:
        uid = obj["uuid"]
        self.line.append(line)
        self.offset.append(offset)
        self.type.append(_TYPE_CODES[kind])
        flags = SIDECHAIN if obj.get("isSidechain") is True else 0
        if kind == "user" and obj.get("isCompactSummary") is True:
            flags |= COMPACT_SUMMARY
        msg = obj.get("message")
        response = 0
        if isinstance(msg, dict):
            if kind == "assistant" and isinstance(msg.get("id"), str):
                response = key(msg["id"])
            elif kind == "user" and isinstance(msg.get("content"), list):
                if any(
                    isinstance(b, dict) and b.get("type") == "tool_result" for b in msg["content"]
                ):
                    flags |= RESULTS
        self.flags.append(flags)
        self.uuid.append(key(uid))
        parent = obj.get("parentUuid")
        self.parent.append(key(parent) if isinstance(parent, str) else 0)
        logical = obj.get("logicalParentUuid")
        if isinstance(logical, str):
            self.logical[len(self.line) - 1] = key(logical)
        self.response.append(response)
        self.agent.append(self._code(0, _str(obj.get("agentId")), self.agents))
        self.session.append(self._code(1, _str(obj.get("sessionId")), self.sessions))
        self.version.append(self._code(2, _str(obj.get("version")), self.versions))
        self._keys = None

    def agent_of(self, row: int) -> str | None:
        k = self.agent[row]
        return self.agents[k - 1] if k else None

    def session_of(self, row: int) -> str | None:
        k = self.session[row]
        return self.sessions[k - 1] if k else None

    def version_of(self, row: int) -> str | None:
        k = self.version[row]
        return self.versions[k - 1] if k else None

    def type_of(self, row: int) -> str:
        return TYPE_NAMES[self.type[row]]

    def _build(self) -> tuple[array[int], array[int]]:
        """The lookup table (linear probing, at most half full); a key met again is a
        duplicate of the row that holds it first."""
        size = 2 * len(self.uuid) + 1
        keys = array("Q", bytes(8 * size))
        rows = array("i", bytes(4 * size))
        dups: list[tuple[int, int]] = []
        for row, k in enumerate(self.uuid):
            i = k % size  # keys are digests, as good as a hash
            while True:
                held = keys[i]
                if held == 0:
                    keys[i] = k
                    rows[i] = row
                    break
                if held == k:
                    dups.append((row, rows[i]))
                    break
                i = i + 1 if i + 1 < size else 0
        self._keys, self._rows, self._dups = keys, rows, dups
        return keys, rows

    def find(self, k: int) -> int | None:
        """The first row whose uuid has key ``k``, or None."""
        keys, rows = (self._keys, self._rows) if self._keys is not None else self._build()
        assert rows is not None
        size = len(keys)
        i = k % size
        while True:
            held = keys[i]
            if held == k:
                return rows[i]
            if held == 0:
                return None
            i = i + 1 if i + 1 < size else 0

    def release_chain(self) -> None:
        """Free what only following the chain needs (the keys, flags, agent and version
        codes, the lookup table): 53 of the 68 bytes a row. The turns read the line, offset,
        type and session of their records, which stay."""
        for name in ("uuid", "parent", "response"):
            setattr(self, name, array("Q"))
        self.flags = bytearray()
        self.agent = array("H")
        self.version = array("H")
        self.logical = {}
        self._keys = self._rows = None
        self._dups = []

    def duplicates(self) -> list[tuple[int, int]]:
        """(row, the row that used its uuid first) for every repeated uuid, in row order."""
        if self._keys is None:
            self._build()
        return list(self._dups)


@attrs.define
class SourceFile:
    """One session file, indexed."""

    path: Path
    name: str
    index: Index = attrs.field(factory=Index)
    queue: list[Entry] = attrs.field(factory=list)  # queue-operation records (no uuid)
    problems: list[Problem] = attrs.field(factory=list)
    counts: Counter[str] = attrs.field(factory=Counter)
    lines: int = 0
    is_transcript: bool = True
    links: Links = attrs.field(factory=Links)  # what the file says about sub-agent calls
    #: message records the first pass parsed and kept, by index row, for the turns to take
    #: (each once) instead of parsing them again: the first PARSED_BUDGET bytes of them
    parsed: dict[int, dict[str, Any]] = attrs.field(factory=dict)

    def problem(self, line: int | None, message: str, severity: Severity = "error") -> None:
        self.problems.append(Problem(self.name, line, message, severity))

    def entry(self, row: int) -> Entry:
        ix = self.index
        return Entry(
            line=ix.line[row],
            offset=ix.offset[row],
            type=ix.type_of(row),
            session_id=ix.session_of(row),
            row=row,
        )

    def record(self, row: int) -> dict[str, Any]:
        """The full record of index row ``row`` (read again from the file)."""
        with open(self.path, "rb") as f:
            f.seek(self.index.offset[row])
            return _loads(f.readline())

    def load_many(self, entries: Iterable[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
        """The full records of ``entries`` (in the order given): those the first pass kept
        (:attr:`parsed`, each handed out once), the others read again, one open file for all."""
        parsed = self.parsed
        f: Any = None
        try:
            for e in entries:
                obj = parsed.pop(e.row, None) if parsed else None
                if obj is None:
                    if f is None:
                        f = open(self.path, "rb")  # closed below
                    f.seek(e.offset)
                    obj = _loads(f.readline())
                yield e, obj
        finally:
            if f is not None:
                f.close()


def _loads(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):  # pragma: no cover - checked in the first pass
        raise ValueError("not an object")
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _json_error(e: json.JSONDecodeError) -> str:
    # some of json's messages end in "at" already ("Invalid control character at")
    return f"not valid JSON: {e.msg.removesuffix(' at')} at column {e.colno}"


def read_source(path: str | os.PathLike[str], name: str | None = None) -> SourceFile:
    """Index a session file (IMP-1, IMP-2). Never raises for bad content; an unreadable file
    is one problem without a line."""
    p = Path(path)
    src = SourceFile(path=p, name=name or str(path))
    try:
        f = open(p, "rb")  # read line by line below, never whole; closed by the with
    except OSError as e:
        src.problem(None, f"cannot be read: {e.strerror or e}")
        src.is_transcript = False
        return src
    # the cycle collector is paused while the file is read (R-COST-4): the records it parses
    # and keeps hold no cycle, and its passes over them, as they pile up, cost a fifth of the
    # reading
    with collector.paused(), f:
        try:
            _index(src, f)
        except OSError as e:
            src.problem(None, f"cannot be read: {e.strerror or e}")
            src.is_transcript = False
    return src


def _lines(f: Any) -> Iterator[tuple[int, int, bytes, bool]]:
    """(line number, byte offset, the line without its newline, whether it is the last line
    and has no newline)."""
    offset = 0
    ln = 0
    pending: bytes | None = None
    for raw in f:
        if pending is not None:
            ln += 1
            yield ln, offset, pending.rstrip(b"\n"), False
            offset += len(pending)
        pending = raw
    if pending is not None:
        ln += 1
        yield ln, offset, pending.rstrip(b"\n"), not pending.endswith(b"\n")


def _index(src: SourceFile, f: Any) -> None:
    newest: tuple[tuple[int, ...], str, int] | None = None
    known_max = parse_version(KNOWN_MAX_VERSION)
    assert known_max is not None
    unknown_types: dict[str, list[int]] = {}  # type -> [first line, count]
    budget = PARSED_BUDGET
    seen_versions: set[str] = set()
    for ln, start, raw, cut in _lines(f):
        collector.sweep()
        src.lines = ln
        if ln == 1 and raw.startswith(BOM):  # a byte-order mark: the record starts after it
            raw = raw[len(BOM) :]
            start += len(BOM)
        if not raw.strip():
            src.problem(ln, "a blank line; skipped", "warning")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            src.problem(
                ln, f"not UTF-8 text (byte 0x{raw[e.start]:02x} at column {e.start + 1}); skipped"
            )
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            if cut:
                src.problem(
                    ln,
                    "the last line is truncated (Claude Code was probably still writing it); skipped",
                )
            else:
                src.problem(ln, f"{_json_error(e)}; skipped")
            continue
        except (RecursionError, ValueError) as e:  # nested too deep, an integer too long
            why = (
                "nested too deep"
                if isinstance(e, RecursionError)
                else f"an integer of more than {sys.get_int_max_str_digits()} digits"
                if "digits" in str(e)
                else str(e)
            )
            src.problem(ln, f"not valid JSON ({why}); skipped")
            continue
        if not isinstance(obj, dict):
            src.problem(ln, f"a record must be a JSON object, got {type(obj).__name__}; skipped")
            continue
        kind = obj.get("type")
        if not isinstance(kind, str):
            src.counts["(no type)"] += 1
            if kind is None:
                src.problem(ln, 'a record without a "type"; skipped')
            else:
                src.problem(ln, f'a record whose "type" is a {type(kind).__name__}; skipped')
            continue
        src.counts[kind] += 1
        if kind in MESSAGE_TYPES or kind in CHAIN_TYPES:
            if not isinstance(obj.get("uuid"), str):
                src.problem(ln, f"a {kind} record without a uuid; skipped")
                continue
            row = len(src.index)
            src.index.add(obj, ln, start, kind)
            if kind != "system" and kind != "attachment":
                src.links.note(obj, kind, ln, row)
            if kind != "progress" and budget > 0:
                # parse once: keep the record for its turn. Its toolUseResult, a copy of the
                # tool's output, is dropped but for what a rule reads: a Skill's command name
                # and the model it switches to (VER-9)
                result = obj.pop("toolUseResult", None)
                if isinstance(result, dict) and "model" in result:
                    obj["toolUseResult"] = {
                        k: result[k] for k in ("commandName", "model") if k in result
                    }
                src.parsed[row] = obj
                budget -= len(raw)
            version = obj.get("version")
            if isinstance(version, str) and version not in seen_versions:
                seen_versions.add(version)
                v = parse_version(version)
                if v is None:
                    src.problem(ln, f"unreadable Claude Code version {version!r}", "warning")
                elif v > known_max and (newest is None or v > newest[0]):
                    newest = (v, version, ln)
        elif kind in METADATA_TYPES:
            if kind == "queue-operation":
                src.queue.append(
                    Entry(
                        line=ln,
                        offset=start,
                        type=kind,
                        session_id=_str(obj.get("sessionId")),
                        operation=_str(obj.get("operation")),
                    )
                )
        else:
            unknown_types.setdefault(kind, [ln, 0])[1] += 1
    for kind, (first, n) in unknown_types.items():
        more = f" ({n} records, the first here)" if n > 1 else ""
        # a newer Claude Code adds record types: read past them, one warning per type
        src.problem(first, f"unknown record type {kind!r}{more}; skipped", "warning")
    if newest is not None:
        src.problem(
            newest[2],
            f"Claude Code version {newest[1]} is newer than this importer knows "
            f"({KNOWN_MAX_VERSION}); its records are read as {KNOWN_MAX_VERSION} records",
            "warning",
        )
    if src.lines == 0:
        src.problems = [Problem(src.name, None, "the file is empty; not a Claude Code transcript")]
        src.is_transcript = False
        return
    if not any(t in (USER, ASSISTANT) for t in src.index.type):
        # one line for the file, not one per line of something else (a hook log, a trace)
        src.is_transcript = False
        src.problems = [
            Problem(
                src.name,
                None,
                f"not a Claude Code transcript: none of its {src.lines} line(s) is a user or "
                "assistant record; skipped",
            )
        ]
