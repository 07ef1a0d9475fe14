"""Every fast path changes speed only (steploop/reducer/fastpaths.py, issue 22): the golden
scenarios and a Hypothesis sample of walks give the same traces, digests, effects and replay
reports with every fast path on and with every one off."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steploop.effects.trace import StepRecord, TraceReader, record_sequence, replay_exact
from steploop.effects.trace.format import TraceHeader
from steploop.reducer import fastpaths, start, step
from steploop.reducer.canonical import canonical_bytes, state_digest
from steploop.reducer.digest import StateDigester
from steploop.reducer.events import Event
from steploop.reducer.explore import moves
from steploop.reducer.serialize import structure, unstructure
from steploop.reducer.state import LoopState
from steploop.reducer.testing import configs, requests

ROOT = Path(__file__).resolve().parent.parent
SCENARIOS = ROOT / "specs" / "scenarios"
NAMES = sorted(p.stem for p in SCENARIOS.glob("*.jsonl"))
PROVENANCE = {"created_at": "differential", "client": None}


def _both(fn: Any) -> tuple[Any, Any]:
    """``fn()`` with every fast path on, then with every one off (the switch as it was after,
    so the test also runs under STEPLOOP_NO_FAST_PATHS=1)."""
    with fastpaths.off():
        fastpaths.enable()
        fast = fn()
        fastpaths.disable()
        slow = fn()
    return fast, slow


def _recorded(path: Path) -> tuple[TraceHeader, list[Event]]:
    header: TraceHeader | None = None
    events: list[Event] = []
    for rec in TraceReader(path):
        if isinstance(rec, TraceHeader):
            header = rec
        elif isinstance(rec, StepRecord) and rec.event is not None:
            events.append(rec.event)
    assert header is not None
    return header, events


def _record(config: Any, request: Any, session: Any, events: list[Event]) -> str:
    out = io.StringIO()
    record_sequence(out, config, request, events, session, provenance=PROVENANCE)
    return out.getvalue()


def test_the_switch_turns_every_registered_path_off_and_back() -> None:
    """off() turns every path off inside the block and restores each after; a name that is not
    registered is refused."""
    before = [fastpaths.on(n) for n in fastpaths.names()]
    with fastpaths.off():
        assert not any(fastpaths.on(n) for n in fastpaths.names())
        fastpaths.enable()
        with fastpaths.off("trace_decoders"):
            assert not fastpaths.on("trace_decoders") and fastpaths.on("evolve")
        assert all(fastpaths.on(n) for n in fastpaths.names())
    assert [fastpaths.on(n) for n in fastpaths.names()] == before
    with pytest.raises(KeyError, match="no fast path named nope"):
        fastpaths.disable("nope")
    assert len(set(fastpaths.names())) == len(fastpaths.REGISTRY)


def test_the_environment_variable_turns_every_path_off_in_the_effects_layer() -> None:
    """STEPLOOP_NO_FAST_PATHS=1: importing steploop.effects turns every fast path off; without
    it every path is on."""
    code = (
        "import steploop.effects\n"
        "from steploop.reducer import fastpaths\n"
        "print(sorted({fastpaths.on(n) for n in fastpaths.names()}))"
    )
    for value, want in (("1", "[False]"), ("", "[True]")):
        env = {**os.environ, "STEPLOOP_NO_FAST_PATHS": value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == want


@pytest.mark.parametrize("name", NAMES)
def test_golden_scenario_is_the_same_with_every_fast_path_off(name: str) -> None:
    """Each golden scenario reads, replays and re-records to the same bytes and reports with
    every fast path on and off."""
    path = SCENARIOS / f"{name}.jsonl"
    (header_on, events_on), (header_off, events_off) = _both(lambda: _recorded(path))
    assert events_on == events_off and header_on == header_off
    h = header_on
    text_on, text_off = _both(lambda: _record(h.config, h.request, h.session, events_on))
    assert text_on == text_off
    rep_on, rep_off = _both(lambda: replay_exact(path))
    assert rep_on.ok and rep_off.ok, (rep_on.describe(), rep_off.describe())
    assert (rep_on.steps, rep_on.effects, rep_on.terminal) == (
        rep_off.steps,
        rep_off.effects,
        rep_off.terminal,
    )


def _walk(data: st.DataObject, steps: int) -> tuple[Any, Any, list[Event]]:
    config = data.draw(configs())
    request = data.draw(requests())
    state, _ = start(request, config)
    events: list[Event] = []
    for _ in range(steps):
        legal = moves(state, config)
        if not legal:
            break
        for event in data.draw(st.sampled_from(legal)).events:
            state, _ = step(state, event, config)
            events.append(event)
    return config, request, events


def _run(config: Any, request: Any, events: list[Event]) -> tuple[Any, ...]:
    """What a walk gives: each step's state digest (whole and composed), canonical text,
    effects, and the round trip of each event and state through the serializer."""
    out: list[Any] = []
    digester = StateDigester()
    state, fx = start(request, config)
    for event in events:
        state, fx = step(state, event, config)
        assert structure(unstructure(event), Event) == event
        assert structure(unstructure(state), LoopState) == state
        out.append((state_digest(state), digester(state), canonical_bytes(state), fx))
    return tuple(out)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(data=st.data())
def test_random_walks_are_the_same_with_every_fast_path_off(data: st.DataObject) -> None:
    """Random configs and legal walks (the Hypothesis kit's strategies): the same digests,
    canonical texts, effects and recorded trace with every fast path on and off."""
    config, request, events = _walk(data, 12)
    on, off = _both(lambda: _run(config, request, events))
    assert on == off
    for digest, composed, _, _ in on:
        assert digest == composed
    text_on, text_off = _both(lambda: _record(config, request, None, events))
    assert text_on == text_off


def test_counterfactual_replay_is_the_same_with_every_fast_path_off(tmp_path: Path) -> None:
    """The counterfactual replay's fast paths (same_request, same_address) change nothing: the
    same report and the same recorded new run with every path on and with every one off (the
    stamp's twin is pinned event kind by event kind in tests/effects/test_answer.py)."""
    from benchmarks.counterfactual import CHANGE, build
    from steploop.effects.trace import replay_counterfactual

    session = tmp_path / "session.jsonl"
    build(session, 12)

    def counterfactual() -> tuple[Any, str]:
        out = tmp_path / f"new-{len(list(tmp_path.iterdir()))}.jsonl"
        report = replay_counterfactual(session, CHANGE, record=out)
        text = "\n".join(line for line in out.read_text("utf-8").splitlines()[1:])
        return report, text

    (fast_report, fast_run), (slow_report, slow_run) = _both(counterfactual)
    assert fast_report.status == "finished" and fast_report.matched["call_model"] == 13
    assert fast_report == slow_report and fast_run == slow_run
