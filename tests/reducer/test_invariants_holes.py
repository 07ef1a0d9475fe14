"""INV-14..INV-16 (specs/invariants.md): the invariants added so the explorer catches the orphan,
id and stop-hook-cap holes of issue 12 on its own. Each fires on a real transition made wrong,
stays quiet on the real one, and holds (exercised) on the CI-bound exploration.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import Gates, LoopConfig, default
from steploop.reducer.effects import Emit
from steploop.reducer.events import Event, ModelCallFailed, StopHooksFinished, ToolFinished
from steploop.reducer.explore import (
    FinalResponseCommitted,
    Invariant,
    MessageIdsFromTheCounter,
    Observation,
    ResultsNeverReplaced,
    catalogue,
)
from steploop.reducer.machine import advance
from steploop.reducer.messages import SystemMessage, TextBlock, ToolResultBlock, Usage, UserMessage
from steploop.reducer.state import Request
from steploop.reducer.transitions import StopHookPrevented
from tests.reducer.driver import SAFE, Driver
from tests.reducer.test_explore import ci_report


def take(d: Driver, event: Event) -> Observation:
    """Feed ``event`` through advance() and return the real observation of the step."""
    before = d.state
    d.state, fx, passed = advance(before, event, d.cfg)
    d.effects.extend(fx)
    return Observation(d.cfg, before, event, fx, d.state, passed)


def check(inv: Invariant, o: Observation) -> tuple[bool, str | None]:
    _, ex, bad = inv.check(inv.initial(o.config, Request(prompt="go"), None), o)
    return ex, bad


def holds_on_the_real_machine(inv_id: str) -> None:
    rep, _ = ci_report()
    r = rep.result(inv_id)
    assert r.violations == 0 and r.exercised > 0 and r.status == "held", r


def _with_emitted(o: Observation, effects: tuple[Any, ...]) -> Observation:
    return Observation(o.config, o.state, o.event, effects, o.next, o.transitions)


# --- INV-14 ------------------------------------------------------------------------------------


def _orphan_repair() -> Observation:
    """t2 finished ("real b") behind the running t1, then the call fails: model_error."""
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.tool_use("t2", "Read", SAFE, file_path="b")
    d.allow("t2")
    d.finish_tool("t2", "real b")
    return take(d, ModelCallFailed(call_id=d.call_id, kind="unknown", message="boom"))


@pytest.mark.spec("INV-14")
def test_inv14_fires_when_a_finished_result_is_replaced() -> None:
    """The repair emitting the error text for a call that had finished breaks INV-14."""
    o = _orphan_repair()
    assert check(ResultsNeverReplaced(), o) == (True, None)
    forged = tuple(
        Emit(item=attrs.evolve(e.item, content=(ToolResultBlock(tool_use_id="t2", content="boom", is_error=True),)))
        if isinstance(e, Emit) and isinstance(e.item, UserMessage) and e.item.content[0] == ToolResultBlock(tool_use_id="t2", content="real b")
        else e
        for e in o.effects
    )
    assert forged != o.effects
    ex, bad = check(ResultsNeverReplaced(), _with_emitted(o, forged))
    assert ex and bad == "the finished result of t2 was replaced by 'boom'"


@pytest.mark.spec("INV-14")
def test_inv14_fires_when_a_result_is_emitted_again() -> None:
    """Emitting a result whose slot already went out (a fallback re-emitting it) breaks INV-14."""
    d = Driver(default())
    d.tool_use("t1", "Read", SAFE, file_path="a")
    d.allow("t1")
    d.finish_tool("t1", "real a")  # emitted: the slot remembers its message
    d.tool_use("t2", "Read", SAFE, file_path="b")
    d.allow("t2")
    o = take(d, ModelCallFailed(call_id=d.call_id, kind="unknown", message="boom"))
    assert check(ResultsNeverReplaced(), o)[1] is None
    assert o.state is not None
    sent = o.state.round.slots[0].message
    assert sent is not None
    _, bad = check(ResultsNeverReplaced(), _with_emitted(o, (Emit(item=sent), *o.effects)))
    assert bad == "the result of t1 was emitted already and is emitted again"


@pytest.mark.spec("INV-14")
def test_inv14_holds_on_the_real_machine() -> None:
    """The CI-bound exploration never replaces or re-emits a result, and puts INV-14 to the test."""
    holds_on_the_real_machine("INV-14")


# --- INV-15 ------------------------------------------------------------------------------------


def _snip_step() -> Observation:
    """Six tool rounds in a 50,000-token window: the round after the sixth snips."""
    d = Driver(default(context_window=50_000, gates=Gates(context_collapse=False, auto_compact=False)))
    for i in range(1, 7):
        tid = f"t{i}"
        d.tool_use(tid, "Read", SAFE, file_path="f")
        d.allow(tid)
        d.end("tool_use", Usage(input_tokens=21_500 if i == 6 else 1_000, output_tokens=0))
        if i < 6:
            d.finish_tool(tid, "x" * 8_000)
    return take(d, ToolFinished(generation=d.generation, tool_use_id="t6", content="x" * 8_000))


@pytest.mark.spec("INV-15", "R-ID-1")
def test_inv15_fires_on_an_id_ahead_of_the_counter() -> None:
    """A snip boundary whose id the counter did not take breaks INV-15."""
    o = _snip_step()
    assert any(isinstance(m, SystemMessage) and m.subtype == "snip_boundary" for m in o.emitted)
    assert check(MessageIdsFromTheCounter(), o) == (True, None)
    behind = attrs.evolve(o.next, ids=attrs.evolve(o.next.ids, msg=o.next.ids.msg - 1))
    ex, bad = check(MessageIdsFromTheCounter(), Observation(o.config, o.state, o.event, o.effects, behind, o.transitions))
    assert ex and bad is not None and "ahead of the counter" in bad


@pytest.mark.spec("INV-15", "R-ID-1")
def test_inv15_fires_on_two_messages_with_one_id() -> None:
    """Two different messages of one step with the same id break INV-15."""
    o = _snip_step()
    first = next(m for m in o.emitted if isinstance(m, SystemMessage))
    twin = UserMessage(id=first.id, content=(TextBlock(text="another"),))
    _, bad = check(MessageIdsFromTheCounter(), _with_emitted(o, (*o.effects, Emit(item=twin))))
    assert bad == f"two messages with id {first.id} in one step"


@pytest.mark.spec("INV-15")
def test_inv15_holds_on_the_real_machine() -> None:
    """The CI-bound exploration gives every message id from the counter, once."""
    holds_on_the_real_machine("INV-15")


# --- INV-16 ------------------------------------------------------------------------------------


def _cap_step(cfg: LoopConfig) -> Observation:
    d = Driver(cfg)
    d.reply("first")
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("no",)))
    d.reply("final answer")
    return take(d, StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("no",)))


@pytest.mark.spec("INV-16", "G11")
def test_inv16_fires_when_the_capped_response_is_not_stored() -> None:
    """A turn the stop-hook cap ends without storing its final response breaks INV-16."""
    o = _cap_step(default(stop_hook_block_cap=1))
    assert o.terminal == StopHookPrevented()
    assert check(FinalResponseCommitted(), o) == (True, None)
    assert o.state is not None
    lost = attrs.evolve(o.next, conversation=o.state.conversation)
    ex, bad = check(FinalResponseCommitted(), Observation(o.config, o.state, o.event, o.effects, lost, o.transitions))
    block = o.state.round.blocks[0].id
    assert ex and bad == f"the turn ended (stop_hook_prevented) without storing {block}"


@pytest.mark.spec("INV-16")
def test_inv16_holds_on_the_real_machine() -> None:
    """Every turn the CI-bound exploration ends keeps its final response."""
    holds_on_the_real_machine("INV-16")


@pytest.mark.spec("INV-14", "INV-15", "INV-16")
def test_the_new_invariants_are_in_the_catalogue() -> None:
    """INV-14..16 are checked by every exploration and by the Hypothesis kit."""
    ids = [inv.id for inv in catalogue()]
    assert ids[13:16] == ["INV-14", "INV-15", "INV-16"]
