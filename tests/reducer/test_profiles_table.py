"""specs/profiles.md is the generated profile table, in sync with the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from steploop.reducer.config import profiles_markdown

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spec("P-DEFAULT-1", "P-CC-1", "P-FULL-1")
def test_profiles_table_matches_code() -> None:
    """Regenerate with: python -c 'from steploop.reducer.config import profiles_markdown as m; print(m(), end="")' > specs/profiles.md"""
    assert (ROOT / "specs" / "profiles.md").read_text(encoding="utf-8") == profiles_markdown()
