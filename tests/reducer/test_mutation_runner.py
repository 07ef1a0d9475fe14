"""The mutation runner (tests/support/mutation/, specs/mutation.md): what it generates, how it
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


def test_every_first_operator_is_generated_on_a_small_function(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One function with a comparison, a constant, a boolean, an and, a keyword and statements
    gives each of the first operators' mutants, each compiling to different code."""
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
    monkeypatch.setattr(mu.scope, "ROOT", tmp_path)
    fs = _fs(src)
    got = {(m.op, m.change) for m in mu.generate([fs], mu.FIRST_OPERATORS)}
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
    """The scope is the reducer's machine, context rules, the guard parts of config, state,
    protocol, driver, transitions, events, graph, digest and texts, and the safety-critical
    effects; every config function in scope is a guard function, and so are the machine's
    functions that cite a guard or transition rule."""
    files = {m.file for m in all_mutants}
    package = {f"steploop/reducer/machine/{p.name}" for p in (mu.ROOT / "steploop/reducer/machine").glob("*.py")}
    machine_files = {t.file for t in mu.MACHINE}
    assert machine_files == package  # every module of the machine's package is in scope
    reducer = {f"steploop/reducer/{n}.py" for n in ("context", "config", "state", "protocol", "drive", "transitions", "events", "graph", "digest", "texts")}
    effects = {
        "steploop/effects/importer/compare.py",
        "steploop/effects/tools/confine.py",
        "steploop/effects/trace/counterfactual.py",
        "steploop/effects/trace/strict.py",
    }
    assert files == (machine_files - {"steploop/reducer/machine/__init__.py"}) | reducer | effects
    guards = {(m.file, m.function) for m in all_mutants if m.guard}
    config = [m for m in all_mutants if m.file == "steploop/reducer/config.py"]
    assert all(m.guard for m in config if m.op != "table")
    assert {fn for f, fn in guards if f == "steploop/reducer/config.py"} >= {"RetryPolicy.delay_ms", "full", "profile_for"}
    assert ("steploop/reducer/state.py", "LoopState.session") in guards
    machine = {fn for f, fn in guards if f.startswith("steploop/reducer/machine/")}
    # the no-tool-use path is the ladder ROUND_END: its rungs hold what no_tool_use held
    assert {"prompt_too_long", "mot_ladder", "token_budget", "take_continue", "interrupt"} <= machine
    assert "msg_id" not in machine  # no rule cited: in the population, not a guard function
    assert not any(m.guard for m in all_mutants if m.file in effects or m.op == "table")


def test_every_file_has_a_kill_set_that_exists() -> None:
    """A reducer file's mutants run in the reducer's tests; each effects file's in the test
    modules that exercise it, every one of which exists."""
    for t in mu.SCOPE:
        assert t.kills, t.file
        for k in t.kills:
            assert (mu.ROOT / k).exists(), (t.file, k)
    assert mu.kill_set(["steploop/reducer/drive.py"]) == ("tests/reducer", "tests/test_scenarios.py", "tests/test_docs.py")
    strict = mu.kill_set(["steploop/effects/trace/strict.py"])
    assert "tests/effects/test_pinned_strict.py" in strict and "tests/reducer" not in strict
    both = mu.kill_set(["steploop/effects/trace/strict.py", "steploop/effects/trace/counterfactual.py"])
    assert len(both) == len(set(both)) and set(strict) < set(both)
    assert mu.scope.in_kill_set("tests/reducer/test_drive.py::test_x", "steploop/reducer/drive.py")
    assert not mu.scope.in_kill_set("tests/effects/test_trace.py::t", "steploop/reducer/drive.py")
    assert not mu.scope.in_kill_set("tests/reducerx/test.py::t", "steploop/reducer/drive.py")


def test_keys_are_unique(all_mutants: list[mu.Mutant]) -> None:
    """Every mutant has its own key (the equivalents list names mutants by key)."""
    keys = [m.key for m in all_mutants]
    assert len(keys) == len(set(keys))


def test_the_sample_is_deterministic_and_covers_every_guard_function(all_mutants: list[mu.Mutant]) -> None:
    """The CI sample takes the same mutants every time, at least one of every guard function,
    and PER_FILE more of every file from what is not a guard function."""
    a = mu.sample(all_mutants, 2, 0, per_file=1)
    b = mu.sample(all_mutants, 2, 0, per_file=1)
    assert [m.key for m in a] == [m.key for m in b]
    guards = {(m.file, m.function) for m in all_mutants if m.guard}
    assert {(m.file, m.function) for m in a if m.guard} == guards
    others = [m for m in a if not m.guard]
    with_others = {m.file for m in all_mutants if not m.guard}
    assert sorted(m.file for m in others) == sorted(with_others)  # one each
    assert all(m.guard for m in mu.sample(all_mutants, 2, 0))
    other = mu.sample(all_mutants, 2, 0, seed="another", per_file=1)
    assert [m.key for m in other] != [m.key for m in a]
    ops = {m.op for m in a}
    assert len(ops & set(mu.FIRST_OPERATORS)) >= 4 and len(ops - set(mu.FIRST_OPERATORS)) >= 4


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
    monkeypatch.setattr(mu.scope, "ROOT", tmp_path)
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
    assert mu.import_time(tree) == {"build", "helper"}


def test_the_full_order_is_a_seeded_shuffle(all_mutants: list[mu.Mutant]) -> None:
    """--full runs the mutants in a seeded random order, so a part of the run is a sample."""
    order = sorted(all_mutants, key=lambda m: mu.rank(m, "steploop"))
    first = order[: len(order) // 10]
    assert order == sorted(all_mutants, key=lambda m: mu.rank(m, "steploop"))
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
    lines = [json.dumps(mu.as_record(o, eq)) for o in recs]
    lines.append(json.dumps({**mu.as_record(recs[0], eq), "key": "gone | f | cmp | x | y"}))
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
    path.write_text(json.dumps({**mu.as_record(recs[0], eq), "status": "maybe"}) + "\n")
    with pytest.raises(mu.RecordError, match="line 1"):
        mu.read_records(path, {m.key: m for m in all_mutants})


def test_every_new_operator_is_generated_on_a_small_function(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Negated conditions, any/all and min/max swaps, a dropped elif, swapped arguments, a
    return of None or of the input, break/continue swapped and changed strings: each once
    where it applies, none of a docstring or an f-string's format spec, each compiling to
    different code."""
    src = textwrap.dedent(
        '''
        def f(s, xs):
            """Docstring."""
            for x in xs:
                if x < 0:
                    break
                elif any(xs):
                    continue
                else:
                    s = min(s, x)
            y = g(s, xs) if s else h(1)
            return f"n={y:>4}"
        '''
    )
    (tmp_path / "x.py").write_text(src)
    monkeypatch.setattr(mu.scope, "ROOT", tmp_path)
    fs = _fs(src)
    new_ops = tuple(op for op in mu.OPERATORS if op not in mu.FIRST_OPERATORS)
    got = sorted((m.line, m.op, m.change) for m in mu.generate([fs], new_ops))
    assert got == sorted(
        [
            (5, "negate", "negate x < 0"),
            (5, "elif", "drop elif any(xs)"),
            (6, "loop", "break -> continue"),
            (7, "negate", "negate any(xs)"),
            (7, "builtin", "any -> all"),
            (8, "loop", "continue -> break"),
            (10, "builtin", "min -> max"),  # min's arguments are not swapped: the same result
            (11, "negate", "negate s"),
            (11, "args", "swap s <-> xs"),
            (12, "return", "return None"),
            (12, "return", "return s"),
            (12, "str", "'n=' -> 'XXn=XX'"),
        ]
    )
    original = mu.compile_function(fs, fs.node)
    for m in mu.generate([fs], new_ops):
        assert mu.compile_function(fs, mu.mutated_function(m, fs)) != original, m.key
    elif_dropped = next(m for m in mu.generate([fs]) if m.op == "elif")
    text = ast.unparse(mu.mutated_function(elif_dropped, fs))
    assert "any(xs)" not in text and "s = min(s, x)" in text  # the else branch stays


def _module(tmp_path: Path, src: str) -> list[mu.FunctionSource]:
    (tmp_path / "m.py").write_text(textwrap.dedent(src))
    return list(mu.scope.functions(mu.scope.Target("m.py")))


def test_table_entries_are_deleted_one_at_a_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A module-level dict, tuple or set literal loses one entry per mutant (a row of pairs
    whole, never one of its fields); __all__, type aliases and plain values are no tables."""
    monkeypatch.setattr(mu.scope, "ROOT", tmp_path)
    units = _module(
        tmp_path,
        """
        from typing import TypeAlias
        __all__ = ["TABLE"]
        Pair: TypeAlias = tuple[int, int]
        LIMIT = 3
        TABLE = {"a": (1, A), **EXTRA}
        ROWS = (("x", 0), ("y", 1))
        NAMES = frozenset({"only"})
        def f(x):
            return TABLE[x]
        """,
    )
    tables = {u.qualname for u in units if u.kind == "table"}
    assert tables == {"TABLE", "ROWS", "NAMES"}
    assert all(u.fresh and not u.guard for u in units if u.kind == "table")
    got = sorted((m.function, m.change) for m in mu.generate(units, ("table",)))
    assert got == [
        ("NAMES", "delete entry 'only'"),
        ("ROWS", "delete entry ('x', 0)"),
        ("ROWS", "delete entry ('y', 1)"),
        ("TABLE", "delete entry 'a'"),
        ("TABLE", "delete entry **EXTRA"),
        ("TABLE", "delete entry 1"),
        ("TABLE", "delete entry A"),
    ]
    by_change = {m.change: m for m in mu.generate(units, ("table",))}
    names = next(u for u in units if u.qualname == "NAMES")
    module = mu.mutated_module(by_change["delete entry 'only'"], names)
    assert "NAMES = frozenset(set())" in module and "def f(x):" in module  # {} would be a dict
    table = next(u for u in units if u.qualname == "TABLE")
    assert "TABLE = {'a': (1, A)}" in mu.mutated_module(by_change["delete entry **EXTRA"], table)


def test_the_fresh_interpreters_import_hook_loads_the_mutated_source(tmp_path: Path) -> None:
    """A fresh interpreter imports the mutated module from the source it is given, under the
    module's own name and path, and every other module as usual."""
    import importlib
    import sys

    from tests.support.mutation.fresh import MutatedFinder

    path = tmp_path / "steploop_mutation_probe.py"
    path.write_text("TABLE = (1, 2)\n")
    finder = MutatedFinder("steploop_mutation_probe", str(path), "TABLE = (1,)\n")
    sys.meta_path.insert(0, finder)
    try:
        module = importlib.import_module("steploop_mutation_probe")
        assert module.TABLE == (1,) and module.__file__ == str(path)
        other = "json"  # any other module: found as usual, not by the hook
        assert finder.find_spec(other) is None
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop("steploop_mutation_probe", None)


def test_the_outside_runs_operators_reach_the_behaviour_it_found_unpinned(all_mutants: list[mu.Mutant]) -> None:
    """The mutants of issue 27's outside run are generated: the recorded world's clock
    (max -> min), the withdrawn requests, drive_async's stop, RUN_IDENTITY's context window,
    the provenance keys, the machine's tables."""
    found = {(m.file, m.function, m.op, m.change) for m in all_mutants}
    cf = "steploop/effects/trace/counterfactual.py"
    assert (cf, "_RecordedWorld.next_event", "builtin", "max -> min") in found
    assert (cf, "_Index.compatible", "return", "return None") in found
    assert (cf, "_policy_model", "return", "return None") in found
    assert any(f == cf and fn == "_RecordedWorld.perform" and op == "stmt" and "cancelled.update" in c for f, fn, op, c in found)
    assert ("steploop/reducer/drive.py", "drive_async", "loop", "break -> continue") in found
    assert ("steploop/reducer/config.py", "RUN_IDENTITY", "table", "delete entry 'context_window'") in found
    assert ("steploop/effects/trace/strict.py", "_PROVENANCE_STR", "table", "delete entry 'python'") in found
    tables = {fn for f, fn, op, _ in found if op == "table" and f.startswith("steploop/reducer/")}
    assert {"TABLE", "OUTCOMES", "RESETS", "REQUESTS", "ROUND_END", "TOOL_ROUND_END"} <= tables
    assert {op for _, _, op, _ in found} == set(mu.OPERATORS)


# --- the modules that run the mutants (recording, orchestrator, report, cli) ---------------------


def test_module_names_of_the_files_in_scope() -> None:
    """A file in scope is imported (and hooked in a fresh interpreter) under its dotted name;
    a package's __init__ under the package's."""
    from tests.support.mutation.recording import module_name

    assert module_name("steploop/reducer/drive.py") == "steploop.reducer.drive"
    assert module_name("steploop/reducer/machine/__init__.py") == "steploop.reducer.machine"
    for t in mu.SCOPE:  # every one names a module that imports
        assert module_name(t.file).startswith("steploop."), t.file


def test_the_instrumented_code_records_the_statements_a_call_executed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every statement of a unit is numbered; the instrumented code calls the hit recorder
    before each statement it runs (not the docstring), so a branch not taken records nothing,
    and a mutant maps to the innermost statement holding it."""
    import builtins

    from tests.support.mutation.recording import HIT, Statements

    src = textwrap.dedent(
        '''
        def f(a):
            """Doc."""
            b = a + 1
            if a > 3:
                b = 0
            return b
        '''
    )
    (tmp_path / "x.py").write_text(src)
    monkeypatch.setattr(mu.scope, "ROOT", tmp_path)
    fs = _fs(src)
    st = Statements()
    code = st.instrumented(fs)
    hits: set[int] = set()
    monkeypatch.setitem(builtins.__dict__, HIT, hits.add)
    namespace: dict[str, object] = {}
    exec(compile(ast.Module([fs.node], []), "x.py", "exec"), namespace)
    fn = namespace["f"]
    assert callable(fn)
    fn.__code__ = code  # type: ignore[attr-defined]
    assert fn(1) == 2
    low = set(hits)
    hits.clear()
    assert fn(5) == 0
    high = set(hits)
    assert len(low) == 3 and len(high) == 4 and low < high  # b = a + 1, if, return (+ b = 0)
    assert set(st.function_of) == {fs.name} and len(st.function_of) == 4
    inner = next(m for m in mu.generate([fs]) if m.op == "const" and m.change == "0 -> 1")
    cond = next(m for m in mu.generate([fs]) if m.op == "cmp")
    assert st.of_mutant(inner, fs) in high - low  # only the call that took the branch ran it
    assert st.of_mutant(cond, fs) in low  # the if statement itself


def test_a_childs_result_becomes_one_outcome(tmp_path: Path, all_mutants: list[mu.Mutant]) -> None:
    """What a child wrote decides the outcome: a failing test kills (named), an error or a
    missing result (the process died) kills, no failure survives, no test run is uncovered."""
    from tests.support.mutation.orchestrator import read_outcome

    m = all_mutants[0]
    out = tmp_path / "r.json"
    cases = [
        ({"failed": ["tests/x.py::t"], "ran": 2}, ("killed", "tests/x.py::t", 2)),
        ({"failed": [], "ran": 5}, ("survived", "", 5)),
        ({"failed": [], "ran": 0}, ("uncovered", "no test ran", 0)),
        ({"error": "MemoryError: "}, ("killed", "the test run raised MemoryError: ", 0)),
    ]
    for result, want in cases:
        out.write_text(json.dumps(result))
        o = read_outcome(m, out, 0, 1.5)
        assert (o.status, o.detail, o.tests_run) == want, result
        assert not out.exists() and o.seconds == 1.5
    died = read_outcome(m, out, 9, 0.1)  # os.waitpid's status of a child killed by SIGKILL
    assert (died.status, died.detail) == ("killed", "the test process died (signal 9)")


def test_the_summary_counts_and_rates(all_mutants: list[mu.Mutant]) -> None:
    """Kill rate = killed / (mutants - identical - equivalent), for all and for the guard
    functions; a listed equivalent that a test kills is stale; rates by file likewise."""
    from tests.support.mutation.report import summarize

    guard = [m for m in all_mutants if m.guard][:3]
    other = [m for m in all_mutants if not m.guard and m.file != guard[0].file][:3]
    outcomes = [
        mu.Outcome(guard[0], "killed", "t"),
        mu.Outcome(guard[1], "survived"),
        mu.Outcome(guard[2], "timeout", "over 60 s"),
        mu.Outcome(other[0], "identical"),
        mu.Outcome(other[1], "survived"),  # listed as equivalent
        mu.Outcome(other[2], "killed", "tests/y.py::t"),  # listed, but killed: stale
    ]
    eq = {other[1].key: "why", other[2].key: "why"}
    s = summarize(outcomes, eq, full=False)
    assert (s.generated, s.identical, s.equivalent, s.killed) == (6, 1, 1, 3)
    assert [o.mutant for o in s.survivors] == [guard[1]] == [o.mutant for o in s.guard_survivors]
    assert s.rate == 3 / 4 and s.guard_rate == 2 / 3
    assert s.stale == [f"{other[2].key} (listed as equivalent, but killed by tests/y.py::t)"]
    assert summarize(outcomes, {**eq, "gone | f | cmp | x | y": "why"}, full=True).stale[0] == "gone | f | cmp | x | y"
    rates = {r.file: r for r in mu.rates_by_file(outcomes, eq)}
    g = rates[guard[0].file]
    assert (g.mutants, g.killed, g.survived) == (3, 2, 1) and g.rate == 2 / 3
    o = rates[other[0].file]
    assert (o.mutants, o.killed, o.equivalent, o.survived, o.rate) == (2, 1, 1, 0, 1.0)


def test_the_command_line_refuses_what_it_cannot_do(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """No matching mutant, --resume or --report without --json, --rerun-survivors without
    --resume: one line each and exit 2, nothing run."""
    assert mu.main(["--only", "no/such/file.py:1"]) == 2
    assert capsys.readouterr().out == "no mutant matches\n"
    f = str(tmp_path / "o.jsonl")
    for argv, line in [
        (["--full", "--resume"], "mutation: --resume, --rerun-survivors and --report read the outcomes of --json FILE"),
        (["--full", "--report"], "mutation: --resume, --rerun-survivors and --report read the outcomes of --json FILE"),
        (["--full", "--rerun-survivors", "--json", f], "mutation: --rerun-survivors goes with --resume"),
    ]:
        assert mu.main(argv) == 2, argv
        assert capsys.readouterr().out == line + "\n", argv


def test_the_list_marks_guards_and_equivalents(capsys: pytest.CaptureFixture[str]) -> None:
    """--list (of the operators asked for) prints one line a mutant, G for a guard function's,
    "(equivalent)" for a listed one, and the counts; it runs nothing."""
    assert mu.main(["--list", "--ops", "cmp"]) == 0
    lines = capsys.readouterr().out.splitlines()
    body, last = lines[:-2], lines[-1]
    mutants = mu.generate(None, ("cmp",))
    assert len(body) == len(mutants) and all("[cmp]" in line for line in body)
    assert sum(line.startswith("G ") for line in body) == sum(m.guard for m in mutants)
    eq = mu.load_equivalents()
    assert sum(line.endswith("(equivalent)") for line in body) == sum(m.key in eq for m in mutants)
    assert last.startswith(f"{len(mutants)} mutants in ") and "listed as equivalent" in last


def test_a_fresh_interpreter_runs_the_listed_tests_in_order(tmp_path: Path) -> None:
    """The fresh interpreter's selection keeps only the listed tests, in the listed order, and
    lifts a module's wall-clock ceiling (CI_SECONDS)."""
    import types

    from tests.support.mutation.fresh import Select

    module = types.SimpleNamespace(CI_SECONDS=5.0)
    items = [types.SimpleNamespace(nodeid=n, module=module) for n in ("a::x", "b::y", "c::z")]
    Select(["c::z", "a::x"]).pytest_collection_modifyitems(None, None, items)
    assert [it.nodeid for it in items] == ["c::z", "a::x"]
    assert module.CI_SECONDS == float("inf")
