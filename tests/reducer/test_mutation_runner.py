"""The mutation runner (tests/support/mutation.py, specs/mutation.md): what it generates, how it
samples, and that its list of equivalent mutants is well formed and current. No mutant is run
here (that is scripts/mutation.py's job); these tests keep the generator honest."""

from __future__ import annotations

import ast
import json
import textwrap
from pathlib import Path

import pytest

from tests.support import mutation as mu


def _fs(src: str, qual: str = "f") -> mu.FunctionSource:
    tree = ast.parse(textwrap.dedent(src))
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    return mu.FunctionSource("x.py", qual, fn, None, guard=True, future_annotations=False)


@pytest.fixture(scope="module")
def all_mutants() -> list[mu.Mutant]:
    return mu.generate()


def test_every_operator_is_generated_on_a_small_function(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One function with a comparison, a constant, a boolean, an and, a keyword and statements
    gives every operator's mutants, each compiling to different code."""
    src = textwrap.dedent(
        """
        def f(a, b):
            x = g(a, key=True)
            if a >= 3 and not b:
                return x
            return None
        """
    )
    (tmp_path / "x.py").write_text(src)
    monkeypatch.setattr(mu, "ROOT", tmp_path)
    fs = _fs(src)
    got = {(m.op, m.change) for m in mu.generate([fs])}
    assert got == {
        ("stmt", "delete x = g(a, key=True)"),
        ("kwarg", "drop key="),
        ("bool", "True -> False"),
        ("stmt", "delete if a >= 3 and (not b):"),  # as ast.unparse writes it
        ("boolop", "and: drop a >= 3"),
        ("boolop", "and: drop not b"),
        ("cmp", "'>=' -> '>'"),
        ("const", "3 -> 4"),
        ("const", "3 -> 2"),
        ("bool", "not b -> b"),
    }
    original = mu.compile_function(fs, fs.node)
    for m in mu.generate([fs]):
        assert mu.compile_function(fs, mu.mutated_function(m, fs)) != original, m.key


def test_the_scope_and_the_guard_functions(all_mutants: list[mu.Mutant]) -> None:
    """The scope is the machine, the context rules and the guard parts of config and state;
    every config/state function in scope is a guard function, and so are the machine's
    functions that cite a guard or transition rule."""
    files = {m.file for m in all_mutants}
    package = {f"steploop/reducer/machine/{p.name}" for p in (mu.ROOT / "steploop/reducer/machine").glob("*.py")}
    machine_files = {t.file for t in mu.MACHINE}
    assert machine_files == package  # every module of the machine's package is in scope
    assert files == (machine_files - {"steploop/reducer/machine/__init__.py"}) | {
        "steploop/reducer/context.py",
        "steploop/reducer/config.py",
        "steploop/reducer/state.py",
    }
    guards = {(m.file, m.function) for m in all_mutants if m.guard}
    assert all(m.guard for m in all_mutants if m.file in ("steploop/reducer/config.py", "steploop/reducer/state.py"))
    assert {fn for f, fn in guards if f == "steploop/reducer/config.py"} >= {"RetryPolicy.delay_ms", "full"}
    machine = {fn for f, fn in guards if f.startswith("steploop/reducer/machine/")}
    # the no-tool-use path is the ladder ROUND_END: its rungs hold what no_tool_use held
    assert {"prompt_too_long", "mot_ladder", "token_budget", "take_continue", "interrupt"} <= machine
    assert "msg_id" not in machine  # no rule cited: in the population, not a guard function


def test_keys_are_unique(all_mutants: list[mu.Mutant]) -> None:
    """Every mutant has its own key (the equivalents list names mutants by key)."""
    keys = [m.key for m in all_mutants]
    assert len(keys) == len(set(keys))


def test_the_sample_is_deterministic_and_covers_every_guard_function(all_mutants: list[mu.Mutant]) -> None:
    """The CI sample takes the same mutants every time and at least one of every guard function."""
    a = mu.sample(all_mutants, 2, 0)
    b = mu.sample(all_mutants, 2, 0)
    assert [m.key for m in a] == [m.key for m in b]
    guards = {(m.file, m.function) for m in all_mutants if m.guard}
    assert {(m.file, m.function) for m in a} == guards
    assert all(m.guard for m in a)
    other = mu.sample(all_mutants, 2, 0, seed="another")
    assert [m.key for m in other] != [m.key for m in a]


def test_the_equivalents_list_is_well_formed_and_current(all_mutants: list[mu.Mutant]) -> None:
    """Every listed equivalent mutant has a reason and is still generated (none stale)."""
    eq = mu.load_equivalents()
    keys = {m.key for m in all_mutants}
    assert all(reason for reason in eq.values())
    stale = sorted(k for k in eq if k not in keys)
    assert stale == [], stale


def test_an_equivalent_without_a_reason_is_refused(tmp_path: Path) -> None:
    """A key line with no reason under it is an error naming the key."""
    p = tmp_path / "eq.txt"
    p.write_text("a.py | f | cmp | x < y | '<' -> '<='\n")
    with pytest.raises(SystemExit, match="has no reason"):
        mu.load_equivalents(p)
    p.write_text("# comment\na.py | f | cmp | x < y | '<' -> '<='\n  x is never equal to y here\n")
    assert mu.load_equivalents(p) == {"a.py | f | cmp | x < y | '<' -> '<='": "x is never equal to y here"}


def test_the_hole_mutants_of_issue_12_are_generated(all_mutants: list[mu.Mutant]) -> None:
    """The runner generates the mutants an outside run found surviving (a few, by behaviour)."""
    found = {(m.function, m.op, m.change) for m in all_mutants}
    assert ("token_budget", "boolop", "and: drop cfg.gates.token_budget") in found
    assert ("token_budget", "boolop", "and: drop not cfg.is_subagent") in found
    assert ("token_budget", "const", "100 -> 101") in found
    assert ("_synthesize_results", "cmp", "'!=' -> '=='") in found
    assert ("RetryPolicy.delay_ms", "const", "0 -> 1") in found
    assert any(f == "on_stop_hooks" and op == "stmt" and c == "delete s = commit(s)" for f, op, c in found)


def test_statements_declared_unreachable_get_no_mutants(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A statement marked ``# pragma: no cover`` and an ``assert_never`` call (and what is in
    them) are not mutated: no test could see the change; the rest of the function is."""
    src = textwrap.dedent(
        """
        def f(a):
            if a > 1:
                return 2
            if a < 0:  # pragma: no cover
                raise AssertionError(a + 1)
            assert_never(a)
        """
    )
    (tmp_path / "x.py").write_text(src)
    monkeypatch.setattr(mu, "ROOT", tmp_path)
    got = {(m.line, m.op, m.change) for m in mu.generate([_fs(src)])}
    assert {line for line, _, _ in got} == {3, 4}
    assert (3, "cmp", "'>' -> '>='") in got


def test_functions_the_import_calls_are_found(tmp_path: Path) -> None:
    """Called by module-level code (a table built at import), or by such a function: the
    recorder never sees those calls, so the runner must treat them as every test's."""
    tree = ast.parse(
        textwrap.dedent(
            """
            def helper(x): return x
            def build(row): return helper(row)
            def handler(s): return build(s)
            def unused(): return 1
            TABLE = {"a": handler}
            COMPILED = {r: build(r) for r in (1, 2)}
            """
        )
    )
    assert mu._import_time(tree) == {"build", "helper"}


def test_the_full_order_is_a_seeded_shuffle(all_mutants: list[mu.Mutant]) -> None:
    """--full runs the mutants in a seeded random order, so a part of the run is a sample."""
    order = sorted(all_mutants, key=lambda m: mu._rank(m, "steploop"))
    first = order[: len(order) // 10]
    assert order == sorted(all_mutants, key=lambda m: mu._rank(m, "steploop"))
    assert order != all_mutants
    assert len({m.file for m in first}) > 1 and len({m.function for m in first}) > 20


def test_outcome_records_read_back_and_bad_ones_are_one_line(tmp_path: Path, all_mutants: list[mu.Mutant]) -> None:
    """What --json writes, --resume reads: outcomes of mutants still generated (a later line
    of a key wins), a stale key left out; a malformed line names the file and line."""
    a, b = all_mutants[0], all_mutants[1]
    eq: dict[str, str] = {}
    recs = [
        mu.Outcome(a, "survived", "", 2.0, 10),
        mu.Outcome(b, "killed", "tests/x.py::t", 0.5, 1),
        mu.Outcome(a, "killed", "tests/y.py::t", 0.7, 3),
    ]
    path = tmp_path / "out.jsonl"
    lines = [json.dumps(mu._as_record(o, eq)) for o in recs]
    lines.append(json.dumps({**mu._as_record(recs[0], eq), "key": "gone | f | cmp | x | y"}))
    path.write_text("\n".join(lines) + "\n")
    got = mu.read_records(path, {m.key: m for m in all_mutants})
    assert [(o.mutant.key, o.status, o.detail) for o in got] == [
        (a.key, "killed", "tests/y.py::t"),
        (b.key, "killed", "tests/x.py::t"),
    ]
    assert mu.read_records(tmp_path / "none.jsonl", {}) == []
    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(mu.RecordError, match=r"out\.jsonl, line 2: not an outcome record"):
        mu.read_records(path, {m.key: m for m in all_mutants})
    path.write_text(json.dumps({**mu._as_record(recs[0], eq), "status": "maybe"}) + "\n")
    with pytest.raises(mu.RecordError, match="line 1"):
        mu.read_records(path, {m.key: m for m in all_mutants})
