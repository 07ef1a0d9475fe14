"""The golden scenarios: every recorded trace in specs/scenarios/ replays exactly and takes the
transitions its hand-written .expected file lists. A change to the machine that alters one fails
here until it is re-recorded on purpose (python specs/scenarios/make.py NAME)."""

from __future__ import annotations

from pathlib import Path

import pytest

from steploop.effects.trace import StepRecord, replay_exact
from steploop.reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES

SCENARIOS = Path(__file__).resolve().parent.parent / "specs" / "scenarios"
NAMES = sorted(p.stem for p in SCENARIOS.glob("*.expected"))


# Scenarios beyond one per transition: the walk-through, and rules that have no transition of
# their own but a trace pins (specs/ R-REFUSAL-1, S-PAUSE-1, R-OVERFLOW-1).
EXTRA = {"walkthrough", "refusal", "pause_turn", "context_overflow"}


def test_every_transition_has_a_scenario() -> None:
    """All 17 transitions (and the extra scenarios) have a golden scenario, each with its trace."""
    tags = {t.TAG for t in (*CONTINUE_TYPES, *TERMINAL_TYPES)}
    assert tags | EXTRA == set(NAMES)
    for name in NAMES:
        assert (SCENARIOS / f"{name}.jsonl").is_file(), name


@pytest.mark.spec("R-ORDER-1", "M-1")
@pytest.mark.parametrize("name", NAMES)
def test_scenario_replays_exactly_with_its_expected_transitions(name: str) -> None:
    """The trace replays bit for bit, and its transitions are the hand-written ones."""
    seen: list[str] = []

    def collect(rec: StepRecord) -> None:
        if rec.transition is not None:
            seen.append(rec.transition.TAG)

    report = replay_exact(SCENARIOS / f"{name}.jsonl", on_step=collect)
    assert report.ok, report.describe()
    assert report.complete
    expected = (SCENARIOS / f"{name}.expected").read_text(encoding="utf-8").split()
    assert seen == expected
    assert report.terminal is not None and report.terminal.TAG == expected[-1]
