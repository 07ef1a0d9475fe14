"""What every ``steploop`` command shares: user errors, exit codes, reading input files, the
``--profile``/``--set`` config, the live model client, the demo's script, and the terminal:
the console, text made safe to print (:func:`terminal_text`) and an output whose reader left
(:func:`printable`, :func:`quiet_output`).

The command modules (``steploop.effects.cli``, ``trace_cli``, ``check_cli``, ``cli_drive``,
``importer.cli``, ``temporal.cli``) import from here and never from each other's private
names; ``steploop.effects.cli`` (the entry point) imports them, none imports it.

Exit codes (the same for ``run``, ``demo`` and ``resume``; README "Exit codes"):

====  ==========================================================================================
0     the turn ended ``completed`` without an API error
1     steploop itself failed; for ``replay``, ``diff`` and ``check``: it ran, the answer is no
2     a usage error or a bad input file (script, trace, settings): one line naming it
3     an API error: ``completed`` with an API-error message (retries exhausted), ``model_error``
4     a context limit: ``prompt_too_long``, ``blocking_limit``, ``image_error``
5     aborted: ``aborted_streaming``, ``aborted_tools`` (an interrupt, a rejected permission, or
      a permission nobody could answer)
6     stopped by a hook: ``stop_hook_prevented``, ``hook_stopped``
7     ``max_turns``
130   interrupted with Ctrl-C
====  ==========================================================================================
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from steploop.effects.redaction import Redactor
from steploop.reducer import LoopConfig, profile
from steploop.reducer.messages import AssistantMessage
from steploop.reducer.state import LoopState

__all__ = [
    "DEMO_PROMPT",
    "EXIT_ABORTED",
    "EXIT_API_ERROR",
    "EXIT_CONTEXT",
    "EXIT_FAILED",
    "EXIT_HOOK",
    "EXIT_INTERRUPTED",
    "EXIT_MAX_TURNS",
    "EXIT_OK",
    "EXIT_USAGE",
    "SAMPLE_PROJECT",
    "TERMINAL_EXIT",
    "CliError",
    "ProgressBar",
    "config_from",
    "console_for",
    "count_steps",
    "demo_script",
    "ended_with_api_error",
    "exit_code",
    "for_terminal",
    "live_model",
    "load_json",
    "one_line",
    "parse_overrides",
    "parse_value",
    "printable",
    "quiet_output",
    "read_bytes",
    "read_text",
    "short",
    "terminal_text",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_API_ERROR = 3
EXIT_CONTEXT = 4
EXIT_ABORTED = 5
EXIT_HOOK = 6
EXIT_MAX_TURNS = 7
EXIT_INTERRUPTED = 130

#: The exit code of each Terminal tag (``completed`` is 0 unless the turn ended on an API
#: error, see :func:`exit_code`).
TERMINAL_EXIT: Mapping[str, int] = {
    "completed": EXIT_OK,
    "model_error": EXIT_API_ERROR,
    "prompt_too_long": EXIT_CONTEXT,
    "blocking_limit": EXIT_CONTEXT,
    "image_error": EXIT_CONTEXT,
    "aborted_streaming": EXIT_ABORTED,
    "aborted_tools": EXIT_ABORTED,
    "stop_hook_prevented": EXIT_HOOK,
    "hook_stopped": EXIT_HOOK,
    "max_turns": EXIT_MAX_TURNS,
}


class CliError(Exception):
    """A user error: printed as one line ``steploop: error: ...``, exit status 2."""


def process_limit() -> int:
    """The most worker processes a command starts (``--jobs``, ``--processes``): four per core
    of this machine, at least 4. A typo such as ``--processes 100000`` would fork that many
    processes and take the machine down; the work cannot go faster than the cores anyway."""
    return max(4, 4 * (os.cpu_count() or 1))


def processes_problem(n: int) -> str | None:
    """Why ``n`` worker processes are too many here, or None."""
    limit = process_limit()
    if n <= limit:
        return None
    cores = os.cpu_count() or 1
    return f"at most {limit:,} (4 per core; this machine has {cores:,}), got {n:,}"


def ended_with_api_error(state: LoopState) -> bool:
    """Whether the last message of the turn is an API-error message (R-RETRY-4, the
    max-output-tokens exit): the turn ends ``completed`` but nothing was answered."""
    for m in state.conversation.reversed():
        return isinstance(m, AssistantMessage) and m.api_error is not None
    return False


def exit_code(terminal_tag: str, state: LoopState | None = None) -> int:
    """The exit code for a turn that ended with ``terminal_tag`` (table in the module doc)."""
    code = TERMINAL_EXIT.get(terminal_tag, EXIT_FAILED)
    if code == EXIT_OK and state is not None and ended_with_api_error(state):
        return EXIT_API_ERROR
    return code


# ----------------------------------------------------------------------------------------------
# Input files: one line naming the file for every way reading one can fail


def _os_reason(e: OSError) -> str:
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, IsADirectoryError):
        return "is a directory, not a file"
    if isinstance(e, PermissionError):
        return "permission denied"
    return f"cannot read: {e.strerror or e}"


def read_bytes(path: str | os.PathLike[str], what: str = "") -> bytes:
    """The bytes of ``path``; any failure is a :class:`CliError` naming the file."""
    label = f"{what} {path}" if what else str(path)
    p = Path(path)
    if p.is_dir():
        raise CliError(f"{label}: is a directory, not a file")
    try:
        return p.read_bytes()
    except OSError as e:
        raise CliError(f"{label}: {_os_reason(e)}") from None


def read_text(path: str | os.PathLike[str], what: str = "") -> str:
    """The UTF-8 text of ``path``; any failure (missing, a directory, unreadable, binary, not
    UTF-8) is a :class:`CliError` naming the file."""
    label = f"{what} {path}" if what else str(path)
    data = read_bytes(path, what)
    if b"\x00" in data:
        raise CliError(f"{label}: a binary file, not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CliError(f"{label}: not UTF-8 text (byte {e.start})") from None


def load_json(path: str | os.PathLike[str], what: str = "") -> Any:
    """Parse ``path`` as JSON; every failure is one :class:`CliError` line naming the file."""
    label = f"{what} {path}" if what else str(path)
    text = read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"{label}:{e.lineno}: not valid JSON: {e.msg}") from None
    except (RecursionError, ValueError) as e:  # nesting too deep, a number too long
        raise CliError(f"{label}: not valid JSON: {type(e).__name__}: {e}"[:300]) from None


# ----------------------------------------------------------------------------------------------
# --profile / --set


def parse_value(raw: str) -> Any:
    """A ``--set`` value: true/false, none/null, an integer (``_`` allowed), else the string."""
    low = raw.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    try:
        return int(raw.replace("_", ""))
    except ValueError:
        return raw


def parse_overrides(pairs: Sequence[str] | None) -> dict[str, Any]:
    """``["a.b=1", ...]`` as ``{"a.b": 1}``; a pair without ``=`` is a :class:`CliError`."""
    out: dict[str, Any] = {}
    for kv in pairs or ():
        if "=" not in kv:
            raise CliError(f"--set takes KEY=VALUE, got {kv!r}")
        key, raw = kv.split("=", 1)
        out[key.strip()] = parse_value(raw.strip())
    return out


def config_from(
    profile_name: str | None, pairs: Sequence[str] | None, extra: Mapping[str, Any] = {}
) -> LoopConfig:
    """The profile with the ``--set`` overrides (then ``extra``) applied."""
    cfg = profile(profile_name or "default")
    overrides = {**parse_overrides(pairs), **extra}
    return cfg.with_overrides(overrides) if overrides else cfg


# ----------------------------------------------------------------------------------------------
# The model: live, or the demo's script

SAMPLE_PROJECT = Path(__file__).resolve().parent / "sample_project"
DEMO_PROMPT = "Fix the null pointer bug in src/auth/validate.ts"


def demo_script() -> list[dict[str, Any]]:
    """The seed's walk-through as a JSON model script (three model calls)."""
    return [
        {
            "type": "response",
            "blocks": [
                {"type": "text", "text": "Let me look at the file."},
                {
                    "type": "tool_use",
                    "name": "Read",
                    "input": {"file_path": "src/auth/validate.ts"},
                },
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
            "blocks": [
                {
                    "type": "text",
                    "text": "I've fixed the null pointer bug by adding a guard clause.",
                }
            ],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 2100, "output_tokens": 20},
        },
    ]


def live_model(
    traits_for: Callable[[str, dict[str, Any]], Any],
    tools: Any,
    *,
    instead: str = "pass --scripted FILE to use a scripted model",
) -> tuple[Any, Any]:
    """The SDK client (close it) and the model client on it, from ``ANTHROPIC_API_KEY``
    (and ``ANTHROPIC_BASE_URL``, ``ANTHROPIC_AUTH_TOKEN`` as the SDK reads them).

    Raises:
        CliError: ``ANTHROPIC_API_KEY`` is not set (the message ends "set it, or ``instead``").
    """
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise CliError(f"ANTHROPIC_API_KEY is not set: set it, or {instead}")
    from steploop.effects.model import AnthropicModelClient, make_client

    client = make_client(connect_timeout=10.0, read_timeout=120.0)
    model = AnthropicModelClient(
        client,
        system="You are a careful coding agent working in the user's workspace.",
        tools=tools,
        traits_for=traits_for,
    )
    return client, model


# ----------------------------------------------------------------------------------------------
# The terminal

#: Control characters but newline and tab: C0, DEL and C1 (ESC starts every escape sequence;
#: CSI, OSC, BEL, CR, backspace move the cursor, clear the screen, set the title or a link).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """``text`` with every control character but newline and tab written as its escape
    (``\\x1b``, ``\\r``), so that nothing from a file, a model, a trace or a hook reaches
    the terminal as a command. Idempotent."""
    if _CONTROL.search(text) is None:
        return text
    return _CONTROL.sub(_escape, text)


def _escape(m: re.Match[str]) -> str:
    ch = m.group()
    return {"\r": "\\r", "\x0b": "\\v", "\x0c": "\\f"}.get(ch) or f"\\x{ord(ch):02x}"


def for_terminal(text: str, redactor: Redactor | None = None) -> str:
    """``text`` as a terminal may show it: every configured secret replaced by its marker
    (``redactor``'s, else the environment's key and token) and every control character
    escaped (:func:`terminal_text`)."""
    return terminal_text((redactor if redactor is not None else Redactor()).text(text))


def short(text: str, n: int = 100) -> str:
    """``text`` on one line (newlines as ``⏎``), cut to ``n`` characters with ``…``."""
    line = text.replace("\n", "⏎ ")
    return line if len(line) <= n else line[: n - 1] + "…"


def one_line(text: str) -> str:
    """``text`` on one line (an error message's newlines as spaces)."""
    return " ".join(text.split("\n")) if "\n" in text else text


def printable(out: TextIO) -> TextIO:
    """``out``, writing a lone surrogate (text from a trace or a tool, B-TEXT-1) as its
    ``\\udXXX`` escape instead of raising UnicodeEncodeError."""
    reconfigure = getattr(out, "reconfigure", None)
    if reconfigure is not None and getattr(out, "errors", None) in ("strict", "surrogateescape"):
        reconfigure(errors="backslashreplace")
    return out


def quiet_output(out: TextIO) -> None:
    """The reader of ``out`` left (``steploop ... | head``): from now on what is written to it
    goes nowhere, so neither a later line nor the interpreter's last flush fails again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    try:
        os.dup2(devnull, out.fileno())
    except (OSError, ValueError, AttributeError):  # no descriptor (a StringIO), or closed
        pass
    finally:
        os.close(devnull)


# ----------------------------------------------------------------------------------------------
# The console (rich)


def console_for(out: TextIO, *, stderr: bool = False) -> Any:
    """A ``rich`` console writing to ``out``.

    Colour and bold only on a terminal and never with ``NO_COLOR`` set; off a terminal
    the width is fixed and generous, so what is written never depends on the terminal's width.
    """
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich would point stdout at /dev/null and exit 1
            self.quiet = True
            raise BrokenPipeError  # the CLI's main ends quietly with status 0

    try:
        tty = out.isatty()
    except (AttributeError, ValueError):
        tty = False
    styled = tty and not os.environ.get("NO_COLOR")
    return _Console(
        file=out,
        stderr=stderr,
        force_terminal=tty,
        no_color=not styled,
        highlight=False,
        emoji=False,
        soft_wrap=True,
        width=None if tty else 1000,
        color_system="auto" if styled else None,  # None: no escape sequence at all
    )


class ProgressBar:
    """A progress bar on ``stream`` (stderr), or nothing when not ``enabled``.

    ``enabled`` is usually "stderr is a terminal, or ``--progress`` was given". On a terminal
    it is a ``rich`` bar (colour unless ``NO_COLOR``), removed when done; off a terminal a plain
    ``\\r[#####     ] 12/40 files`` line without escape codes, which stays. Updates are drawn at
    most ten times a second, so a bar costs next to nothing per step.
    """

    def __init__(
        self, total: int | None, label: str, unit: str, stream: TextIO, enabled: bool
    ) -> None:
        self.enabled = enabled
        self.total = total
        self.unit = unit
        self.stream = stream
        self._done = 0
        self._last = 0.0
        self._progress: Any = None
        if not enabled:
            return
        try:
            tty = stream.isatty()
        except (AttributeError, ValueError):
            tty = False
        if not tty:
            self._draw()
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        console = Console(file=stream, no_color=bool(os.environ.get("NO_COLOR")), highlight=False)
        self._progress = Progress(
            TextColumn(label),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn(unit),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            auto_refresh=False,
        )
        self._task = self._progress.add_task(label, total=total)
        self._progress.start()

    def _draw(self) -> None:
        if self.total:
            width = 30
            filled = min(width, width * self._done // self.total)
            bar = "#" * filled + " " * (width - filled)
            self.stream.write(f"\r[{bar}] {self._done}/{self.total} {self.unit}")
        else:
            self.stream.write(f"\r{self._done} {self.unit}")
        self.stream.flush()

    def advance(self, n: int = 1) -> None:
        if not self.enabled:
            return
        import time

        self._done += n
        now = time.monotonic()
        if now - self._last < 0.1 and self._done != self.total:
            return
        self._last = now
        if self._progress is None:
            self._draw()
        else:
            self._progress.update(self._task, completed=self._done)
            self._progress.refresh()

    def close(self) -> None:
        if not self.enabled:
            return
        self.enabled = False
        if self._progress is None:
            self.stream.write("\n")
            self.stream.flush()
        else:
            self._progress.stop()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def count_steps(path: str | os.PathLike[str]) -> int | None:
    """The step records in a trace file (for a progress bar's total), or None if unreadable."""
    pattern = b'{"record":"step"'
    n = 0
    tail = b""  # shorter than the pattern: a match in it was not counted yet
    try:
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                data = tail + chunk
                n += data.count(pattern)
                tail = data[-(len(pattern) - 1) :]
        return n
    except OSError:
        return None
