"""Counterfactual replay stays linear in the trace, and replays report their progress."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import steploop.effects.trace.counterfactual as counterfactual
import steploop.effects.trace.fingerprints as fingerprints
from benchmarks.counterfactual import CHANGE, build
from steploop.effects.trace import ReplayProgress, TraceReader, replay_counterfactual, replay_exact
from steploop.effects.trace.format import StepRecord
from steploop.reducer.effects import CallModel


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cf") / "session.jsonl"
    build(path, 150)  # 150 tool rounds, history never compacted
    return path


def test_each_message_is_encoded_once_per_run(
    session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call's fingerprint is chained from the previous call's: each message's content
    is encoded once in the recording and once in the new run, never the history per call
    (that made a 1,000-round session take 33 s)."""
    encoded = [0]
    real = fingerprints.message_content

    def counting(m: object) -> bytes:
        encoded[0] += 1
        return real(m)  # type: ignore[arg-type]

    monkeypatch.setattr(fingerprints, "message_content", counting)
    report = replay_counterfactual(session, CHANGE)
    assert report.status == "finished" and report.matched["call_model"] == 151
    last_call = [
        e
        for rec in TraceReader(session)
        if isinstance(rec, StepRecord)
        for e in rec.effects
        if isinstance(e, CallModel)
    ][-1]
    assert encoded[0] <= 2 * last_call.conversation.length


def test_a_long_recording_is_let_go_as_it_is_used(session: Path) -> None:
    """The index reads the recording as far as the new run needs it and drops what it used:
    at the end it holds no recorded answer of a matched request."""
    fps = fingerprints.Fingerprints()
    index = counterfactual._Index(session, fps)
    assert index.steps < 5  # nothing read beyond the start yet
    r = index.ordinal("call_model", 3)
    assert r is not None and index.steps < 30
    index.use(r)
    assert r.key not in index.answers


def test_replays_report_progress(session: Path) -> None:
    size = session.stat().st_size
    seen: list[ReplayProgress] = []
    assert replay_exact(session, progress=seen.append, progress_every=100).ok
    assert [p.phase for p in seen] == ["reading"] * len(seen) and len(seen) >= 7
    assert all(a.done <= b.done for a, b in itertools.pairwise(seen))
    assert seen[-1].done == size and seen[-1].fraction == 1.0
    seen.clear()
    report = replay_counterfactual(session, CHANGE, progress=seen.append, progress_every=100)
    assert report.ok and len(seen) >= 7
    assert {p.phase for p in seen} == {"reading", "running"}
    assert max(p.done for p in seen) == size
