"""The trace commands of the ``steploop`` CLI: replay, diff, show, stats and resume.

:func:`register` adds them to the main parser's subparsers; each handler has the signature
``(args, out) -> int`` and reports a user error by raising ``steploop.effects.cli_common.CliError`` or a
``steploop.reducer.SteploopError`` (one line, exit status 2). Exit status 1 means "ran, but the answer
is no": a replay mismatch or divergence, or two traces that differ.

``show`` lives in :mod:`steploop.effects.show_cli`. ``python -m steploop.effects.trace_cli``
runs these commands on their own.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from steploop.effects.cli_common import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    CliError,
    ProgressBar,
    console_for,
    count_steps,
    for_terminal,
    live_model,
    load_json,
    one_line,
    parse_overrides,
    printable,
)
from steploop.effects.redaction import Redactor
from steploop.effects.show_cli import SHOW_ALL_UP_TO, SHOW_ENDS, cmd_show
from steploop.effects.trace import (
    DEFAULT_CHECKPOINT_EVERY,
    POLICIES,
    VERIFY_POLICIES,
    Policy,
    ReplayProgress,
    TraceError,
    TraceReader,
    describe_effect,
    describe_request,
    make_provenance,
    prepare_resume,
    replay_counterfactual_async,
    replay_exact,
    resume_trace,
)
from steploop.reducer import LoopConfig, SteploopError
from steploop.reducer.config import profile_for

__all__ = ["TRACE_COMMANDS", "claude_code_transcript", "explain", "main", "register"]

Handler = Callable[[argparse.Namespace, TextIO], int]


# ----------------------------------------------------------------------------------------------
# Helpers


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _overrides(pairs: Sequence[str] | None) -> dict[str, Any]:
    return parse_overrides(pairs)


def _load_json(path: str) -> Any:
    return load_json(path, "script")


#: Keys of a Claude Code transcript record (never of a steploop trace record).
_CLAUDE_CODE_KEYS = ("sessionId", "parentUuid", "leafUuid", "isSidechain", "messageId")


def claude_code_transcript(path: str | os.PathLike[str]) -> bool:
    """Whether the first record of ``path`` is a Claude Code transcript's: no ``record`` key,
    and a ``type`` Claude Code writes or a key of its session chain (the first MB is read)."""
    from steploop.effects.importer.source import CHAIN_TYPES, MESSAGE_TYPES, METADATA_TYPES

    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return False
    line = head.removeprefix(b"\xef\xbb\xbf").split(b"\n", 1)[0].strip()
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # a first line longer than what was read, not JSON
        return line.startswith(b'{"') and any(b'"%s":' % k.encode() in line for k in _CLAUDE_CODE_KEYS)
    if not isinstance(obj, dict) or "record" in obj:
        return False
    kind = obj.get("type")
    known = isinstance(kind, str) and kind in MESSAGE_TYPES | CHAIN_TYPES | METADATA_TYPES
    return isinstance(kind, str) and (known or any(k in obj for k in _CLAUDE_CODE_KEYS))


def explain(e: Exception) -> str:
    """The one-line message for a user error; a trace command given a Claude Code transcript
    is told so, and what makes a trace of it."""
    if isinstance(e, TraceError) and e.line in (None, 1) and claude_code_transcript(e.file):
        return (
            f"{e.file}: a Claude Code transcript, not a steploop trace; "
            f"`steploop import {shlex.quote(e.file)}` makes a trace of it (then show or "
            "replay that)"
        )
    return str(e)


# ----------------------------------------------------------------------------------------------
# replay


def _recorded_config(path: str) -> LoopConfig:
    reader = TraceReader(path)
    for _rec in reader:
        break
    assert reader.header is not None
    return reader.header.config


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    counterfactual = bool(
        args.set or args.profile or args.on_divergence or args.script or args.html
    )
    from steploop.effects import corpus  # several traces, a directory, --jobs, --scheduler

    if corpus.is_corpus(args):
        if counterfactual:
            raise CliError("counterfactual replay takes one trace file")
        return corpus.replay_command(args, out)
    args.trace = args.trace[0] if isinstance(args.trace, list) else args.trace
    err = sys.stderr
    show = bool(args.progress) or err.isatty()
    if not counterfactual:
        total = count_steps(args.trace) if show else None
        with ProgressBar(total, "replaying", "steps", err, show) as bar:
            report = replay_exact(
                args.trace,
                verify=args.verify or "every",
                checkpoint_every=args.checkpoint_every or DEFAULT_CHECKPOINT_EVERY,
                on_step=(lambda _rec: bar.advance()) if show else None,
            )
        _print_verdict(report.describe(), report.ok, out)
        return 0 if report.ok else 1
    if args.verify or args.checkpoint_every:
        raise CliError("--verify and --checkpoint-every apply to exact replay only")
    import anyio

    policy: Policy = args.on_divergence or "stop"
    if args.script and policy != "scripted":
        raise CliError("--script goes with --on-divergence scripted")
    if policy == "scripted" and not args.script:
        raise CliError("--on-divergence scripted needs --script FILE (a JSON list of responses)")
    base: LoopConfig | None = None
    if args.profile:  # [P-RUN-1] the profile's machine, the recorded run's model and window
        base = profile_for(args.profile, _recorded_config(args.trace))
    overrides = _overrides(args.set)
    script = _load_json(args.script) if args.script else None
    client: Any = None
    model: Any = None
    if policy == "live":
        from steploop.effects.tools import ToolRegistry, builtin_tools

        registry = ToolRegistry(builtin_tools("."))
        client, model = live_model(
            registry.traits,
            registry.definitions(),
            instead="answer from a script instead (--on-divergence scripted --script FILE)",
        )

    bytes_bar = _ByteBar("replaying", err, show)
    scratch = tempfile.TemporaryDirectory(prefix="steploop-replay-") if args.html else None
    record = os.path.join(scratch.name, "counterfactual.jsonl") if scratch is not None else None

    async def go() -> Any:
        try:
            return await replay_counterfactual_async(
                args.trace,
                overrides,
                policy,
                script,
                base=base,
                model=model,
                progress=bytes_bar.update if show else None,
                record=record,
            )
        finally:
            if client is not None:
                await client.close()

    try:
        try:
            report = anyio.run(go)
        finally:
            bytes_bar.close()
        what = [f"profile {args.profile}" if args.profile else "the recorded config"]
        if overrides:
            what.append("overrides " + ", ".join(f"{k}={v!r}" for k, v in overrides.items()))
        title = f"counterfactual replay of {args.trace} with {'; '.join(what)}; on divergence: {policy}"
        print(title, file=out)
        _print_verdict(report.describe(), report.ok, out)
        if record is not None:
            from steploop.effects.viewer import write_replay_html

            path = write_replay_html(args.trace, record, args.html, report=report, title=title)
            print(f"wrote {path} (the recording and the new run side by side)", file=out)
    finally:
        if scratch is not None:
            scratch.cleanup()
    return 0 if report.ok else 1


class _ByteBar:
    """A :class:`ProgressBar` over the bytes of the recording a counterfactual replay reads
    (the new run reads it as far as it needs it, so both of its phases move one bar), in kB,
    or MB from 10 MB on; made on the first report, when the file's size is known."""

    def __init__(self, label: str, stream: TextIO, enabled: bool) -> None:
        self.label, self.stream, self.enabled = label, stream, enabled
        self.bar: ProgressBar | None = None
        self.scale = 1_000
        self.shown = 0

    def update(self, p: ReplayProgress) -> None:
        if self.bar is None:
            self.scale = 1_000_000 if p.total >= 10_000_000 else 1_000
            unit = "MB" if self.scale > 1_000 else "kB"
            total = -(-p.total // self.scale)
            self.bar = ProgressBar(total, self.label, unit, self.stream, self.enabled)
        now = -(-p.done // self.scale) if p.done >= p.total else p.done // self.scale
        if now > self.shown:
            self.bar.advance(now - self.shown)
            self.shown = now

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _say(text: str, out: TextIO) -> None:
    """One line of a report (text from a trace): secrets hidden, control characters escaped."""
    print(for_terminal(text), file=out)


def _print_verdict(text: str, ok: bool, out: TextIO) -> None:
    """A replay's report: its first line green when it held, red when not."""
    from rich.text import Text

    console = console_for(out)
    first, _, rest = for_terminal(text).partition("\n")
    console.print(Text(first, style="green" if ok else "bold red"))
    if rest:
        console.print(Text(rest))


# ----------------------------------------------------------------------------------------------
# diff


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.effects.trace_diff import diff_traces

    found = diff_traces(args.a, args.b, exact=bool(args.exact))
    for line in found.lines:
        _say(line, out)
    if args.html:
        from steploop.effects.viewer import write_compare_html

        path = write_compare_html(args.a, args.b, args.html, diff=found)
        print(f"wrote {path} (A and B side by side: open it in a browser)", file=out)
    return 0 if found.identical else 1


# ----------------------------------------------------------------------------------------------
# stats


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.effects.corpus import stats_command  # in parallel: steploop/effects/corpus.py

    return stats_command(args, out)


# ----------------------------------------------------------------------------------------------
# resume


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    import anyio

    from steploop.effects.cli_drive import (
        Display,
        PermissionAsker,
        drive,
        permission_setup,
        stop_hooks_from_args,
    )
    from steploop.effects.redaction import client_secrets
    from steploop.effects.tools import Read, ToolRegistry, builtin_tools
    from steploop.effects.trace.resume import check_resumable

    # read the trace before anything else: a bad trace is the first thing to report; nothing
    # is written to it before everything else is checked
    point = prepare_resume(args.trace)
    check_resumable(point)
    recorded_ws = point.header.provenance.get("workspace")
    ws_arg = args.workspace or (recorded_ws if isinstance(recorded_ws, str) else ".")
    workspace = Path(ws_arg).resolve()
    if not workspace.is_dir():
        raise CliError(f"workspace {workspace} is not a directory (pass --workspace DIR)")
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=args.enable_bash))
    policy, mode = permission_setup(args)
    redactor = Redactor()
    display = Display(out, redactor, first_round=point.rounds)
    read = registry.get("Read")
    # E-STALE-2: the files the killed run's model read, read again (as Claude Code's resume)
    restored = read.restore(point.messages()) if isinstance(read, Read) else 0
    hooks, notes = stop_hooks_from_args(args, workspace, mode, on_report=display.hook_report)
    client: Any = None
    model: Any
    script: Any = None
    if args.scripted:
        from steploop.effects.scripted import ScriptedModel, ScriptError

        try:
            script = ScriptedModel.from_json(_load_json(args.scripted), traits_for=registry.traits)
            script.skip(point.model_answers)  # the killed run's script: on from the first unused
        except ScriptError as bad:
            raise CliError(f"script {args.scripted}: {bad}") from None
        model = script
    else:
        client, model = live_model(registry.traits, registry.definitions())
    redactor.add(client_secrets(model))
    for note in notes:
        display.line(note, "yellow")
    with resume_trace(point, provenance=make_provenance(model=model, workspace=workspace)) as rs:
        cut = " (dropped a truncated last line)" if point.truncated_tail else ""
        used = (
            f"; the script goes on from its answer {point.model_answers + 1}"
            if script is not None
            else ""
        )
        display.line(f"resuming {point.path} after step {point.last_step}{cut}{used}")
        if restored:
            display.line(f"  read again: {restored} file(s) the model had read (Edit and Write accept them)")
        for ev in rs.synthesized:
            display.line(f"  settled: {describe_effect(ev, 160)}")
        for e in rs.reissued:
            display.line(f"  issued again: {describe_request(e)}")
        for e in rs.requested:
            display.line(f"  then: {describe_request(e)}")
        r = rs.run(
            model=model,
            tools=registry,
            workspace=workspace,
            permissions=policy,
            stop_hooks=hooks,
        )

        async def go() -> Any:
            try:
                return await drive(r, display, PermissionAsker(redactor=redactor))
            finally:
                if client is not None:
                    await client.close()

        res = anyio.run(go)
    code = display.result(res, what="this run's ")
    display.line(f"appended to {point.path}")
    return code


# ----------------------------------------------------------------------------------------------
# Registration


TRACE_COMMANDS: dict[str, Handler] = {
    "replay": cmd_replay,
    "diff": cmd_diff,
    "show": cmd_show,
    "stats": cmd_stats,
    "resume": cmd_resume,
}


def register(subparsers: Any) -> dict[str, Handler]:
    """Add the trace commands to ``parser.add_subparsers(...)``; returns name -> handler
    (each subparser also carries it as the ``handler`` default)."""
    from steploop.effects.corpus import add_options as corpus_options

    p = subparsers.add_parser(
        "replay",
        help="replay a trace exactly, or under another config (counterfactual)",
        description="Without options: exact replay (every effect and state digest checked). "
        "With --set/--profile/--on-divergence: counterfactual replay.",
    )
    p.add_argument("trace", metavar="TRACE", nargs="+", help="a trace, or several, a DIR, @LIST")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    p.add_argument(
        "--profile", metavar="NAME", help="start from this profile, not the recorded config"
    )
    p.add_argument(
        "--on-divergence",
        choices=POLICIES,
        help="when the recording cannot answer: stop (default), scripted, or live",
    )
    p.add_argument("--script", metavar="FILE", help="the JSON script for --on-divergence scripted")
    p.add_argument(
        "--html",
        metavar="OUT.html",
        help="counterfactual replay: write the recording and the new run side by side, aligned "
        "by round, the first divergence named (one self-contained page)",
    )
    p.add_argument(
        "--verify",
        choices=VERIFY_POLICIES,
        help="exact replay: check the state digest after every step (default), or only at "
        "checkpoints (faster; effects are still checked at every step, and a difference is "
        "reported at its first step, but a digest wrong only between checkpoints is not seen)",
    )
    p.add_argument(
        "--progress", action="store_true", help="show the progress bar even off a terminal"
    )
    p.add_argument(
        "--checkpoint-every",
        type=_at_least_one,
        metavar="N",
        help=f"steps between checkpoints (default {DEFAULT_CHECKPOINT_EVERY})",
    )
    corpus_options(p)
    p.set_defaults(handler=cmd_replay)

    d = subparsers.add_parser("diff", help="the first divergence between two traces")
    d.add_argument("a", metavar="A")
    d.add_argument("b", metavar="B")
    d.add_argument("--exact", action="store_true", help="compare event times and state digests too")
    d.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write A and B side by side, aligned by round, the first divergence named "
        "(one self-contained page)",
    )
    d.set_defaults(handler=cmd_diff)

    s = subparsers.add_parser("show", help="a trace's timeline, one row per round")
    s.add_argument("trace", metavar="TRACE")
    s.add_argument(
        "--summary",
        action="store_true",
        help="totals per round kind, tools by name and tokens instead of the rows",
    )
    s.add_argument(
        "--all",
        action="store_true",
        help=f"every round (past {SHOW_ALL_UP_TO} rounds only the first and last {SHOW_ENDS} are shown)",
    )
    s.add_argument(
        "--html",
        metavar="OUT.html",
        help="write the step-through viewer: rounds, requests, steps, tokens per context "
        "layer, the timeline and the machine's diagram (one self-contained HTML file)",
    )
    s.set_defaults(handler=cmd_show)

    st = subparsers.add_parser(
        "stats", help="transition, terminal, compaction and token counts over traces"
    )
    st.add_argument("dir", metavar="DIR", nargs="+", help="directories, traces, @LIST files")
    corpus_options(st, progress=True)
    st.add_argument(
        "--format",
        nargs=2,
        metavar=("FORMAT", "OUT"),
        help="also write the tables turns and rounds (one row per trace, one per round) into "
        "the directory OUT as FORMAT: parquet (needs steploop[parquet]), csv or json (JSON "
        "Lines); columns in docs/viewer.md",
    )
    st.set_defaults(handler=cmd_stats)

    r = subparsers.add_parser("resume", help="continue a killed run, appending to its trace")
    r.add_argument("trace", metavar="TRACE")
    r.add_argument(
        "--scripted",
        metavar="FILE",
        help="answer model calls from the killed run's JSON script, from the first answer "
        "the recorded part did not use",
    )
    r.add_argument("--workspace", metavar="DIR", help="default: the one recorded in the trace")
    r.add_argument("--enable-bash", action="store_true", help="offer the Bash tool")
    from steploop.effects.cli_drive import add_permission_args, add_stop_hook_args

    add_permission_args(r)
    add_stop_hook_args(r)
    r.set_defaults(handler=cmd_resume)
    return dict(TRACE_COMMANDS)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one trace command (what ``steploop`` does for these commands)."""
    out = printable(out or sys.stdout)
    parser = argparse.ArgumentParser(prog="steploop", description="steploop trace commands")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args, out))
    except (CliError, SteploopError) as e:
        print(f"steploop: error: {for_terminal(one_line(explain(e)))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("steploop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
