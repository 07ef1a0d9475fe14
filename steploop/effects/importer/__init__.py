"""Importing Claude Code session transcripts as steploop traces (specs/import.md).

``steploop import PATH...`` (or :func:`import_paths`) reads Claude Code's session files (a file,
a project folder, or ``~/.claude/projects`` itself), follows each file's ``parentUuid`` chain,
cuts every thread into user turns, drives the machine through each turn under
``claude_code_2_1_88()`` with the transcript answering what the machine asks, and writes each
turn as a trace that ``steploop replay`` checks like any other. Every turn gets a verdict:
``reproduced`` (the machine wrote the same messages, ids aside, and reached an end state),
``reproduced-to-cut`` (the transcript cuts the turn off, and up to the cut the machine wrote what
it holds) or ``diverged``, with the first divergence and its cause.

Modules: :mod:`~steploop.effects.importer.source` (reading and indexing a file),
:mod:`~steploop.effects.importer.chain` (threads and the chain), :mod:`~steploop.effects.importer.convert`
(records as messages), :mod:`~steploop.effects.importer.segment` (user turns),
:mod:`~steploop.effects.importer.infer` (the inference rules), :mod:`~steploop.effects.importer.driver` (driving
the machine), :mod:`~steploop.effects.importer.compare` and :mod:`~steploop.effects.importer.causes` (the
verdict), :mod:`~steploop.effects.importer.session` (one file), :mod:`~steploop.effects.importer.cli` (the command).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tempfile
import textwrap
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import attrs

from steploop.effects.importer.causes import CAUSES
from steploop.effects.importer.places import Children, source_order
from steploop.effects.importer.session import (
    IMPORTER,
    FileReport,
    TraceNames,
    TurnReport,
    import_file,
)
from steploop.effects.importer.source import Problem

__all__ = [
    "CAUSES",
    "IMPORTER",
    "FileReport",
    "FileSummary",
    "ImportSummary",
    "Problem",
    "TurnReport",
    "find_sources",
    "import_file",
    "import_paths",
]


@attrs.define(slots=True)
class FileSummary:
    """What the summary keeps of one file once its report is written: counts, not turns (a
    folder of many files is imported in memory that does not grow with its turns)."""

    file: str
    transcript: bool
    turns: int
    ended: int
    reproduced: int
    cut: int  # cut off by the transcript, reproduced up to the cut (IMP-22)
    traces: int
    causes: dict[str, int]
    problems: list[Problem]

    @classmethod
    def of(cls, report: FileReport) -> FileSummary:
        return cls(
            file=report.file,
            transcript=report.transcript,
            turns=len(report.turns),
            ended=sum(1 for t in report.turns if t.terminal is not None),
            reproduced=sum(1 for t in report.turns if t.reproduced),
            cut=sum(1 for t in report.turns if t.verdict == "reproduced-to-cut"),
            traces=sum(1 for t in report.turns if t.trace is not None),
            causes=dict(
                Counter(t.divergence.cause for t in report.turns if t.divergence is not None)
            ),
            problems=report.problems,
        )


@attrs.define
class ImportSummary:
    """What an import did, file by file (the turns are in each file's report: ``on_file``
    and ``import-report.json``)."""

    files: list[FileSummary] = attrs.field(factory=list)
    missing: list[str] = attrs.field(factory=list)

    @property
    def turns(self) -> int:
        return sum(f.turns for f in self.files)

    @property
    def problems(self) -> list[Problem]:
        return [p for f in self.files for p in f.problems]

    @property
    def transcripts(self) -> int:
        return sum(1 for f in self.files if f.transcript)

    @property
    def reproduced(self) -> int:
        return sum(f.reproduced for f in self.files)

    @property
    def ended(self) -> int:
        return sum(f.ended for f in self.files)

    @property
    def cut(self) -> int:
        """Turns the transcript cuts off, reproduced up to the cut (IMP-22)."""
        return sum(f.cut for f in self.files)

    @property
    def traces(self) -> int:
        return sum(f.traces for f in self.files)

    def causes(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for f in self.files:
            out.update(f.causes)
        return out

    def errors(self) -> int:
        return sum(1 for p in self.problems if p.severity == "error")

    def totals(self) -> dict[str, Any]:
        """The report's totals (``import-report.json`` beside the per-file ``reports``)."""
        probs = self.problems
        return {
            "files": len(self.files),
            "transcripts": self.transcripts,
            "turns": self.turns,
            "ended": self.ended,
            "reproduced": self.reproduced,
            "reproduced_to_cut": self.cut,
            "causes": dict(self.causes()),
            "problems": {
                sev: sum(1 for p in probs if p.severity == sev)
                for sev in ("error", "warning", "note")
            },
        }


class _Report:
    """``import-report.json`` written as the import goes: each file's report when the file is
    done (so no report waits in memory), the totals at the end. Written under a temporary name
    and renamed when complete, so the file is never a truncated JSON document."""

    def __init__(self, out: Path) -> None:
        self.path = out / "import-report.json"
        self.partial = out / "import-report.json.partial"
        self.f = self.partial.open("w", encoding="utf-8")
        self.f.write('{\n "importer": ' + json.dumps(IMPORTER) + ',\n "reports": [')
        self.first = True

    def add(self, report: FileReport) -> None:
        text = json.dumps(report.to_json(), indent=1, ensure_ascii=False)
        self.f.write(("\n" if self.first else ",\n") + textwrap.indent(text, "  "))
        self.first = False

    def finish(self, summary: ImportSummary) -> None:
        self.f.write("\n ],\n")
        totals = json.dumps(summary.totals(), indent=1, ensure_ascii=False)
        self.f.write(totals[2:] + "\n")  # its members, after the reports: '{\n' left out
        self.f.close()
        os.replace(self.partial, self.path)

    def abandon(self) -> None:
        self.f.close()
        self.partial.unlink(missing_ok=True)


def _within(
    progress: Callable[[int, int, str], None], before: int, size: int, total: int, name: str
) -> Callable[[float], None]:
    """Progress inside one file: its bytes counted in proportion to the part read."""
    return lambda part: progress(before + int(size * part), total, name)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # reported when the file is read


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
            for f in sorted(p.rglob("*.jsonl"), key=lambda f: source_order(f, p)):
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
    on_file: Callable[[FileReport], None] | None = None,
    profile: str | None = None,
) -> ImportSummary:
    """Import every session file under ``paths`` into ``out_dir`` (one trace per user turn and
    ``import-report.json``); ``out_dir=None`` compares only and writes nothing.

    ``progress(done, total, name)`` counts bytes of the files: it is called before each file,
    after each of its turns (the file's bytes counted in proportion to its lines read) and once
    at the end (``done == total``); ``on_file(report)`` with each file's full report (its turns,
    their verdicts) when the file is done. The summary keeps counts per file, so memory does not grow with the number of
    turns. A path that does not exist is listed in ``missing``; nothing raises for bad content.
    ``profile``: every turn runs under this named profile instead of its records' version's.
    """
    out = Path(out_dir) if out_dir is not None else None
    summary = ImportSummary()
    sources: list[tuple[Path, str]] = []
    for raw in paths:
        if not Path(raw).expanduser().exists():
            summary.missing.append(str(raw))
            continue
        sources.extend(find_sources([raw], exclude=out))
    if not sources:
        return summary  # nothing to import: nothing written, not even the folder
    with contextlib.ExitStack() as stack:
        spool = _Spool(stack)
        sources = [(spool.seekable(path), name) for path, name in sources]
        _import_sources(sources, out, summary, progress, on_file, profile)
    return summary


class _Spool:
    """A pipe or a device named as an input (``steploop import <(zcat s.jsonl.gz)``) is read
    once into a temporary file: the import reads a session twice, the second time by offsets.
    The files go with the import."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        self._stack = stack
        self._dir: Path | None = None
        self._count = 0

    def seekable(self, path: Path) -> Path:
        try:
            mode = path.stat().st_mode
        except OSError:
            return path  # reported when it is read
        if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            return path
        if self._dir is None:
            self._dir = Path(
                self._stack.enter_context(tempfile.TemporaryDirectory(prefix="steploop-import-"))
            )
        self._count += 1
        copy = self._dir / f"{self._count}.jsonl"
        try:
            with open(path, "rb") as source, open(copy, "wb") as target:
                shutil.copyfileobj(source, target)
        except OSError:
            return path  # reported when it is read
        return copy


def _import_sources(
    sources: list[tuple[Path, str]],
    out: Path | None,
    summary: ImportSummary,
    progress: Callable[[int, int, str], None] | None,
    on_file: Callable[[FileReport], None] | None,
    profile: str | None,
) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    names = TraceNames(out) if out is not None else None
    children = Children()
    report = _Report(out) if out is not None else None
    sizes = [_size(path) for path, _ in sources]
    total = sum(sizes)
    before = 0  # bytes of the files already imported
    try:
        for (path, name), size in zip(sources, sizes, strict=True):
            on_turn = None
            if progress is not None:
                progress(before, total, name)
                on_turn = _within(progress, before, size, total, name)
            rep = import_file(
                path,
                out,
                name=name,
                names=names,
                on_turn=on_turn,
                children=children,
                profile=profile,
            )
            before += size
            if on_file is not None:
                on_file(rep)
            if report is not None:
                report.add(rep)
            summary.files.append(FileSummary.of(rep))
            del rep  # the next file's turns do not wait for this one's
        if progress is not None:
            progress(total, total, "")
    except BaseException:
        if report is not None:
            report.abandon()
        raise
    if report is not None:
        report.finish(summary)
