"""Tests added because the mutation check (scripts/mutation.py) found rules nothing pinned."""

from __future__ import annotations

import pytest

from steploop.reducer import default
from steploop.reducer.effects import CancelTools, PersistToolResult, RunStopHooks
from steploop.reducer.events import StopHooksFinished, ToolTraits
from steploop.reducer.messages import Usage
from steploop.reducer.transitions import Completed, TokenBudgetContinuation
from tests.reducer.driver import BASH, SAFE, Driver


@pytest.mark.spec("R-CTX-0", "G14")
def test_declared_limit_above_the_cap_still_budgets_at_50000() -> None:
    """A tool declaring 100,000 chars is budgeted at min(100,000, 50,000): 60,000 chars are replaced."""
    big = ToolTraits(concurrency_safe=True, max_result_chars=100_000)
    d = Driver(default())
    d.tool_use("t1", "WebFetch", big, url="x")
    d.allow("t1")
    fx = d.finish_tool("t1", "x" * 60_000)
    assert PersistToolResult(tool_use_id="t1", content="x" * 60_000) in fx
    slot = d.state.round.slots[0]
    assert slot.result is not None and len(slot.result.content) < 3_000


@pytest.mark.spec("R-TOOL-7")
def test_successful_sibling_canceller_cancels_nothing() -> None:
    """Only an *error* of a sibling-cancelling tool cancels its siblings."""
    d = Driver(default())
    d.tool_use(
        "t1",
        "Bash",
        ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True),
        command="ls",
    )
    d.allow("t1")
    d.tool_use("t2", "Read", SAFE, file_path="a")
    d.allow("t2")
    fx = d.finish_tool("t1", "a.py")
    assert not [f for f in fx if isinstance(f, CancelTools)]
    assert d.state.round.sibling_error is None
    assert d.state.round.slots[1].status == "running"
    assert BASH.cancels_siblings_on_error


def _budget_round(d: Driver, out: int) -> None:
    d.text("work")
    d.end("end_turn", Usage(input_tokens=1_000, output_tokens=out))
    assert any(isinstance(f, RunStopHooks) for f in d.last)
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id))


@pytest.mark.spec("C-BUDGET-1")
def test_budget_stops_at_90_percent() -> None:
    """At 95% of the budget the turn completes instead of continuing."""
    d = Driver(default(), token_budget=10_000)
    _budget_round(d, 9_500)
    assert d.transition == Completed()


@pytest.mark.spec("C-BUDGET-1")
def test_budget_continues_just_below_90_percent() -> None:
    """At 89% of the budget the turn continues."""
    d = Driver(default(), token_budget=10_000)
    _budget_round(d, 8_900)
    assert d.transition == TokenBudgetContinuation()


@pytest.mark.spec("C-BUDGET-1")
def test_budget_stops_on_diminishing_returns() -> None:
    """After 3 continuations, two deltas under 500 tokens stop the turn well below 90%."""
    d = Driver(default(), token_budget=100_000)
    for out in (10_000, 10_000, 10_000):
        _budget_round(d, out)
        assert d.transition == TokenBudgetContinuation()
    _budget_round(d, 100)  # delta 100, but the last delta was 10,000: not yet diminishing
    assert d.transition == TokenBudgetContinuation()
    _budget_round(d, 100)  # two small deltas in a row after 3+ continuations
    assert d.transition == Completed()
    assert d.state.turn_output_tokens == 30_200


@pytest.mark.spec("R-SESSION-1", "R-RETRY-2")
def test_next_turn_uses_its_own_config_model_unless_on_fallback() -> None:
    """A session carries the fallback model, not a model the new config replaced."""
    from steploop.reducer import Request, start

    d = Driver(default(model="model-a"))
    d.reply("hi")
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id))
    session = d.state.session()
    s, _ = start(Request(prompt="again"), default(model="model-b"), session)
    assert s.model == "model-b"
    assert session.model is None  # no fallback happened: nothing sticky
