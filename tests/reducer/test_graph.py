"""The Mermaid diagram of the machine is generated, complete, and snapshot-tested."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest

from steploop.reducer import default
from steploop.reducer.graph import Edge, mermaid, phase_edges, static_edges
from steploop.reducer.machine import (
    ATTEMPT,
    ESCALATED,
    KEPT_OR_CLEARED,
    OUTCOMES,
    PLUS_ONE,
    RESET,
    RESETS,
    ROUND_END,
    TABLE,
    TOOL_ROUND_END,
    Write,
)
from steploop.reducer.transitions import (
    CONTINUE_TYPES,
    TERMINAL_TYPES,
    CollapseDrainRetry,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    NextTurn,
    ReactiveCompactRetry,
    StopHookBlocking,
    TokenBudgetContinuation,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def observed() -> set[Edge]:
    return phase_edges()


@pytest.fixture(scope="module")
def diagram(observed: set[Edge]) -> str:
    return mermaid(observed)


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
    for phase in (
        "compacting",
        "streaming",
        "waiting_retry",
        "running_tools",
        "draining",
        "reactive_compacting",
        "stop_hooks",
        "done",
    ):
        assert f"{phase} -->" in diagram or f"--> {phase}" in diagram, phase


def test_readme_shows_the_current_diagram(diagram: str) -> None:
    """The README carries the same diagram as specs/machine.mmd."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "```mermaid\n" + diagram + "```" in readme


def test_graph_command_prints_it(diagram: str) -> None:
    """`steploop graph --fenced` prints the fenced diagram."""
    from steploop.effects.cli import main

    out = io.StringIO()
    assert main(["graph", "--fenced"], out=out) == 0
    assert out.getvalue() == "```mermaid\n" + diagram + "```\n"


# --- the static machine: the tables of steploop/reducer/machine.py --------------------------------------


@pytest.mark.spec("M-2", "R-ORDER-1")
def test_every_observed_edge_is_one_the_tables_allow(observed: set[Edge]) -> None:
    """The two drawings agree: whatever the explorer sees the machine do, the tables (TABLE,
    OUTCOMES, the round-end ladders, the Continues' next round) say it may do; and both draw
    all 17 transitions."""
    static = static_edges()
    assert observed <= static, sorted(observed - static)
    tags = {t.TAG for t in (*CONTINUE_TYPES, *TERMINAL_TYPES)}
    assert {e[3] for e in static} - {""} == tags == {e[3] for e in observed} - {""}
    # every arrow of the observed drawing is an arrow of the static one, with its labels
    arrows = {
        line.split(": ")[0]: set(line.split(": ", 1)[1].split(", "))
        for line in mermaid(static).splitlines()
        if "-->" in line and ": " in line
    }
    for line in mermaid(observed).splitlines():
        if "-->" in line and ": " in line:
            head, labels = line.split(": ", 1)
            assert set(labels.split(", ")) <= arrows[head], line


@pytest.mark.spec("M-2")
def test_outcomes_cover_table() -> None:
    """OUTCOMES names only pairs of TABLE, and only phases, transitions and ladders."""
    for phase, row in OUTCOMES.items():
        assert set(row) <= set(TABLE[phase]), phase
    assert {(a, ev) for a, ev, _, _ in static_edges() if a != "[*]"} == {
        (p, ev.__name__) for p, row in TABLE.items() for ev in row
    }


def _spec_ids() -> set[str]:
    text = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "specs").glob("*.md"))
    return set(re.findall(r"^### ([A-Z][A-Z0-9-]*\d)\b", text, re.M))


@pytest.mark.spec("R-ORDER-1")
def test_the_round_end_ladder_is_the_reference_order() -> None:
    """PTL -> media -> MOT -> API-error exit -> pause_turn resume -> stop hooks -> token budget
    -> completed, each rung naming a rule of specs/; the tool-use path: hook_stopped ->
    max_turns -> next_turn."""
    assert [r.name for r in ROUND_END] == [
        "prompt-too-long ladder",
        "media ladder",
        "max-output-tokens ladder",
        "API-error exit",
        "pause_turn resume",
        "stop hooks",
        "token budget",
        "completed",
    ]
    assert [r.waits for r in ROUND_END].count(True) == 1 and ROUND_END[5].waits
    deciding = [r.name for r in TOOL_ROUND_END if r.exits]
    assert deciding == ["hook_stopped", "max_turns", "next_turn"]
    ids = _spec_ids()
    rules = [r.rule for r in (*ROUND_END, *TOOL_ROUND_END)] + [r.rule for r in RESETS]
    assert set(rules) <= ids, set(rules) - ids


_SPEC_VALUES = {"0": 0, "false": False, "true": True, "none": None}
_SPEC_COLUMNS = {
    "next_turn": NextTurn,
    "reactive": ReactiveCompactRetry,
    "recovery": MaxOutputTokensRecovery,
    "escalate": MaxOutputTokensEscalate,
    "collapse": CollapseDrainRetry,
    "stop_hook_blocking": StopHookBlocking,
    "budget": TokenBudgetContinuation,
}
_SPEC_FIELDS = {"auto-compact tracking": "tracking"}


@pytest.mark.spec("C-RESET-1")
def test_the_reset_table_is_the_one_in_the_specs() -> None:
    """Every cell of specs/rules.md's C-RESET-1 table is what RESETS writes."""
    text = (ROOT / "specs" / "rules.md").read_text(encoding="utf-8")
    table = text.split("### C-RESET-1", 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    rows = {row.transition: dict(row.writes) for row in RESETS}
    assert set(rows) == set(CONTINUE_TYPES)
    for line in table[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        field = _SPEC_FIELDS.get(cells[0], cells[0])
        for column, cell in zip(header[1:], cells[1:], strict=True):
            writes = rows[_SPEC_COLUMNS[column]]
            if cell.startswith("kept") and not cell.startswith("kept*"):
                assert field not in writes, (column, field)
            elif cell == "kept*":
                assert writes[field] is KEPT_OR_CLEARED, (column, field)
            elif cell == "64,000":
                assert writes[field] is ESCALATED, (column, field)
                assert default().escalated_max_output_tokens == 64_000
            elif cell == "attempt":
                assert writes[field] is ATTEMPT
            elif cell == "+1":
                assert writes[field] is PLUS_ONE
            elif cell == "reset":
                assert writes[field] is RESET
            else:
                assert writes[field] == _SPEC_VALUES[cell], (column, field)


@pytest.mark.spec("C-RESET-1")
def test_the_reset_table_runs_no_code_from_strings() -> None:
    """Each write of RESETS is a function applied by plain code: no exec, eval or compile
    anywhere in the machine's package."""
    writes = [w for row in RESETS for _, w in row.writes if isinstance(w, Write)]
    assert writes and all(callable(w.compute) for w in writes)
    for path in sorted((ROOT / "steploop" / "reducer" / "machine").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        called = {
            n.func.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
        }
        assert not called & {"exec", "eval", "compile"}, path.name


def test_graph_command_draws_the_static_machine() -> None:
    from steploop.effects.cli import main

    out = io.StringIO()
    assert main(["graph", "--static"], out=out) == 0
    assert out.getvalue() == mermaid(static_edges())
