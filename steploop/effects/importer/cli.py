"""``steploop import PATH...``: Claude Code transcripts in, steploop traces out (specs/import.md §9).

Prints one line per problem (``FILE:LINE: what``, on stderr), a progress bar on stderr (a
terminal, or ``--progress``), a table per file (user turns, reproduced, the first divergences'
causes) and a summary, with ``rich`` (colour on a terminal only, never with ``NO_COLOR``). Exit status: 0 when every file was read
and imported (warnings and notes allowed), 1 when some input could not be imported (a line or a
file skipped: an error-level problem), 2 for a usage error (a path that does not exist, nothing to
import, an output path that is a file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from steploop.effects.cli_common import CliError, ProgressBar, console_for
from steploop.effects.importer import CAUSES, ImportSummary, find_sources, import_paths
from steploop.reducer import ConfigError, profile

__all__ = ["cmd_import", "register"]

DEFAULT_OUT = "steploop-import"


def _pct(n: int, d: int) -> str:
    return f"{100 * n / d:.1f}%" if d else "-"


def print_summary(summary: ImportSummary, out: TextIO, out_dir: Path | None) -> None:
    """The per-file table, the causes of the divergences and the totals (a ``rich`` table;
    plain columns off a terminal)."""
    from rich.table import Table
    from rich.text import Text

    console = console_for(out)
    table = Table(box=None, pad_edge=False, show_edge=False, padding=(0, 2, 0, 0))
    # on a narrow terminal the names fold onto more lines; the counts and headers stay whole
    table.add_column("file", overflow="fold")
    for name in ("turns", "ended", "reproduced", "to-cut"):
        table.add_column(name, justify="right", no_wrap=True, min_width=len(name))
    table.add_column("first divergences", overflow="fold")
    for f in summary.files:
        if not f.transcript:
            table.add_row(f.file, "-", "-", "-", "-", Text("not a transcript", style="yellow"))
            continue
        table.add_row(
            f.file,
            str(f.turns),
            str(f.ended),
            Text(str(f.reproduced), style="green" if f.reproduced == f.ended else "yellow"),
            str(f.cut) if f.cut else "",
            ", ".join(f"{c} {n}" for c, n in sorted(f.causes.items())),
        )
    console.print(table)
    turns = summary.turns
    line = (
        f"\n{len(summary.files)} file(s), {summary.transcripts} transcript(s), {turns} "
        f"user turn(s): {summary.ended} ended, {summary.reproduced} reproduced exactly "
        f"({_pct(summary.reproduced, summary.ended)} of those that ended)"
    )
    if summary.cut:
        line += f"; {summary.cut} cut off by the transcript, reproduced up to the cut"
    console.print(Text(line, style="bold"))
    causes = summary.causes()
    if causes:
        console.print("first divergences by cause:")
        width = max(len(c) for c in causes)
        for cause, n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])):
            console.print(Text(f"  {cause.ljust(width)}  {n:>4}  {CAUSES[cause]}"))
    probs = summary.problems
    if probs:
        by = {s: sum(1 for p in probs if p.severity == s) for s in ("error", "warning", "note")}
        console.print(
            f"problems: {by['error']} error(s), {by['warning']} warning(s), {by['note']} note(s) "
            "(listed on stderr)"
        )
    if out_dir is not None:
        console.print(
            Text(f"{summary.traces} trace(s) and import-report.json written to {out_dir}")
        )


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    out_dir: Path | None = None if args.no_traces else Path(args.out)
    if out_dir is not None and out_dir.exists() and not out_dir.is_dir():
        raise CliError(f"{out_dir}: exists and is not a directory")
    # usage errors first: a command that has nothing to import writes nothing
    present = [p for p in args.paths if Path(p).expanduser().exists()]
    if not present:
        raise CliError(f"{args.paths[0]}: no such file or directory")
    if next(find_sources(present, exclude=out_dir), None) is None:
        raise CliError(f"no *.jsonl files under {', '.join(args.paths)}")
    if out_dir is not None:
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise CliError(f"{out_dir}: cannot create the output folder: {e.strerror or e}") from None
    if args.profile is not None:
        try:
            profile(args.profile)
        except ConfigError as e:
            raise CliError(str(e)) from None
    err = sys.stderr
    show = bool(args.progress) or err.isatty()
    bar: ProgressBar | None = None
    scale = 1
    shown = 0

    def progress(done: int, total: int, _name: str) -> None:
        # by bytes, so that one large file among many small ones moves the bar too
        nonlocal bar, scale, shown
        if bar is None:
            scale = 1_000_000 if total >= 10_000_000 else 1_000
            bar = ProgressBar(-(-total // scale), "importing", "MB" if scale > 1_000 else "kB", err, show)
        now = -(-done // scale) if done == total else done // scale
        if now > shown:
            bar.advance(now - shown)
            shown = now

    try:
        summary = import_paths(args.paths, out_dir, progress=progress, profile=args.profile)
    except OSError as e:  # the output folder: removed, full, read-only while importing
        raise CliError(f"{out_dir}: cannot write: {e.strerror or e}") from None
    finally:
        if bar is not None:
            bar.close()
    if summary.missing and not summary.files:
        raise CliError(f"{summary.missing[0]}: no such file or directory")
    if not summary.files:
        raise CliError(f"no *.jsonl files under {', '.join(args.paths)}")
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
        "whether the machine (the profile of the Claude Code version the records name) "
        "reproduced the transcript. Exit "
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
    p.add_argument(
        "--profile",
        metavar="NAME",
        default=None,
        help="run every turn under this profile (default, claude_code_2_1_88, full, "
        "claude_code_2_1_56, ...) instead of the profile of the version its records name",
    )
    p.set_defaults(handler=cmd_import)
