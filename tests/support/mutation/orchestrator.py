"""The host pytest session's plugin that runs the baseline and every mutant in forked
children (specs/mutation.md, "How a mutant is run")."""

from __future__ import annotations

import builtins
import json
import os
import signal
import subprocess
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.mutation.fresh import start_fresh
from tests.support.mutation.operators import (
    Mutant,
    compile_function,
    mutated_function,
    mutated_module,
)
from tests.support.mutation.recording import (
    HIT,
    Recorder,
    Statements,
    fork,
    lift_time_ceilings,
    live_functions,
    run_items,
)
from tests.support.mutation.report import Outcome
from tests.support.mutation.scope import FunctionSource, in_kill_set


@dataclass
class Baseline:
    durations: dict[str, float] = field(default_factory=dict)  # nodeid -> seconds
    hits: dict[int, set[str]] = field(default_factory=dict)  # statement id -> nodeids
    seconds: float = 0.0


@dataclass
class Task:
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
        self.killers: dict[str, list[str]] = {}  # unit -> tests that killed its mutants
        self.kills: dict[str, int] = {}  # test -> mutants it killed
        self.hits: set[int] = set()
        self.rec = Recorder(self.hits)
        self.statements = Statements()
        self.items: list[Any] = []
        self.spec_of: dict[str, frozenset[str]] = {}
        self.import_hits: set[str] = set()
        self.base = Baseline()
        self.outcomes: list[Outcome] = []
        self.problem: str | None = None
        builtins.__dict__[HIT] = self.hits.add
        self.live = live_functions(fns)
        self.original: dict[str, types.CodeType] = {}
        for fs in fns:
            if fs.kind != "function":
                continue
            self.original[fs.name] = self.live[fs.name][0].__code__
            code = self.statements.instrumented(fs)
            for f in self.live[fs.name]:
                f.__code__ = code

    # --- pytest hooks ---------------------------------------------------------------------

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        lift_time_ceilings(items)

    def pytest_collection_finish(self, session: Any) -> None:
        self.items = list(session.items)
        self.spec_of = {
            it.nodeid: frozenset(a for mark in it.iter_markers("spec") for a in mark.args)
            for it in self.items
        }
        # functions that ran while the test modules were imported (configs built at import):
        # their mutants run in a fresh interpreter, where the import sees the mutant
        self.import_hits = {self.statements.function_of[n] for n in self.hits}
        self.import_hits |= {fs.name for fs in self.fns.values() if fs.fresh}
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
                run_items(share, self.rec, stop_first=False)
                return {
                    "durations": self.rec.durations,
                    "skipped": sorted(self.rec.skipped),
                    "failed": self.rec.failed,
                    "hits": self.rec.hits_per_test(),
                }

            return run

        pids = {fork(job(share), tmp / f"baseline-{k}.json"): k for k, share in enumerate(shares)}
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

    def _tasks(self) -> tuple[list[Task], dict[int, Outcome]]:
        tasks: list[Task] = []
        settled: dict[int, Outcome] = {}
        for i, m in enumerate(self.mutants):
            fs = self.fns[(m.file, m.function)]
            try:
                mutated = compile_function(fs, mutated_function(m, fs))
            except (LookupError, SyntaxError, ValueError, TypeError) as e:
                settled[i] = Outcome(m, "error", f"cannot build the mutant: {e}")
                continue
            if mutated == compile_function(fs, fs.node):
                settled[i] = Outcome(m, "identical", "compiles to the original code")
                continue
            fresh = fs.name in self.import_hits
            if fresh:  # import-time use: every test of its kill set may see it
                tests = set(self.base.durations)
            else:
                tests = self.base.hits.get(self.statements.of_mutant(m, fs), set())
            tests = {t for t in tests if in_kill_set(t, m.file)}
            if not tests:
                settled[i] = Outcome(
                    m, "uncovered", "no test in the kill set executes its statement"
                )
                continue
            order = sorted(tests, key=lambda t: (self.base.durations.get(t, 0.0), t))
            cost = sum(self.base.durations.get(t, 0.0) for t in order)
            # generous: on a shared machine a slow run is not an endless one
            budget = min(self.timeout, 60.0 + 5.0 * cost)
            tasks.append(Task(i, m, order, budget, fresh))
        return tasks, settled

    def _start(
        self, task: Task, tmp: Path, out: Path
    ) -> tuple[int, subprocess.Popen[bytes] | None]:
        if task.fresh:
            fs = self.fns[(task.mutant.file, task.mutant.function)]
            source = mutated_module(task.mutant, fs)
            proc = start_fresh(task.index, fs.file, source, task.order, tmp, out)
            return proc.pid, proc
        return fork(self._mutant_job(task), out), None

    def _run_mutants(self, tmp: Path) -> list[Outcome]:
        tasks, outcomes = self._tasks()
        total = len(self.mutants)
        done = 0
        for i in sorted(outcomes):
            done += 1
            self.progress(outcomes[i], done, total)
        running: dict[int, tuple[Task, float, Path, subprocess.Popen[bytes] | None]] = {}
        while tasks or running:
            while tasks and len(running) < self.jobs:
                task = tasks.pop(0)
                task.order = self._killers_first(task)
                out = tmp / f"mutant-{task.index}.json"
                pid, proc = self._start(task, tmp, out)
                running[pid] = (task, time.perf_counter(), out, proc)
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
                    outcome = read_outcome(task.mutant, out, status, elapsed)
                outcome.fresh = task.fresh
                if proc is not None:
                    for leftover in (f"fresh-{task.index}.py", f"fresh-{task.index}.json"):
                        (tmp / leftover).unlink(missing_ok=True)
                del running[pid]
                outcomes[task.index] = outcome
                if outcome.status == "killed" and outcome.detail in self.base.durations:
                    self._credit(task.mutant, outcome.detail)
                done += 1
                self.progress(outcome, done, total)
        return [outcomes[i] for i in range(len(self.mutants))]

    def _killers_first(self, task: Task) -> list[str]:
        """The tests that killed this unit's mutants (latest first), then the ones that
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

    def _mutant_job(self, task: Task) -> Callable[[], dict[str, Any]]:
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
            for f in self.live[fs.name]:
                f.__code__ = code
            run_items(items, self.rec, stop_first=True)
            return {"failed": self.rec.failed[:1], "ran": self.rec.ran}

        return run


def read_outcome(m: Mutant, out: Path, status: int, elapsed: float) -> Outcome:
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
