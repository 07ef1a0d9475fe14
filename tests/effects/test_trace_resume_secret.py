"""A recorder appending to a resumed trace that meets a secret falls back to text masking
(specs/ TR-SECRET-1; issue 27, "a resumed recorder that meets a secret")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from steploop.effects.trace import TraceRecorder, make_provenance
from steploop.effects.trace.provenance import redaction_marker
from steploop.reducer import Request, default, start, step
from steploop.reducer.events import ToolFinished
from tests.effects.trace_kit import tool_round_events

SECRET = "sk-ant-api03-RESUMED-0123456789"


@pytest.mark.spec("TR-SECRET-1")
def test_a_resumed_recorder_without_the_turn_masks_the_text(tmp_path: Path) -> None:
    """Appending to a carried-over trace whose turn it does not know (Temporal's continue-as-new
    path: no config or request to step a redacted shadow with), a step holding a secret is
    written as JSON with the secret masked in its text, ``diverged_at`` says from which step,
    and the later steps are written too; no crash."""
    cfg = default()
    events = tool_round_events()
    events[4] = ToolFinished(generation=1, tool_use_id="toolu_1", content=f"KEY={SECRET}\n")
    state, _ = start(Request(prompt="What does a.py print?"), cfg)
    for ev in events[:4]:  # what the first recorder wrote before the run was carried over
        state, _ = step(state, ev, cfg)
    path = tmp_path / "carried.jsonl"
    rec = TraceRecorder._appending(
        open(path, "w", encoding="utf-8"),
        next_index=5,
        last=state,
        window=16,
        provenance=make_provenance(),
        secrets=[SECRET],
    )
    with rec:
        for ev in events[4:]:
            state, fx = step(state, ev, cfg)
            rec(ev, state, fx)
    # two replacements: the event and the message record that holds the tool result
    assert rec.diverged_at == 5 and rec.redactions == 2 and rec.steps == 9 and rec.ended
    text = path.read_text("utf-8")
    assert SECRET not in text and redaction_marker(len(SECRET)) in text
    steps = [json.loads(x) for x in text.splitlines() if json.loads(x)["record"] == "step"]
    assert [s["i"] for s in steps] == [5, 6, 7, 8]
