"""The steploop command line: the demo, run --scripted, and one-line errors for bad input."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from effects.cli import main


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
