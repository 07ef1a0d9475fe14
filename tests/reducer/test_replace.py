"""The fast evolve of steploop/reducer/_replace.py: same result as attrs.evolve, same errors."""

from __future__ import annotations

import attrs
import pytest

from steploop.reducer import default
from steploop.reducer._replace import evolve
from steploop.reducer.config import Gates
from steploop.reducer.errors import ConfigError
from steploop.reducer.events import ToolTraits
from steploop.reducer.messages import TextBlock, UserMessage
from steploop.reducer.state import Ids, LoopState, Round, Slot
from tests.reducer.driver import Driver


def test_dict_backed_state_records_evolve_like_attrs() -> None:
    """The dict-copy path gives a new, equal-to-attrs.evolve, still frozen instance and
    leaves the original untouched."""
    s = Driver(default()).state
    assert "__dict__" in dir(s) and not hasattr(LoopState, "__slots__")
    t = evolve(s, phase="done", turn_count=7)
    assert t == attrs.evolve(s, phase="done", turn_count=7)
    assert type(t) is LoopState and t is not s
    assert (s.phase, s.turn_count) == ("streaming", 1)
    assert t.round is s.round  # unchanged fields are shared, not copied
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        t.phase = "streaming"  # type: ignore[misc]
    for rec, change in (
        (Round(), {"retry_attempt": 2}),
        (Ids(), {"msg": 5}),
        (Slot(tool_use_id="t", name="n", traits=ToolTraits()), {"status": "done"}),
    ):
        assert evolve(rec, **change) == attrs.evolve(rec, **change)


def test_unknown_field_is_a_type_error() -> None:
    """A misspelt field name raises TypeError on both paths, as attrs.evolve does."""
    with pytest.raises(TypeError, match="LoopState has no field"):
        evolve(Driver(default()).state, phsae="done")
    with pytest.raises(TypeError):
        evolve(UserMessage(id="m", content=(TextBlock(text="x"),)), contnet=())


def test_validated_classes_are_rebuilt_through_init() -> None:
    """A class with validators (Gates) is rebuilt through its __init__, so they still run;
    a dict-backed copy would have skipped them."""
    g = Gates()
    assert evolve(g, auto_compact=False) == attrs.evolve(g, auto_compact=False)
    with pytest.raises(ConfigError, match="auto_compact must be true or false"):
        evolve(g, auto_compact="no")
    m = UserMessage(id="m", content=(TextBlock(text="x"),))  # slotted: the compiled path
    assert evolve(m, id="n") == attrs.evolve(m, id="n")
