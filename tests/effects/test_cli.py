"""The steploop command line: the demo, run --scripted, and one-line errors for bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from steploop.effects.cli import main


def test_demo_runs_the_walkthrough(capsys: pytest.CaptureFixture[str]) -> None:
    """`steploop demo` shows each transition and ends completed with the file fixed."""
    out = io.StringIO()
    assert main(["demo"], out=out) == 0
    text = out.getvalue()
    assert text.count("── continue: next_turn") == 2
    assert "══ terminal: completed" in text
    assert "permission? Edit(" in text and "→ approved" in text
    assert "the guard clause is in place: True" in text


def test_run_scripted(tmp_path: Path) -> None:
    """`steploop run --scripted FILE` answers from the script and uses the real tools."""
    (tmp_path / "a.txt").write_text("hello\n")
    script = tmp_path / "s.json"
    script.write_text(json.dumps([
        {"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}},
        {"type": "reply", "text": "It says hello."},
    ]))
    out = io.StringIO()
    assert main(["run", "read a.txt", "--workspace", str(tmp_path), "--scripted", str(script)], out=out) == 0
    assert "It says hello." in out.getvalue() and "terminal: completed" in out.getvalue()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "x", "--scripted", "/nonexistent.json"], "/nonexistent.json: no such file"),
        (["run", "x", "--workspace", "/nonexistent-dir"], "is not a directory"),
        (["demo", "--profile", "nope"], "unknown profile 'nope'"),
        (["demo", "--set", "nope=1"], "unknown config key 'nope'"),
        (["demo", "--set", "context_window"], "--set takes KEY=VALUE"),
        (["demo", "--set", "context_window=-5"], "context_window must be a positive integer"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    """User errors print one `steploop: error:` line and exit 2, never a traceback."""
    assert main(argv, out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("steploop: error:") and message in err
    assert "Traceback" not in err and err.count("\n") == 1


def test_bad_script_names_the_entry(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed script is reported with the entry it is in."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"type": "reply"}]))
    assert main(["run", "x", "--workspace", str(tmp_path), "--scripted", str(bad)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert "script[0]" in err and "Traceback" not in err
    bad.write_text("[{")
    assert main(["run", "x", "--workspace", str(tmp_path), "--scripted", str(bad)], out=io.StringIO()) == 2
    assert "not valid JSON" in capsys.readouterr().err


def test_run_without_key_or_script_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Without ANTHROPIC_API_KEY and without --scripted the error says how to proceed."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert main(["run", "x", "--workspace", str(tmp_path)], out=io.StringIO()) == 2
    assert "pass --scripted FILE" in capsys.readouterr().err


# -- exit codes -----------------------------------------------------------------------------


def _script(tmp_path: Path, entries: list[dict[str, object]]) -> str:
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(entries))
    return str(path)


def _run(tmp_path: Path, entries: list[dict[str, object]], *extra: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["run", "go", "--workspace", str(tmp_path), "--scripted", _script(tmp_path, entries), *extra], out=out)
    return code, out.getvalue()


OVERLOADED = {"type": "failure", "kind": "overloaded", "status": 529}


@pytest.mark.spec("CLI-1")
@pytest.mark.parametrize(
    ("entries", "extra", "code"),
    [
        ([{"type": "reply", "text": "done"}], (), 0),
        ([OVERLOADED, OVERLOADED], ("--max-retries", "1"), 3),  # retries exhausted: completed + API error
        ([], (), 3),  # the script ran out: model_error
        ([{"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}}] * 3, ("--set", "max_turns=2"), 7),
    ],
    ids=["completed", "api-error", "model-error", "max-turns"],
)
def test_run_exit_codes_tell_the_truth(
    tmp_path: Path, entries: list[dict[str, object]], extra: tuple[str, ...], code: int
) -> None:
    """0 only for completed without an API error; each other terminal group its own code."""
    (tmp_path / "a.txt").write_text("hello\n")
    got, text = _run(tmp_path, entries, *extra)
    assert got == code, text
    assert f"exit status {code}" in text


def test_max_retries_bounds_the_retries(tmp_path: Path) -> None:
    """--max-retries N sets retry.max_retries: N retry notices, then the API-error exit."""
    got, text = _run(tmp_path, [OVERLOADED, OVERLOADED, OVERLOADED], "--max-retries", "2")
    assert got == 3 and text.count("retrying in") == 2 and "attempt 2 of 2" in text, text
    got, text = _run(tmp_path, [OVERLOADED], "--max-retries", "0")
    assert got == 3 and "retrying in" not in text, text


@pytest.mark.spec("CLI-1")
def test_exit_codes_are_one_table(tmp_path: Path) -> None:
    """run, demo and the table agree; every Terminal has a code; 0 is only for completed."""
    from steploop.effects.cli_common import TERMINAL_EXIT
    from steploop.reducer.transitions import TERMINAL_TYPES

    assert set(TERMINAL_EXIT) == {t.TAG for t in TERMINAL_TYPES}
    assert [k for k, v in TERMINAL_EXIT.items() if v == 0] == ["completed"]
    assert main(["demo"], out=io.StringIO()) == 0


# -- input files ----------------------------------------------------------------------------


@pytest.mark.spec("CLI-2")
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "is a directory"),
        (b"\xff\xfe\x00\x01", "binary file"),
        (b"caf\xe9", "not UTF-8"),
        (b"[" * 100_000, "not valid JSON"),
        (b'{"responses": 3}', "expected a list"),
    ],
    ids=["directory", "binary", "latin-1", "deep", "shape"],
)
def test_every_bad_script_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | None, message: str
) -> None:
    path = tmp_path / "s"
    if content is None:
        path.mkdir()
    else:
        path.write_bytes(content)
    assert main(["run", "x", "--workspace", str(tmp_path), "--scripted", str(path)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("steploop: error: script ") and str(path) in err and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1


def test_unreadable_script_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    path = tmp_path / "s.json"
    path.write_text("[]")
    path.chmod(0)
    try:
        if os.access(path, os.R_OK):
            pytest.skip("running as a user who reads every file (root)")
        assert main(["run", "x", "--workspace", str(tmp_path), "--scripted", str(path)], out=io.StringIO()) == 2
        assert "permission denied" in capsys.readouterr().err
    finally:
        path.chmod(0o600)


# -- recording, permissions, hooks ----------------------------------------------------------


def test_run_trace_records_a_replayable_trace(tmp_path: Path) -> None:
    """--trace FILE records the run: it replays exactly and shows its rounds."""
    (tmp_path / "a.txt").write_text("hello\n")
    trace = tmp_path / "run.jsonl"
    got, text = _run(
        tmp_path,
        [{"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}}, {"type": "reply", "text": "ok"}],
        "--trace",
        str(trace),
    )
    assert got == 0 and f"trace: {trace}" in text
    out = io.StringIO()
    assert main(["replay", str(trace)], out=out) == 0, out.getvalue()
    out = io.StringIO()
    assert main(["show", str(trace)], out=out) == 0
    assert "2 round(s); terminal completed" in out.getvalue()


def test_run_trace_in_a_missing_directory_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    got, _ = _run(tmp_path, [{"type": "reply", "text": "ok"}], "--trace", str(tmp_path / "no" / "t.jsonl"))
    assert got == 2 and "cannot write" in capsys.readouterr().err


EDIT: dict[str, object] = {"type": "tool_call", "name": "Write", "input": {"file_path": "b.txt", "content": "x"}}


@pytest.mark.spec("CLI-3")
def test_no_terminal_and_no_yes_fails_at_the_first_permission(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal to ask, the first request ends the turn with a hint how to allow it."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    got, text = _run(tmp_path, [EDIT, {"type": "reply", "text": "done"}])
    err = capsys.readouterr().err
    assert got == 5, text
    assert err.count("\n") == 1 and "Write needs permission" in err and "--yes" in err and "--allow Write" in err
    assert "refused (no terminal to ask)" in text and not (tmp_path / "b.txt").exists()
    got, _ = _run(tmp_path, [EDIT, {"type": "reply", "text": "done"}], "--allow", "Write")
    assert got == 0 and (tmp_path / "b.txt").read_text() == "x"


def test_permission_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """plan denies the write without asking; acceptEdits allows it; --yes contradicts plan."""
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    got, text = _run(tmp_path, [EDIT, {"type": "reply", "text": "done"}], "--permission-mode", "plan")
    assert not (tmp_path / "b.txt").exists() and "refused" not in text
    got, _ = _run(tmp_path, [EDIT, {"type": "reply", "text": "done"}], "--permission-mode", "acceptEdits")
    assert got == 0 and (tmp_path / "b.txt").exists()
    got, _ = _run(tmp_path, [EDIT], "--permission-mode", "plan", "--yes")
    assert got == 2 and "contradicts" in capsys.readouterr().err


HOOK = """\
import json, sys, pathlib
p = json.load(sys.stdin)
log = pathlib.Path(sys.argv[1])
log.write_text(log.read_text() + json.dumps(p) + "\\n" if log.exists() else json.dumps(p) + "\\n")
if not p["stop_hook_active"]:
    print("run the tests first", file=sys.stderr)
    sys.exit(2)
print(json.dumps({"systemMessage": "tests are green"}))
"""


@pytest.mark.spec("HOOK-1", "HOOK-2")
def test_stop_hook_blocks_once_then_passes(tmp_path: Path) -> None:
    """--stop-hook CMD speaks Claude Code's protocol: exit 2 feeds '[cmd]: stderr' back, the
    second call sees stop_hook_active and its systemMessage is shown."""
    import sys

    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "calls.jsonl"
    cmd = f"{sys.executable} {tmp_path / 'hook.py'} {log}"
    got, text = _run(
        tmp_path,
        [{"type": "reply", "text": "done"}, {"type": "reply", "text": "tests pass"}],
        "--stop-hook",
        cmd,
        "--yes",
    )
    assert got == 0, text
    assert "continue: stop_hook_blocking" in text and f"Stop hook feedback:⏎ [{sys.executable} " in text
    assert "tests are green" in text
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c["stop_hook_active"] for c in calls] == [False, True]
    assert {c["permission_mode"] for c in calls} == {"bypassPermissions"}
    assert calls[0]["transcript_path"] and calls[0]["hook_event_name"] == "Stop"


def test_project_settings_are_read_and_announced_first(tmp_path: Path) -> None:
    """The workspace's .claude/settings.json hooks run, and the first line says so."""
    import sys

    (tmp_path / "hook.py").write_text(HOOK)
    log = tmp_path / "calls.jsonl"
    (tmp_path / ".claude").mkdir()
    settings = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": f"{sys.executable} \"$CLAUDE_PROJECT_DIR\"/hook.py {log}", "timeout": 30}]}]}}
    (tmp_path / ".claude" / "settings.json").write_text(json.dumps(settings))
    entries: list[dict[str, object]] = [{"type": "reply", "text": "done"}, {"type": "reply", "text": "ok"}]
    got, text = _run(tmp_path, entries)
    assert got == 0, text
    assert text.splitlines()[0].startswith("settings: reading Stop hooks from ") and ".claude/settings.json" in text.splitlines()[0]
    assert len(log.read_text().splitlines()) == 2
    log.unlink()
    got, text = _run(tmp_path, entries[:1], "--no-project-settings")
    assert got == 0 and not log.exists() and "settings:" not in text


@pytest.mark.spec("CLI-2")
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("{", "not valid JSON"),
        ('{"hooks": []}', "hooks: expected an object"),
        ('{"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}', "hooks.Stop[0].hooks[0].command"),
        ('{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}', "timeout"),
        ('{"hooks": {"Stop": [{"hooks": [{"type": "shell", "command": "x"}]}]}}', ".type"),
    ],
)
def test_bad_settings_are_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: str, message: str
) -> None:
    path = tmp_path / "settings.json"
    path.write_text(settings)
    got, _ = _run(tmp_path, [{"type": "reply", "text": "ok"}], "--settings", str(path))
    err = capsys.readouterr().err
    assert got == 2 and str(path) in err and message in err and err.count("\n") == 1, err


def test_plugin_hooks_get_their_root(tmp_path: Path) -> None:
    """--plugin DIR runs DIR/hooks/hooks.json with CLAUDE_PLUGIN_ROOT=DIR."""
    (tmp_path / "plug" / "hooks").mkdir(parents=True)
    (tmp_path / "plug" / "hooks" / "stop.sh").write_text('#!/bin/sh\necho "$CLAUDE_PLUGIN_ROOT" > "$CLAUDE_PROJECT_DIR/root.txt"\n')
    (tmp_path / "plug" / "hooks" / "stop.sh").chmod(0o755)
    hooks = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/hooks/stop.sh"}]}]}}
    (tmp_path / "plug" / "hooks" / "hooks.json").write_text(json.dumps(hooks))
    got, text = _run(tmp_path, [{"type": "reply", "text": "ok"}], "--plugin", str(tmp_path / "plug"))
    assert got == 0, text
    assert (tmp_path / "root.txt").read_text().strip() == str((tmp_path / "plug").resolve())


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("steploop ")


def test_demo_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's scratch copy is removed, also when the demo fails on a bad --profile."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert main(["demo"], out=io.StringIO()) == 0
    assert main(["demo", "--profile", "nope"], out=io.StringIO()) == 2
    assert list(tmp_path.iterdir()) == []


# -- diff -----------------------------------------------------------------------------------


def test_diff_of_two_recordings_of_one_script_is_identical(tmp_path: Path) -> None:
    """Two runs of the same script differ only in their clocks: diff says identical (exit 0)
    and compares the times only with --exact, naming the field."""
    import time

    entries: list[dict[str, object]] = [{"type": "reply", "text": "same"}]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert _run(tmp_path, entries, "--trace", str(a))[0] == 0
    time.sleep(0.01)
    assert _run(tmp_path, entries, "--trace", str(b))[0] == 0
    out = io.StringIO()
    assert main(["diff", str(a), str(b)], out=out) == 0, out.getvalue()
    assert out.getvalue().startswith("identical (") and "differ" not in out.getvalue()
    out = io.StringIO()
    assert main(["diff", str(a), str(b), "--exact"], out=out) == 1
    assert "requests differ: at_ms (" in out.getvalue()


def test_diff_names_the_differing_field_of_an_effect(tmp_path: Path) -> None:
    from steploop.effects.trace import record_sequence
    from steploop.reducer import Request, default
    from steploop.reducer.events import Event, ModelBlockReceived, ModelResponseEnded
    from steploop.reducer.messages import TextBlock, Usage

    events: list[Event] = [
        ModelBlockReceived(call_id=1, block=TextBlock(text="hi")),
        ModelResponseEnded(call_id=1, model="m", stop_reason="end_turn", usage=Usage(input_tokens=5)),
    ]
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    record_sequence(a, default(), Request(prompt="go"), events)
    record_sequence(b, default().with_overrides({"model": "claude-other"}), Request(prompt="go"), events)
    out = io.StringIO()
    assert main(["diff", str(a), str(b)], out=out) == 1
    text = out.getvalue()
    assert "configs differ: model (" in text
    assert "first divergence at step 0: same event, the effects differ" in text
    assert "effect 1 (call_model / call_model):" in text and "model: " in text and "→ 'claude-other'" in text, text


# -- show -----------------------------------------------------------------------------------


def test_show_collapses_a_long_trace_and_sums_it_up(tmp_path: Path) -> None:
    """Past 40 rounds show prints the first and last ten with the totals; --summary gives the
    totals per round kind, tools by name and tokens; --all every row."""
    (tmp_path / "a.txt").write_text("hello\n")
    read: dict[str, object] = {"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}}
    glob: dict[str, object] = {"type": "tool_call", "name": "Glob", "input": {"pattern": "*.txt"}}
    trace = tmp_path / "t.jsonl"
    got, _ = _run(tmp_path, [read, glob] * 25 + [{"type": "reply", "text": "done"}], "--trace", str(trace))
    assert got == 0
    out = io.StringIO()
    assert main(["show", str(trace)], out=out) == 0
    text = out.getvalue()
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit() and "steps," not in line]
    assert [r[0] for r in rows] == [str(n) for n in (*range(1, 11), *range(42, 52))]
    assert "31 rounds not shown" in text and "tools by name: Glob 25, Read 25" in text
    out = io.StringIO()
    assert main(["show", str(trace), "--summary"], out=out) == 0
    summary = out.getvalue()
    kinds = {line.split()[0]: line.split()[1:] for line in summary.splitlines() if line.startswith(("next_turn", "completed", "total"))}
    assert kinds["next_turn"][0] == "50" and kinds["completed"][0] == "1" and kinds["total"][:3] == ["51", "51", "50"]
    out = io.StringIO()
    assert main(["show", str(trace), "--all"], out=out) == 0
    assert len([line for line in out.getvalue().splitlines() if line.strip()[:1].isdigit() and "steps," not in line]) == 51


def test_show_of_a_closed_pipe_ends_quietly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`steploop show … | head`: a reader that leaves is no error and no traceback."""
    import os

    trace = Path(__file__).resolve().parents[2] / "specs" / "scenarios" / "completed.jsonl"
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first line
    out = os.fdopen(w, "w", buffering=1)
    try:
        assert main(["show", str(trace)], out=out) == 0
    finally:
        try:
            out.close()
        except BrokenPipeError:
            pass
    assert "Traceback" not in capsys.readouterr().err


def test_the_sample_replies_file_runs(tmp_path: Path) -> None:
    """examples/replies.json (the README's scripted-replies example) runs on the sample project,
    through a retried failure, to completed."""
    import shutil

    from steploop.effects.cli import SAMPLE_PROJECT

    root = Path(__file__).resolve().parents[2]
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE_PROJECT, ws)
    out = io.StringIO()
    argv = ["run", "Where is userId read?", "--workspace", str(ws), "--scripted", str(root / "examples" / "replies.json")]
    assert main(argv, out=out) == 0, out.getvalue()
    text = out.getvalue()
    assert "retrying in" in text and text.count("── continue: next_turn") == 2 and "userId is read in validate.ts" in text


@pytest.mark.spec("CLI-1")
def test_ctrl_c_is_130_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    monkeypatch.setattr("steploop.effects.cli.anyio.run", interrupted)
    got, _ = _run(tmp_path, [{"type": "reply", "text": "x"}])
    assert got == 130 and capsys.readouterr().err == "steploop: interrupted\n"
    assert list(scratch.iterdir()) == []  # the scratch transcript went too


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_and_never_with_no_color(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A terminal gets colour (BROKEN does not look like held); NO_COLOR and pipes get none; the
    words are the same whatever the width."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "40")
    entries: list[dict[str, object]] = [{"type": "reply", "text": "done " * 30}]
    tty = _Tty()
    main(["run", "go", "--workspace", str(tmp_path), "--scripted", _script(tmp_path, entries)], out=tty)
    assert "\x1b[" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Tty()
    main(["run", "go", "--workspace", str(tmp_path), "--scripted", _script(tmp_path, entries)], out=plain)
    piped = io.StringIO()
    main(["run", "go", "--workspace", str(tmp_path), "--scripted", _script(tmp_path, entries)], out=piped)
    assert "\x1b[" not in plain.getvalue() and "\x1b[" not in piped.getvalue()
    assert "assistant: " + ("done " * 30).strip()[:80] in piped.getvalue()  # not wrapped at 40
