"""What the runner records and how it runs tests in a forked child (specs/mutation.md, "How a
mutant is run"): the statement numbering and instrumentation that tell which tests executed
the statement a mutant is in, the pytest plugin that records failures, durations and those
hits, and the fork with its silenced output and memory cap."""

from __future__ import annotations

import ast
import copy
import gc
import importlib
import json
import os
import resource
import sys
import types
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.support.mutation.operators import Mutant, Path_, compile_function, is_docstring
from tests.support.mutation.scope import ROOT, FunctionSource

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


def lift_time_ceilings(items: Sequence[Any]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        for name in TIME_CEILINGS:
            if module is not None and hasattr(module, name):
                setattr(module, name, float("inf"))


def load_hypothesis_profile() -> None:
    """Derandomized and without an example database, so every run draws the same examples."""
    from hypothesis import settings

    settings.register_profile("steploop-mutation", database=None, derandomize=True)
    settings.load_profile("steploop-mutation")


def module_name(file: str) -> str:
    """``steploop/reducer/drive.py`` -> ``steploop.reducer.drive``."""
    parts = file.removesuffix(".py").split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def prepare_parent(files: Sequence[str]) -> None:
    """Import what every child needs once, before forking: the modules in scope, the
    interpreter, pytest and hypothesis."""
    os.chdir(ROOT)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    load_hypothesis_profile()
    names = ["pytest", "steploop.reducer", "steploop.reducer.testing", "steploop.effects"]
    for name in (*names, *(module_name(f) for f in files)):
        importlib.import_module(name)


def live_functions(fns: Sequence[FunctionSource]) -> dict[str, list[types.FunctionType]]:
    """``file::qualname`` -> every live function object running that code (a module
    attribute, a method, the function behind a cached property, ...)."""
    wanted: dict[tuple[str, str], str] = {
        (str(ROOT / fs.file), fs.qualname): fs.name for fs in fns if fs.kind == "function"
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
            self.function_of.append(fs.name)
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
                        if not (node is fn and i == 0 and is_docstring(st)):
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


def silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def limit_memory() -> None:
    try:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
    except (ValueError, OSError):  # pragma: no cover - a platform without the limit
        pass


def fork(job: Callable[[], dict[str, Any]], out: Path) -> int:
    """Run ``job`` in a forked child (its own process group, silenced, memory-capped) that
    writes the job's result as JSON to ``out``; returns the child's pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child
        code = 3
        try:
            os.setpgrp()
            silence()
            limit_memory()
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


class Recorder:
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


def run_items(items: Sequence[Any], rec: Recorder, stop_first: bool) -> None:
    """Run pytest items through the full protocol (fixtures, warnings as errors, hypothesis)."""
    for i, item in enumerate(items):
        nextitem = items[i + 1] if i + 1 < len(items) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if stop_first and rec.failed:
            return
