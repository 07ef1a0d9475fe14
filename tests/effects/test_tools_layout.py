"""The tool package's layout rules (RULES: no source file over 800 lines, no private name
imported across modules): builtin.py was 847 lines and is split by responsibility."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import steploop.effects.tools as tools_package

PACKAGE = Path(tools_package.__file__).resolve().parent
MODULES = sorted(PACKAGE.glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_tool_module_is_over_800_lines(path: Path) -> None:
    """Each module of steploop/effects/tools/ has at most 800 lines."""
    assert len(path.read_text().splitlines()) <= 800


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_no_private_name_is_imported_across_modules(path: Path) -> None:
    """No module of steploop/effects/tools/ imports a ``_private`` name of another module."""
    tree = ast.parse(path.read_text())
    private = [
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("steploop")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not private, private
