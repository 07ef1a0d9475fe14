"""The command line, ``scripts/mutation.py`` (specs/mutation.md)."""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from pathlib import Path

from tests.support.mutation.operators import OPERATORS, Mutant, generate
from tests.support.mutation.orchestrator import Orchestrator
from tests.support.mutation.recording import PYTEST_ARGS, prepare_parent
from tests.support.mutation.report import (
    ALIVE,
    Outcome,
    RecordError,
    as_record,
    describe,
    print_summary,
    read_records,
)
from tests.support.mutation.scope import functions_in_scope, kill_set
from tests.support.mutation.selection import load_equivalents, rank, sample

PER_GUARD = 2
PER_FILE = 1  # the CI sample's mutants of each file beyond its guard functions


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="scripts/mutation.py",
        description=(
            "Generate mutants of the reducer and of the safety-critical parts of the effects, "
            "and run the tests that can kill each."
        ),
    )
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--full",
        action="store_true",
        help="every mutant, in a seeded random order (days on 2 cores: resume with --resume)",
    )
    mode.add_argument(
        "--sample",
        action="store_true",
        help=(
            "the CI sample: PER_GUARD mutants of every guard function, PER_OTHER of every "
            "other, PER_FILE more of every file"
        ),
    )
    mode.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--per-guard", type=int, default=PER_GUARD)
    ap.add_argument("--per-other", type=int, default=0)
    ap.add_argument("--per-file", type=int, default=PER_FILE)
    ap.add_argument("--seed", default="steploop", help="the sample's seed (default: steploop)")
    ap.add_argument(
        "--only", nargs="+", metavar="TEXT", help="mutants whose key or file:line contains TEXT"
    )
    ap.add_argument(
        "--ops",
        nargs="+",
        choices=OPERATORS,
        metavar="OP",
        help=f"only these operators ({', '.join(OPERATORS)})",
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
    return ap


def list_mutants(mutants: Sequence[Mutant], equivalents: dict[str, str]) -> None:
    for m in mutants:
        mark = " (equivalent)" if m.key in equivalents else ""
        print(f"{'G' if m.guard else ' '} {describe(m)}{mark}")
    units = len({(m.file, m.function) for m in mutants})
    guard_fns = len({(m.file, m.function) for m in mutants if m.guard})
    print(
        f"\n{len(mutants)} mutants in {units} functions and tables of "
        f"{len({m.file for m in mutants})} files; "
        f"{sum(m.guard for m in mutants)} in {guard_fns} guard functions; "
        f"{sum(m.key in equivalents for m in mutants)} listed as equivalent"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    fns = functions_in_scope()
    all_mutants = generate(fns, args.ops or OPERATORS)
    equivalents = load_equivalents()
    if args.list:
        list_mutants(all_mutants, equivalents)
        return 0
    if args.only:
        chosen = [m for m in all_mutants if any(t in m.key or t == m.where for t in args.only)]
    elif args.sample:
        candidates = [m for m in all_mutants if m.key not in equivalents]
        chosen = sample(candidates, args.per_guard, args.per_other, args.seed, args.per_file)
    else:
        # a seeded random order: a run stopped part way (and resumed later) has run a uniform
        # sample of all the mutants, not the first functions of the first file
        chosen = sorted(all_mutants, key=lambda m: rank(m, args.seed))
    if not chosen:
        print("no mutant matches")
        return 2
    if (args.resume or args.report or args.rerun_survivors) and args.json is None:
        print("mutation: --resume, --rerun-survivors and --report read the outcomes of --json FILE")
        return 2
    if args.rerun_survivors and not args.resume:
        print("mutation: --rerun-survivors goes with --resume")
        return 2
    files = sorted({m.file for m in chosen})
    if args.only or args.ops:  # stale entries are looked for among the files run, only
        equivalents_run = {k: v for k, v in equivalents.items() if k.split(" | ")[0] in files}
    else:
        equivalents_run = equivalents

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
            why = "no such file" if not args.json.exists() else "no outcome of these mutants"
            print(f"mutation: --report: {args.json}: {why} (write it with --full --json FILE)")
            return 2
        return finish(reused, equivalents_run, args, len(chosen), None)
    done_keys = {o.mutant.key for o in reused}
    todo = [m for m in chosen if m.key not in done_keys]

    if args.json:  # the outcomes kept, then one line a mutant as each ends
        args.json.write_text(
            "".join(json.dumps(as_record(o, equivalents)) + "\n" for o in reused),
            encoding="utf-8",
        )
    if reused:
        print(f"{len(reused)} outcomes kept from {args.json}; {len(todo)} mutants to run")
    if not todo:
        return finish(reused, equivalents_run, args, len(chosen), time.perf_counter() - t0)

    def progress(o: Outcome, done: int, total: int) -> None:
        if args.json:  # one JSON object a line, written as each mutant ends
            with args.json.open("a", encoding="utf-8") as f:
                f.write(json.dumps(as_record(o, equivalents)) + "\n")
        if args.quiet and o.status not in ALIVE:
            return
        mark = " (equivalent)" if o.mutant.key in equivalents else ""
        killer = f"  <- {o.detail}" if o.detail and o.status == "killed" and not args.quiet else ""
        print(
            f"[{done}/{total}] {o.status:9s} {o.seconds:5.1f}s {describe(o.mutant)}{mark}{killer}",
            flush=True,
        )

    todo_files = sorted({m.file for m in todo})
    prepare_parent(todo_files)
    import pytest

    # only the units with a mutant to run are instrumented: coverage of the others is never
    # read, and instrumenting a hot function (the digest, the events) slows every test down
    mutated = {(m.file, m.function) for m in todo}
    units = [fs for fs in fns if (fs.file, fs.qualname) in mutated]
    orch = Orchestrator(todo, units, args.jobs, args.timeout, progress)
    pytest.main([*kill_set(todo_files), *PYTEST_ARGS], plugins=[orch])
    if orch.problem is not None:
        print(f"mutation: {orch.problem}")
        return 2
    outcomes = reused + orch.outcomes
    return finish(outcomes, equivalents_run, args, len(chosen), time.perf_counter() - t0)


def finish(
    outcomes: Sequence[Outcome],
    equivalents: dict[str, str],
    args: argparse.Namespace,
    chosen: int,
    wall: float | None,
) -> int:
    """Print the summary; the exit status (specs/mutation.md): a sample fails on a guard
    function's survivor, any other run on any survivor, stale entry or missing outcome."""
    s = print_summary(
        outcomes,
        equivalents,
        full=args.full,
        chosen=chosen,
        wall=wall,
        jobs=args.jobs,
        by_file=not args.sample,
    )
    if args.sample:
        others = len(s.survivors) - len(s.guard_survivors)
        if others:
            print(
                f"{others} of the survivors are outside the guard functions: reported, the "
                'sample does not fail on them (specs/mutation.md, "The CI run")'
            )
        return 1 if s.guard_survivors else 0
    complete = len(outcomes) == chosen
    return 1 if s.survivors or s.stale or not complete else 0
