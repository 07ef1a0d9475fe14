"""Mutation testing of the reducer and of the safety-critical effects: does the suite have teeth?
(specs/mutation.md)

Generates mutants from operators (comparisons flipped, integer constants moved by one, booleans
negated, and/or operands dropped, keyword arguments removed, statements deleted, conditions
negated, any/all and min/max swapped, elif branches dropped, arguments swapped, return values
replaced by None or the input, break/continue swapped, strings changed, module-level table
entries deleted) over the reducer (the machine, context, the guard parts of config, state,
protocol, driver, transitions, events, graph, digest, texts) and the importer's comparison, the
confinement, the counterfactual replay and the strict trace validator. Each file has its own
kill set (the reducer's tests for the reducer; for each effects file, the test modules that
exercise it); a mutant runs only the tests of its file's kill set that executed its statement
in the baseline, likely killers first, and stops at the first failure. A mutant of a function
runs in a forked child that swaps the function's code; a table's, or a function's that an
import calls, in a fresh interpreter that imports the mutated module through an import hook
(nothing is copied). Survivors are listed with file:line and the mutation; mutants listed
with a reason in specs/mutation-equivalents.txt are expected to survive. The runner is
tests/support/mutation/ (scope, operators, selection, recording, orchestrator, fresh, report,
cli); tests/reducer/test_mutation_runner.py tests it without running a mutant.

    .venv/bin/python scripts/mutation.py --sample --quiet  # the CI run (.ci/run)
    .venv/bin/python scripts/mutation.py --full --only steploop/reducer/transitions.py --json F
    .venv/bin/python scripts/mutation.py --list --ops table  # the mutants, no tests run
    .venv/bin/python scripts/mutation.py --only steploop/reducer/machine/round_end.py:169

--sample takes --per-guard (2) mutants of every guard function, --per-other (0) of every other
unit and --per-file (1) more of every file, spread over the operators, in a seeded order.

Exit status: 0 when nothing unexplained survived (--sample: no guard function's mutant
survived; the other survivors are reported), 1 otherwise, 2 when no mutant matches, the
options do not go together, or --report finds no outcome to sum up.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.mutation import main

if __name__ == "__main__":
    raise SystemExit(main())
