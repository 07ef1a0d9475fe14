"""``steploop import PATH...``: Claude Code transcripts in, steploop traces out (specs/import.md §9).

Prints one line per problem (``FILE:LINE: what``, on stderr), a table per file (user turns,
reproduced, the first divergences' causes) and a summary. Exit status: 0 when every file was read
and imported (warnings and notes allowed), 1 when some input could not be imported (a line or a
file skipped: an error-level problem), 2 for a usage error (a path that does not exist, nothing to
import, an output path that is a file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from effects.importer import CAUSES, ImportSummary, import_paths

__all__ = ["cmd_import", "register"]

DEFAULT_OUT = "steploop-import"


class _Progress:
    """``import [#####     ] 3/17 files  NAME`` on stderr, when it is a terminal or asked for."""

    def __init__(self, stream: TextIO, enabled: bool, width: int = 30) -> None:
        self.stream = stream
        self.enabled = enabled
        self.width = width
        self._shown = False

    def __call__(self, done: int, total: int, name: str) -> None:
        if not self.enabled or total == 0:
            return
        filled = self.width * done // total
        bar = "#" * filled + " " * (self.width - filled)
        tail = name if len(name) <= 40 else "…" + name[-39:]
        self.stream.write(f"\rimport [{bar}] {done}/{total} files  {tail:<40}")
        self.stream.flush()
        self._shown = True
        if done == total:
            self.stream.write("\n")
            self.stream.flush()


def _error(message: str) -> Exception:
    from effects.cli import CliError

    return CliError(message)


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "-"


def print_summary(summary: ImportSummary, out: TextIO, out_dir: Path | None) -> None:
    """The per-file table, the causes of the divergences and the totals."""
    rows = [("file", "turns", "ended", "reproduced", "first divergences")]
    for f in summary.files:
        if not f.transcript:
            rows.append((f.file, "-", "-", "-", "not a transcript"))
            continue
        causes: dict[str, int] = {}
        for t in f.turns:
            if t.divergence is not None:
                causes[t.divergence.cause] = causes.get(t.divergence.cause, 0) + 1
        ended = sum(1 for t in f.turns if t.terminal is not None)
        rep = sum(1 for t in f.turns if t.reproduced)
        rows.append(
            (
                f.file,
                str(len(f.turns)),
                str(ended),
                str(rep),
                ", ".join(f"{c} {n}" for c, n in sorted(causes.items())),
            )
        )
    widths = [max(len(r[k]) for r in rows) for k in range(5)]
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [r[k].rjust(widths[k]) for k in (1, 2, 3)] + [r[4]]
        print("  ".join(cells).rstrip(), file=out)
    turns = summary.turns
    print(
        f"\n{len(summary.files)} file(s), {summary.transcripts} transcript(s), {len(turns)} user "
        f"turn(s): {summary.ended} ended, {summary.reproduced} reproduced exactly "
        f"({_pct(summary.reproduced, len(turns))})",
        file=out,
    )
    causes = summary.causes()
    if causes:
        print("first divergences by cause:", file=out)
        width = max(len(c) for c in causes)
        for cause, n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {cause.ljust(width)}  {n:>4}  {CAUSES[cause]}", file=out)
    probs = summary.problems
    if probs:
        by = {s: sum(1 for p in probs if p.severity == s) for s in ("error", "warning", "note")}
        print(
            f"problems: {by['error']} error(s), {by['warning']} warning(s), {by['note']} note(s) "
            "(listed on stderr)",
            file=out,
        )
    if out_dir is not None:
        written = sum(1 for t in turns if t.trace is not None)
        print(f"{written} trace(s) and import-report.json written to {out_dir}", file=out)


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    out_dir: Path | None = None if args.no_traces else Path(args.out)
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise _error(f"{out_dir}: exists and is not a directory")
    err = sys.stderr
    progress = _Progress(err, bool(args.progress) or err.isatty())
    summary = import_paths(args.paths, out_dir, progress=progress)
    if summary.missing and not summary.files:
        raise _error(f"{summary.missing[0]}: no such file or directory")
    if not summary.files:
        raise _error(f"no *.jsonl files under {', '.join(args.paths)}")
    for m in summary.missing:
        print(f"steploop: error: {m}: no such file or directory", file=err)
    for p in summary.problems:
        print(f"steploop: {p.severity}: {p}", file=err)
    print_summary(summary, out, out_dir)
    return 1 if summary.errors() or summary.missing else 0


def register(subparsers: Any) -> None:
    """Add ``import`` to the main parser's subparsers."""
    p = subparsers.add_parser(
        "import",
        help="import Claude Code session transcripts as traces, and check them against the machine",
        description="Read Claude Code session files (a .jsonl file, a project folder, or "
        "~/.claude/projects), write one steploop trace per user turn, and report for each turn "
        "whether the machine (claude_code_2_1_88 profile) reproduced the transcript. Exit "
        "status: 0 all imported, 1 some input could not be imported (listed on stderr), 2 usage "
        "error.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH")
    p.add_argument(
        "-o",
        "--out",
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"where the traces and import-report.json go (default: ./{DEFAULT_OUT})",
    )
    p.add_argument(
        "--no-traces", action="store_true", help="only compare and report; write nothing"
    )
    p.add_argument(
        "--progress", action="store_true", help="show the progress bar even off a terminal"
    )
    p.set_defaults(handler=cmd_import)
