"""The invariant catalogue (specs/invariants.md INV-1..INV-17; INV-17 is tested in test_explore_api.py).

For every rule: the check *fires* on a hand-made violating transition (a real state, a fake
``(event, effects, next_state)`` that breaks the rule), stays quiet on the same transition done
right, and *holds* on the real machine (the CI-bound exploration of the default profile, shared
with test_explore.py).
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import LoopConfig, LoopState, default
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    WaitElapsed,
)
from steploop.reducer.explore import (
    AutoCompactBreaker,
    DrainOnce,
    EscalateOnce,
    Invariant,
    MaxTurnsBound,
    MotRecoveryLimit,
    NoHooksAfterApiError,
    NoProgressFreeCycle,
    NothingAfterFinish,
    Observation,
    ReactiveOnce,
    StopHookCap,
    ToolResultPairing,
    TruncatedInputsNeverRun,
    WithheldErrors,
    catalogue,
    explore,
)
from steploop.reducer.explore.cycles import Analysis
from steploop.reducer.explore.state_graph import Graph
from steploop.reducer.machine import MOT_NUDGE, advance
from steploop.reducer.messages import (
    AssistantMessage,
    ErrorInfo,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.state import Request, Session
from steploop.reducer.transitions import (
    CollapseDrainRetry,
    Completed,
    MaxOutputTokensEscalate,
    MaxOutputTokensRecovery,
    MaxTurns,
    NextTurn,
    PromptTooLong,
    StopHookBlocking,
    TokenBudgetContinuation,
)
from tests.reducer.driver import SAFE, UNSAFE, Driver
from tests.reducer.test_explore import ci_report

CFG = default()


# --- helpers ---------------------------------------------------------------------------------


def streaming() -> LoopState:
    """A real state: the first round's model call in flight."""
    return Driver(CFG).state


def obs(
    state: LoopState | None,
    event: Event | None,
    effects: tuple[Any, ...],
    nxt: LoopState,
    cfg: LoopConfig = CFG,
) -> Observation:
    # the transitions the hand-made step took: the new one ``nxt`` holds, then a Finish's
    transitions: list[Any] = []
    before = state.transition if state is not None else None
    if nxt.transition is not None and nxt.transition is not before:
        transitions.append(nxt.transition)
    transitions += [f.terminal for f in effects if isinstance(f, Finish)]
    return Observation(cfg, state, event, effects, nxt, tuple(dict.fromkeys(transitions)))


def continued(state: LoopState, t: Any, **changes: Any) -> LoopState:
    """The same state after a transition ``t`` (a fresh object, as the machine makes)."""
    return attrs.evolve(state, transition=t, **changes)


def api_error(kind: str, text: str = "API Error") -> AssistantMessage:
    return AssistantMessage(
        id="e1",
        response_id="r1",
        model="<synthetic>",
        content=(TextBlock(text=text),),
        api_error=ErrorInfo(kind=kind, message=text),
    )


def holds_on_the_real_machine(inv_id: str) -> None:
    rep, _ = ci_report()
    r = rep.result(inv_id)
    assert r.violations == 0 and r.exercised > 0 and r.status == "held", r


def fresh(inv: Invariant, cfg: LoopConfig = CFG) -> Any:
    return inv.initial(cfg, Request(prompt="go"), None)


# --- INV-1 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-1")
def test_breaker_fires_on_an_auto_compaction_after_three_failures() -> None:
    inv = AutoCompactBreaker()
    s = streaming()
    compacting = attrs.evolve(s, phase="compacting")
    # three failed auto-compactions, as the monitor sees them
    mon = fresh(inv)
    for _ in range(3):
        mon, _, bad = inv.check(mon, obs(compacting, CompactionFailed(compact_id=1), (), s))
        assert bad is None
    assert mon == 3
    again = Compact(compact_id=2, conversation=s.conversation, trigger="auto", pre_tokens=190_000)
    nxt = continued(compacting, NextTurn())
    _, ex, bad = inv.check(mon, obs(s, WaitElapsed(wait_id=1), (again,), nxt))
    assert bad is not None and "after 3 consecutive failures" in bad
    assert ex  # a round began with the breaker tripped and the count over the threshold
    # the same with two failures is fine; a success resets the count
    assert inv.check(2, obs(s, WaitElapsed(wait_id=1), (again,), nxt))[2] is None
    ok = CompactionFinished(compact_id=1, messages=())
    assert inv.check(3, obs(compacting, ok, (), s))[0] == 0


@pytest.mark.spec("INV-1")
def test_breaker_scope_follows_the_config() -> None:
    inv = AutoCompactBreaker()
    carried = Session(autocompact_failures=2)
    assert inv.initial(CFG, Request(prompt="go"), carried) == 2  # session scope (default)
    turn = default(autocompact_breaker_scope="turn")
    assert inv.initial(turn, Request(prompt="go"), carried) == 0
    assert not inv.applies(default(query_source="compact"))  # G8: never auto-compacts


@pytest.mark.spec("INV-1")
def test_breaker_holds() -> None:
    holds_on_the_real_machine("INV-1")


# --- INV-2 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-2")
def test_fourth_nudge_fires() -> None:
    inv = MotRecoveryLimit()
    s = streaming()
    nxt = continued(s, MaxOutputTokensRecovery(attempt=4))
    _, _, bad = inv.check(3, obs(s, WaitElapsed(wait_id=1), (), nxt))
    assert bad is not None and "nudge 4" in bad
    assert inv.check(2, obs(s, WaitElapsed(wait_id=1), (), nxt))[2] is None


@pytest.mark.spec("INV-2")
def test_nudges_are_counted_from_the_conversation_and_reset() -> None:
    """A nudge appended without the Continue (the machine forgot it) still counts."""
    inv = MotRecoveryLimit()
    s = streaming()
    nudge = UserMessage(id="n1", content=(TextBlock(text=MOT_NUDGE),), is_meta=True, origin="nudge")
    nxt = attrs.evolve(s, conversation=s.conversation.append(nudge))
    _, _, bad = inv.check(3, obs(s, WaitElapsed(wait_id=1), (), nxt))
    assert bad is not None
    for reset in (NextTurn(), StopHookBlocking(), TokenBudgetContinuation()):
        assert inv.check(3, obs(s, WaitElapsed(wait_id=1), (), continued(s, reset)))[0] == 0


@pytest.mark.spec("INV-2")
def test_nudges_hold() -> None:
    holds_on_the_real_machine("INV-2")


# --- INV-3 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-3")
def test_second_escalation_fires() -> None:
    inv = EscalateOnce()
    s = streaming()
    nxt = continued(s, MaxOutputTokensEscalate())
    mon, _, bad = inv.check(fresh(inv), obs(s, WaitElapsed(wait_id=1), (), nxt))
    assert bad is None and mon == 1
    _, _, bad = inv.check(
        mon, obs(s, WaitElapsed(wait_id=1), (), continued(s, MaxOutputTokensEscalate()))
    )
    assert bad is not None and "escalation number 2" in bad
    assert not inv.applies(default(max_output_tokens_env_override=20_000))


@pytest.mark.spec("INV-3")
def test_escalation_holds() -> None:
    holds_on_the_real_machine("INV-3")


# --- INV-4 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-4")
def test_second_reactive_compaction_fires_and_stop_hooks_do_not_reset() -> None:
    inv = ReactiveOnce()
    s = streaming()
    reactive = Compact(compact_id=1, conversation=s.conversation, trigger="reactive", pre_tokens=1)
    ptl = ModelCallFailed(call_id=s.round.call_id, kind="prompt_too_long")
    mon, _, bad = inv.check(fresh(inv), obs(s, ptl, (reactive,), s))
    assert bad is None and mon == 1
    # stop_hook_blocking keeps the attempt (G3) ...
    mon, _, _ = inv.check(mon, obs(s, WaitElapsed(wait_id=1), (), continued(s, StopHookBlocking())))
    _, ex, bad = inv.check(mon, obs(s, ptl, (reactive,), s))
    assert bad is not None and ex
    # ... next_turn and token_budget_continuation reset it
    for reset in (NextTurn(), TokenBudgetContinuation()):
        assert inv.check(1, obs(s, WaitElapsed(wait_id=1), (), continued(s, reset)))[0] == 0


@pytest.mark.spec("INV-4")
def test_reactive_once_holds() -> None:
    holds_on_the_real_machine("INV-4")


# --- INV-5 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-5")
def test_drain_twice_in_a_row_fires() -> None:
    inv = DrainOnce()
    s = streaming()
    drain = continued(s, CollapseDrainRetry(committed=1))
    mon, _, bad = inv.check(fresh(inv), obs(s, WaitElapsed(wait_id=1), (), drain))
    assert bad is None and mon is True
    _, _, bad = inv.check(
        mon,
        obs(drain, WaitElapsed(wait_id=1), (), continued(drain, CollapseDrainRetry(committed=1))),
    )
    assert bad is not None
    # another Continue in between makes the next drain fine
    mon, _, _ = inv.check(
        True, obs(s, WaitElapsed(wait_id=1), (), continued(s, MaxOutputTokensRecovery(attempt=1)))
    )
    assert mon is False


@pytest.mark.spec("INV-5")
def test_drain_once_holds() -> None:
    holds_on_the_real_machine("INV-5")


# --- INV-6 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-6")
def test_stop_hooks_after_an_api_error_fire() -> None:
    inv = NoHooksAfterApiError()
    s = streaming()
    err = api_error("auth")
    hooks = RunStopHooks(hooks_id=1, conversation=s.conversation, stop_hook_active=False)
    ev = ModelCallFailed(call_id=s.round.call_id, kind="auth")
    assert inv.check(None, obs(s, ev, (Emit(item=err), hooks), s))[2] is not None
    ends_in_error = RunStopHooks(
        hooks_id=1, conversation=s.conversation.append(err), stop_hook_active=False
    )
    assert "ends in an API-error" in str(inv.check(None, obs(s, ev, (ends_in_error,), s))[2])
    # an emitted API error that does not end the turn
    assert "went on" in str(inv.check(None, obs(s, ev, (Emit(item=err),), s))[2])
    done = attrs.evolve(s, phase="done", transition=Completed())
    _, ex, bad = inv.check(None, obs(s, ev, (Emit(item=err), Finish(terminal=Completed())), done))
    assert bad is None and ex


@pytest.mark.spec("INV-6", "VER-1")
def test_stop_hooks_after_an_api_error_are_no_violation_before_the_guard() -> None:
    """Under a version that ran stop hooks after an API error (VER-1) the invariant does not
    apply: the same step is no violation."""
    from steploop.reducer import claude_code

    inv = NoHooksAfterApiError()
    s = streaming()
    err = api_error("auth")
    hooks = RunStopHooks(hooks_id=1, conversation=s.conversation, stop_hook_active=False)
    ev = ModelCallFailed(call_id=s.round.call_id, kind="auth")
    legacy = claude_code("2.1.56")
    assert inv.check(None, obs(s, ev, (Emit(item=err), hooks), s, legacy))[2] is None
    assert inv.check(None, obs(s, ev, (Emit(item=err), hooks), s))[2] is not None


@pytest.mark.spec("INV-6")
def test_no_hooks_after_api_error_holds() -> None:
    holds_on_the_real_machine("INV-6")


# --- INV-7 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-7")
def test_ninth_blocking_retry_fires() -> None:
    inv = StopHookCap()
    s = streaming()
    block = StopHooksFinished(hooks_id=1, blocking_errors=("no",))
    mon, ex, bad = inv.check(7, obs(s, block, (), continued(s, StopHookBlocking())))
    assert bad is None and mon == 8 and not ex
    _, ex, bad = inv.check(8, obs(s, block, (), continued(s, StopHookBlocking())))
    assert bad is not None and "number 9 with a cap of 8" in bad and ex
    # with no cap the count saturates at one (the graph check takes over, see test_explore)
    uncapped = default(stop_hook_block_cap=None)
    o = obs(s, block, (), continued(s, StopHookBlocking()), uncapped)
    assert inv.check(5, o) == (1, True, None)


@pytest.mark.spec("INV-7")
def test_uncapped_blocking_is_found_as_a_cycle() -> None:
    rep = explore(default(stop_hook_block_cap=None), rounds=1)
    r = rep.result("INV-7")
    assert r.status == "broken" and r.counterexample is not None
    assert r.counterexample.loop_start is not None
    assert "hooks:block" in r.counterexample.labels[r.counterexample.loop_start // 2 :]


@pytest.mark.spec("INV-7")
def test_stop_hook_cap_holds() -> None:
    holds_on_the_real_machine("INV-7")


# --- INV-8 ------------------------------------------------------------------------------------


def _call(conv: Conversation) -> CallModel:
    return CallModel(call_id=2, model="m", conversation=conv, max_tokens=8_000)


def _tool_use(tid: str) -> AssistantMessage:
    return AssistantMessage(
        id=f"a-{tid}",
        response_id="r1",
        model="m",
        content=(ToolUseBlock(id=tid, name="Read", input={}),),
    )


def _result(tid: str) -> UserMessage:
    return UserMessage(
        id=f"u-{tid}",
        content=(ToolResultBlock(tool_use_id=tid, content="ok"),),
        origin="tool_result",
    )


@pytest.mark.spec("INV-8")
def test_pairing_fires_on_missing_duplicate_and_orphan_results() -> None:
    inv = ToolResultPairing()
    s = streaming()
    base = s.conversation
    cases = {
        "has no tool_result": base.extend([_tool_use("t1")]),
        "answers no open tool_use": base.extend([_tool_use("t1"), _result("t1"), _result("t1")]),
        "appears twice": base.extend([_tool_use("t1"), _tool_use("t1"), _result("t1")]),
    }
    for what, conv in cases.items():
        _, ex, bad = inv.check(None, obs(s, WaitElapsed(wait_id=1), (_call(conv),), s))
        assert bad is not None and what in bad, what
        assert ex
    good = base.extend([_tool_use("t1"), _result("t1")])
    assert inv.check(None, obs(s, WaitElapsed(wait_id=1), (_call(good),), s)) == (None, True, None)
    # the conversation a finished turn leaves is checked too
    done = attrs.evolve(s, phase="done", conversation=cases["has no tool_result"])
    fin = (Finish(terminal=Completed()),)
    assert "the conversation the turn leaves" in str(
        inv.check(None, obs(s, Interrupted(), fin, done))[2]
    )


@pytest.mark.spec("INV-8")
def test_pairing_holds() -> None:
    holds_on_the_real_machine("INV-8")


# --- INV-9 ------------------------------------------------------------------------------------


@pytest.mark.spec("INV-9")
def test_withheld_errors_fire_when_emitted_early() -> None:
    inv = WithheldErrors()
    s = streaming()
    done = attrs.evolve(s, phase="done", transition=Completed())
    fin = Finish(terminal=Completed())
    mot = api_error("max_output_tokens")
    end = ModelResponseEnded(
        call_id=s.round.call_id,
        model="m",
        stop_reason="max_tokens",
        usage=s.round.usage or _usage(),
    )
    # escalation still possible (default: gate on, no override, no escalation yet)
    bad = inv.check(fresh(inv), obs(s, end, (Emit(item=mot), fin), done))[2]
    assert bad is not None and "escalation was still possible" in bad
    # escalated, but only one nudge so far
    bad = inv.check((1, 1, 0, False), obs(s, end, (Emit(item=mot), fin), done))[2]
    assert bad is not None and "after 1 of 3 nudges" in bad
    assert inv.check((3, 1, 0, False), obs(s, end, (Emit(item=mot), fin), done))[2] is None
    # a prompt-too-long error emitted while the turn goes on
    ptl = api_error("prompt_too_long")
    fail = ModelCallFailed(call_id=s.round.call_id, kind="prompt_too_long")
    assert "goes on" in str(inv.check((0, 0, 1, True), obs(s, fail, (Emit(item=ptl),), s))[2])
    # surfaced without trying reactive compaction
    pdone = attrs.evolve(done, transition=PromptTooLong())
    pfin = Finish(terminal=PromptTooLong())
    assert "reactive" in str(
        inv.check((0, 0, 0, True), obs(s, fail, (Emit(item=ptl), pfin), pdone))[2]
    )
    assert inv.check((0, 0, 1, True), obs(s, fail, (Emit(item=ptl), pfin), pdone))[2] is None


def _usage() -> Any:
    from steploop.reducer.messages import Usage

    return Usage(input_tokens=10, output_tokens=10)


@pytest.mark.spec("INV-9")
def test_withheld_errors_hold() -> None:
    holds_on_the_real_machine("INV-9")


# --- INV-10 -----------------------------------------------------------------------------------


@pytest.mark.spec("INV-10")
def test_truncated_tool_input_that_runs_fires() -> None:
    inv = TruncatedInputsNeverRun()
    s = streaming()
    cut = ToolUseBlock(id="cut1", name="Edit", input={"file_path": "a"})
    ev = ModelBlockReceived(call_id=s.round.call_id, block=cut, tool=UNSAFE, input_complete=False)
    ask = AskPermission(generation=1, tool_use_id="cut1", name="Edit")
    _, ex, bad = inv.check(None, obs(s, ev, (ask,), s))
    assert ex and bad is not None and "AskPermission for truncated" in bad
    # it became a slot
    d = Driver(CFG)
    d.tool_use("cut1", "Edit", traits=UNSAFE)
    assert "became a tool slot" in str(inv.check(None, obs(s, ev, (), d.state))[2])
    # the right way: nothing happens
    assert inv.check(None, obs(s, ev, (), s)) == (None, True, None)


@pytest.mark.spec("INV-10")
def test_start_without_permission_fires() -> None:
    inv = TruncatedInputsNeverRun()
    d = Driver(CFG)
    d.tool_use("t1", "Read", traits=SAFE)  # asking permission
    asking = d.state
    start = StartTool(generation=d.generation, tool_use_id="t1", name="Read")
    allow = PermissionAnswered(generation=d.generation, tool_use_id="t1", decision="allow")
    assert inv.check(None, obs(asking, allow, (start,), asking))[2] is None
    never = StartTool(generation=d.generation, tool_use_id="t9", name="Read")
    assert "not asking permission" in str(inv.check(None, obs(asking, allow, (never,), asking))[2])


@pytest.mark.spec("INV-10")
def test_truncated_inputs_hold() -> None:
    holds_on_the_real_machine("INV-10")


# --- INV-11 -----------------------------------------------------------------------------------


@pytest.mark.spec("INV-11")
def test_next_turn_past_max_turns_fires() -> None:
    cfg = default(max_turns=2)
    inv = MaxTurnsBound()
    s = streaming()
    mon, _, bad = inv.check(0, obs(s, WaitElapsed(wait_id=1), (), continued(s, NextTurn()), cfg))
    assert bad is None and mon == 1
    _, ex, bad = inv.check(1, obs(s, WaitElapsed(wait_id=1), (), continued(s, NextTurn()), cfg))
    assert bad is not None and ex and "turn 3 with max_turns 2" in bad
    wrong = (Finish(terminal=MaxTurns(turn_count=7)),)
    done = attrs.evolve(s, phase="done", transition=MaxTurns(turn_count=7))
    assert "MaxTurns(turn_count=7)" in str(
        inv.check(1, obs(s, WaitElapsed(wait_id=1), wrong, done, cfg))[2]
    )
    right = (Finish(terminal=MaxTurns(turn_count=3)),)
    assert inv.check(1, obs(s, WaitElapsed(wait_id=1), right, done, cfg))[2] is None
    assert not inv.applies(default())


@pytest.mark.spec("INV-11")
def test_max_turns_holds() -> None:
    rep = explore(default(max_turns=1), rounds=2, deep_world=None)
    r = rep.result("INV-11")
    assert r.status == "held" and r.exercised > 0


# --- INV-12 -----------------------------------------------------------------------------------


@pytest.mark.spec("INV-12")
def test_effects_after_finish_fire() -> None:
    inv = NothingAfterFinish()
    s = streaming()
    done = attrs.evolve(s, phase="done", transition=Completed())
    fin = Finish(terminal=Completed())
    emit = Emit(item=api_error("auth"))
    assert "Emit after Finish" in str(inv.check(None, obs(s, Interrupted(), (fin, emit), done))[2])
    assert "two Finish" in str(inv.check(None, obs(s, Interrupted(), (fin, fin), done))[2])
    assert "but phase done" in str(inv.check(None, obs(s, Interrupted(), (), done))[2])
    assert "without phase done" in str(inv.check(None, obs(s, Interrupted(), (fin,), s))[2])
    assert "after Finish returned" in str(
        inv.check(None, obs(done, Interrupted(), (emit,), done))[2]
    )
    assert inv.check(None, obs(s, Interrupted(), (emit, fin), done)) == (None, True, None)


@pytest.mark.spec("INV-12")
def test_a_machine_that_accepts_events_after_finish_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The explorer probes every terminal state with an interrupt."""
    import steploop.reducer.explore.expand as explore_module

    real = advance  # the machine's advance(), which steploop.reducer.explore.expand imports and calls
    assert vars(explore_module)["advance"] is real

    def lax(state: Any, event: Any, config: Any) -> Any:
        if state.phase == "done":
            return state, (Emit(item=api_error("auth")),), ()
        return real(state, event, config)

    monkeypatch.setattr(explore_module, "advance", lax)
    rep = explore(default(), rounds=1, deep_world=None)
    r = rep.result("INV-12")
    assert r.status == "broken" and r.counterexample is not None
    assert r.counterexample.labels[-1] == "probe:after_finish"


@pytest.mark.spec("INV-12")
def test_nothing_after_finish_holds() -> None:
    holds_on_the_real_machine("INV-12")


# --- INV-13 -----------------------------------------------------------------------------------


def _graph(edges: dict[int, list[tuple[int, str, int, int]]]) -> Graph:
    g = Graph(CFG, Request(prompt="go"), None)
    s = streaming()
    for n in range(len(edges)):
        g.add(("n", n), s, (), n - 1, None, n, n)
    for n, out in edges.items():
        g.out[n] = out
    return g


@pytest.mark.spec("INV-13")
def test_progress_free_cycle_analysis_on_a_hand_made_graph() -> None:
    """0 → 1 → 2 → 1 where 2 → 1 answers a model call and nothing is progress: a lasso
    through 1 and 2; with 1 → 2 a progress step the cycle is harmless and the longest
    progress-free path is counted in model answers."""
    from steploop.reducer.explore import World

    spin = _graph({0: [(1, "a", 1, 0)], 1: [(2, "b", 0, 0)], 2: [(1, "c", 1, 0)]})
    a = Analysis(spin, CFG, World(), None)
    entry, labels = a.progress_free_lasso() or (None, [])
    assert entry == 1 and labels == ["b", "c"]
    assert a.longest_progress_free() == (None, None)
    calm = _graph({0: [(1, "a", 1, 0)], 1: [(2, "b", 0, 1)], 2: [(1, "c", 2, 0)]})
    a = Analysis(calm, CFG, World(), None)
    assert a.progress_free_lasso() is None
    # 2 → 1 answers twice, then 1 → 2 is progress: two answers at most
    assert a.longest_progress_free() == (2, (2, ["c"]))
    assert NoProgressFreeCycle().check(None, obs(None, None, (), streaming())) == (
        None,
        False,
        None,
    )


@pytest.mark.spec("INV-13")
def test_progress_free_cycle_holds() -> None:
    holds_on_the_real_machine("INV-13")


# --- the catalogue as a whole -----------------------------------------------------------------


def test_catalogue_ids_match_specs() -> None:
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "specs" / "invariants.md").read_text()
    ids = re.findall(r"^### (INV-\d+) ·", text, re.M)
    assert ids == [inv.id for inv in catalogue()]
    assert len({inv.id for inv in catalogue()}) == 17
