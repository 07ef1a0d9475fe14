"""The test helper ``tests.reducer.driver.Driver``: it steps through ``advance()`` (keeping the
transitions) and holds the machine to the world protocol (W-PROTO-5) on every event it feeds."""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import default, machine
from steploop.reducer.effects import Emit
from steploop.reducer.events import ModelCallFailed, ToolFinished
from steploop.reducer.messages import SystemMessage
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import NextTurn
from tests.reducer.driver import SAFE, Driver


def _discarded_attempt() -> tuple[Driver, int]:
    """A tool running, then a 529 that discards the attempt (its CancelTools withdraws the run)."""
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE)
    d.allow("t1")
    gen = d.generation
    d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert ("start_tool", gen, "t1") in d.ledger.withdrawn
    return d, gen


@pytest.mark.spec("W-PROTO-5", "R-TOOL-8")
def test_a_late_answer_is_fed_ignored_and_listed() -> None:
    d, gen = _discarded_attempt()
    state = d.state
    assert d.feed(ToolFinished(generation=gen, tool_use_id="t1", content="x")) == ()
    assert d.state == state
    ((event, problem),) = d.late
    assert isinstance(event, ToolFinished) and "withdrawn" in problem


@pytest.mark.spec("W-PROTO-5")
def test_a_machine_that_acts_on_a_late_answer_fails_the_test_that_fed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = machine.TABLE["waiting_retry"][ToolFinished]

    def acts(s: LoopState, e: ToolFinished, cfg: Any, fx: Any) -> LoopState:
        fx.append(Emit(item=SystemMessage(id="x", subtype="oops", text="acted on it")))
        return real(s, e, cfg, fx)

    d, gen = _discarded_attempt()
    monkeypatch.setitem(machine.TABLE["waiting_retry"], ToolFinished, acts)
    with pytest.raises(AssertionError, match="the machine acted on ToolFinished, which answers"):
        d.feed(ToolFinished(generation=gen, tool_use_id="t1", content="x"))


@pytest.mark.spec("W-PROTO-5")
def test_a_refused_event_is_not_delivered_and_transitions_are_kept() -> None:
    from steploop.reducer.errors import IllegalEvent

    d = Driver(default())
    d.tool_use("t1", "Read", SAFE)
    d.allow("t1")
    with pytest.raises(IllegalEvent):
        d.feed(ToolFinished(generation=d.generation + 7, tool_use_id="t1", content="x"))
    d.end("tool_use")
    d.finish_tool("t1", "file text")  # still open: the refused event delivered nothing
    assert d.late == []
    assert [type(t) for t in d.transitions] == [NextTurn]
