"""`steploop resume TRACE --scripted FILE` with the killed run's own script (issue 27 item 12):
the script goes on from the first answer the recorded part did not use, so no work is done
twice."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from steploop.effects.cli import main
from steploop.effects.trace import StepRecord, TraceReader
from steploop.reducer.effects import CallModel, StartTool

SCRIPT: list[dict[str, object]] = [
    {"type": "tool_call", "name": "Read", "input": {"file_path": "a.txt"}},
    {"type": "tool_call", "name": "Read", "input": {"file_path": "b.txt"}},
    {"type": "reply", "text": "a says A, b says B"},
]


def _recorded(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "a.txt").write_text("A\n")
    (tmp_path / "b.txt").write_text("B\n")
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))
    trace = tmp_path / "t.jsonl"
    argv = ["run", "read a and b", "--workspace", str(tmp_path), "--scripted", str(script), "--trace", str(trace)]
    assert main(argv, out=io.StringIO()) == 0
    return trace, script


def _kill_when_issued(trace: Path, call_id: int) -> None:
    """Cut the trace after the step that issued model call ``call_id`` (nothing streamed yet),
    with half of the next line, as a kill leaves it."""
    lines = trace.read_bytes().splitlines(keepends=True)
    for k, line in enumerate(lines):
        rec = json.loads(line)
        if rec["record"] == "step" and any(e.get("call_id") == call_id and e["type"] == "call_model" for e in rec["effects"]):
            trace.write_bytes(b"".join(lines[: k + 1]) + lines[k + 1][:10])
            return
    raise AssertionError(f"no step issued call {call_id}")


def _tools_run(trace: Path) -> list[str]:
    return [
        str(e.input["file_path"])
        for rec in TraceReader(trace)
        if isinstance(rec, StepRecord)
        for e in rec.effects
        if isinstance(e, StartTool)
    ]


@pytest.mark.parametrize(("killed_before", "used"), [(2, 1), (3, 2)])
def test_resume_goes_on_with_the_first_answer_not_used(tmp_path: Path, killed_before: int, used: int) -> None:
    """Killed before call 2 (or 3): the resumed run answers from script entry 2 (or 3), each
    file is read once, and the trace has the 3 rounds the uninterrupted run has."""
    trace, script = _recorded(tmp_path)
    _kill_when_issued(trace, killed_before)
    out = io.StringIO()
    code = main(["resume", str(trace), "--scripted", str(script), "--workspace", str(tmp_path), "--yes"], out=out)
    text = out.getvalue()
    assert code == 0, text
    assert f"the script goes on from its answer {used + 1}" in text
    assert _tools_run(trace) == ["a.txt", "b.txt"]
    calls = [e for rec in TraceReader(trace) if isinstance(rec, StepRecord) for e in rec.effects if isinstance(e, CallModel)]
    assert len(calls) == 3
    assert "result: completed after 3 round(s); this run's tokens in/out" in text
    shown = io.StringIO()
    assert main(["show", str(trace)], out=shown) == 0
    assert "3 round(s); terminal completed; resumed 1x" in shown.getvalue()


def test_a_script_shorter_than_what_the_run_used_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A script that holds fewer answers than the killed run used: one line, exit 2, and the
    trace is left as it was."""
    trace, script = _recorded(tmp_path)
    _kill_when_issued(trace, 3)
    before = trace.read_bytes()
    script.write_text(json.dumps(SCRIPT[:1]))
    code = main(["resume", str(trace), "--scripted", str(script), "--workspace", str(tmp_path), "--yes"], out=io.StringIO())
    err = capsys.readouterr().err
    assert code == 2 and err == f"steploop: error: script {script}: the run used 2 answers already; the script holds 1\n"
    assert trace.read_bytes() == before
