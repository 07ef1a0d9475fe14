"""``steploop check`` when step() itself crashes: a broken M-5 with its trace, no traceback."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.cli import main
from steploop.reducer import machine
from steploop.reducer.events import Interrupted, StopHooksFinished
from steploop.reducer.state import LoopState


def _crash(s: LoopState, e: StopHooksFinished, cfg: Any, fx: Any) -> LoopState:
    raise ZeroDivisionError("a bug in the stop-hook handler")


@pytest.mark.spec("M-5")
def test_a_crash_in_step_is_reported_as_broken_with_its_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The explorer finds the crash; writing its counterexample replays the events, the crash
    comes again, and the command still reports it (exit 1) and writes the steps before it."""
    monkeypatch.setitem(machine.TABLE["stop_hooks"], StopHooksFinished, _crash)
    out = io.StringIO()
    code = main(["check", "--rounds", "1", "--deep", "off", "--out", str(tmp_path / "cex")], out=out)
    text = out.getvalue()
    assert code == 1, text
    assert "Traceback" not in capsys.readouterr().err
    assert "M-5" in text and "BROKEN" in text and "ZeroDivisionError" in text
    traces = sorted((tmp_path / "cex").glob("steploop-check-M-5*.jsonl"))
    assert traces, text
    side = json.loads(traces[0].with_suffix(".json").read_text())
    assert side["raises"].startswith("ZeroDivisionError") and side["events"][side["raises_at"]]["type"] == "stop_hooks_finished"
    monkeypatch.undo()  # the prefix replays exactly with the real machine
    replay = io.StringIO()
    assert main(["replay", str(traces[0])], out=replay) == 0, replay.getvalue()


def test_check_writes_under_the_folder_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Counterexamples go to ``steploop-check/`` by default, never loose in the current directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(machine.TABLE["stop_hooks"], StopHooksFinished, _crash)
    out = io.StringIO()
    assert main(["check", "--rounds", "1", "--deep", "off"], out=out) == 1
    assert {p.name for p in tmp_path.iterdir()} == {"steploop-check"}
    assert "steploop-check/steploop-check-M-5" in out.getvalue()


def _accept_after_finish(s: LoopState, e: Interrupted, cfg: Any, fx: Any) -> LoopState:
    return s  # a broken machine: a finished turn takes an interrupt


@pytest.mark.spec("INV-12", "ABS-3")
def test_events_after_finish_are_counted_beside_a_trace_that_ends_at_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A machine that accepts an event after Finish breaks INV-12; its counterexample is written
    by the driver loop, which stops at Finish: the trace ends there (its end record last), the
    sidecar counts the event after it, and the trace replays exactly on the real machine."""
    monkeypatch.setitem(machine.TABLE["done"], Interrupted, _accept_after_finish)
    out = io.StringIO()
    code = main(["check", "--rounds", "1", "--deep", "off", "--out", str(tmp_path)], out=out)
    text = out.getvalue()
    assert code == 1 and "INV-12" in text and "BROKEN" in text, text
    assert "Traceback" not in capsys.readouterr().err
    trace = tmp_path / "steploop-check-INV-12.jsonl"
    side = json.loads(trace.with_suffix(".json").read_text())
    assert side["after_finish"] == 1 and side["labels"][-1] == "probe:after_finish"
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert records[-1]["record"] == "end"
    steps = [r for r in records if r["record"] == "step"]
    assert len(steps) == len(side["events"])  # start() and every event but the one after Finish
    monkeypatch.undo()
    assert main(["replay", str(trace)], out=io.StringIO()) == 0


def test_more_worker_processes_than_the_machine_can_use_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--processes 100000`` forked until the machine fell over; now: four per core at most,
    said in one line, exit 2, nothing started. The same bound holds for ``--jobs``."""
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert main(["check", "--processes", "100000", "--max-states", "10"], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err == "steploop: error: --processes: at most 8 (4 per core; this machine has 2), got 100,000\n"
    scenarios = str(Path(__file__).resolve().parents[2] / "specs" / "scenarios")
    assert main(["stats", scenarios, "--jobs", "9"], out=io.StringIO()) == 2
    assert "argument --jobs: at most 8 (4 per core; this machine has 2), got 9" in capsys.readouterr().err
