"""Mutation testing of the reducer and of the safety-critical effects: does the suite have teeth?
(specs/mutation.md)

Generates mutants from operators (comparisons flipped, integer constants moved by one, booleans
negated, and/or operands dropped, keyword arguments removed, statements deleted, conditions
negated, any/all and min/max swapped, elif branches dropped, arguments swapped, return values
replaced by None or the input, break/continue swapped, strings changed, table entries deleted)
over the reducer (the machine, context, the guard parts of config, state, protocol, driver,
transitions, events, graph, digest, texts) and the importer's comparison, the confinement, the
counterfactual replay and the strict trace validator; runs the tests that can kill each one
and lists the survivors with file:line and the mutation. Mutants listed with a reason in
specs/mutation-equivalents.txt are expected to survive. The runner is tests/support/mutation/.

    .venv/bin/python scripts/mutation.py --sample      # the CI run: every guard function sampled
    .venv/bin/python scripts/mutation.py --full --only steploop/reducer/transitions.py --json F
    .venv/bin/python scripts/mutation.py --list        # the mutants, no tests run
    .venv/bin/python scripts/mutation.py --only steploop/reducer/machine/round_end.py:169

Exit status: 0 when nothing unexplained survived (--sample: no guard function's mutant
survived), 1 otherwise, 2 when no mutant matches or --report finds no outcome to sum up.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.mutation import main

if __name__ == "__main__":
    raise SystemExit(main())
