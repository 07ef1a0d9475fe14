"""What the trace commands say about inputs they cannot use (issue 27 items 14, 15): `stats` of
nothing readable exits 2 as `replay` does; a Claude Code transcript given to `show`, `replay`,
`diff` or `resume` is named as one, with the command that makes a trace of it."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from steploop.effects.cli import main

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = ROOT / "tests" / "data" / "cc-transcripts" / "derived" / "stop_hook_feedback.jsonl"


@pytest.mark.spec("CLI-2", "TR-READ-1")
def test_stats_of_nothing_readable_exits_2_as_replay_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two files, neither a trace: stats warns for each, says none could be read, exits 2;
    replay of the same exits 2; one good trace beside them and stats exits 0."""
    (tmp_path / "a.jsonl").write_text("not json\n")
    (tmp_path / "b.jsonl").write_text('{"a": 1}\n')
    bad = [str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]
    out = io.StringIO()
    assert main(["stats", *bad], out=out) == 2
    err = capsys.readouterr().err
    assert out.getvalue().startswith("0 trace(s) read, 2 skipped")
    assert err.count("(skipped)") == 2 and err.endswith("steploop: error: none of the 2 trace(s) could be read\n")
    assert main(["replay", *bad], out=io.StringIO()) == 2
    shutil.copy(ROOT / "specs" / "scenarios" / "completed.jsonl", tmp_path / "c.jsonl")
    out = io.StringIO()
    assert main(["stats", *bad, str(tmp_path / "c.jsonl")], out=out) == 0
    assert out.getvalue().startswith("1 trace(s) read, 2 skipped")


@pytest.mark.spec("CLI-2", "TR-READ-1")
@pytest.mark.parametrize("command", ["show", "replay", "diff", "resume", "replay-set"])
def test_a_claude_code_transcript_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    """show/replay/diff/resume of a Claude Code transcript: one line saying what it is and the
    `steploop import` command that makes a trace of it; exit 2."""
    path = tmp_path / "my session.jsonl"
    shutil.copy(TRANSCRIPT, path)
    argv = {
        "show": ["show", str(path)],
        "replay": ["replay", str(path)],
        "replay-set": ["replay", str(path), "--set", "max_turns=3"],
        "diff": ["diff", str(path), str(path)],
        "resume": ["resume", str(path), "--scripted", str(path)],
    }[command]
    assert main(argv, out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err == (
        f"steploop: error: {path}: a Claude Code transcript, not a steploop trace; "
        f"`steploop import '{path}'` makes a trace of it (then show or replay that)\n"
    )


def test_a_transcript_whose_first_line_is_long_or_a_snapshot_is_recognised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A first record past the first MB (a pasted file), or a file-history-snapshot first, is
    still recognised; a JSON line of no known kind keeps the reader's own message."""
    long = tmp_path / "long.jsonl"
    first = {"parentUuid": None, "sessionId": "s", "type": "user", "message": {"content": "x" * 1_200_000}}
    long.write_text(json.dumps(first) + "\n")
    snapshot = tmp_path / "snap.jsonl"
    snapshot.write_text(json.dumps({"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text('{"a": 1}\n')
    for path in (long, snapshot):
        assert main(["show", str(path)], out=io.StringIO()) == 2
        assert "a Claude Code transcript, not a steploop trace" in capsys.readouterr().err
    assert main(["show", str(other)], out=io.StringIO()) == 2
    assert "a record needs a 'record' key" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--transcript", "--trace"])
def test_a_pipe_or_a_directory_as_the_runs_output_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    """The run reads its transcript back (and rewrites it to withdraw a record) and appends to
    its trace: a pipe at that name held ``steploop run`` for ever; now one line, exit 2, before
    anything starts. A directory is named as one."""
    import os

    script = tmp_path / "s.json"
    script.write_text(json.dumps([{"type": "reply", "text": "hi"}]))
    pipe = tmp_path / "pipe.jsonl"
    os.mkfifo(pipe)
    argv = ["run", "x", "--scripted", str(script), "--workspace", str(tmp_path)]
    what = flag.removeprefix("--")
    assert main([*argv, flag, str(tmp_path)], out=io.StringIO()) == 2  # first: it cannot hang
    assert capsys.readouterr().err == f"steploop: error: {what} {tmp_path}: is a directory, not a file\n"
    assert main([*argv, flag, str(pipe)], out=io.StringIO()) == 2
    assert capsys.readouterr().err == (
        f"steploop: error: {what} {pipe}: not a regular file (a pipe or a device cannot be read "
        "back and rewritten, as the run does)\n"
    )
