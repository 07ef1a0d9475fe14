"""Outcomes and what is said of them (specs/mutation.md, "Kill rate"): an outcome per mutant,
the summary and its kill rates (all, guard functions, by file), and the outcomes file that
``--json`` writes and ``--resume`` and ``--report`` read back."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from tests.support.mutation.operators import Mutant

STATUSES: Final = ("killed", "timeout", "survived", "uncovered", "identical", "error")
KILLED: Final = ("killed", "timeout")
ALIVE: Final = ("survived", "uncovered", "error")


@dataclass
class Outcome:
    mutant: Mutant
    status: str  # one of STATUSES
    detail: str = ""  # the killing test, or why
    seconds: float = 0.0
    tests_run: int = 0
    fresh: bool = False  # run in a fresh interpreter (the module's import runs the unit)


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
    killed = [o for o in outcomes if o.status in KILLED]
    alive = [o for o in outcomes if o.status in ALIVE]
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
        guard_killed=sum(o.status in KILLED for o in guard),
        guard_survivors=[o for o in survivors if o.mutant.guard],
    )


@dataclass(frozen=True)
class FileRate:
    file: str
    mutants: int  # not identical
    killed: int
    equivalent: int
    survived: int

    @property
    def rate(self) -> float:
        n = self.mutants - self.equivalent
        return self.killed / n if n else 1.0


def rates_by_file(outcomes: Sequence[Outcome], equivalents: dict[str, str]) -> list[FileRate]:
    """The kill rate of each file's mutants (identical code left out), in file order."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    for o in outcomes:
        if o.status == "identical":
            continue
        c = counts[o.mutant.file]
        c[0] += 1
        if o.status in KILLED:
            c[1] += 1
        elif o.mutant.key in equivalents:
            c[2] += 1
        else:
            c[3] += 1
    return [FileRate(f, *counts[f]) for f in sorted(counts)]


def as_record(o: Outcome, equivalents: dict[str, str]) -> dict[str, Any]:
    """The outcome as one line of ``--json``."""
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


def print_summary(
    outcomes: Sequence[Outcome],
    equivalents: dict[str, str],
    *,
    full: bool,
    chosen: int,
    wall: float | None,
    jobs: int,
    by_file: bool = False,
) -> Summary:
    """Print the survivors, the stale equivalents and the kill rates; return the summary."""
    complete = len(outcomes) == chosen
    s = summarize(outcomes, equivalents, full=full and complete)
    print()
    if not complete:
        print(
            f"{len(outcomes)} of the {chosen} mutants have an outcome (a uniform sample of them "
            "under --full's seeded order); the figures below are of those"
        )
    if s.survivors:
        print(
            f"{len(s.survivors)} unexplained survivors (kill them with a test, or list them "
            "with the reason in specs/mutation-equivalents.txt):"
        )
        for o in s.survivors:
            why = f"{o.status}{': ' + o.detail if o.detail else ''}"
            print(f"  {'G' if o.mutant.guard else ' '} {describe(o.mutant)}  [{why}]")
            print(f"      key: {o.mutant.key}")
    for k in s.stale:
        print(f"  stale equivalent: {k}")
    if by_file:
        print("\nkill rate by file (mutants not identical; killed / non-equivalent):")
        for r in rates_by_file(outcomes, equivalents):
            print(
                f"  {r.file:48s} {r.mutants:5d} mutants, killed {r.killed:5d}, "
                f"equivalent {r.equivalent:3d}, survived {r.survived:3d}: {r.rate:.1%}"
            )
    print(
        f"\nmutants {s.generated}: killed {s.killed}, equivalent {s.equivalent}, "
        f"identical code {s.identical}, survived {len(s.survivors)}; "
        f"kill rate {s.rate:.1%} of non-equivalent mutants"
    )
    print(
        f"guard functions: {s.guard_generated} mutants, killed {s.guard_killed}, "
        f"equivalent {s.guard_equivalent}, survived {len(s.guard_survivors)}; "
        f"kill rate {s.guard_rate:.1%}"
    )
    if wall is not None:
        print(f"wall time {wall:.0f} s ({jobs} processes)")
    return s
