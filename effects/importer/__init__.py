"""Importing Claude Code session transcripts as steploop traces (specs/import.md).

``steploop import PATH...`` (or :func:`import_paths`) reads Claude Code's session files (a file,
a project folder, or ``~/.claude/projects`` itself), follows each file's ``parentUuid`` chain,
cuts every thread into user turns, drives the machine through each turn under
``claude_code_2_1_88()`` with the transcript answering what the machine asks, and writes each
turn as a trace that ``steploop replay`` checks like any other. Every turn gets a verdict: the
machine reproduced the transcript (wrote the same messages, ids aside, and reached an end
state) or not, with the first divergence and its cause.

Modules: :mod:`~effects.importer.source` (reading and indexing a file),
:mod:`~effects.importer.chain` (threads and the chain), :mod:`~effects.importer.convert`
(records as messages), :mod:`~effects.importer.segment` (user turns),
:mod:`~effects.importer.infer` (the inference rules), :mod:`~effects.importer.driver` (driving
the machine), :mod:`~effects.importer.compare` and :mod:`~effects.importer.causes` (the
verdict), :mod:`~effects.importer.session` (one file), :mod:`~effects.importer.cli` (the command).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from effects.importer.causes import CAUSES
from effects.importer.session import IMPORTER, FileReport, TurnReport, _Names, import_file
from effects.importer.source import Problem

__all__ = [
    "CAUSES",
    "IMPORTER",
    "FileReport",
    "ImportSummary",
    "Problem",
    "TurnReport",
    "find_sources",
    "import_file",
    "import_paths",
]


@attrs.define
class ImportSummary:
    """What an import did, file by file and turn by turn."""

    files: list[FileReport] = attrs.field(factory=list)
    missing: list[str] = attrs.field(factory=list)

    @property
    def turns(self) -> list[TurnReport]:
        return [t for f in self.files for t in f.turns]

    @property
    def problems(self) -> list[Problem]:
        return [p for f in self.files for p in f.problems]

    @property
    def transcripts(self) -> int:
        return sum(1 for f in self.files if f.transcript)

    @property
    def reproduced(self) -> int:
        return sum(1 for t in self.turns if t.reproduced)

    @property
    def ended(self) -> int:
        return sum(1 for t in self.turns if t.terminal is not None)

    def causes(self) -> Counter[str]:
        return Counter(t.divergence.cause for t in self.turns if t.divergence is not None)

    def errors(self) -> int:
        return sum(1 for p in self.problems if p.severity == "error")

    def to_json(self) -> dict[str, Any]:
        turns = self.turns
        return {
            "importer": IMPORTER,
            "files": len(self.files),
            "transcripts": self.transcripts,
            "turns": len(turns),
            "ended": self.ended,
            "reproduced": self.reproduced,
            "causes": dict(self.causes()),
            "problems": {
                sev: sum(1 for p in self.problems if p.severity == sev)
                for sev in ("error", "warning", "note")
            },
            "reports": [f.to_json() for f in self.files],
        }


def find_sources(
    paths: Iterable[str | os.PathLike[str]], exclude: Path | None = None
) -> Iterator[tuple[Path, str]]:
    """Every ``*.jsonl`` file under ``paths`` (a file is taken as it is), sorted, each with the
    name it is reported under (relative to the folder given). ``exclude``: a folder to skip (the
    output folder, when it lies inside an input folder)."""
    excluded = exclude.resolve() if exclude is not None else None
    for raw in paths:
        p = Path(raw).expanduser()
        if p.is_dir():
            for f in sorted(p.rglob("*.jsonl")):
                if excluded is not None and excluded in f.resolve().parents:
                    continue
                if f.is_file():
                    yield f, str(f.relative_to(p)) if p != Path(".") else str(f)
        else:
            yield p, str(raw)


def import_paths(
    paths: Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str] | None,
    *,
    progress: Callable[[int, int, str], None] | None = None,
) -> ImportSummary:
    """Import every session file under ``paths`` into ``out_dir`` (one trace per user turn and
    ``import-report.json``); ``out_dir=None`` compares only and writes nothing.

    ``progress(done, total, name)`` is called before each file and once at the end. A path that
    does not exist is listed in ``missing``; nothing raises for bad content.
    """
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    summary = ImportSummary()
    sources: list[tuple[Path, str]] = []
    for raw in paths:
        if not Path(raw).expanduser().exists():
            summary.missing.append(str(raw))
            continue
        sources.extend(find_sources([raw], exclude=out))
    names = _Names(out) if out is not None else None
    for k, (path, name) in enumerate(sources):
        if progress is not None:
            progress(k, len(sources), name)
        summary.files.append(import_file(path, out, name=name, names=names))
    if progress is not None:
        progress(len(sources), len(sources), "")
    if out is not None:
        (out / "import-report.json").write_text(
            json.dumps(summary.to_json(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
        )
    return summary
