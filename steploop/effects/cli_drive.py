"""Driving a live turn from the command line (``steploop run``, ``demo`` and ``resume``).

What is shared by the commands that run the loop: the one-line display of every emitted item
and transition, answering permission requests (on a terminal, or refusing with a hint when
there is none), the permission policy of ``--permission-mode``/``--yes``/``--allow``, the stop
hooks of ``--stop-hook``/``--settings``/``--plugin`` and of the workspace's ``.claude/``
settings, and the result line with its exit code.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from steploop.effects.cli_common import (
    CliError,
    console_for,
    exit_code,
    for_terminal,
    quiet_output,
    short,
    terminal_text,
)
from steploop.effects.hooks import (
    DEFAULT_TIMEOUT_S,
    PERMISSION_MODES,
    CommandStopHook,
    HookRun,
    PermissionMode,
    StopHook,
    StopHooks,
)
from steploop.effects.redaction import Redactor
from steploop.effects.run import PermissionPolicy, PermissionRequest, Run, RunResult
from steploop.effects.settings import SettingsError, load_settings, project_settings_files
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    ToolUseSummary,
    UserMessage,
)
from steploop.reducer.transitions import CONTINUE_TYPES

__all__ = [
    "EXIT_MEANINGS",
    "READ_ONLY_TOOLS",
    "Display",
    "PermissionAsker",
    "add_mcp_args",
    "add_permission_args",
    "add_stop_hook_args",
    "describe",
    "drive",
    "mcp_from_args",
    "permission_setup",
    "stop_hooks_from_args",
    "telemetry_from_env",
]

#: Tools that run without asking in the default mode (they only read).
READ_ONLY_TOOLS = frozenset({"Read", "Glob", "Grep"})
EDIT_TOOLS = frozenset({"Edit", "Write"})

EXIT_MEANINGS = {
    0: "completed",
    1: "steploop failed",
    3: "API error",
    4: "context limit",
    5: "aborted",
    6: "stopped by a hook",
    7: "max turns",
}


# ----------------------------------------------------------------------------------------------
# Display


def describe(item: object, redactor: Redactor | None = None) -> str:
    """One line for an item the loop emitted: every secret ``redactor`` knows (by default the
    environment's key and token) replaced before a text is cut, control characters escaped."""
    r = redactor if redactor is not None else Redactor()

    def cut(text: str, n: int = 100) -> str:
        return short(r.text(text), n)

    return for_terminal(_describe(item, cut), r)


def _describe(item: object, cut: Callable[..., str]) -> str:
    if isinstance(item, UserMessage):
        parts = []
        results = False
        for b in item.content:
            if isinstance(b, ToolResultBlock):
                results = True
                lines = b.content.count("\n") + 1
                mark = "error" if b.is_error else f"{lines} line{'s' if lines != 1 else ''}"
                parts.append(f"tool result ← {b.tool_use_id} ({mark}): {cut(b.content, 60)}")
            elif isinstance(b, TextBlock):
                parts.append(cut(b.text))
        if results:
            return "  " + " | ".join(parts)
        who = "user (meta)" if item.is_meta else "user"
        return f"{who}: {' | '.join(parts)}"
    if isinstance(item, AssistantMessage):
        first = item.content[0] if item.content else None
        if item.api_error is not None:
            return f"assistant (API error): {cut(item.api_error.message)}"
        if isinstance(first, TextBlock):
            return f"assistant: {cut(first.text)}"
        if isinstance(first, ToolUseBlock):
            args = ", ".join(f"{k}={cut(str(v), 40)}" for k, v in first.input.items())
            return f"assistant → {first.name}({args})"
        if isinstance(first, ThinkingBlock):
            return f"assistant (thinking): {cut(first.thinking)}"
        return "assistant: (block)"
    if isinstance(item, SystemMessage):
        return f"system [{item.subtype}]: {cut(item.text)}"
    if isinstance(item, AttachmentMessage):
        data = ", ".join(f"{k}={v}" for k, v in item.data)
        return f"attachment [{item.attachment_type}] {data}"
    if isinstance(item, Tombstone):
        return f"tombstone: remove {item.message_id}"
    if isinstance(item, ToolUseSummary):
        return f"summary: {cut(item.summary)}"
    return repr(item)


def _payload(t: object) -> str:
    fields = {k: getattr(t, k) for k in ("attempt", "committed", "turn_count") if hasattr(t, k)}
    error = getattr(t, "error", None)
    if error is not None and hasattr(error, "message"):
        fields["error"] = error.message
    return " (" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")" if fields else ""


def _style(item: object) -> str:
    if isinstance(item, AssistantMessage):
        return "bold red" if item.api_error is not None else ""
    if isinstance(item, SystemMessage):
        return "yellow" if item.level == "warning" else "dim"
    if isinstance(item, UserMessage) and item.is_meta:
        return "dim"
    return ""


class Display:
    """Prints items and, after each, the transitions the machine took.

    Every line goes out with the configured secrets replaced by their markers (``redactor``:
    the environment's key and token and the model client's credentials, as the trace hides
    them) and every control character escaped (:func:`~steploop.effects.cli_common.terminal_text`).
    A Continue is printed when the run passed it (``── continue: … → round N``, rounds counted
    from ``first_round``); the Terminal only when the run is over, after everything its last
    step emitted. When the reader of the output leaves (``| head``) the display goes quiet and
    the run goes on to its end: the exit status is the turn's.
    """

    def __init__(self, out: TextIO, redactor: Redactor | None = None, first_round: int = 1) -> None:
        self.out = out
        self.console = console_for(out)
        self.redactor = redactor if redactor is not None else Redactor()
        self.closed = False  # the reader left
        self.round = first_round  # the round the run is in (1 + the Continues passed)
        self._shown = 0  # how many of the run's transitions are printed

    def line(self, text: str, style: str = "") -> None:
        if self.closed:
            return
        from rich.text import Text

        try:
            self.console.print(Text(for_terminal(text, self.redactor), style=style))
            self.out.flush()
        except BrokenPipeError:
            self.closed = True
            quiet_output(self.out)

    def item(self, r: Run, text: str, style: str = "") -> None:
        self.line(f"  {text}", style)
        self.transition(r)

    def transition(self, r: Run, *, done: bool = False) -> None:
        """Print the transitions passed since the last call; the Terminal only when ``done``."""
        passed = r.transitions  # every transition the run passed through, in order
        for t in passed[self._shown :]:
            if isinstance(t, CONTINUE_TYPES):
                self.round += 1
                self.line(f"── continue: {t.TAG}{_payload(t)} → round {self.round}", "cyan")
            elif not done:
                return  # the last step's items come first
            else:
                ok = t.TAG == "completed"
                self.line(f"══ terminal: {t.TAG}{_payload(t)}", "bold green" if ok else "bold red")
            self._shown += 1

    def hook_report(self, hooks_id: int, runs: tuple[HookRun, ...]) -> None:
        """Show what the stop hooks said to the user (``systemMessage``, ``stopReason``)."""
        for run in runs:
            if run.result.system_message:
                self.line(f"  hook [{run.name}]: {run.result.system_message}", "magenta")
            if run.result.prevent and run.result.stop_reason:
                self.line(f"  hook [{run.name}] stopped the turn: {run.result.stop_reason}", "magenta")

    def result(self, res: RunResult, *, what: str = "") -> int:
        """The result line; returns the exit code (steploop.effects.cli_common's table).

        Rounds are counted as the display counted them (and as ``steploop show`` counts a
        trace's); tokens as ``show`` counts them, "in" being everything the prompts held:
        uncached input, cache writes and cache reads (each said). ``what`` names the part
        of the turn counted (``resume``: "this run's ")."""
        from rich.text import Text

        u = res.usage
        code = exit_code(res.terminal.TAG, res.state)
        meaning = EXIT_MEANINGS.get(code, "")
        tokens_in = u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        if self.closed:
            return code
        text = Text("\nresult: ")
        text.append(res.terminal.TAG, style="bold green" if code == 0 else "bold red")
        text.append(
            f" after {self.round} round(s); {what}tokens in/out {tokens_in:,}/{u.output_tokens:,} "
            f"(in: {u.input_tokens:,} uncached, {u.cache_creation_input_tokens:,} cache writes, "
            f"{u.cache_read_input_tokens:,} cache reads); exit status {code} ({meaning})"
        )
        try:
            self.console.print(text)
            self.out.flush()
        except BrokenPipeError:
            self.closed = True
            quiet_output(self.out)
        return code


# ----------------------------------------------------------------------------------------------
# Permissions


class PermissionAsker:
    """Answers permission requests the policy left open: on a terminal by asking; without one
    by refusing (``None``), which ends the turn with a one-line hint on stderr.

    The question goes to stdout when it is a terminal, else to stderr (``run … | head`` or
    ``| tee log``: the user still sees it, the pipe does not get it); the answer is read from
    stdin.
    """

    def __init__(
        self, interactive: bool | None = None, err: TextIO | None = None, redactor: Redactor | None = None
    ) -> None:
        self.interactive = sys.stdin.isatty() if interactive is None else interactive
        self.err = err
        self.redactor = redactor if redactor is not None else Redactor()
        self.refused: str | None = None  # the hint printed, once

    def __call__(self, req: PermissionRequest) -> bool | None:
        if not self.interactive:
            return None
        args = short(self.redactor.text(json.dumps(dict(req.input))), 200)
        what = for_terminal(f"{req.name}({args})", self.redactor)
        ask = sys.stdout if _isatty(sys.stdout) else (self.err or sys.stderr)
        try:
            ask.write(f"Allow {what}? [y/N] ")
            ask.flush()
            answer = sys.stdin.readline()
        except (OSError, ValueError):  # the terminal went away: nobody answered
            return None
        if not answer:  # end of input: nobody answered
            return None
        return answer.strip().lower() in ("y", "yes")

    def refuse(self, req: PermissionRequest) -> None:
        if self.refused is None:
            self.refused = (
                f"steploop: error: {terminal_text(req.name)} needs permission and there is no "
                f"terminal to ask: pass --yes to allow every tool call, or --allow "
                f"{terminal_text(req.name)} (repeatable), "
                "or --permission-mode acceptEdits"
            )
            print(self.refused, file=self.err or sys.stderr, flush=True)


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def add_permission_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    p.add_argument(
        "--allow", action="append", metavar="TOOL", default=None, help="allow this tool without asking (repeatable)"
    )
    p.add_argument(
        "--permission-mode",
        choices=PERMISSION_MODES,
        default=None,
        help="Claude Code's permission modes: default (ask for all but Read/Glob/Grep), "
        "acceptEdits (Edit and Write too), plan (read-only: the rest is denied), dontAsk (deny "
        "what is not allowed), bypassPermissions (allow everything, as --yes); hooks are told it",
    )


def permission_setup(args: argparse.Namespace) -> tuple[PermissionPolicy, PermissionMode]:
    """The policy and the mode hooks are told, from ``--permission-mode``/``--yes``/``--allow``."""
    mode: PermissionMode | None = getattr(args, "permission_mode", None)
    if getattr(args, "yes", False):
        if mode not in (None, "bypassPermissions"):
            raise CliError(f"--yes allows everything; it contradicts --permission-mode {mode}")
        mode = "bypassPermissions"
    mode = mode or "default"
    allowed = frozenset(getattr(args, "allow", None) or ())
    if mode == "bypassPermissions":
        return PermissionPolicy(default="allow"), mode
    if mode == "acceptEdits":
        return PermissionPolicy(allow=READ_ONLY_TOOLS | EDIT_TOOLS | allowed, default="ask"), mode
    if mode == "plan":
        return PermissionPolicy(allow=READ_ONLY_TOOLS, default="deny"), mode
    if mode == "dontAsk":
        return PermissionPolicy(allow=READ_ONLY_TOOLS | allowed, default="deny"), mode
    return PermissionPolicy(allow=READ_ONLY_TOOLS | allowed, default="ask"), mode


# ----------------------------------------------------------------------------------------------
# Stop hooks


def add_stop_hook_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--stop-hook",
        action="append",
        metavar="CMD",
        default=None,
        help="run this shell command as a Stop hook (Claude Code's protocol; repeatable)",
    )
    p.add_argument(
        "--settings",
        action="append",
        metavar="FILE",
        default=None,
        help="read Stop hooks from a Claude Code settings file (repeatable)",
    )
    p.add_argument(
        "--plugin",
        action="append",
        metavar="DIR",
        default=None,
        help="run a Claude Code plugin's Stop hooks (DIR/hooks/hooks.json, with CLAUDE_PLUGIN_ROOT=DIR)",
    )
    p.add_argument(
        "--no-project-settings",
        action="store_true",
        help="ignore the workspace's .claude/settings.json and .claude/settings.local.json",
    )
    p.add_argument(
        "--hook-timeout",
        type=float,
        metavar="S",
        default=None,
        help="timeout for --stop-hook commands in seconds (default 600, as Claude Code)",
    )


def stop_hooks_from_args(
    args: argparse.Namespace,
    workspace: Path,
    permission_mode: PermissionMode,
    on_report: Callable[[int, tuple[HookRun, ...]], None] | None = None,
) -> tuple[StopHooks | None, list[str]]:
    """The stop hooks the command line asks for, and the lines to say where they came from
    (printed first). Bad settings files are a :class:`CliError` naming the file."""
    notes: list[str] = []
    files: list[str] = []
    roots: list[str | None] = []
    if not getattr(args, "no_project_settings", False):
        project = project_settings_files(workspace)
        if project:
            notes.append(
                "settings: reading Stop hooks from "
                + ", ".join(str(p) for p in project)
                + " (--no-project-settings to ignore them)"
            )
        files.extend(str(p) for p in project)
        roots.extend(None for _ in project)
    for f in getattr(args, "settings", None) or ():
        files.append(f)
        roots.append(None)
    for d in getattr(args, "plugin", None) or ():
        root = Path(d)
        if not root.is_dir():
            raise CliError(f"plugin {d}: not a directory")
        files.append(str(root / "hooks" / "hooks.json"))
        roots.append(str(root.resolve()))
    try:
        settings = load_settings(files, plugin_roots=roots)
    except SettingsError as e:
        raise CliError(str(e)) from None
    hooks: list[StopHook] = [h.to_hook() for h in settings.for_event("Stop")]
    timeout = getattr(args, "hook_timeout", None)
    if timeout is not None and not timeout > 0:
        raise CliError(f"--hook-timeout must be a positive number of seconds, got {timeout}")
    for cmd in getattr(args, "stop_hook", None) or ():
        if not cmd.strip():
            raise CliError("--stop-hook takes a command, got an empty string")
        hooks.append(CommandStopHook(cmd, timeout_s=timeout or DEFAULT_TIMEOUT_S))
    notes.extend(f"settings: {s}" for s in settings.skipped)
    if settings.disabled and settings.hooks:
        notes.append("settings: disableAllHooks is set; the settings' hooks are not run")
    if not hooks:
        return None, notes
    return StopHooks(hooks, permission_mode=permission_mode, on_report=on_report), notes


def add_mcp_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mcp-config",
        action="append",
        metavar="FILE",
        default=None,
        help="MCP servers from this JSON file ({\"mcpServers\": {...}}, as Claude Code reads it; "
        "repeatable), besides the workspace's .mcp.json and the settings' mcpServers; their "
        "tools are mcp__SERVER__TOOL (allow them with --allow mcp__SERVER); needs steploop[mcp]",
    )
    p.add_argument(
        "--strict-mcp-config",
        action="store_true",
        help="use only the servers of --mcp-config (not .mcp.json nor the settings')",
    )


def mcp_from_args(args: argparse.Namespace, workspace: Path) -> tuple[dict[str, Any], list[str]]:
    """The MCP servers the command line asks for (``.mcp.json`` and the project settings'
    ``mcpServers`` unless ``--no-project-settings``; ``--settings`` files; ``--mcp-config``),
    and the lines saying where they came from. A bad file is a :class:`CliError`."""
    from steploop.effects.mcp import McpConfigError, mcp_servers_from

    project = not getattr(args, "no_project_settings", False)
    settings = [*(project_settings_files(workspace) if project else ()), *(getattr(args, "settings", None) or ())]
    try:
        servers, notes = mcp_servers_from(
            workspace=workspace if project else None,
            settings_files=settings,
            config_files=getattr(args, "mcp_config", None) or (),
            strict=bool(getattr(args, "strict_mcp_config", False)),
        )
    except McpConfigError as e:
        raise CliError(str(e)) from None
    if servers:
        try:
            import mcp  # noqa: F401
        except ImportError:
            raise CliError(
                f"MCP servers are configured ({', '.join(servers)}) but the MCP SDK is not "
                "installed: pip install 'steploop[mcp]' (or --strict-mcp-config without files)"
            ) from None
    return dict(servers), notes


def telemetry_from_env() -> Any:
    """OpenTelemetry spans when ``OTEL_TRACES_EXPORTER`` asks for them (off by default)."""
    from steploop.effects.telemetry import Telemetry, TelemetryError

    try:
        return Telemetry.from_env()
    except TelemetryError as e:
        raise CliError(str(e)) from None


# ----------------------------------------------------------------------------------------------
# Driving a run


async def drive(
    r: Run, display: Display, answer: Callable[[PermissionRequest], bool | None]
) -> RunResult:
    """Consume the run: show every item, answer every permission request."""
    async with r:
        for note in r.extensions.notices:  # MCP servers that failed to connect
            display.line(note, "yellow")
        async for item in r:
            if isinstance(item, PermissionRequest):
                ok = answer(item)
                what = f"{item.name}({short(display.redactor.text(json.dumps(dict(item.input))), 80)})"
                if ok is None:
                    refuse = getattr(answer, "refuse", None)
                    if refuse is not None:
                        refuse(item)
                    display.item(r, f"permission? {what} → refused (no terminal to ask)", "red")
                    item.reject()
                    continue
                display.item(r, f"permission? {what} → {'approved' if ok else 'rejected'}")
                item.allow() if ok else item.reject()
            else:
                display.item(r, describe(item, display.redactor), _style(item))
        display.transition(r, done=True)
    assert r.result is not None
    return r.result


