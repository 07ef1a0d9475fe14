"""Mutants that run in a fresh interpreter (specs/mutation.md, "How a mutant is run", item 4):
a module-level table, or a function the module's import or the test modules' imports call.
A swapped code object would not reach values built before the fork, so a new interpreter
imports the mutated module instead: an import hook hands it the module's source with the
mutant applied (nothing is copied; every other module comes from the repository), and it runs
the mutant's tests, stopping at the first failure.

This module imports nothing of steploop: the hook must be in place before the first import.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.support.mutation.recording import (
    PYTEST_ARGS,
    Recorder,
    lift_time_ceilings,
    limit_memory,
    load_hypothesis_profile,
    module_name,
)
from tests.support.mutation.scope import ROOT


class MutatedLoader(importlib.machinery.SourceFileLoader):
    """Loads one module from the given source instead of its file (same name, same path)."""

    def __init__(self, fullname: str, path: str, source: str) -> None:
        super().__init__(fullname, path)
        self.source = source

    def get_source(self, fullname: str) -> str:
        return self.source

    def get_code(self, fullname: str) -> types.CodeType:
        return compile(self.source, self.path, "exec", dont_inherit=True)


class MutatedFinder(importlib.abc.MetaPathFinder):
    """Finds the mutated module first; every other module as usual."""

    def __init__(self, fullname: str, path: str, source: str) -> None:
        self.fullname, self.path, self.source = fullname, path, source

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.fullname:
            return None
        loader = MutatedLoader(fullname, self.path, self.source)
        return importlib.util.spec_from_file_location(fullname, self.path, loader=loader)


class Select:
    """Runs only the listed tests, in the listed order."""

    def __init__(self, order: list[str]) -> None:
        self.pos = {nodeid: k for k, nodeid in enumerate(order)}

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        lift_time_ceilings(items)
        items[:] = sorted(
            (it for it in items if it.nodeid in self.pos), key=lambda it: self.pos[it.nodeid]
        )


# Tests a fresh interpreter runs first, collecting only their modules: the likely killers lead
# the order, so most mutants die there and the rest of the kill set is never collected.
FIRST_STAGE = 8


def fresh_main(spec_path: str) -> int:
    """Entry point of a fresh interpreter: import the mutated module through the hook, run
    the listed tests in two stages (the first few, then the rest), stop at the first failure."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    source = Path(spec["source"]).read_text(encoding="utf-8")
    sys.meta_path.insert(0, MutatedFinder(spec["module"], spec["path"], source))
    limit_memory()
    load_hypothesis_profile()
    import pytest

    rec = Recorder(set())
    order: list[str] = spec["order"]
    for stage in (order[:FIRST_STAGE], order[FIRST_STAGE:]):
        if not stage or rec.failed:
            continue
        files = sorted({nodeid.split("::")[0] for nodeid in stage})
        pytest.main([*files, *PYTEST_ARGS, "-x"], plugins=[Select(stage), rec])
    Path(spec["out"]).write_text(
        json.dumps({"failed": rec.failed[:1], "ran": rec.ran}), encoding="utf-8"
    )
    return 0


def start_fresh(
    index: int, file: str, source: str, order: list[str], tmp: Path, out: Path
) -> subprocess.Popen[bytes]:
    """A new interpreter, in the repository, running ``order`` (stopping at the first failure)
    with ``file``'s module imported from ``source``."""
    mutated = tmp / f"fresh-{index}.py"
    mutated.write_text(source, encoding="utf-8")
    spec = tmp / f"fresh-{index}.json"
    spec.write_text(
        json.dumps(
            {
                "order": order,
                "out": str(out),
                "module": module_name(file),
                "path": str(ROOT / file),
                "source": str(mutated),
            }
        ),
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    code = (
        "import sys; from tests.support.mutation.fresh import fresh_main; "
        "sys.exit(fresh_main(sys.argv[1]))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code, str(spec)],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
