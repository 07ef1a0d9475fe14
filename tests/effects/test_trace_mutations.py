"""Trace commands under attack (issue #17; specs/ TR-READ-1..3).

A property-based test mutates the golden traces (flipped bytes, truncation, duplicated, dropped
and swapped lines, values of the wrong type, deep nesting, huge numbers, lone surrogates, dropped
and added keys) and runs ``replay``, ``show``, ``stats``, ``diff`` and ``resume`` on each, in
process, as ``steploop`` runs them: status 0 only for a trace valid under
specs/trace.schema.json (strict integers, the format's limits), else status 2 with one line
naming the file (``stats``: the file skipped with that line), and never an exception (a
traceback). A replay mismatch (status 1) is the truth only when it was found before the first
invalid line. The oracle and the mutations are in tests/support/trace_mutations.py
(``python -m tests.support.trace_mutations N`` sweeps N traces).

CI runs a few examples per mutation with derandomized settings (a few seconds); ``--slow`` runs
many more.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.trace_mutations import (
    GOLDEN,
    MUTATIONS,
    judge,
    one_line_error,
    schema_valid,
    violations,
)

ROOT = Path(__file__).resolve().parents[2]
COMPLETED = ROOT / "specs" / "scenarios" / "completed.jsonl"


def _settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


def _check(mutation: str, golden: Path, seed: int) -> None:
    data = MUTATIONS[mutation](golden.read_bytes(), random.Random(seed))
    with tempfile.TemporaryDirectory() as tmp:
        found = violations(data, golden, Path(tmp))
    assert not found, (mutation, golden.name, seed, found)


@pytest.mark.spec("TR-READ-1", "TR-READ-2", "TR-READ-3")
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@given(golden=st.sampled_from(GOLDEN), seed=st.integers(0, 2**32 - 1))
@_settings(5)
def test_mutated_traces_exit_0_only_when_valid_else_2_with_one_line(
    mutation: str, golden: Path, seed: int
) -> None:
    _check(mutation, golden, seed)


@pytest.mark.slow
@pytest.mark.spec("TR-READ-1", "TR-READ-2")
@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
@given(golden=st.sampled_from(GOLDEN), seed=st.integers(0, 2**32 - 1))
@_settings(300)
def test_mutated_traces_many(mutation: str, golden: Path, seed: int) -> None:
    _check(mutation, golden, seed)


def test_the_oracle_tells_valid_from_invalid() -> None:
    """Control: every golden trace is valid; each kind of breakage is not."""
    data = COMPLETED.read_bytes()
    assert all(schema_valid(p.read_bytes()) for p in GOLDEN)
    assert not schema_valid(data[:-2])  # cut inside the last record
    assert schema_valid(data[:-1])  # only its newline lost: accepted (trace-format.md §6)
    assert not schema_valid(data.replace(b'"auto_compact":true', b'"auto_compact":"true"', 1))
    assert not schema_valid(data.replace(b'"max_turns":null', b'"max_turns":2.0', 1))
    assert not schema_valid(data.replace(b'"at_ms":0', b'"at_ms":' + b"9" * 101, 1))
    assert schema_valid(data.replace(b'"at_ms":0', b'"at_ms":' + b"9" * 100, 1))


# --- each command on the issue's cases -----------------------------------------------------


def _header_edit(data: bytes, edit: str) -> bytes:
    lines = data.split(b"\n")
    header = json.loads(lines[0])
    if edit == "auto_compact":
        header["config"]["gates"]["auto_compact"] = "false"
    elif edit == "max_turns":
        header["config"]["max_turns"] = 2.9
    elif edit == "profile":
        header["config"]["profile_name"] = ["default"]
    elif edit == "config":
        header["config"] = []
    elif edit == "session":
        header["session"] = "s"
    elif edit == "request":
        header["request"] = [1]
    lines[0] = json.dumps(header).encode()
    return b"\n".join(lines)


CASES = {
    "auto_compact": 'header: config: gates.auto_compact must be true or false, got "false"',
    "max_turns": "header: config: max_turns must be an integer, got 2.9",
    "profile": 'header: config: profile_name must be a string, got ["default"]',
    "config": "header: config: must be an object, got []",
    "session": 'header: session: must be an object, got "s"',
    "request": "header: request: must be an object, got [1]",
    "deep": "nested deeper than 128 levels of arrays and objects",
    "huge": "an integer of more than 100 digits",
}


def _case(name: str) -> bytes:
    data = COMPLETED.read_bytes()
    if name == "deep":
        return data.replace(b'"at_ms":0', b'"at_ms":' + b"[" * 700 + b"]" * 700, 1)
    if name == "huge":
        return data.replace(b'"at_ms":0', b'"at_ms":' + b"7" * 5_000, 1)
    return _header_edit(data, name)


@pytest.mark.spec("TR-READ-1", "TR-READ-2")
@pytest.mark.parametrize("command", ["replay", "show", "diff", "resume", "stats"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_issue_cases_for_every_command(case: str, command: str, tmp_path: Path) -> None:
    """Each was a traceback (RecursionError, ValueError, AttributeError) or a silent coercion."""
    d = tmp_path / "traces"
    d.mkdir()
    path = d / "bad.jsonl"
    path.write_bytes(_case(case))
    script = tmp_path / "s.json"
    script.write_text('[{"type": "reply", "text": "ok"}]', encoding="utf-8")
    argv = {
        "replay": ["replay", str(path)],
        "show": ["show", str(path)],
        "diff": ["diff", str(COMPLETED), str(path)],
        "resume": ["resume", str(path), "--scripted", str(script), "--yes"],
        "stats": ["stats", str(d)],
    }[command]
    o = judge(argv)
    assert o.escaped is None, o
    golden = COMPLETED.read_bytes().split(b"\n")
    line = next(n for n, x in enumerate(path.read_bytes().split(b"\n"), 1) if x != golden[n - 1])
    want = f"{path}:{line}: {CASES[case]}"
    if command == "stats":
        nothing = "steploop: error: none of the 1 trace(s) could be read"  # the only one: exit 2
        assert o.code == 2 and o.stderr_lines == [f"steploop: warning: {want} (skipped)", nothing], o
    else:
        assert one_line_error(o, str(path)) and o.stderr_lines == [f"steploop: error: {want}"], o


# --- output: lone surrogates, a closed pipe -------------------------------------------------


@pytest.mark.spec("TR-READ-3", "B-TEXT-1")
def test_a_lone_surrogate_in_a_trace_prints(tmp_path: Path) -> None:
    """A trace holding a ``\\ud800`` escape (here in the prompt) is valid; show prints it and
    replay reports the mismatch (the recording was of the prompt without it) instead of raising
    UnicodeEncodeError."""
    data = COMPLETED.read_bytes().replace(b'"prompt":"hello"', b'"prompt":"hello\\ud800"', 1)
    assert schema_valid(data)
    path = tmp_path / "s.jsonl"
    path.write_bytes(data)
    show = judge(["show", str(path)])
    assert show.escaped is None and show.code == 0 and "hello\\ud800" in show.stdout, show
    replay = judge(["replay", str(path)])
    assert replay.escaped is None and replay.code == 1, replay
    assert "mismatch at step 0 (line 3)" in replay.stdout and "hello\\ud800" in replay.stdout


@pytest.mark.spec("TR-READ-3")
def test_a_closed_pipe_ends_quietly() -> None:
    """``steploop show run.jsonl | head -1``: it raised BrokenPipeError (a traceback, status 1);
    now nothing on stderr and status 0."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "steploop.effects.cli", "show", str(COMPLETED)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the first line is written
    err = proc.stderr.read()
    proc.stderr.close()
    code = proc.wait(timeout=60)
    assert code == 0 and err == b"", (code, err)
