"""The Mermaid diagram of the machine is generated, complete, and snapshot-tested."""

from __future__ import annotations

import ast
import io
import re
from pathlib import Path

import pytest

from steploop.reducer import default
from steploop.reducer.config import PROFILES
from steploop.reducer.events import CompactionFinished, ModelCallFailed
from steploop.reducer.graph import GRAPH_CONFIGS, Edge, mermaid, phase_edges, static_edges
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
    advance,
    begin,
)
from steploop.reducer.messages import TextBlock, UserMessage
from steploop.reducer.state import Request
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


def test_machine_page_shows_the_current_diagram(diagram: str) -> None:
    """docs/machine.md carries the diagram the code draws."""
    page = (ROOT / "docs" / "machine.md").read_text(encoding="utf-8")
    assert "```mermaid\n" + diagram + "```" in page


def test_graph_command_prints_it(diagram: str) -> None:
    """`steploop graph --fenced` prints the fenced diagram."""
    from steploop.effects.cli import main

    out = io.StringIO()
    assert main(["graph", "--fenced"], out=out) == 0
    assert out.getvalue() == "```mermaid\n" + diagram + "```\n"


# --- the static machine: the tables of steploop/reducer/machine/table.py ------------------------

# The edges the tables allow that the graph's bound does not reach, each with the reason. The
# explorer's compaction answers with a short summary (steploop/reducer/explore/world.py), so the
# round after a reactive compaction always waits for the model; a real compaction's result can
# be larger (test_the_edges_past_the_bound_are_real feeds one).
# The graph's bound is 2 model calls (phase_edges). At the explorer's CI bound (3 calls, then the
# deep tier) the same configs take the same 115 edges: checked once, with about 15 minutes of
# CPU (12 of them the token-budget config's 1.2 million states), too slow for the suite.
PAST_THE_BOUND: dict[Edge, str] = {
    ("reactive_compacting", "CompactionFinished", "compacting", "reactive_compact_retry"): (
        "the retry's round auto-compacts only when the compaction's own result is over the "
        "auto-compact threshold"
    ),
    ("reactive_compacting", "CompactionFinished", "done", "blocking_limit"): (
        "the retry's round ends at the blocking limit only when the compaction's own result is "
        "over it (auto-compact off, as in full())"
    ),
}


@pytest.mark.spec("M-2", "R-ORDER-1")
def test_the_tables_allow_exactly_the_edges_the_machine_takes(observed: set[Edge]) -> None:
    """The two drawings agree exactly: the edges the tables allow (TABLE, START, OUTCOMES, the
    round-end ladders, NEXT_ROUND) are the edges the machine takes under the graph's configs,
    but for the few listed in PAST_THE_BOUND with their reason; both draw all 17 transitions."""
    static = static_edges()
    assert observed <= static, sorted(observed - static)
    assert static - observed == set(PAST_THE_BOUND), sorted(static - observed)
    tags = {t.TAG for t in (*CONTINUE_TYPES, *TERMINAL_TYPES)}
    assert {e[3] for e in static} - {""} == tags == {e[3] for e in observed} - {""}


def test_the_graph_configs_hold_every_profile() -> None:
    """The drawn union covers every profile of PROFILES (each with the full alphabet)."""
    configs = [cfg for cfg, *_ in GRAPH_CONFIGS()]
    assert all(make() in configs for make in PROFILES.values())


@pytest.mark.spec("M-2", "C-REACTIVE-1")
@pytest.mark.parametrize("profile", ["default", "full"])
def test_the_edges_past_the_bound_are_real(profile: str) -> None:
    """A reactive compaction whose result is over the thresholds: the retry's round compacts
    again (auto-compact on) or ends at the blocking limit (auto-compact off): the edges of
    PAST_THE_BOUND, which the explorer's short summaries never reach."""
    cfg = PROFILES[profile]()
    s, _, _ = begin(Request(prompt="work"), cfg)
    fail = ModelCallFailed(call_id=s.round.call_id, kind="prompt_too_long", status=400)
    s, _, _ = advance(s, fail, cfg)
    assert s.phase == "reactive_compacting"
    summary = UserMessage(
        id="c.s", content=(TextBlock(text="x" * 4_000_000),), is_meta=True, origin="compact_summary"
    )
    done = CompactionFinished(compact_id=s.round.pending_id, messages=(summary,))
    nxt, _, passed = advance(s, done, cfg)
    edge = ("reactive_compacting", "CompactionFinished", nxt.phase, passed[-1].TAG)
    assert edge in PAST_THE_BOUND and edge in static_edges()
    assert passed[0] == ReactiveCompactRetry()


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
    the tool list refreshed (gated, it waits) -> max_turns -> next_turn."""
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
    assert deciding == ["hook_stopped", "tool list refreshed", "max_turns", "next_turn"]
    assert [r.name for r in TOOL_ROUND_END if r.waits] == ["tool list refreshed"]
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
