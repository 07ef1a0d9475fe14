"""What is mutated (specs/mutation.md, "What is mutated"): the files and functions in scope, the
module-level tables, which functions are guard functions, and the tests that may kill a
mutant of each file (its kill set).

A *unit* (:class:`FunctionSource`) is one top-level function or method, or one module-level
table (an assignment whose value holds dict, tuple, list or set literals: the machine's
``TABLE``, ``OUTCOMES``, ``RESETS``, the protocol's ``REQUESTS``, ...).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

ROOT = Path(__file__).resolve().parents[3]
EQUIVALENTS = ROOT / "specs" / "mutation-equivalents.txt"

# The kill set of the reducer's files: the tests that exercise the reducer directly (unit,
# property, explorer at the CI bound), the golden scenario replays and the executed examples
# of the README and docs/.
REDUCER_KILLS: tuple[str, ...] = (
    "tests/reducer",
    "tests/test_scenarios.py",
    "tests/test_docs.py",
)

# The kill sets of the safety-critical files of the effects: the test modules that exercise
# each (a mutant runs in the tests of its own file's kill set only).
TRACE_READING = (
    "tests/effects/test_pinned_strict.py",
    "tests/effects/test_trace_mutations.py",
    "tests/effects/test_trace_fast.py",
    "tests/effects/test_outside_data.py",
    "tests/effects/test_trace.py",
    "tests/effects/test_trace_replays.py",
)
COUNTERFACTUAL = (
    "tests/effects/test_pinned_counterfactual.py",
    "tests/effects/test_trace_counterfactual.py",
    "tests/effects/test_trace_layers.py",
    "tests/effects/test_trace_replays.py",
    "tests/effects/test_import.py",
)
CONFINEMENT = (
    "tests/effects/test_tools_confine.py",
    "tests/effects/test_tools_walk.py",
    "tests/effects/test_tools_races.py",
    "tests/effects/test_tools_files.py",
    "tests/effects/test_tools.py",
    "tests/effects/test_tools_layout.py",
)
IMPORT_COMPARE = (
    "tests/effects/test_pinned_import.py",
    "tests/effects/test_import.py",
    "tests/effects/test_import_cases.py",
)


@dataclass(frozen=True)
class Target:
    """A file to mutate: ``functions`` None means every function and method in it; ``tables``
    None every module-level table, () none; ``kills`` the tests that may kill its mutants."""

    file: str
    functions: tuple[str, ...] | None = None
    tables: tuple[str, ...] | None = None
    kills: tuple[str, ...] = REDUCER_KILLS


# The guard parts of config.py: the derived thresholds and gates the machine reads, the retry
# delay, the profiles that switch guards on and off, what a profile keeps of a recorded run.
CONFIG_GUARDS = (
    "RetryPolicy.delay_ms",
    "LoopConfig.default_max_tokens",
    "LoopConfig.effective_window",
    "LoopConfig.autocompact_threshold",
    "LoopConfig.blocking_limit",
    "LoopConfig.snip_threshold",
    "LoopConfig.collapse_threshold",
    "LoopConfig.auto_compact_enabled",
    "LoopConfig.media_recovery_enabled",
    "LoopConfig.is_subagent",
    "claude_code_2_1_88",
    "full",
    "profile_for",
)
CONFIG_TABLES = (
    "QUERY_SOURCES_NO_AUTOCOMPACT",
    "QUERY_SOURCES_NO_BLOCKING",
    "PROFILES",
    "RUN_IDENTITY",
)

# The machine: every module of the package steploop/reducer/machine/, every function.
MACHINE: tuple[Target, ...] = tuple(
    Target(p.relative_to(ROOT).as_posix())
    for p in sorted((ROOT / "steploop" / "reducer" / "machine").glob("*.py"))
)

# The rest of the reducer the machine's decisions rest on (the world protocol, the driver loop,
# the transitions, events, the static graph, the digest, the texts).
REDUCER: tuple[Target, ...] = (
    *MACHINE,
    Target("steploop/reducer/context.py"),
    Target("steploop/reducer/config.py", CONFIG_GUARDS, CONFIG_TABLES),
    Target("steploop/reducer/state.py"),
    Target("steploop/reducer/protocol.py"),
    Target("steploop/reducer/drive.py"),
    Target("steploop/reducer/transitions.py"),
    Target("steploop/reducer/events.py"),
    Target("steploop/reducer/graph.py"),
    Target("steploop/reducer/digest.py"),
    Target("steploop/reducer/texts.py"),
)

# The safety-critical parts of the effects.
EFFECTS: tuple[Target, ...] = (
    Target("steploop/effects/importer/compare.py", kills=IMPORT_COMPARE),
    Target("steploop/effects/tools/confine.py", kills=CONFINEMENT),
    Target("steploop/effects/trace/counterfactual.py", kills=COUNTERFACTUAL),
    Target("steploop/effects/trace/strict.py", kills=TRACE_READING),
)

SCOPE: tuple[Target, ...] = (*REDUCER, *EFFECTS)

# Functions whose every mutant is a guard mutant (in scope for that reason).
GUARD_FILES = ("steploop/reducer/config.py",)

# A function of the machine or of context.py is a *guard function* when its code cites a
# death-spiral guard [G<n>], a Continue or Terminal rule [C-...], [T-...], an interrupt rule
# [I-<n>] or a compatibility flag [Q-<n>]: the functions that decide which transition happens.
# Every function taken from config.py is one, and LoopState.session (what a turn hands the
# next one).
GUARD_TAG = re.compile(r"\[(G\d+|[CT]-[A-Z]+(?:-[A-Z]+)*-\d+|I-\d+|Q-\d+)\]")
GUARD_FUNCTIONS = {"steploop/reducer/state.py": ("LoopState.session",)}
# Any rule id the function's code or docstring cites (R-TOOL-5, S-SNIP-1, G11, ...): tests
# marked with the same rule are run first against the function's mutants.
RULE_TAG = re.compile(r"\b((?:[A-Z]+-)+\d+|G\d+)\b")

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
TableNode = ast.Assign | ast.AnnAssign


@dataclass
class FunctionSource:
    """One unit in scope, parsed: a top-level function or method (``kind`` "function"), or a
    module-level table (``kind`` "table"; ``qualname`` its name, ``node`` its assignment)."""

    file: str
    qualname: str
    node: ast.stmt
    class_name: str | None
    guard: bool
    future_annotations: bool
    rules: frozenset[str] = frozenset()  # the rule ids its code cites, e.g. {"C-BUDGET-1", "G11"}
    at_import: bool = False  # its module's import runs it (a table, a function a table calls)
    kind: Literal["function", "table"] = "function"

    @property
    def name(self) -> str:
        return f"{self.file}::{self.qualname}"

    @property
    def fresh(self) -> bool:
        """Its mutants run in a fresh interpreter: the module's import runs it."""
        return self.at_import or self.kind == "table"


def target_of(file: str) -> Target:
    for t in SCOPE:
        if t.file == file:
            return t
    raise LookupError(f"{file} is not in the mutation scope")


def kill_set(files: Iterable[str]) -> tuple[str, ...]:
    """The test paths that may kill the mutants of ``files`` (each file's own, in order)."""
    out: list[str] = []
    for f in files:
        for k in target_of(f).kills:
            if k not in out:
                out.append(k)
    return tuple(out)


def in_kill_set(nodeid: str, file: str) -> bool:
    """Whether the test ``nodeid`` belongs to the kill set of ``file``."""
    path = nodeid.split("::")[0]
    return any(path == k or path.startswith(k.rstrip("/") + "/") for k in target_of(file).kills)


def _names(nodes: Iterable[ast.AST], into: set[str]) -> None:
    """The names ``nodes`` call, not descending into the bodies of the functions they define
    (a function's decorators and defaults run where it is defined, its body does not)."""
    stack = list(nodes)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(d for d in (*node.args.defaults, *node.args.kw_defaults) if d)
            continue
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            into.add(node.func.id)
        stack.extend(ast.iter_child_nodes(node))


def import_time(tree: ast.Module) -> set[str]:
    """Top-level functions the module's own import may call: called by module-level code
    (class bodies included), and, transitively, by the bodies of such functions. The recorder
    starts after the modules in scope are imported, so it never sees these calls; the runner
    treats them as every test's (their mutants run in a fresh interpreter)."""
    bodies = {n.name: n.body for n in tree.body if isinstance(n, ast.FunctionDef)}
    named: set[str] = set()
    _names(tree.body, named)
    todo = [n for n in named if n in bodies]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        inner: set[str] = set()
        _names(bodies[name], inner)
        todo.extend(n for n in inner if n in bodies)
    return seen


def has_table(value: ast.AST) -> bool:
    """A value with a dict, tuple, list or set literal outside type expressions."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Dict, ast.Tuple, ast.List, ast.Set)):
            return True
        if isinstance(node, (ast.Subscript, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def table_name(node: ast.stmt) -> str | None:
    """The name of a module-level table assignment, or None: one plain name assigned a value
    with a literal table in it (``__all__`` and type aliases are not tables)."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        target, value = node.target, node.value
        if "TypeAlias" in ast.unparse(node.annotation):
            return None
    else:
        return None
    if not isinstance(target, ast.Name) or target.id.startswith("__"):
        return None
    return target.id if has_table(value) else None


def functions(target: Target) -> Iterator[FunctionSource]:
    """The units of ``target``: its functions and methods, then its tables."""
    path = ROOT / target.file
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(path))
    lines = text.split("\n")
    future = any(
        isinstance(n, ast.ImportFrom)
        and n.module == "__future__"
        and any(a.name == "annotations" for a in n.names)
        for n in tree.body
    )
    found: set[str] = set()
    at_import = import_time(tree)
    always_guard = target.file in GUARD_FILES
    guard_names = GUARD_FUNCTIONS.get(target.file, ())

    def emit(fn: FunctionNode, cls: str | None) -> FunctionSource | None:
        qual = f"{cls}.{fn.name}" if cls else fn.name
        if target.functions is not None and qual not in target.functions:
            return None
        found.add(qual)
        src = "\n".join(lines[fn.lineno - 1 : fn.end_lineno])
        guard = always_guard or qual in guard_names or bool(GUARD_TAG.search(src))
        rules = frozenset(RULE_TAG.findall(src))
        return FunctionSource(
            target.file, qual, fn, cls, guard, future, rules, at_import=qual in at_import
        )

    tables: list[FunctionSource] = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            fs = emit(node, None)
            if fs:
                yield fs
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    fs = emit(sub, node.name)
                    if fs:
                        yield fs
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            name = table_name(node)
            if name is None or (target.tables is not None and name not in target.tables):
                continue
            found.add(name)
            src = "\n".join(lines[node.lineno - 1 : node.end_lineno])
            rules = frozenset(RULE_TAG.findall(src))
            tables.append(
                FunctionSource(target.file, name, node, None, False, future, rules, True, "table")
            )
    yield from tables
    wanted = set(target.functions or ()) | set(target.tables or ())
    missing = sorted(wanted - found)
    if missing:
        raise SystemExit(
            f"mutation scope: {target.file} has no {', '.join(missing)}; update SCOPE in "
            "tests/support/mutation/scope.py"
        )


def functions_in_scope(scope: Iterable[Target] = SCOPE) -> list[FunctionSource]:
    return [fs for t in scope for fs in functions(t)]
