"""Why a turn did not reproduce: the first divergence, classified (specs/import.md §8)."""

from __future__ import annotations

import attrs

from effects.importer.compare import Divergence
from effects.importer.driver import TurnDriver
from effects.importer.segment import Item

__all__ = ["explain"]


def explain(div: Divergence, driver: TurnDriver, items: list[Item]) -> Divergence:
    return attrs.evolve(div, cause="unexplained")
