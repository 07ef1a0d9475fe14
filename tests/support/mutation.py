"""Mutation testing for the reducer: generate mutants from operators, run the tests that can
kill each one, list the survivors (specs/mutation.md explains the method and the figures).

Mutants are generated, not chosen: every comparison flipped, every integer constant moved by
one, every boolean negated, every operand of ``and``/``or`` dropped, every keyword argument of a
call removed and every statement deleted, inside the bodies of the functions in ``SCOPE``.

Running one mutant costs a fork, not a copy of the repository: the parent process imports the
reducer once; each child swaps the ``__code__`` of the mutated function (so every reference to
it, however imported, runs the mutant), then runs in-process pytest on the tests that executed
that function in the baseline run, fastest first, stopping at the first failure. Test modules
are imported in the child, after the swap, so configs built at import time see the mutant too.

The command line is ``scripts/mutation.py`` (``--help``).
"""

from __future__ import annotations
import __future__ as future_flags

import argparse
import ast
import builtins
import copy
import gc
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import types
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

ROOT = Path(__file__).resolve().parents[2]
EQUIVALENTS = ROOT / "specs" / "mutation-equivalents.txt"

# --- scope -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """A file to mutate; ``functions`` None means every function and method in it."""

    file: str
    functions: tuple[str, ...] | None = None


# The guard parts of config.py and state.py: the derived thresholds and gates the machine reads,
# the retry delay, the profiles that switch guards on and off, and what a session carries.
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
)
STATE_GUARDS = ("LoopState.session",)

# The machine: every module of the package steploop/reducer/machine/, every function.
MACHINE: tuple[Target, ...] = tuple(
    Target(p.relative_to(ROOT).as_posix())
    for p in sorted((ROOT / "steploop" / "reducer" / "machine").glob("*.py"))
)

SCOPE: tuple[Target, ...] = (
    *MACHINE,
    Target("steploop/reducer/context.py"),
    Target("steploop/reducer/config.py", CONFIG_GUARDS),
    Target("steploop/reducer/state.py", STATE_GUARDS),
)

# A function of the machine or of context.py is a *guard function* when its code cites a
# death-spiral guard [G<n>], a Continue or Terminal rule [C-...], [T-...], an interrupt rule
# [I-<n>] or a compatibility flag [Q-<n>]: the functions that decide which transition happens.
# Every function taken from config.py and state.py is one (they are in scope for that reason).
GUARD_TAG = re.compile(r"\[(G\d+|[CT]-[A-Z]+(?:-[A-Z]+)*-\d+|I-\d+|Q-\d+)\]")
# Any rule id the function's code or docstring cites (R-TOOL-5, S-SNIP-1, G11, ...): tests
# marked with the same rule are run first against the function's mutants.
RULE_TAG = re.compile(r"\b((?:[A-Z]+-)+\d+|G\d+)\b")

# The kill set: the tests that exercise the reducer directly (unit, property, explorer at the CI
# bound), the golden scenario replays and the executed examples of the README and docs/.
KILL_SET: tuple[str, ...] = ("tests/reducer", "tests/test_scenarios.py", "tests/test_docs.py")

# Statements that are never deleted: a deleted return falls through to None (a crash any test
# sees), an assert checks an invariant the code already keeps, pass is nothing.
_KEPT_STATEMENTS = (ast.Return, ast.Assert, ast.Pass, ast.FunctionDef, ast.ClassDef, ast.Global)

_CMP_FLIP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_CMP_SYM = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}

OPERATORS = ("cmp", "const", "bool", "boolop", "kwarg", "stmt")


# --- mutants -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mutant:
    file: str
    function: str  # qualified name of the top-level function or method
    line: int
    op: str  # one of OPERATORS
    site: str  # the source line, stripped
    change: str  # what the operator did, e.g. "'<' -> '<='"
    guard: bool
    ordinal: int  # among mutants with the same file, function, op, site and change
    path: tuple[tuple[str, int | None], ...]  # where in the function's AST
    edit: int  # which of the operators' edits at that node

    @property
    def key(self) -> str:
        """Stable across line moves: names the function, the operator, the line's text and the
        change (and an ordinal when the same change fits the same line twice)."""
        tail = f" #{self.ordinal}" if self.ordinal > 1 else ""
        return f"{self.file} | {self.function} | {self.op} | {self.site} | {self.change}{tail}"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass
class FunctionSource:
    """One top-level function or method in scope, parsed."""

    file: str
    qualname: str
    node: ast.FunctionDef
    class_name: str | None
    guard: bool
    future_annotations: bool
    rules: frozenset[str] = frozenset()  # the rule ids its code cites, e.g. {"C-BUDGET-1", "G11"}
    at_import: bool = False  # its module's import calls it (a table compiled at import)


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


def _import_time(tree: ast.Module) -> set[str]:
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


def _functions(target: Target) -> Iterator[FunctionSource]:
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
    at_import = _import_time(tree)

    def emit(fn: ast.FunctionDef, cls: str | None) -> FunctionSource | None:
        qual = f"{cls}.{fn.name}" if cls else fn.name
        if target.functions is not None and qual not in target.functions:
            return None
        found.add(qual)
        src = "\n".join(lines[fn.lineno - 1 : fn.end_lineno])
        guard = target.functions is not None or bool(GUARD_TAG.search(src))
        rules = frozenset(RULE_TAG.findall(src))
        return FunctionSource(
            target.file, qual, fn, cls, guard, future, rules, at_import=qual in at_import
        )

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            fs = emit(node, None)
            if fs:
                yield fs
        elif isinstance(node, ast.ClassDef):
            for sub in node.body:
                if isinstance(sub, ast.FunctionDef):
                    fs = emit(sub, node.name)
                    if fs:
                        yield fs
    if target.functions is not None:
        missing = sorted(set(target.functions) - found)
        if missing:
            raise SystemExit(
                f"mutation scope: {target.file} has no {', '.join(missing)}; update SCOPE in "
                "tests/support/mutation.py"
            )


def functions_in_scope() -> list[FunctionSource]:
    return [fs for t in SCOPE for fs in _functions(t)]


def _child_nodes(node: ast.AST) -> Iterator[tuple[str, int | None, ast.AST]]:
    for name, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield name, i, item
        elif isinstance(value, ast.AST):
            yield name, None, value


def _walk(
    node: ast.AST, path: tuple[tuple[str, int | None], ...]
) -> Iterator[tuple[ast.AST, tuple[tuple[str, int | None], ...]]]:
    """Every node under ``node`` with its path, skipping what is never mutated: nested
    function signatures (defaults are evaluated at import), decorators, annotations, asserts."""
    for name, i, child in _child_nodes(node):
        if name in ("decorator_list", "returns", "annotation") or isinstance(child, ast.arguments):
            continue
        if isinstance(child, ast.Assert):
            continue
        sub = (*path, (name, i))
        yield child, sub
        yield from _walk(child, sub)


def _resolve(root: ast.AST, path: Sequence[tuple[str, int | None]]) -> ast.AST:
    node = root
    for name, i in path:
        value = getattr(node, name)
        node = value[i] if i is not None else value
    return node


def _replace(root: ast.AST, path: Sequence[tuple[str, int | None]], new: ast.AST | None) -> None:
    parent = _resolve(root, path[:-1])
    name, i = path[-1]
    if i is None:
        assert new is not None
        setattr(parent, name, new)
    else:
        seq = getattr(parent, name)
        if new is None:
            del seq[i]
        else:
            seq[i] = new


def _is_docstring(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node).split("\n")[0]
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass(frozen=True)
class _Edit:
    op: str
    change: str
    apply: Callable[[ast.FunctionDef], None]


def _edits(node: ast.AST, path: tuple[tuple[str, int | None], ...]) -> Iterator[_Edit]:
    """The operators that apply at ``node``."""
    if isinstance(node, ast.Compare):
        for k, cop in enumerate(node.ops):
            new_op = _CMP_FLIP[type(cop)]

            def flip(fn: ast.FunctionDef, k: int = k, new_op: type[ast.cmpop] = new_op) -> None:
                target = _resolve(fn, path)
                assert isinstance(target, ast.Compare)
                target.ops[k] = new_op()

            yield _Edit("cmp", f"'{_CMP_SYM[type(cop)]}' -> '{_CMP_SYM[new_op]}'", flip)
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):

        def negate(fn: ast.FunctionDef) -> None:
            target = _resolve(fn, path)
            assert isinstance(target, ast.Constant)
            target.value = not target.value

        yield _Edit("bool", f"{node.value} -> {not node.value}", negate)
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        for delta in (1, -1):

            def move(fn: ast.FunctionDef, delta: int = delta) -> None:
                target = _resolve(fn, path)
                assert isinstance(target, ast.Constant) and isinstance(target.value, int)
                target.value = target.value + delta

            yield _Edit("const", f"{node.value} -> {node.value + delta}", move)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):

        def drop_not(fn: ast.FunctionDef) -> None:
            target = _resolve(fn, path)
            assert isinstance(target, ast.UnaryOp)
            _replace(fn, path, target.operand)

        yield _Edit(
            "bool", f"not {_short(node.operand, 40)} -> {_short(node.operand, 40)}", drop_not
        )
    elif isinstance(node, ast.BoolOp):
        word = "and" if isinstance(node.op, ast.And) else "or"
        for k, operand in enumerate(node.values):

            def drop(fn: ast.FunctionDef, k: int = k) -> None:
                target = _resolve(fn, path)
                assert isinstance(target, ast.BoolOp)
                rest = [v for j, v in enumerate(target.values) if j != k]
                _replace(
                    fn, path, rest[0] if len(rest) == 1 else ast.BoolOp(op=target.op, values=rest)
                )

            yield _Edit("boolop", f"{word}: drop {_short(operand, 50)}", drop)
    elif isinstance(node, ast.Call):
        for k, kw in enumerate(node.keywords):
            if kw.arg is None:
                continue

            def remove(fn: ast.FunctionDef, k: int = k) -> None:
                target = _resolve(fn, path)
                assert isinstance(target, ast.Call)
                del target.keywords[k]

            yield _Edit("kwarg", f"drop {kw.arg}=", remove)
    if (
        isinstance(node, ast.stmt)
        and not isinstance(node, _KEPT_STATEMENTS)
        and not _is_docstring(node)
        and path[-1][1] is not None
    ):

        def delete(fn: ast.FunctionDef) -> None:
            target = _resolve(fn, path)
            _replace(fn, path, ast.copy_location(ast.Pass(), target))

        yield _Edit("stmt", f"delete {_short(node)}", delete)


def _declared_unreachable(node: ast.AST, lines: Sequence[str]) -> bool:
    """A statement the code declares never runs: marked ``# pragma: no cover`` (the
    ladders' "the last rung always ends the round"), or an ``assert_never(...)`` call (there
    for the type checker's exhaustiveness check). Mutating it can change no behaviour a test
    could see, so no mutant is made of it or of anything inside it."""
    if not isinstance(node, ast.stmt):
        return False
    if "pragma: no cover" in lines[node.lineno - 1]:
        return True
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "assert_never"
    )


def generate(functions: Sequence[FunctionSource] | None = None) -> list[Mutant]:
    """Every mutant of every function in scope, in source order."""
    out: list[Mutant] = []
    for fs in functions if functions is not None else functions_in_scope():
        lines = (ROOT / fs.file).read_text(encoding="utf-8").split("\n")
        seen: dict[tuple[str, str, str], int] = defaultdict(int)
        for stmt_i, stmt in enumerate(fs.node.body):
            if (stmt_i == 0 and _is_docstring(stmt)) or isinstance(stmt, ast.Assert):
                continue
            top: tuple[tuple[str, int | None], ...] = (("body", stmt_i),)
            skipped: list[tuple[int, int]] = []  # line ranges declared unreachable
            for node, path in [(stmt, top), *_walk(stmt, top)]:
                at: int | None = getattr(node, "lineno", None)
                if at is not None and any(a <= at <= b for a, b in skipped):
                    continue
                if _declared_unreachable(node, lines):
                    assert isinstance(node, ast.stmt)
                    skipped.append((node.lineno, node.end_lineno or node.lineno))
                    continue
                for k, edit in enumerate(_edits(node, path)):
                    line = getattr(node, "lineno", fs.node.lineno)
                    site = lines[line - 1].strip()
                    seen[(edit.op, site, edit.change)] += 1
                    out.append(
                        Mutant(
                            file=fs.file,
                            function=fs.qualname,
                            line=line,
                            op=edit.op,
                            site=site,
                            change=edit.change,
                            guard=fs.guard,
                            ordinal=seen[(edit.op, site, edit.change)],
                            path=path,
                            edit=k,
                        )
                    )
    return out


def mutated_function(m: Mutant, fs: FunctionSource) -> ast.FunctionDef:
    """A copy of the function's AST with the mutant applied."""
    fn = copy.deepcopy(fs.node)
    edits = list(_edits(_resolve(fs.node, m.path), m.path))
    if m.edit >= len(edits) or (edits[m.edit].op, edits[m.edit].change) != (m.op, m.change):
        raise LookupError(f"mutant {m.key} no longer applies")
    edits[m.edit].apply(fn)
    return fn


def compile_function(fs: FunctionSource, fn: ast.FunctionDef) -> types.CodeType:
    """Compile ``fn`` as it would be in its module (same file name, line numbers, qualname)."""
    body: ast.stmt = fn
    if fs.class_name is not None:
        body = ast.ClassDef(name=fs.class_name, bases=[], keywords=[], body=[fn], decorator_list=[])
        ast.copy_location(body, fn)
    mod = ast.Module(body=[body], type_ignores=[])
    ast.fix_missing_locations(mod)
    flags = future_flags.annotations.compiler_flag if fs.future_annotations else 0
    code = compile(mod, str(ROOT / fs.file), "exec", flags=flags, dont_inherit=True)
    for const in _all_code(code):
        if const.co_qualname == fs.qualname:
            return const
    raise LookupError(f"no code for {fs.qualname}")  # pragma: no cover


def _all_code(code: types.CodeType) -> Iterator[types.CodeType]:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield c
            yield from _all_code(c)


# --- equivalent mutants -----------------------------------------------------------------------


def load_equivalents(path: Path = EQUIVALENTS) -> dict[str, str]:
    """``key -> reason`` from the checked-in list: a key line (``file | function | op | site |
    change``) followed by indented reason lines; ``#`` starts a comment line."""
    if not path.exists():
        return {}
    out: dict[str, str] = {}
    key: str | None = None
    for n, raw in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if raw[0] in " \t":
            if key is None:
                raise SystemExit(f"{path}:{n}: a reason line before any mutant key")
            out[key] = (out[key] + " " + raw.strip()).strip()
        else:
            key = raw.strip()
            if key.count(" | ") < 4:
                raise SystemExit(f"{path}:{n}: a key is 'file | function | op | site | change'")
            if key in out:
                raise SystemExit(f"{path}:{n}: {key!r} is listed twice")
            out[key] = ""
    for k, reason in out.items():
        if not reason:
            raise SystemExit(f"{path}: {k!r} has no reason")
    return out


# --- sampling ---------------------------------------------------------------------------------


def _rank(m: Mutant, seed: str) -> str:
    return hashlib.blake2b(f"{seed}|{m.key}".encode(), digest_size=8).hexdigest()


def sample(
    mutants: Sequence[Mutant], per_guard: int, per_other: int, seed: str = "steploop"
) -> list[Mutant]:
    """A deterministic stratified sample: ``per_guard`` mutants of every guard function and
    ``per_other`` of every other function, spread over the operators (round-robin over the
    operators present, each operator's mutants in hash order)."""
    by_fn: dict[tuple[str, str], list[Mutant]] = defaultdict(list)
    for m in mutants:
        by_fn[(m.file, m.function)].append(m)
    picked: list[Mutant] = []
    for group in by_fn.values():
        want = per_guard if group[0].guard else per_other
        by_op: dict[str, list[Mutant]] = defaultdict(list)
        for m in sorted(group, key=lambda m: _rank(m, seed)):
            by_op[m.op].append(m)
        ops = sorted(by_op, key=lambda op: _rank(by_op[op][0], seed))
        chosen: list[Mutant] = []
        while len(chosen) < want and any(by_op.values()):
            for op in ops:
                if by_op[op] and len(chosen) < want:
                    chosen.append(by_op[op].pop(0))
        picked.extend(chosen)
    order = {id(m): i for i, m in enumerate(mutants)}
    return sorted(picked, key=lambda m: order[id(m)])


# --- running ----------------------------------------------------------------------------------


STATUSES: Final = ("killed", "timeout", "survived", "uncovered", "identical", "error")


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # one of STATUSES
    detail: str = ""  # the killing test, or why
    seconds: float = 0.0
    tests_run: int = 0
    fresh: bool = False  # run in a fresh interpreter (the function runs when tests import)


@dataclass
class Baseline:
    durations: dict[str, float] = field(default_factory=dict)  # nodeid -> seconds
    hits: dict[int, set[str]] = field(default_factory=dict)  # statement id -> nodeids
    seconds: float = 0.0


HIT = "__steploop_mutation_hit__"
PYTEST_ARGS = (
    "-p",
    "no:cacheprovider",
    "-p",
    "no:terminal",  # the runner reports; no 'no tests ran' line from the host session
    "-s",  # children close their own output; the parent prints its progress
    "-o",
    "addopts=",
    # the parent imported anyio before pytest loaded its plugin: nothing to rewrite there
    "-W",
    "ignore::pytest.PytestAssertRewriteWarning",
)

# Wall-clock ceilings a test module asserts (``CI_SECONDS``): on a shared machine they would
# kill a mutant for being slow, not for being wrong, so the runner lifts them; a mutant that
# never ends is caught by the runner's own per-mutant timeout.
TIME_CEILINGS = ("CI_SECONDS",)


def _lift_time_ceilings(items: Sequence[Any]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        for name in TIME_CEILINGS:
            if module is not None and hasattr(module, name):
                setattr(module, name, float("inf"))


def _load_hypothesis_profile() -> None:
    """Derandomized and without an example database, so every run draws the same examples."""
    from hypothesis import settings

    settings.register_profile("steploop-mutation", database=None, derandomize=True)
    settings.load_profile("steploop-mutation")


def _prepare_parent() -> None:
    """Import what every child needs once, before forking: the reducer, the interpreter,
    pytest and hypothesis."""
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    _load_hypothesis_profile()
    import importlib

    for name in (
        "pytest",
        "steploop.reducer",
        "steploop.reducer.machine",
        "steploop.reducer.context",
        "steploop.reducer.config",
        "steploop.reducer.state",
        "steploop.reducer.testing",
        "steploop.effects",
    ):
        importlib.import_module(name)


def _live_functions(fns: Sequence[FunctionSource]) -> dict[str, list[types.FunctionType]]:
    """``file::qualname`` -> every live function object running that code (a module
    attribute, a method, the function behind a cached property, ...)."""
    wanted: dict[tuple[str, str], str] = {
        (str(ROOT / fs.file), fs.qualname): f"{fs.file}::{fs.qualname}" for fs in fns
    }
    out: dict[str, list[types.FunctionType]] = defaultdict(list)
    for obj in gc.get_objects():
        if isinstance(obj, types.FunctionType):
            code = obj.__code__
            name = wanted.get((code.co_filename, code.co_qualname))
            if name is not None:
                out[name].append(obj)
    missing = [v for v in wanted.values() if v not in out]
    if missing:
        raise SystemExit(f"mutation: no live function for {', '.join(missing)}")
    return out


Path_ = tuple[tuple[str, int | None], ...]


class Statements:
    """Numbers every statement of the functions in scope, so coverage can be recorded per
    statement: a mutant can only be killed by a test that executed the statement it is in."""

    def __init__(self) -> None:
        self.ids: dict[tuple[str, str, Path_], int] = {}
        self.function_of: list[str] = []  # statement id -> "file::qualname"

    def id(self, fs: FunctionSource, path: Path_) -> int:
        key = (fs.file, fs.qualname, path)
        n = self.ids.get(key)
        if n is None:
            n = self.ids[key] = len(self.function_of)
            self.function_of.append(f"{fs.file}::{fs.qualname}")
        return n

    def of_mutant(self, m: Mutant, fs: FunctionSource) -> int:
        """The id of the innermost statement holding the mutated node."""
        node: ast.AST = fs.node
        best: Path_ = m.path[:1]
        for k, (name, i) in enumerate(m.path):
            value = getattr(node, name)
            node = value[i] if i is not None else value
            if isinstance(node, ast.stmt):
                best = m.path[: k + 1]
        return self.id(fs, best)

    def instrumented(self, fs: FunctionSource) -> types.CodeType:
        """The function's code with, before every statement, a call recording it ran."""
        fn = copy.deepcopy(fs.node)

        def visit(node: ast.AST, path: Path_) -> None:
            for name, value in list(ast.iter_fields(node)):
                if (
                    isinstance(value, list)
                    and value
                    and all(isinstance(v, ast.stmt) for v in value)
                ):
                    out: list[ast.stmt] = []
                    for i, st in enumerate(value):
                        sub = (*path, (name, i))
                        visit(st, sub)
                        if not (node is fn and i == 0 and _is_docstring(st)):
                            call = ast.parse(f"{HIT}({self.id(fs, sub)})").body[0]
                            for n in ast.walk(call):
                                ast.copy_location(n, st)
                            out.append(call)
                        out.append(st)
                    setattr(node, name, out)
                elif isinstance(value, list):
                    for i, v in enumerate(value):
                        if isinstance(v, ast.AST):
                            visit(v, (*path, (name, i)))
                elif isinstance(value, ast.AST):
                    visit(value, (*path, (name, None)))

        visit(fn, ())
        return compile_function(fs, fn)


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def _limit_memory() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    except (ValueError, OSError):  # pragma: no cover - a platform without the limit
        pass


def _fork(job: Callable[[], dict[str, Any]], out: Path) -> int:
    """Run ``job`` in a forked child (its own process group, silenced, memory-capped) that
    writes the job's result as JSON to ``out``; returns the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 3
        try:
            os.setpgrp()
            _silence()
            _limit_memory()
            result = job()
            out.write_text(json.dumps(result), encoding="utf-8")
            code = 0
        except BaseException as e:  # the child reports anything, then exits
            try:
                out.write_text(json.dumps({"error": f"{type(e).__name__}: {e}"}), encoding="utf-8")
            except BaseException:
                pass
        finally:
            os._exit(code)
    return pid


class _Recorder:
    """A pytest plugin (in the host session and every child): the first failure, durations,
    skips and, while ``hits`` is live, which functions each test executed."""

    def __init__(self, hits: set[int]) -> None:
        self.hits = hits
        self.record_hits = False
        self.failed: list[str] = []
        self.durations: dict[str, float] = defaultdict(float)
        self.skipped: set[str] = set()
        self.test_hits: dict[str, set[int]] = {}
        # what fixtures executed (setup, teardown) is credited to every test of the module:
        # a module-scoped fixture runs in one test's setup but serves them all
        self.module_hits: dict[str, set[int]] = defaultdict(set)
        self.ran = 0

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.hits.clear()

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.failed.append(f"collecting {report.nodeid}")

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.durations[report.nodeid] += report.duration
        if report.skipped:
            self.skipped.add(report.nodeid)
        if report.failed:
            self.failed.append(report.nodeid)
        if report.when == "call":
            self.ran += 1
        if self.record_hits:
            if report.when == "call":
                self.test_hits[report.nodeid] = set(self.hits)
            else:
                self.module_hits[report.nodeid.split("::")[0]] |= self.hits
            self.hits.clear()

    def hits_per_test(self) -> dict[str, list[int]]:
        return {
            nodeid: sorted(names | self.module_hits[nodeid.split("::")[0]])
            for nodeid, names in self.test_hits.items()
        }


def _run_items(items: Sequence[Any], rec: _Recorder, stop_first: bool) -> None:
    """Run pytest items through the full protocol (fixtures, warnings as errors, hypothesis)."""
    for i, item in enumerate(items):
        nextitem = items[i + 1] if i + 1 < len(items) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if stop_first and rec.failed:
            return


@dataclass
class _Task:
    index: int
    mutant: Mutant
    order: list[str]
    budget: float
    fresh: bool


class Orchestrator:
    """The host pytest session's plugin: after collection it runs the baseline and every
    mutant in forked children instead of running the tests itself."""

    def __init__(
        self,
        mutants: Sequence[Mutant],
        fns: Sequence[FunctionSource],
        jobs: int,
        timeout: float,
        progress: Callable[[Outcome, int, int], None],
    ) -> None:
        self.mutants = mutants
        self.fns = {(fs.file, fs.qualname): fs for fs in fns}
        self.jobs = jobs
        self.timeout = timeout
        self.progress = progress
        self.killers: dict[str, list[str]] = {}  # function -> tests that killed its mutants
        self.kills: dict[str, int] = {}  # test -> mutants it killed
        self.hits: set[int] = set()
        self.rec = _Recorder(self.hits)
        self.statements = Statements()
        self.items: list[Any] = []
        self.spec_of: dict[str, frozenset[str]] = {}
        self.import_hits: set[str] = set()
        self.base = Baseline()
        self.outcomes: list[Outcome] = []
        self.problem: str | None = None
        builtins.__dict__[HIT] = self.hits.add
        self.live = _live_functions(fns)
        self.original: dict[str, types.CodeType] = {}
        for fs in fns:
            name = f"{fs.file}::{fs.qualname}"
            self.original[name] = self.live[name][0].__code__
            code = self.statements.instrumented(fs)
            for f in self.live[name]:
                f.__code__ = code

    # --- pytest hooks ---------------------------------------------------------------------

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        _lift_time_ceilings(items)

    def pytest_collection_finish(self, session: Any) -> None:
        self.items = list(session.items)
        self.spec_of = {
            it.nodeid: frozenset(a for mark in it.iter_markers("spec") for a in mark.args)
            for it in self.items
        }
        # functions that ran while the test modules were imported (configs built at import):
        # their mutants run in a fresh interpreter, where the import sees the mutant
        self.import_hits = {self.statements.function_of[n] for n in self.hits}
        self.import_hits |= {
            f"{fs.file}::{fs.qualname}" for fs in self.fns.values() if fs.at_import
        }
        self.hits.clear()
        self.rec.hits = self.hits

    def pytest_runtestloop(self, session: Any) -> bool:
        if session.testsfailed:
            self.problem = "the kill set does not collect"
            return True
        session.config.pluginmanager.register(self.rec, "steploop-mutation-recorder")
        with tempfile.TemporaryDirectory(prefix="steploop-mutation-") as tmpdir:
            tmp = Path(tmpdir)
            try:
                self.base = self._baseline(tmp)
            except RuntimeError as e:
                self.problem = str(e)
                return True
            print(
                f"baseline: {len(self.base.durations)} tests pass in {self.base.seconds:.1f} s; "
                f"running {len(self.mutants)} mutants on {self.jobs} processes",
                flush=True,
            )
            self.outcomes = self._run_mutants(tmp)
        return True

    # --- baseline ---------------------------------------------------------------------------

    def _baseline(self, tmp: Path) -> Baseline:
        """Run the kill set unmutated, in ``jobs`` shards (whole modules): every test must
        pass; record each test's duration and the functions in scope it executed."""
        t0 = time.perf_counter()
        modules = sorted({it.nodeid.split("::")[0] for it in self.items})
        shares = [
            [it for it in self.items if modules.index(it.nodeid.split("::")[0]) % self.jobs == k]
            for k in range(self.jobs)
        ]

        def job(share: list[Any]) -> Callable[[], dict[str, Any]]:
            def run() -> dict[str, Any]:
                self.rec.record_hits = True
                _run_items(share, self.rec, stop_first=False)
                return {
                    "durations": self.rec.durations,
                    "skipped": sorted(self.rec.skipped),
                    "failed": self.rec.failed,
                    "hits": self.rec.hits_per_test(),
                }

            return run

        pids = {_fork(job(share), tmp / f"baseline-{k}.json"): k for k, share in enumerate(shares)}
        base = Baseline()
        problems: list[str] = []
        for pid, k in pids.items():
            os.waitpid(pid, 0)
            out = tmp / f"baseline-{k}.json"
            if not out.exists():
                problems.append(f"baseline shard {k} died")
                continue
            res = json.loads(out.read_text(encoding="utf-8"))
            if "error" in res:
                problems.append(res["error"])
                continue
            if res["failed"]:
                problems.append("failing: " + ", ".join(res["failed"][:5]))
            skipped = set(res["skipped"])
            for nodeid, secs in res["durations"].items():
                if nodeid not in skipped:
                    base.durations[nodeid] = secs
            for nodeid, names in res["hits"].items():
                if nodeid not in skipped:
                    for name in names:
                        base.hits.setdefault(name, set()).add(nodeid)
        if problems:
            raise RuntimeError("the unmutated kill set does not pass: " + "; ".join(problems))
        base.seconds = time.perf_counter() - t0
        return base

    # --- mutants ----------------------------------------------------------------------------

    def _tasks(self) -> tuple[list[_Task], dict[int, Outcome]]:
        tasks: list[_Task] = []
        settled: dict[int, Outcome] = {}
        for i, m in enumerate(self.mutants):
            fs = self.fns[(m.file, m.function)]
            name = f"{m.file}::{m.function}"
            try:
                mutated = compile_function(fs, mutated_function(m, fs))
            except (LookupError, SyntaxError, ValueError, TypeError) as e:
                settled[i] = Outcome(m, "error", f"cannot build the mutant: {e}")
                continue
            if mutated == compile_function(fs, fs.node):
                settled[i] = Outcome(m, "identical", "compiles to the original code")
                continue
            fresh = name in self.import_hits
            tests = self.base.hits.get(self.statements.of_mutant(m, fs), set())
            if fresh:  # import-time use: every test may see it
                tests = set(self.base.durations)
            if not tests:
                settled[i] = Outcome(
                    m, "uncovered", "no test in the kill set executes its statement"
                )
                continue
            order = sorted(tests, key=lambda t: (self.base.durations.get(t, 0.0), t))
            cost = sum(self.base.durations.get(t, 0.0) for t in order)
            # generous: on a shared machine a slow run is not an endless one
            budget = min(self.timeout, 60.0 + 5.0 * cost)
            tasks.append(_Task(i, m, order, budget, fresh))
        return tasks, settled

    def _run_mutants(self, tmp: Path) -> list[Outcome]:
        tasks, outcomes = self._tasks()
        total = len(self.mutants)
        done = 0
        for i in sorted(outcomes):
            done += 1
            self.progress(outcomes[i], done, total)
        running: dict[int, tuple[_Task, float, Path, subprocess.Popen[bytes] | None]] = {}
        while tasks or running:
            while tasks and len(running) < self.jobs:
                task = tasks.pop(0)
                task.order = self._killers_first(task)
                out = tmp / f"mutant-{task.index}.json"
                if task.fresh:
                    fs = self.fns[(task.mutant.file, task.mutant.function)]
                    fresh = _start_fresh(task, fs, tmp, out)
                    running[fresh.pid] = (task, time.perf_counter(), out, fresh)
                else:
                    pid = _fork(self._mutant_job(task), out)
                    running[pid] = (task, time.perf_counter(), out, None)
            time.sleep(0.005)
            for pid, (task, started, out, proc) in list(running.items()):
                elapsed = time.perf_counter() - started
                status = 0
                if proc is None:
                    finished, status = os.waitpid(pid, os.WNOHANG)
                    over = finished == 0
                else:
                    over = proc.poll() is None
                if over:
                    if elapsed <= task.budget:
                        continue
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except ProcessLookupError:  # pragma: no cover - it just ended
                        pass
                    if proc is None:
                        os.waitpid(pid, 0)
                    else:
                        proc.wait()
                    outcome = Outcome(task.mutant, "timeout", f"over {task.budget:.0f} s", elapsed)
                else:
                    outcome = _read_outcome(task.mutant, out, status, elapsed)
                outcome.fresh = task.fresh
                if proc is not None:
                    shutil.rmtree(out.parent / f"fresh-{task.index}", ignore_errors=True)
                del running[pid]
                outcomes[task.index] = outcome
                if outcome.status == "killed" and outcome.detail in self.base.durations:
                    self._credit(task.mutant, outcome.detail)
                done += 1
                self.progress(outcome, done, total)
        return [outcomes[i] for i in range(len(self.mutants))]

    def _killers_first(self, task: _Task) -> list[str]:
        """The tests that killed this function's mutants (latest first), then the ones that
        killed most mutants anywhere, then the rest, fastest first: a mutant usually dies in
        the test that killed its neighbour."""
        name = f"{task.mutant.file}::{task.mutant.function}"
        covering = set(task.order)
        first = [t for t in self.killers.get(name, []) if t in covering]
        rules = self.fns[(task.mutant.file, task.mutant.function)].rules
        if rules:  # the tests that pin a rule the function cites
            first += [
                t for t in task.order if self.spec_of.get(t, frozenset()) & rules and t not in first
            ]
        ranked = sorted(self.kills, key=lambda t: (-self.kills[t], t))
        first += [t for t in ranked[:40] if t in covering and t not in first]
        chosen = set(first)
        return first + [t for t in task.order if t not in chosen]

    def _credit(self, m: Mutant, test: str) -> None:
        name = f"{m.file}::{m.function}"
        lst = self.killers.setdefault(name, [])
        if test in lst:
            lst.remove(test)
        lst.insert(0, test)
        self.kills[test] = self.kills.get(test, 0) + 1

    def _mutant_job(self, task: _Task) -> Callable[[], dict[str, Any]]:
        m = task.mutant
        fs = self.fns[(m.file, m.function)]
        wanted = set(task.order)
        pos = {nodeid: k for k, nodeid in enumerate(task.order)}
        items = sorted(
            (it for it in self.items if it.nodeid in wanted), key=lambda it: pos[it.nodeid]
        )

        def run() -> dict[str, Any]:
            for name, code in self.original.items():  # the children run uninstrumented
                for f in self.live[name]:
                    f.__code__ = code
            code = compile_function(fs, mutated_function(m, fs))
            for f in self.live[f"{m.file}::{m.function}"]:
                f.__code__ = code
            _run_items(items, self.rec, stop_first=True)
            return {"failed": self.rec.failed[:1], "ran": self.rec.ran}

        return run


def _read_outcome(m: Mutant, out: Path, status: int, elapsed: float) -> Outcome:
    if not out.exists():
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        return Outcome(m, "killed", f"the test process died (signal {sig})", elapsed)
    res = json.loads(out.read_text(encoding="utf-8"))
    out.unlink()
    if "error" in res:
        return Outcome(m, "killed", f"the test run raised {res['error']}", elapsed)
    if res["failed"]:
        return Outcome(m, "killed", res["failed"][0], elapsed, res["ran"])
    if not res["ran"]:
        return Outcome(m, "uncovered", "no test ran", elapsed)
    return Outcome(m, "survived", "", elapsed, res["ran"])


# --- fresh interpreters (functions that run while tests import) --------------------------------

_COPIED = ("steploop", "tests", "specs", "benchmarks", "pyproject.toml", "README.md", "docs", "examples")


def _mutated_module(m: Mutant, fs: FunctionSource) -> str:
    """The whole module's source with the mutant applied (via the AST: comments are lost,
    behaviour is not)."""
    tree = ast.parse((ROOT / fs.file).read_text(encoding="utf-8"))
    new = mutated_function(m, fs)
    for node in tree.body:
        holder: list[ast.stmt] | None = None
        if (
            isinstance(node, ast.FunctionDef)
            and fs.class_name is None
            and node.name == fs.node.name
        ):
            holder = tree.body
        elif isinstance(node, ast.ClassDef) and node.name == fs.class_name:
            holder = node.body
        if holder is None:
            continue
        for k, sub in enumerate(holder):
            if (
                isinstance(sub, ast.FunctionDef)
                and sub.name == fs.node.name
                and sub.lineno == fs.node.lineno
            ):
                holder[k] = new
                return ast.unparse(tree) + "\n"
    raise LookupError(f"{fs.qualname} not found in {fs.file}")  # pragma: no cover


def _start_fresh(task: _Task, fs: FunctionSource, tmp: Path, out: Path) -> subprocess.Popen[bytes]:
    """A copy of the repository with the mutated module, and a new interpreter running the
    task's tests there (stopping at the first failure)."""
    root = tmp / f"fresh-{task.index}"
    root.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".hypothesis")
    for part in _COPIED:
        src = ROOT / part
        if src.is_dir():
            shutil.copytree(src, root / part, ignore=ignore)
        elif src.exists():
            shutil.copy2(src, root / part)
    (root / fs.file).write_text(_mutated_module(task.mutant, fs), encoding="utf-8")
    spec = root / "task.json"
    spec.write_text(json.dumps({"order": task.order, "out": str(out)}), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    code = "import sys; from tests.support.mutation import fresh_main; sys.exit(fresh_main(sys.argv[1]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, str(spec)],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


class _Select:
    def __init__(self, order: list[str]) -> None:
        self.pos = {nodeid: k for k, nodeid in enumerate(order)}

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        _lift_time_ceilings(items)
        items[:] = sorted(
            (it for it in items if it.nodeid in self.pos), key=lambda it: self.pos[it.nodeid]
        )


def fresh_main(spec_path: str) -> int:
    """Entry point of a fresh interpreter: run the listed tests, stop at the first failure."""
    _limit_memory()
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    _load_hypothesis_profile()
    import pytest

    rec = _Recorder(set())
    files = sorted({nodeid.split("::")[0] for nodeid in spec["order"]})
    pytest.main([*files, *PYTEST_ARGS, "-x"], plugins=[_Select(spec["order"]), rec])
    Path(spec["out"]).write_text(
        json.dumps({"failed": rec.failed[:1], "ran": rec.ran}), encoding="utf-8"
    )
    return 0


# --- report -----------------------------------------------------------------------------------


@dataclass
class Summary:
    generated: int
    identical: int
    equivalent: int
    killed: int
    survivors: list[Outcome]
    stale: list[str]  # equivalents listed but not generated, or killed
    guard_generated: int
    guard_equivalent: int
    guard_killed: int
    guard_survivors: list[Outcome]

    @property
    def rate(self) -> float:
        n = self.generated - self.identical - self.equivalent
        return self.killed / n if n else 1.0

    @property
    def guard_rate(self) -> float:
        n = self.guard_generated - self.guard_equivalent
        return self.guard_killed / n if n else 1.0


def summarize(outcomes: Sequence[Outcome], equivalents: dict[str, str], full: bool) -> Summary:
    keys = {o.mutant.key for o in outcomes}
    stale = sorted(k for k in equivalents if full and k not in keys)
    identical = sum(o.status == "identical" for o in outcomes)
    killed = [o for o in outcomes if o.status in ("killed", "timeout")]
    alive = [o for o in outcomes if o.status in ("survived", "uncovered", "error")]
    equivalent = [o for o in alive if o.mutant.key in equivalents]
    stale += [
        f"{o.mutant.key} (listed as equivalent, but killed by {o.detail})"
        for o in killed
        if o.mutant.key in equivalents
    ]
    survivors = [o for o in alive if o.mutant.key not in equivalents]
    guard = [o for o in outcomes if o.mutant.guard and o.status != "identical"]
    equivalent_keys = {o.mutant.key for o in equivalent}
    return Summary(
        generated=len(outcomes),
        identical=identical,
        equivalent=len(equivalent),
        killed=len(killed),
        survivors=survivors,
        stale=stale,
        guard_generated=len(guard),
        guard_equivalent=sum(o.mutant.key in equivalent_keys for o in guard),
        guard_killed=sum(o.status in ("killed", "timeout") for o in guard),
        guard_survivors=[o for o in survivors if o.mutant.guard],
    )


def _as_record(o: Outcome, equivalents: dict[str, str]) -> dict[str, Any]:
    return {
        "key": o.mutant.key,
        "where": o.mutant.where,
        "guard": o.mutant.guard,
        "status": o.status,
        "detail": o.detail,
        "seconds": round(o.seconds, 2),
        "tests_run": o.tests_run,
        "fresh": o.fresh,
        "equivalent": o.mutant.key in equivalents,
    }


def describe(m: Mutant) -> str:
    return f"{m.where:26s} {m.function:28s} [{m.op}] {m.site}  ::  {m.change}"


# --- command line -----------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/mutation.py",
        description="Generate mutants of the reducer's guards and rules and run the tests that can kill each.",
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--full", action="store_true", help="every mutant, in a seeded random order (hours on 2 cores: resume with --resume)")
    mode.add_argument(
        "--sample",
        action="store_true",
        help="the CI sample: PER_GUARD mutants of every guard function, PER_OTHER of every other",
    )
    mode.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--per-guard", type=int, default=2)
    ap.add_argument("--per-other", type=int, default=0)
    ap.add_argument("--seed", default="steploop", help="the sample's seed (default: steploop)")
    ap.add_argument(
        "--only", nargs="+", metavar="TEXT", help="mutants whose key or file:line contains TEXT"
    )
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--timeout", type=float, default=3600.0, help="most seconds for one mutant (default 3600)"
    )
    ap.add_argument("--json", type=Path, help="write every outcome to this file")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the outcomes already in --json and run only the mutants it lacks",
    )
    ap.add_argument(
        "--rerun-survivors",
        action="store_true",
        help="with --resume: run again the mutants recorded as surviving (after new tests)",
    )
    ap.add_argument(
        "--report",
        action="store_true",
        help="summarise the outcomes in --json and run nothing",
    )
    ap.add_argument("--quiet", action="store_true", help="print survivors and the summary only")
    args = ap.parse_args(argv)

    fns = functions_in_scope()
    all_mutants = generate(fns)
    equivalents = load_equivalents()
    if args.list:
        for m in all_mutants:
            mark = " (equivalent)" if m.key in equivalents else ""
            print(f"{'G' if m.guard else ' '} {describe(m)}{mark}")
        guard_fns = sorted({m.function for m in all_mutants if m.guard})
        print(
            f"\n{len(all_mutants)} mutants in {len({(m.file, m.function) for m in all_mutants})} functions; "
            f"{sum(m.guard for m in all_mutants)} in {len(guard_fns)} guard functions; "
            f"{sum(m.key in equivalents for m in all_mutants)} listed as equivalent"
        )
        return 0
    if args.only:
        chosen = [m for m in all_mutants if any(t in m.key or t == m.where for t in args.only)]
    elif args.sample:
        candidates = [m for m in all_mutants if m.key not in equivalents]
        chosen = sample(candidates, args.per_guard, args.per_other, args.seed)
    else:
        # a seeded random order: a run stopped part way (and resumed later) has run a uniform
        # sample of all the mutants, not the first functions of the first file
        chosen = sorted(all_mutants, key=lambda m: _rank(m, args.seed))
    if not chosen:
        print("no mutant matches")
        return 2
    if (args.resume or args.report or args.rerun_survivors) and args.json is None:
        print("mutation: --resume, --rerun-survivors and --report read the outcomes of --json FILE")
        return 2
    if args.rerun_survivors and not args.resume:
        print("mutation: --rerun-survivors goes with --resume")
        return 2

    t0 = time.perf_counter()
    reused: list[Outcome] = []
    if args.json and (args.resume or args.report):
        try:
            recorded = read_records(args.json, {m.key: m for m in chosen})
        except RecordError as e:
            print(f"mutation: {e}")
            return 2
        keep = ("killed", "timeout", "identical") if args.rerun_survivors else None
        reused = [o for o in recorded if keep is None or o.status in keep]
    if args.report:
        if not reused:  # nothing to sum up: no "kill rate 100.0%" of 0 mutants
            missing = not args.json.exists()
            why = "no such file" if missing else "no outcome of these mutants"
            print(f"mutation: --report: {args.json}: {why} (write it with --full --json FILE)")
            return 2
        return _print_summary(reused, equivalents, args, len(chosen), 0.0)
    done_keys = {o.mutant.key for o in reused}
    todo = [m for m in chosen if m.key not in done_keys]

    if args.json:  # the outcomes kept, then one line a mutant as each ends
        args.json.write_text(
            "".join(json.dumps(_as_record(o, equivalents)) + "\n" for o in reused),
            encoding="utf-8",
        )
    if reused:
        print(f"{len(reused)} outcomes kept from {args.json}; {len(todo)} mutants to run")
    if not todo:
        return _print_summary(reused, equivalents, args, len(chosen), time.perf_counter() - t0)

    def progress(o: Outcome, done: int, total: int) -> None:
        if args.json:  # one JSON object a line, written as each mutant ends
            with args.json.open("a", encoding="utf-8") as f:
                f.write(json.dumps(_as_record(o, equivalents)) + "\n")
        if args.quiet and o.status not in ("survived", "uncovered", "error"):
            return
        mark = " (equivalent)" if o.mutant.key in equivalents else ""
        killer = f"  <- {o.detail}" if o.detail and o.status == "killed" and not args.quiet else ""
        print(
            f"[{done}/{total}] {o.status:9s} {o.seconds:5.1f}s {describe(o.mutant)}{mark}{killer}",
            flush=True,
        )

    _prepare_parent()
    import pytest

    orch = Orchestrator(todo, fns, args.jobs, args.timeout, progress)
    pytest.main([*KILL_SET, *PYTEST_ARGS], plugins=[orch])
    if orch.problem is not None:
        print(f"mutation: {orch.problem}")
        return 2
    outcomes = reused + orch.outcomes
    return _print_summary(outcomes, equivalents, args, len(chosen), time.perf_counter() - t0)


class RecordError(Exception):
    """An outcomes file that cannot be read back (one line saying where and why)."""


def read_records(path: Path, mutants: dict[str, Mutant]) -> list[Outcome]:
    """The outcomes recorded in ``path`` (one JSON object a line, as ``--json`` writes them)
    of the mutants in ``mutants``; records of mutants no longer generated (the code changed
    there) are left out, and a later record of a key replaces an earlier one."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as e:
        raise RecordError(f"cannot read {path}: {e}") from None
    found: dict[str, Outcome] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            key, status = rec["key"], rec["status"]
            if not isinstance(key, str) or status not in STATUSES:
                raise ValueError
            outcome = (
                Outcome(
                    mutants[key],
                    status,
                    str(rec.get("detail", "")),
                    float(rec.get("seconds", 0.0)),
                    int(rec.get("tests_run", 0)),
                    bool(rec.get("fresh", False)),
                )
                if key in mutants
                else None
            )
        except (ValueError, KeyError, TypeError):
            raise RecordError(f"{path}, line {n}: not an outcome record of this runner") from None
        if outcome is not None:
            found[key] = outcome
    return list(found.values())


def _print_summary(
    outcomes: Sequence[Outcome],
    equivalents: dict[str, str],
    args: argparse.Namespace,
    chosen: int,
    wall: float,
) -> int:
    complete = len(outcomes) == chosen
    s = summarize(outcomes, equivalents, full=args.full and complete)
    print()
    if not complete:
        print(
            f"{len(outcomes)} of the {chosen} mutants have an outcome (a uniform sample of them "
            "under --full's seeded order); the figures below are of those"
        )
    if s.survivors:
        print(
            f"{len(s.survivors)} unexplained survivors (kill them with a test, or list them with the reason in specs/mutation-equivalents.txt):"
        )
        for o in s.survivors:
            print(
                f"  {'G' if o.mutant.guard else ' '} {describe(o.mutant)}  [{o.status}{': ' + o.detail if o.detail else ''}]"
            )
            print(f"      key: {o.mutant.key}")
    for k in s.stale:
        print(f"  stale equivalent: {k}")
    print(
        f"\nmutants {s.generated}: killed {s.killed}, equivalent {s.equivalent}, identical code {s.identical}, "
        f"survived {len(s.survivors)}; kill rate {s.rate:.1%} of non-equivalent mutants"
    )
    print(
        f"guard functions: {s.guard_generated} mutants, killed {s.guard_killed}, equivalent {s.guard_equivalent}, "
        f"survived {len(s.guard_survivors)}; kill rate {s.guard_rate:.1%}"
    )
    if not args.report:
        print(f"wall time {wall:.0f} s ({args.jobs} processes)")
    if args.sample:
        return 1 if s.guard_survivors else 0
    return 1 if s.survivors or s.stale or not complete else 0
