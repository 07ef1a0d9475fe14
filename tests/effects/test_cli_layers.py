"""The command line's modules in order (issue 22): the entry point (steploop.effects.cli) on top,
the command modules under it, the shared helpers (cli_drive, then cli_common) at the bottom; no
import circle among them and no private name (``_name``) imported from another module."""

from __future__ import annotations

import ast
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Top to bottom: a module may import only from rows below its own.
ORDER = (
    ("steploop.effects.cli",),
    ("steploop.effects.trace_cli", "steploop.effects.check_cli", "steploop.effects.temporal.cli", "steploop.effects.importer.cli"),
    ("steploop.effects.show_cli", "steploop.effects.cli_drive"),
    ("steploop.effects.cli_common",),
)
CLI_MODULES = [m for row in ORDER for m in row]


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("steploop")


def test_the_cli_modules_import_only_downwards(graph: grimp.ImportGraph) -> None:
    """No chain of imports (direct or through other modules) runs from a CLI module to one on
    its own row or above: cli.py → temporal/cli.py → trace_cli.py → cli.py is gone."""
    upward = []
    for k, row in enumerate(ORDER):
        for low in row:
            for high in (m for r in ORDER[: k + 1] for m in r if m != low):
                chain = graph.find_shortest_chain(importer=low, imported=high)
                if chain is not None:
                    upward.append(" → ".join(chain))
    assert upward == []


def test_no_cli_module_imports_a_private_name() -> None:
    """`from steploop.x import _name` appears in no CLI module (a public name is made instead)."""
    private = []
    for module in CLI_MODULES:
        path = ROOT / (module.replace(".", "/") + ".py")
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("steploop"):
                private += [
                    f"{module}: from {node.module} import {a.name}"
                    for a in node.names
                    if a.name.startswith("_") and not a.name.startswith("__")
                ]
    assert private == []
