"""Every rule in specs/ (rules, invariants, import, temporal) is named by a test, and every named rule exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RULE = re.compile(r"^### (\S+) ·", re.M)
MARK = re.compile(r"spec\(((?:\s*\"[^\"]+\"\s*,?)+)\)")


SPEC_FILES = ("rules.md", "invariants.md", "import.md", "temporal.md")


def spec_ids() -> set[str]:
    ids: set[str] = set()
    for name in SPEC_FILES:
        ids |= set(RULE.findall((ROOT / "specs" / name).read_text(encoding="utf-8")))
    return ids


def named_ids() -> dict[str, set[str]]:
    named: dict[str, set[str]] = {}
    for path in (ROOT / "tests").rglob("*.py"):
        for m in MARK.finditer(path.read_text(encoding="utf-8")):
            for rid in re.findall(r"\"([^\"]+)\"", m.group(1)):
                named.setdefault(rid, set()).add(path.name)
    return named


def test_rules_are_unique_and_parsed() -> None:
    """specs/rules.md has rule headings and no id appears twice."""
    ids = [i for name in SPEC_FILES for i in RULE.findall((ROOT / "specs" / name).read_text(encoding="utf-8"))]
    assert len(ids) > 50
    assert len(ids) == len(set(ids)), [i for i in ids if ids.count(i) > 1]


def test_every_rule_has_a_test() -> None:
    """A rule no test names is a rule nothing checks."""
    missing = sorted(spec_ids() - set(named_ids()))
    assert not missing, f"rules without a test: {missing}"


def test_every_named_rule_exists() -> None:
    """A test that names a rule that is not in specs/ points at nothing."""
    unknown = {k: v for k, v in named_ids().items() if k not in spec_ids()}
    assert not unknown, f"tests name unknown rules: {unknown}"
