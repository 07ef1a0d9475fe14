"""What `steploop run`, `demo`, `resume` and `show` print (issue 27, items 4, 11, 13, 16, 17):
no secret, no raw terminal escape, the same words for the same numbers, and a quiet end when the
reader of the output leaves."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from steploop.effects.cli import main
from steploop.effects.redaction import redaction_marker
from steploop.effects.trace import EndRecord, TraceReader
from tests.support.messages_server import MessagesServer, error_response

KEY = "sk-ant-api03-LIVE-0123456789abcdef"
TOKEN = "auth-token-0123456789"


def _script(tmp_path: Path, entries: list[dict[str, object]]) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(entries))
    return str(path)


def _run(tmp_path: Path, prompt: str, entries: list[dict[str, object]], *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    argv = ["run", prompt, "--workspace", str(tmp_path), "--scripted", _script(tmp_path, entries), "--yes", *extra]
    code = main(argv, out=out)
    return code, out.getvalue()


# -- item 4: secrets ------------------------------------------------------------------------


def test_the_key_never_reaches_the_live_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt, a tool result and the model's text holding the API key or the auth token
    show the trace's marker instead."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", TOKEN)
    (tmp_path / ".env").write_text(f"ANTHROPIC_API_KEY={KEY}\nTOKEN={TOKEN}\n")
    (tmp_path / "long.txt").write_text("x" * 40 + KEY + "\n")  # the one-line preview cuts the key
    entries: list[dict[str, object]] = [
        {"type": "tool_call", "name": "Read", "input": {"file_path": ".env"}},
        {"type": "tool_call", "name": "Read", "input": {"file_path": "long.txt"}},
        {"type": "tool_call", "name": "Bash", "input": {"command": "x" * 70 + f" {KEY}"}},
        {"type": "reply", "text": f"The key is {KEY} and the token {TOKEN}."},
    ]
    code, text = _run(tmp_path, f"is {KEY} my key?", entries)
    assert code == 0, text
    assert KEY not in text and TOKEN not in text
    assert KEY[:12] not in text  # not even the part before a cut
    marker, token_marker = redaction_marker(len(KEY)), redaction_marker(len(TOKEN))
    assert f"▶ is {marker} my key?" in text
    assert f"ANTHROPIC_API_KEY={marker}" in text
    assert f"assistant: The key is {marker} and the token {token_marker}." in text


def test_an_api_error_echoing_the_key_is_shown_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A live run whose API error line echoes the key shows the marker (exit 3)."""
    with MessagesServer() as server:
        server.enqueue(error_response(529, "overloaded_error", f"overloaded (caller {KEY})"))
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        out = io.StringIO()
        code = main(["run", "hi", "--workspace", str(tmp_path), "--max-retries", "0"], out=out)
    text = out.getvalue() + capsys.readouterr().err
    assert code == 3, text
    assert KEY not in text
    assert "assistant (API error): " in text and f"(caller {redaction_marker(len(KEY))})" in text


# -- item 17: terminal escapes --------------------------------------------------------------


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\r"


def test_escape_sequences_are_printed_escaped(tmp_path: Path) -> None:
    """A file, the model's text and the prompt cannot clear the screen or set the title: every
    control character is shown as its escape, in run and in show."""
    (tmp_path / "evil.txt").write_text(f"hello{ESCAPES}world\n")
    trace = tmp_path / "t.jsonl"
    entries: list[dict[str, object]] = [
        {"type": "tool_call", "name": "Read", "input": {"file_path": "evil.txt"}},
        {"type": "reply", "text": f"It says{ESCAPES}hello."},
    ]
    code, text = _run(tmp_path, f"read{ESCAPES}evil.txt", entries, "--trace", str(trace))
    assert code == 0, text
    for ch in "\x1b\x07\x9b\r":
        assert ch not in text
    assert "\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\r" in text
    assert "assistant: It says\\x1b[2J" in text and "▶ read\\x1b[2J" in text
    out = io.StringIO()
    assert main(["show", str(trace)], out=out) == 0
    assert "\x1b" not in out.getvalue() and "prompt: read\\x1b[2J" in out.getvalue()


# -- item 11: a reader that leaves ----------------------------------------------------------


class _ReaderLeaves(io.TextIOWrapper):
    """A pipe whose reader reads the first line and leaves (`| head -1`): the writes after it
    fail as they do on a terminal pipeline (EPIPE)."""

    def __init__(self) -> None:
        self._r, w = os.pipe()
        super().__init__(os.fdopen(w, "wb"), encoding="utf-8", line_buffering=True)

    def write(self, s: str) -> int:
        n = super().write(s)
        if "\n" in s and self._r >= 0:
            self.flush()
            os.close(self._r)
            self._r = -1
        return n

    def close(self) -> None:
        try:
            super().close()
        except BrokenPipeError:  # the buffer's last flush: the reader is gone
            pass
        if self._r >= 0:
            os.close(self._r)
            self._r = -1


@pytest.mark.spec("TR-READ-3")
def test_run_and_demo_whose_reader_leaves_end_quietly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`demo | head -1` and `run … | head -1`: no traceback; the turn still runs to its end (its
    trace is complete) and the exit status is the turn's."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    trace = tmp_path / "t.jsonl"
    (tmp_path / "a.txt").write_text("hi\n")
    script = _script(tmp_path, [{"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}}])
    argv = ["run", "go", "--workspace", str(tmp_path), "--trace", str(trace), "--scripted", script]
    for args, status in ((["demo"], 0), (argv, 3)):  # 3: the script ran out (model_error)
        out = _ReaderLeaves()
        try:
            assert main(args, out=out) == status
        finally:
            out.close()
    err = capsys.readouterr().err
    assert "Traceback" not in err and "Exception" not in err, err
    assert isinstance(list(TraceReader(trace))[-1], EndRecord)
    assert list(scratch.iterdir()) == []


def test_run_piped_into_head_exits_with_the_turns_status_without_a_word(tmp_path: Path) -> None:
    """`steploop run … | head -1` as a user types it (a Bash call keeps the turn going after
    head left): the turn's status, nothing on stderr, the trace complete."""
    trace = tmp_path / "t.jsonl"
    script = _script(tmp_path, [
        {"type": "tool_call", "name": "Bash", "input": {"command": "sleep 1"}},
        {"type": "reply", "text": "done"},
    ])
    run = f"{sys.executable} -m steploop.effects.cli run go --workspace {tmp_path} --enable-bash --yes --scripted {script} --trace {trace}"
    done = subprocess.run(["bash", "-c", f"{run} | head -1; echo ${{PIPESTATUS[0]}}"], capture_output=True, text=True, timeout=120)
    assert done.stdout.splitlines() == ["▶ go", "0"] and done.stderr == "", done
    assert isinstance(list(TraceReader(trace))[-1], EndRecord)


# -- item 13: one meaning per word ----------------------------------------------------------


BLOCK_ONCE = """\
import json, sys
p = json.load(sys.stdin)
if not p["stop_hook_active"]:
    print("run the tests first", file=sys.stderr)
    sys.exit(2)
"""


def test_rounds_and_tokens_mean_the_same_in_run_and_show(tmp_path: Path) -> None:
    """A stop hook blocks once: the live display's "round 2", the result line, show and the
    viewer all count 2 rounds; "tokens in" counts cache reads and writes in each."""
    (tmp_path / "hook.py").write_text(BLOCK_ONCE)
    trace = tmp_path / "t.jsonl"
    usage = {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200}
    entries: list[dict[str, object]] = [
        {"type": "reply", "text": "done", "usage": usage},
        {"type": "reply", "text": "tests pass", "usage": usage},
    ]
    hook = f"{sys.executable} {tmp_path / 'hook.py'}"
    code, text = _run(tmp_path, "go", entries, "--stop-hook", hook, "--trace", str(trace))
    assert code == 0, text
    assert "→ round 2" in text
    assert (
        "result: completed after 2 round(s); tokens in/out 2,420/10 (in: 20 uncached, 400 cache "
        "writes, 2,000 cache reads); exit status 0 (completed)"
    ) in text
    out = io.StringIO()
    assert main(["show", str(trace)], out=out) == 0
    shown = out.getvalue()
    assert "2 round(s); terminal completed" in shown
    rows = [line.split() for line in shown.splitlines() if line.strip()[:1].isdigit() and "steps," not in line]
    assert [r[-2] for r in rows] == ["1,210/5", "1,210/5"]  # 2 x 1,210 = the result line's 2,420
    from steploop.effects.viewer import trace_view

    rounds = trace_view(trace).data["rounds"]  # the viewer: the same rounds, the same tokens
    assert [(r["tin"], r["tout"]) for r in rounds] == [(1210, 5), (1210, 5)]


ERRING_HOOK = "import sys; sys.exit(1)"
STOPPING_HOOK = 'import json; print(json.dumps({"continue": False, "stopReason": "enough"}))'


@pytest.mark.parametrize(("hook", "terminal"), [(ERRING_HOOK, "completed"), (STOPPING_HOOK, "stop_hook_prevented")])
def test_the_terminal_line_comes_after_everything_of_its_turn(tmp_path: Path, hook: str, terminal: str) -> None:
    """The stop hooks' summary (and a hook stop's attachment) print before "terminal: …"."""
    (tmp_path / "hook.py").write_text(hook)
    code, text = _run(tmp_path, "go", [{"type": "reply", "text": "done"}], "--stop-hook", f"{sys.executable} {tmp_path / 'hook.py'}")
    assert code == (0 if terminal == "completed" else 6), text
    lines = [line for line in text.splitlines() if line.strip()]
    end = next(k for k, line in enumerate(lines) if line.startswith("══ terminal:"))
    assert lines[end] == f"══ terminal: {terminal}", text
    assert any("stop_hook_summary" in line for line in lines[:end]), text
    assert lines[end + 1].startswith("result: "), text


# -- item 16: show's long-trace row ---------------------------------------------------------


def test_show_of_a_long_trace_keeps_its_columns_narrow(tmp_path: Path) -> None:
    """The "rounds not shown" note does not widen the transition column: every line of the
    table is as wide as it is with --all."""
    (tmp_path / "a.txt").write_text("hello\n")
    read: dict[str, object] = {"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}}
    trace = tmp_path / "t.jsonl"
    code, _ = _run(tmp_path, "go", [read] * 45 + [{"type": "reply", "text": "done"}], "--trace", str(trace))
    assert code == 0
    widths = {}
    out, full = io.StringIO(), io.StringIO()
    assert main(["show", str(trace)], out=out) == 0 and main(["show", str(trace), "--all"], out=full) == 0
    for name, buf in (("collapsed", out), ("all", full)):
        table = [line for line in buf.getvalue().splitlines() if line.startswith(("round", "    ", "  …"))]
        widths[name] = max(len(line.rstrip()) for line in table)
    assert widths["collapsed"] <= widths["all"] < 80, widths
    assert "26 rounds not shown (--all shows them, --summary totals them)" in out.getvalue()


def test_a_permission_question_reaches_the_user_when_stdout_is_a_pipe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run … | head` on a terminal: the question goes to stderr, not into the pipe (where the
    reader may have left), its secrets hidden and controls escaped; the answer is read."""
    from steploop.effects.cli_drive import PermissionAsker
    from steploop.effects.run import PermissionRequest
    from steploop.reducer.effects import AskPermission

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    ask = AskPermission(generation=1, tool_use_id="t1", name="Bash", input={"command": f"echo {KEY}\x1b[2J"})
    req = PermissionRequest(ask, lambda *_: None)  # the asker reads name and input only
    assert PermissionAsker(interactive=True)(req) is True
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("Allow Bash(") and KEY not in captured.err and "\x1b" not in captured.err
    assert PermissionAsker(interactive=True)(req) is None  # end of input: nobody answered
