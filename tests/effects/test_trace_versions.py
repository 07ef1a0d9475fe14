"""Trace format version 2 (the state digest no longer counts the dead ``Round.summary_due``) and
version 1 files: read, replayed exactly and resumed as version 1 (specs/trace-format.md §9)."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from steploop.effects import PermissionPolicy
from steploop.effects.scripted import ScriptedModel, reply
from steploop.effects.tools import ToolRegistry
from steploop.effects.trace import (
    VERSION,
    StepRecord,
    TraceHeader,
    TraceReader,
    record_sequence,
    replay_exact,
    resume_trace,
)
from steploop.reducer.canonical import state_digest

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "specs" / "scenarios" / "walkthrough.jsonl"


def _events(path: Path) -> tuple[TraceHeader, list[StepRecord]]:
    recs = list(TraceReader(path))
    header = recs[0]
    assert isinstance(header, TraceHeader)
    return header, [r for r in recs if isinstance(r, StepRecord)]


def test_a_version_1_trace_replays_exactly() -> None:
    header, _ = _events(GOLDEN)
    assert header.version == 1 and VERSION == 2
    report = replay_exact(GOLDEN)
    assert report.ok and report.complete, report.describe()


def test_the_same_run_recorded_today_is_version_2_with_other_digests(tmp_path: Path) -> None:
    """Re-recorded from the golden trace's events, the turn is the same (same effects, same
    transitions) but its digests are version 2's: the canonical state without summary_due."""
    header, steps = _events(GOLDEN)
    path = tmp_path / "again.jsonl"
    state, _ = record_sequence(
        path,
        header.config,
        header.request,
        [s.event for s in steps if s.event is not None],
        header.session,
    )
    again_header, again = _events(path)
    assert again_header.version == 2
    assert [s.effects for s in again] == [s.effects for s in steps]
    assert [s.transition for s in again] == [s.transition for s in steps]
    assert all(a.digest != b.digest for a, b in zip(again, steps, strict=True))
    assert again[-1].digest == state_digest(state)
    assert b"summary_due" not in json.dumps(json.loads(path.read_text().splitlines()[1])).encode()
    assert replay_exact(path).ok


def test_a_tampered_version_1_digest_is_still_found(tmp_path: Path) -> None:
    path = tmp_path / "v1.jsonl"
    lines = GOLDEN.read_text(encoding="utf-8").splitlines()
    k = next(n for n, line in enumerate(lines) if '"record":"step","i":3' in line)
    rec = json.loads(lines[k])
    rec["digest"] = "0" * 32
    lines[k] = json.dumps(rec, separators=(",", ":"))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report = replay_exact(path)
    assert not report.ok and report.mismatch is not None
    assert (report.mismatch.step, report.mismatch.what) == (3, "digest")


def test_a_version_1_trace_resumes_as_version_1(tmp_path: Path) -> None:
    """Cut a version-1 trace after its first model call was issued: resume appends steps
    whose digests are version 1's, so the whole file replays exactly."""
    path = tmp_path / "cut.jsonl"
    lines = GOLDEN.read_text(encoding="utf-8").splitlines()
    k = next(n for n, line in enumerate(lines) if '"record":"step","i":1' in line)
    path.write_text("\n".join(lines[:k]) + "\n", encoding="utf-8")  # steps 0 only
    tools = ToolRegistry([])
    model = ScriptedModel([reply("Nothing to do.")], traits_for=tools.traits)

    async def main() -> None:
        with resume_trace(path, clock_ms=lambda: 5) as rs:
            async with rs.run(
                model=model,
                tools=tools,
                workspace=tmp_path,
                permissions=PermissionPolicy(default="allow"),
                clock_ms=lambda: 5,
            ) as r:
                async for _ in r:
                    pass
            assert r.result is not None and r.result.terminal.TAG == "completed"

    anyio.run(main)
    header, steps = _events(path)
    assert header.version == 1 and len(steps) > 1
    report = replay_exact(path)
    assert report.ok and report.complete and report.resumes == 1, report.describe()


@pytest.mark.parametrize("version", [0, 3])
def test_other_versions_are_refused(version: int, tmp_path: Path) -> None:
    path = tmp_path / "v.jsonl"
    lines = GOLDEN.read_text(encoding="utf-8").splitlines()
    head = json.loads(lines[0])
    head["version"] = version
    path.write_text(json.dumps(head) + "\n" + "\n".join(lines[1:]) + "\n", encoding="utf-8")
    with pytest.raises(Exception, match=f"format version {version}"):
        replay_exact(path)
