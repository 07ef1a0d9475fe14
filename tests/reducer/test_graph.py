"""The Mermaid diagram of the machine is generated, complete, and snapshot-tested."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

from reducer.graph import mermaid, phase_edges
from reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def diagram() -> str:
    return mermaid(phase_edges())


@pytest.mark.spec("M-2")
def test_graph_matches_the_snapshot(diagram: str) -> None:
    """specs/machine.mmd is what the code draws; regenerate with `steploop graph > specs/machine.mmd`."""
    assert (ROOT / "specs" / "machine.mmd").read_text(encoding="utf-8") == diagram


def test_graph_draws_every_phase_and_all_17_transitions(diagram: str) -> None:
    """Every phase appears and every Continue and Terminal labels an arrow."""
    arrows = [line for line in diagram.splitlines() if "-->" in line]
    labels = ", ".join(line.split(": ", 1)[1] for line in arrows if ": " in line)
    for t in (*CONTINUE_TYPES, *TERMINAL_TYPES):
        assert re.search(rf"\b{t.TAG}\b", labels), t.TAG
    for phase in ("compacting", "streaming", "waiting_retry", "running_tools", "draining", "reactive_compacting", "stop_hooks", "done"):
        assert f"{phase} -->" in diagram or f"--> {phase}" in diagram, phase


def test_readme_shows_the_current_diagram(diagram: str) -> None:
    """The README carries the same diagram as specs/machine.mmd."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```mermaid\n" + diagram + "```" in readme


def test_graph_command_prints_it(diagram: str) -> None:
    """`steploop graph --fenced` prints the fenced diagram."""
    from effects.cli import main

    out = io.StringIO()
    assert main(["graph", "--fenced"], out=out) == 0
    assert out.getvalue() == "```mermaid\n" + diagram + "```\n"
