"""Mutation testing of the reducer and of the safety-critical parts of the effects: generate
mutants from operators, run the tests that can kill each one, list the survivors
(specs/mutation.md explains the method and the figures).

Mutants are generated, not chosen (:mod:`.operators`): every comparison flipped, integer
constant moved by one, boolean negated, operand of ``and``/``or`` dropped, keyword argument
removed, statement deleted, condition negated, ``any``/``all`` and ``min``/``max`` swapped,
``elif`` branch dropped, pair of arguments swapped, return value replaced (``None``, the input
unchanged), ``break``/``continue`` swapped, string constant changed, inside the bodies of the
functions in scope (:mod:`.scope`), and every entry of a module-level table deleted.

Running one mutant costs a fork, not a copy of the repository (:mod:`.orchestrator`): the
parent process imports the modules in scope once; each child swaps the ``__code__`` of the
mutated function (so every reference to it, however imported, runs the mutant), then runs
in-process pytest on the tests of its file's kill set that executed the mutated statement in
the baseline run, likely killers first, stopping at the first failure. A table, or a function
the imports call, is mutated in a fresh interpreter that imports the mutated module
(:mod:`.fresh`).

The modules: :mod:`.scope` (what is mutated, the kill sets), :mod:`.operators` (the mutants),
:mod:`.selection` (equivalents, the sample, the seeded order), :mod:`.recording` (coverage,
the pytest plugin, the fork), :mod:`.orchestrator` (the baseline and the mutants),
:mod:`.fresh`, :mod:`.report` (outcomes, summaries, the outcomes file), :mod:`.cli`. The
command line is ``scripts/mutation.py`` (``--help``).
"""

from __future__ import annotations

from tests.support.mutation import operators, scope
from tests.support.mutation.cli import main
from tests.support.mutation.operators import (
    FIRST_OPERATORS,
    OPERATORS,
    Mutant,
    compile_function,
    generate,
    mutated_function,
    mutated_module,
)
from tests.support.mutation.report import (
    Outcome,
    RecordError,
    as_record,
    rates_by_file,
    read_records,
)
from tests.support.mutation.scope import (
    EFFECTS,
    MACHINE,
    REDUCER,
    ROOT,
    SCOPE,
    FunctionSource,
    functions_in_scope,
    import_time,
    kill_set,
)
from tests.support.mutation.selection import load_equivalents, rank, sample

__all__ = [
    "EFFECTS",
    "FIRST_OPERATORS",
    "MACHINE",
    "OPERATORS",
    "REDUCER",
    "ROOT",
    "SCOPE",
    "FunctionSource",
    "Mutant",
    "Outcome",
    "RecordError",
    "as_record",
    "compile_function",
    "functions_in_scope",
    "generate",
    "import_time",
    "kill_set",
    "load_equivalents",
    "main",
    "mutated_function",
    "mutated_module",
    "operators",
    "rank",
    "rates_by_file",
    "read_records",
    "sample",
    "scope",
]
