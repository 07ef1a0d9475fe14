"""Reading a Claude Code session file: one pass that indexes every line (specs/import.md §2).

A session file is JSONL as Claude Code writes it under ``~/.claude/projects/<project>/``. This
module reads it once, line by line, and keeps a small :class:`Entry` per record (line number,
byte offset, type, uuid, parent links, sidechain and agent ids, the response id); the records'
content stays on disk and is read again, record by record, when a turn is reconstructed
(:meth:`SourceFile.load`). Memory therefore grows with the number of records, by a few hundred
bytes each, never with their content.

Everything that cannot be read becomes a :class:`Problem` (``FILE:LINE: what``): a line that is
not JSON, a truncated last line, a record that is not an object, a record type the importer does
not know, a Claude Code version newer than the importer knows, a file that is not a transcript.
Nothing is dropped without one.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeAlias

import attrs

__all__ = [
    "CHAIN_TYPES",
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
    """What the first pass keeps of one record (its content stays in the file)."""

    line: int
    offset: int
    type: str
    uuid: str | None = None
    parent: str | None = None
    logical_parent: str | None = None
    sidechain: bool = False
    agent_id: str | None = None
    session_id: str | None = None
    version: str | None = None
    response_id: str | None = None  # assistant: message.id
    subtype: str | None = None  # system: subtype
    tool_use_ids: tuple[str, ...] = ()  # assistant: the tool_use ids of its blocks
    tool_result_ids: tuple[str, ...] = ()  # user: the tool_use ids its tool_result blocks answer
    operation: str | None = None  # queue-operation: enqueue, remove, dequeue, ...


@attrs.define
class SourceFile:
    """One session file, indexed. ``entries`` are in file order."""

    path: Path
    name: str
    entries: list[Entry] = attrs.field(factory=list)
    queue: list[Entry] = attrs.field(factory=list)  # queue-operation records (no uuid)
    problems: list[Problem] = attrs.field(factory=list)
    counts: Counter[str] = attrs.field(factory=Counter)
    lines: int = 0
    is_transcript: bool = True

    def problem(self, line: int | None, message: str, severity: Severity = "error") -> None:
        self.problems.append(Problem(self.name, line, message, severity))

    def load(self, entry: Entry) -> dict[str, Any]:
        """The full record of ``entry`` (read again from the file)."""
        with open(self.path, "rb") as f:
            f.seek(entry.offset)
            return _loads(f.readline())

    def load_many(self, entries: list[Entry]) -> Iterator[tuple[Entry, dict[str, Any]]]:
        """The full records of ``entries`` (in the order given), one open file for all."""
        with open(self.path, "rb") as f:
            for e in entries:
                f.seek(e.offset)
                yield e, _loads(f.readline())


def _loads(raw: bytes) -> dict[str, Any]:
    value = json.loads(raw)
    if not isinstance(value, dict):  # pragma: no cover - checked in the first pass
        raise ValueError("not an object")
    return value


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _ids(content: Any, block_type: str, key: str) -> tuple[str, ...]:
    if not isinstance(content, list):
        return ()
    out = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == block_type and isinstance(b.get(key), str):
            out.append(b[key])
    return tuple(out)


def _entry(obj: dict[str, Any], line: int, offset: int, kind: str) -> Entry:
    e = Entry(
        line=line,
        offset=offset,
        type=kind,
        uuid=_str(obj.get("uuid")),
        parent=_str(obj.get("parentUuid")),
        logical_parent=_str(obj.get("logicalParentUuid")),
        sidechain=obj.get("isSidechain") is True,
        agent_id=_str(obj.get("agentId")),
        session_id=_str(obj.get("sessionId")),
        version=_str(obj.get("version")),
    )
    msg = obj.get("message")
    if kind == "assistant" and isinstance(msg, dict):
        e.response_id = _str(msg.get("id"))
        e.tool_use_ids = _ids(msg.get("content"), "tool_use", "id")
    elif kind == "user" and isinstance(msg, dict):
        e.tool_result_ids = _ids(msg.get("content"), "tool_result", "tool_use_id")
    elif kind == "system":
        e.subtype = _str(obj.get("subtype"))
    return e


def _json_error(e: json.JSONDecodeError) -> str:
    return f"not valid JSON: {e.msg} at column {e.colno}"


def read_source(path: str | os.PathLike[str], name: str | None = None) -> SourceFile:
    """Index a session file (IMP-1, IMP-2). Never raises for bad content; an unreadable file
    is one problem without a line."""
    p = Path(path)
    src = SourceFile(path=p, name=name or str(path))
    try:
        data = p.read_bytes()
    except OSError as e:
        src.problem(None, f"cannot be read: {e.strerror or e}")
        src.is_transcript = False
        return src
    if not data:
        src.problem(None, "the file is empty; not a Claude Code transcript")
        src.is_transcript = False
        return src
    newest: tuple[tuple[int, ...], str, int] | None = None
    known_max = parse_version(KNOWN_MAX_VERSION)
    assert known_max is not None
    unknown_types: dict[str, list[int]] = {}  # type -> [first line, count]
    offset = 0
    raw_lines = data.split(b"\n")
    if raw_lines and raw_lines[-1] == b"":
        raw_lines.pop()
        ends_with_newline = True
    else:
        ends_with_newline = False
    last = len(raw_lines)
    for ln, raw in enumerate(raw_lines, 1):
        start = offset
        offset += len(raw) + 1
        src.lines = ln
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
            if ln == last and not ends_with_newline:
                src.problem(
                    ln,
                    "the last line is truncated (Claude Code was probably still writing it); skipped",
                )
            else:
                src.problem(ln, f"{_json_error(e)}; skipped")
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
            ent = _entry(obj, ln, start, kind)
            if ent.uuid is None:
                src.problem(ln, f"a {kind} record without a uuid; skipped")
                continue
            src.entries.append(ent)
            if ent.version is not None:
                v = parse_version(ent.version)
                if v is None:
                    src.problem(ln, f"unreadable Claude Code version {ent.version!r}", "warning")
                elif v > known_max and (newest is None or v > newest[0]):
                    newest = (v, ent.version, ln)
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
        src.problem(first, f"unknown record type {kind!r}{more}; skipped")
    if newest is not None:
        src.problem(
            newest[2],
            f"Claude Code version {newest[1]} is newer than this importer knows "
            f"({KNOWN_MAX_VERSION}); its records are read as {KNOWN_MAX_VERSION} records",
            "warning",
        )
    if not any(e.type in ("user", "assistant") for e in src.entries):
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
    return src
