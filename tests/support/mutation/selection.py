"""Which mutants run: the listed equivalent mutants (specs/mutation-equivalents.txt), the CI
sample, and the seeded order of a full run (specs/mutation.md, "The CI run", "The full run")."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from tests.support.mutation.operators import Mutant
from tests.support.mutation.scope import EQUIVALENTS


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


def rank(m: Mutant, seed: str) -> str:
    """The mutant's place in the seeded order (a hash of its key and the seed)."""
    return hashlib.blake2b(f"{seed}|{m.key}".encode(), digest_size=8).hexdigest()


def _spread(group: Sequence[Mutant], want: int, seed: str) -> list[Mutant]:
    """``want`` mutants of ``group`` spread over the operators: round-robin over the
    operators present (in the hash order of their first mutant), each operator's mutants in
    hash order."""
    by_op: dict[str, list[Mutant]] = defaultdict(list)
    for m in sorted(group, key=lambda m: rank(m, seed)):
        by_op[m.op].append(m)
    ops = sorted(by_op, key=lambda op: rank(by_op[op][0], seed))
    chosen: list[Mutant] = []
    while len(chosen) < want and any(by_op.values()):
        for op in ops:
            if by_op[op] and len(chosen) < want:
                chosen.append(by_op[op].pop(0))
    return chosen


def sample(
    mutants: Sequence[Mutant],
    per_guard: int,
    per_other: int,
    seed: str = "steploop",
    per_file: int = 0,
) -> list[Mutant]:
    """A deterministic stratified sample: ``per_guard`` mutants of every guard function and
    ``per_other`` of every other function (or table), spread over the operators; then
    ``per_file`` more of every file in scope from its units that are not guard functions (its
    other functions and its tables), spread over the operators."""
    by_fn: dict[tuple[str, str], list[Mutant]] = defaultdict(list)
    for m in mutants:
        by_fn[(m.file, m.function)].append(m)
    picked: list[Mutant] = []
    for group in by_fn.values():
        picked.extend(_spread(group, per_guard if group[0].guard else per_other, seed))
    if per_file:
        taken = {id(m) for m in picked}
        by_file: dict[str, list[Mutant]] = defaultdict(list)
        for m in mutants:
            if not m.guard and id(m) not in taken:
                by_file[m.file].append(m)
        for group in by_file.values():
            picked.extend(_spread(group, per_file, seed))
    order = {id(m): i for i, m in enumerate(mutants)}
    return sorted(picked, key=lambda m: order[id(m)])
