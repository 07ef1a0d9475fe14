"""The ``steploop`` command line.

``steploop demo`` runs the walk-through the project started from live: a scripted model, the real built-in
tools on a scratch copy of a small sample project, the Edit approved, every transition shown as
it happens. ``steploop run PROMPT`` runs an agent on a workspace.

Every user error prints one line ``steploop: error: ...`` and exits with status 2; no traceback.
The exit codes are the table in :mod:`steploop.effects.cli_common` (README "Exit codes").
"""

from __future__ import annotations

import argparse
import shutil
import stat
import sys
import tempfile
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio

from steploop.effects.cli_common import (
    DEMO_PROMPT,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    SAMPLE_PROJECT,
    CliError,
    config_from,
    demo_script,
    for_terminal,
    live_model,
    load_json,
    one_line,
    printable,
    quiet_output,
)
from steploop.effects.cli_drive import (
    Display,
    PermissionAsker,
    add_mcp_args,
    add_permission_args,
    add_stop_hook_args,
    describe,
    drive,
    mcp_from_args,
    permission_setup,
    stop_hooks_from_args,
    telemetry_from_env,
)
from steploop.effects.redaction import Redactor, client_secrets
from steploop.effects.run import PermissionPolicy, PermissionRequest, run
from steploop.effects.tools.base import ToolRegistry
from steploop.effects.tools.builtin import builtin_tools
from steploop.reducer import ConfigError, LoopConfig, SteploopError

# DEMO_PROMPT, SAMPLE_PROJECT, demo_script and printable live in cli_common (temporal's CLI
# uses them too); they are named here as well, where the demo is
__all__ = [
    "DEMO_PROMPT",
    "SAMPLE_PROJECT",
    "CliError",
    "build_parser",
    "demo_script",
    "describe",
    "main",
    "printable",
]

# ----------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------


def _config(args: argparse.Namespace) -> LoopConfig:
    extra: dict[str, Any] = {}
    retries = getattr(args, "max_retries", None)
    if retries is not None:
        if retries < 0:
            raise CliError(f"--max-retries must be 0 or more, got {retries}")
        extra["retry.max_retries"] = retries
    return config_from(getattr(args, "profile", None), getattr(args, "set", None), extra)


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.effects.scripted import ScriptedModel

    config = _config(args)  # a bad --profile or --set fails before anything is made
    scratch = Path(tempfile.mkdtemp(prefix="steploop-demo-"))
    try:
        workspace = scratch / "sample_project"
        shutil.copytree(SAMPLE_PROJECT, workspace)
        registry = ToolRegistry(builtin_tools(workspace))
        model = ScriptedModel.from_json(demo_script(), traits_for=registry.traits)
        display = Display(out)
        display.line(
            "steploop demo: the walk-through the project started from (a null-pointer fix "
            f"with a Read and an Edit) on a scratch copy at {workspace}"
        )
        display.line(f"▶ {DEMO_PROMPT}", "bold")
        asker = PermissionAsker() if args.interactive else None

        def approve(req: PermissionRequest) -> bool | None:
            return asker(req) if asker is not None else True

        r = run(
            DEMO_PROMPT,
            model=model,
            tools=registry,
            workspace=workspace,
            config=config,
            permissions=PermissionPolicy(allow=frozenset({"Read", "Glob", "Grep"})),
            session_id=str(uuid.uuid4()),
            transcript_path=scratch / "transcript.jsonl",
        )
        res = anyio.run(drive, r, display, approve)
        code = display.result(res)
        fixed = (workspace / "src/auth/validate.ts").read_text(encoding="utf-8")
        kept = f"kept at {scratch}" if args.keep else "removed (--keep keeps it)"
        display.line(f"the guard clause is in place: {'if (!userId)' in fixed}; scratch copy {kept}")
        return code
    finally:
        if not args.keep:
            shutil.rmtree(scratch, ignore_errors=True)


def _load_script(path: str, registry: ToolRegistry) -> Any:
    from steploop.effects.scripted import ScriptedModel, ScriptError

    data = load_json(path, "script")
    try:
        return ScriptedModel.from_json(data, traits_for=registry.traits)
    except ScriptError as e:
        raise CliError(f"script {path}: {e}") from None


def _output_file(raw: str, what: str) -> Path:
    """A file the run writes and reads back (its transcript, its trace): a directory, or a pipe
    or a device already at that name, is one line (a pipe would hold the run for ever)."""
    path = Path(raw)
    try:
        mode = path.stat().st_mode
    except OSError:
        return path  # created by the run; a bad directory is reported when it is written
    if stat.S_ISDIR(mode):
        raise CliError(f"{what} {raw}: is a directory, not a file")
    if not stat.S_ISREG(mode):
        raise CliError(
            f"{what} {raw}: not a regular file (a pipe or a device cannot be read back and "
            "rewritten, as the run does)"
        )
    return path


def _workspace(raw: str) -> Path:
    workspace = Path(raw).resolve()
    if not workspace.is_dir():
        raise CliError(f"workspace {workspace} is not a directory")
    return workspace


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.effects.trace import TraceRecorder, make_provenance

    workspace = _workspace(args.workspace)
    transcript = _output_file(args.transcript, "transcript") if args.transcript else None
    if args.trace:
        _output_file(args.trace, "trace")
    config = _config(args)
    policy, mode = permission_setup(args)
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=args.enable_bash))
    redactor = Redactor()  # the environment's key and token; the client's own below
    display = Display(out, redactor)
    hooks, notes = stop_hooks_from_args(args, workspace, mode, on_report=display.hook_report)
    servers, mcp_notes = mcp_from_args(args, workspace)  # connected by the run, for the turn
    notes.extend(mcp_notes)
    telemetry = telemetry_from_env()
    model: Any
    client: Any = None
    if args.scripted:
        model = _load_script(args.scripted, registry)
    else:
        client, model = live_model(registry.traits, registry.definitions())
    redactor.add(client_secrets(model))
    for note in notes:
        display.line(note, "yellow")
    scratch: Path | None = None
    if transcript is None:
        scratch = Path(tempfile.mkdtemp(prefix="steploop-run-"))
        transcript = scratch / "transcript.jsonl"
    recorder: Any = None
    try:
        if args.trace:
            try:
                recorder = TraceRecorder(
                    args.trace, provenance=make_provenance(model=model, workspace=workspace)
                )
            except OSError as e:
                raise CliError(f"trace {args.trace}: cannot write: {e.strerror or e}") from None
        display.line(f"▶ {args.prompt}", "bold")
        r = run(
            args.prompt,
            model=model,
            tools=registry,
            workspace=workspace,
            config=config,
            permissions=policy,
            stop_hooks=hooks,
            session_id=str(uuid.uuid4()),
            transcript_path=transcript,
            observer=recorder,
            mcp_servers=servers or None,
            telemetry=telemetry,
        )
        if recorder is not None:
            recorder.attach(r)

        async def go() -> Any:
            try:
                return await drive(r, display, PermissionAsker(redactor=redactor))
            finally:
                if client is not None:
                    await client.close()

        res = anyio.run(go)
    finally:
        if recorder is not None:
            recorder.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        if telemetry is not None:
            telemetry.shutdown()  # flush the spans
    code = display.result(res)
    if args.trace:
        display.line(f"trace: {args.trace} (steploop show / replay / resume it)")
    return code


def cmd_graph(args: argparse.Namespace, out: TextIO) -> int:
    from steploop.reducer.graph import mermaid, phase_edges, static_edges

    text = mermaid(static_edges() if args.static else phase_edges())
    if args.fenced:
        text = "```mermaid\n" + text + "```\n"
    out.write(text)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace, TextIO], int]] = {
    "demo": cmd_demo,
    "run": cmd_run,
    "graph": cmd_graph,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="steploop", description="The agent loop as a pure state machine.")
    sub = p.add_subparsers(dest="command", required=True)
    p.add_argument("--version", action="version", version=f"steploop {_version()}")
    d = sub.add_parser("demo", help="run the walk-through the project started from, live (no API key needed)")
    d.add_argument("--interactive", action="store_true", help="ask before the Edit instead of approving it")
    d.add_argument("--keep", action="store_true", help="keep the scratch copy (default: removed)")
    _config_args(d)
    r = sub.add_parser(
        "run",
        help="run an agent on a workspace with the built-in tools",
        description="Run one user turn. Exit status: 0 completed, 2 usage error or bad input "
        "file, 3 API error, 4 context limit, 5 aborted, 6 stopped by a hook, 7 max turns, "
        "130 Ctrl-C (README, Exit codes).",
    )
    r.add_argument("prompt")
    r.add_argument("--workspace", default=".", help="directory the tools are confined to (default: .)")
    r.add_argument("--scripted", metavar="FILE", help="answer model calls from a JSON script (see examples/replies.json)")
    r.add_argument("--enable-bash", action="store_true", help="offer the Bash tool")
    r.add_argument("--trace", metavar="FILE", help="record the run as a trace (replay, show, resume it)")
    r.add_argument(
        "--transcript",
        metavar="FILE",
        help="keep the Claude Code transcript here (default: a scratch file, removed at the end)",
    )
    add_permission_args(r)
    add_stop_hook_args(r)
    add_mcp_args(r)
    _config_args(r)
    g = sub.add_parser("graph", help="print the machine as a Mermaid state diagram (from the explorer)")
    g.add_argument("--fenced", action="store_true", help="wrap it in a ```mermaid fence for Markdown")
    g.add_argument(
        "--static", action="store_true", help="draw what the machine's tables allow (no exploration)"
    )
    from steploop.effects import check_cli

    check_cli.register(sub)
    try:
        from steploop.effects import trace_cli
    except ImportError:  # pragma: no cover - only while the trace layer is absent
        trace_cli = None  # type: ignore[assignment]
    if trace_cli is not None:
        trace_cli.register(sub)
    from steploop.effects.importer import cli as import_cli

    import_cli.register(sub)
    from steploop.effects.temporal import cli as temporal_cli  # needs temporalio only when run

    temporal_cli.register(sub)
    return p


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="default, claude_code_2_1_88 or full")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")
    p.add_argument(
        "--max-retries",
        type=int,
        metavar="N",
        default=None,
        help="API retries before giving up (default 10, about 150 s of backoff; sets retry.max_retries)",
    )


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("steploop")
    except Exception:
        return "0+unknown"


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``steploop`` console script."""
    out = printable(out or sys.stdout)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help/--version (0) or a usage error (2)
        return int(e.code) if isinstance(e.code, int) else EXIT_USAGE
    handler = getattr(args, "handler", None) or COMMANDS[args.command]
    try:
        code = int(handler(args, out))
    except (CliError, ConfigError, SteploopError) as e:
        from steploop.effects.trace_cli import explain

        print(f"steploop: error: {_safe(explain(e))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("steploop: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `steploop show ... | head`: the reader left; end quietly
        quiet_output(out)  # the interpreter's last flush of it would fail again
        return 0
    except BaseExceptionGroup as group:  # raised inside a run's task group, wrapped
        ours = group.subgroup((CliError, ConfigError, SteploopError))
        if ours is not None:  # a prompt the machine refuses (M-HIST-1), ...: one line
            first: BaseException = ours
            while isinstance(first, BaseExceptionGroup):
                first = first.exceptions[0]
            from steploop.effects.trace_cli import explain

            print(f"steploop: error: {_safe(explain(first))}", file=sys.stderr)  # type: ignore[arg-type]
            return EXIT_USAGE
        if group.split(BrokenPipeError)[1] is not None:
            raise
        quiet_output(out)
        return 0
    try:
        out.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except BrokenPipeError:
        quiet_output(out)
    return code


def _safe(text: str) -> str:
    """An error line: on one line, secrets hidden, control characters escaped."""
    return for_terminal(one_line(text))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
