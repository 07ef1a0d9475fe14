"""The ``steploop`` command line.

``steploop demo`` runs the seed chapter's walk-through live: a scripted model, the real built-in
tools on a scratch copy of a small sample project, the Edit approved, every transition shown as
it happens. ``steploop run PROMPT`` runs an agent on a workspace.

Every user error prints one line ``steploop: error: ...`` and exits with status 2; no traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import anyio

from effects.run import PermissionPolicy, PermissionRequest, Run, RunResult, run
from effects.tools.base import ToolRegistry
from effects.tools.builtin import builtin_tools
from reducer import ConfigError, LoopConfig, SteploopError, profile
from reducer.messages import (
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
from reducer.transitions import CONTINUE_TYPES

__all__ = ["SAMPLE_PROJECT", "demo_script", "main"]

SAMPLE_PROJECT = Path(__file__).resolve().parent / "sample_project"
DEMO_PROMPT = "Fix the null pointer bug in src/auth/validate.ts"


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def demo_script() -> list[dict[str, Any]]:
    """The seed's walk-through as a JSON model script (three model calls)."""
    return [
        {
            "type": "response",
            "blocks": [
                {"type": "text", "text": "Let me look at the file."},
                {"type": "tool_use", "name": "Read", "input": {"file_path": "src/auth/validate.ts"}},
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1200, "output_tokens": 40},
        },
        {
            "type": "response",
            "blocks": [
                {"type": "text", "text": "I see the bug on line 42 — userId can be null."},
                {
                    "type": "tool_use",
                    "name": "Edit",
                    "input": {
                        "file_path": "src/auth/validate.ts",
                        "old_string": "  const user = getUser(userId)",
                        "new_string": "  if (!userId) return { error: 'unauthorized' }\n  const user = getUser(userId)",
                    },
                },
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 1900, "output_tokens": 90},
        },
        {
            "type": "response",
            "blocks": [{"type": "text", "text": "I've fixed the null pointer bug by adding a guard clause."}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 2100, "output_tokens": 20},
        },
    ]


# ----------------------------------------------------------------------------------------------
# Display
# ----------------------------------------------------------------------------------------------


def _short(text: str, n: int = 100) -> str:
    line = text.replace("\n", "⏎ ")
    return line if len(line) <= n else line[: n - 1] + "…"


def describe(item: object) -> str:
    """One line for an item the loop emitted."""
    if isinstance(item, UserMessage):
        parts = []
        for b in item.content:
            if isinstance(b, ToolResultBlock):
                lines = b.content.count("\n") + 1
                mark = "error" if b.is_error else f"{lines} line{'s' if lines != 1 else ''}"
                parts.append(f"tool result ← {b.tool_use_id} ({mark}): {_short(b.content, 60)}")
            elif isinstance(b, TextBlock):
                parts.append(_short(b.text))
        who = "user (meta)" if item.is_meta else "user"
        return f"{who}: {' | '.join(parts)}" if not any(isinstance(b, ToolResultBlock) for b in item.content) else "  " + " | ".join(parts)
    if isinstance(item, AssistantMessage):
        first = item.content[0] if item.content else None
        if item.api_error is not None:
            return f"assistant (API error): {_short(item.api_error.message)}"
        if isinstance(first, TextBlock):
            return f"assistant: {_short(first.text)}"
        if isinstance(first, ToolUseBlock):
            args = ", ".join(f"{k}={_short(str(v), 40)}" for k, v in first.input.items())
            return f"assistant → {first.name}({args})"
        if isinstance(first, ThinkingBlock):
            return f"assistant (thinking): {_short(first.thinking)}"
        return "assistant: (block)"
    if isinstance(item, SystemMessage):
        return f"system [{item.subtype}]: {_short(item.text)}"
    if isinstance(item, AttachmentMessage):
        data = ", ".join(f"{k}={v}" for k, v in item.data)
        return f"attachment [{item.attachment_type}] {data}"
    if isinstance(item, Tombstone):
        return f"tombstone: remove {item.message_id}"
    if isinstance(item, ToolUseSummary):
        return f"summary: {_short(item.summary)}"
    return repr(item)


class Display:
    """Prints items and, after each, the transition the machine took (if it changed)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self._seen: object = None
        self._round = 1

    def item(self, r: Run, text: str) -> None:
        print(f"  {text}", file=self.out, flush=True)
        self.transition(r)

    def transition(self, r: Run) -> None:
        state = r.state
        if state is None or state.transition is None or state.transition is self._seen:
            return
        self._seen = state.transition
        t = state.transition
        if isinstance(t, CONTINUE_TYPES):
            self._round += 1
            print(f"── continue: {t.TAG}{_payload(t)} → round {self._round}", file=self.out, flush=True)
        else:
            print(f"══ terminal: {t.TAG}{_payload(t)}", file=self.out, flush=True)


def _payload(t: object) -> str:
    fields = {k: getattr(t, k) for k in ("attempt", "committed", "turn_count") if hasattr(t, k)}
    if hasattr(t, "error") and hasattr(t.error, "message"):
        fields["error"] = t.error.message
    return " (" + ", ".join(f"{k}={v}" for k, v in fields.items()) + ")" if fields else ""


# ----------------------------------------------------------------------------------------------
# Commands
# ----------------------------------------------------------------------------------------------


def _traits_for(registry: ToolRegistry) -> Callable[[str, dict[str, Any]], Any]:
    return registry.traits


async def _drive(r: Run, display: Display, answer: Callable[[PermissionRequest], bool]) -> RunResult:
    async with r:
        async for item in r:
            if isinstance(item, PermissionRequest):
                ok = answer(item)
                display.item(r, f"permission? {item.name}({_short(json.dumps(dict(item.input)), 80)}) → {'approved' if ok else 'rejected'}")
                item.allow() if ok else item.reject()
            else:
                display.item(r, describe(item))
        display.transition(r)
    assert r.result is not None
    return r.result


def _print_result(res: RunResult, out: TextIO) -> None:
    u = res.usage
    print(
        f"\nresult: {res.terminal.TAG} after {res.state.turn_count} round(s); "
        f"usage: {u.input_tokens} input / {u.output_tokens} output tokens",
        file=out,
    )


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from effects.scripted import ScriptedModel

    scratch = Path(tempfile.mkdtemp(prefix="steploop-demo-"))
    workspace = scratch / "sample_project"
    shutil.copytree(SAMPLE_PROJECT, workspace)
    registry = ToolRegistry(builtin_tools(workspace))
    model = ScriptedModel.from_json(demo_script(), traits_for=registry.traits)
    print(f"steploop demo: the seed chapter's walk-through on a scratch copy at {workspace}", file=out)
    print(f"▶ {DEMO_PROMPT}", file=out)
    display = Display(out)

    def approve(req: PermissionRequest) -> bool:
        if args.interactive:
            return _ask_terminal(req)
        return True

    r = run(
        DEMO_PROMPT,
        model=model,
        tools=registry,
        workspace=workspace,
        config=_config(args),
        permissions=PermissionPolicy(allow=frozenset({"Read", "Glob", "Grep"})),
        transcript_path=scratch / "transcript.jsonl",
    )
    res = anyio.run(_drive, r, display, approve)
    _print_result(res, out)
    fixed = (workspace / "src/auth/validate.ts").read_text(encoding="utf-8")
    print(f"the guard clause is in place: {'if (!userId)' in fixed}; transcript: {scratch / 'transcript.jsonl'}", file=out)
    return 0 if res.terminal.TAG == "completed" else 1


def _ask_terminal(req: PermissionRequest) -> bool:
    try:
        answer = input(f"Allow {req.name}({json.dumps(dict(req.input))})? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


def _config(args: argparse.Namespace) -> LoopConfig:
    cfg = profile(getattr(args, "profile", "default") or "default")
    overrides: dict[str, Any] = {}
    for kv in getattr(args, "set", None) or []:
        if "=" not in kv:
            raise CliError(f"--set takes KEY=VALUE, got {kv!r}")
        key, raw = kv.split("=", 1)
        overrides[key.strip()] = _parse_value(raw.strip())
    return cfg.with_overrides(overrides) if overrides else cfg


def _parse_value(raw: str) -> Any:
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        return raw


def cmd_run(args: argparse.Namespace, out: TextIO) -> int:
    workspace = Path(args.workspace).resolve()
    if not workspace.is_dir():
        raise CliError(f"workspace {workspace} is not a directory")
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=args.enable_bash))
    model: Any
    if args.scripted:
        from effects.scripted import ScriptedModel

        path = Path(args.scripted)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise CliError(f"{path}: no such file") from None
        except json.JSONDecodeError as e:
            raise CliError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None
        model = ScriptedModel.from_json(data, traits_for=registry.traits)
    elif os.environ.get("ANTHROPIC_API_KEY"):
        from effects.model import AnthropicModelClient, make_client

        client = make_client(connect_timeout=10.0, read_timeout=120.0)
        model = AnthropicModelClient(
            client,
            system="You are a careful coding agent working in the user's workspace.",
            tools=registry.definitions(),
            traits_for=registry.traits,
        )
    else:
        raise CliError("ANTHROPIC_API_KEY is not set: set it, or pass --scripted FILE to use a scripted model")
    display = Display(out)
    print(f"▶ {args.prompt}", file=out)
    r = run(
        args.prompt,
        model=model,
        tools=registry,
        workspace=workspace,
        config=_config(args),
        permissions=PermissionPolicy(allow=frozenset({"Read", "Glob", "Grep"}), default="allow" if args.yes else "ask"),
    )
    res = anyio.run(_drive, r, display, _ask_terminal)
    _print_result(res, out)
    return 0


def cmd_graph(args: argparse.Namespace, out: TextIO) -> int:
    from reducer.graph import mermaid, phase_edges

    text = mermaid(phase_edges())
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
    d = sub.add_parser("demo", help="run the seed chapter's walk-through live (no API key needed)")
    d.add_argument("--interactive", action="store_true", help="ask before the Edit instead of approving it")
    _config_args(d)
    r = sub.add_parser("run", help="run an agent on a workspace with the built-in tools")
    r.add_argument("prompt")
    r.add_argument("--workspace", default=".", help="directory the tools are confined to (default: .)")
    r.add_argument("--scripted", metavar="FILE", help="answer model calls from a JSON script")
    r.add_argument("--enable-bash", action="store_true", help="offer the Bash tool")
    r.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    _config_args(r)
    g = sub.add_parser("graph", help="print the machine as a Mermaid state diagram (from the explorer)")
    g.add_argument("--fenced", action="store_true", help="wrap it in a ```mermaid fence for Markdown")
    from effects import check_cli

    check_cli.register(sub)
    try:
        from effects import trace_cli
    except ImportError:  # pragma: no cover - only while the trace layer is absent
        trace_cli = None  # type: ignore[assignment]
    if trace_cli is not None:
        trace_cli.register(sub)
    from effects.temporal import cli as temporal_cli  # needs temporalio only when run

    temporal_cli.register(sub)
    return p


def _config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--profile", default="default", help="default, claude_code_2_1_88 or full")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Entry point of the ``steploop`` console script."""
    out = out or sys.stdout
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None) or COMMANDS[args.command]
    try:
        return int(handler(args, out))
    except (CliError, ConfigError, SteploopError) as e:
        print(f"steploop: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("steploop: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
