"""The public Hypothesis kit (steploop/reducer/testing): strategies, LoopMachine, settings profiles."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, run_state_machine_as_test

from steploop.reducer import (
    IllegalEvent,
    LoopConfig,
    Request,
    claude_code_2_1_88,
    default,
    start,
    step,
)
from steploop.reducer.effects import CallModel
from steploop.reducer.explore import DEEP_WORLD, Invariant, Observation, Verdict
from steploop.reducer.testing import (
    CI_PROFILE,
    SLOW_PROFILE,
    InvariantViolation,
    LoopMachine,
    ci_settings,
    configs,
    events_for,
    moves_for,
    requests,
    slow_settings,
)

ALL_INV = tuple(f"INV-{n}" for n in range(1, 14))


@pytest.mark.spec(*ALL_INV)
def test_loop_machine_holds_under_the_ci_profile() -> None:
    """Random configs (every profile, random toggles, small windows), random sessions: every
    rule the config does not break on purpose holds on every transition."""
    run_state_machine_as_test(LoopMachine, settings=ci_settings())


class CallBudget(LoopMachine):
    """A user-style subclass: at most one model call is in flight (every CallModel but the
    latest was answered: a per-transition rule), and the prompt stays first unless a
    compaction replaced the history (a between-steps rule)."""

    calls_seen: int = 0

    def configs(self) -> st.SearchStrategy[LoopConfig]:
        return configs(profiles=("default",))

    def on_step(self, o: Observation) -> None:
        calls = sum(isinstance(e, CallModel) for e in self.effects)
        CallBudget.calls_seen = max(CallBudget.calls_seen, calls)
        assert calls <= self.model_answers + 1, f"{calls} calls, {self.model_answers} answers"

    @invariant()
    def prompt_comes_first(self) -> None:
        if self.state is not None and self.state.conversation.length:
            first = self.state.conversation.messages()[0]
            assert getattr(first, "origin", None) in ("prompt", "compact_summary") or (
                type(first).__name__ == "SystemMessage"
            )


@pytest.mark.spec("INV-2", "INV-7")
def test_a_subclass_adds_its_own_rules() -> None:
    run_state_machine_as_test(CallBudget, settings=settings(ci_settings(), max_examples=25))
    assert CallBudget.calls_seen >= 1


class AtMostOneCall(Invariant):
    """A deliberately false rule with a monitor, to show an Invariant plugs in."""

    id = "MY-1"
    title = "at most one model call per turn"

    def initial(self, config: LoopConfig, request: Request, session: Any) -> int:
        return 0

    def check(self, mon: Any, o: Observation) -> Verdict:
        n = min(mon + len(o.calls), 2)
        return n, bool(o.calls), "a second model call" if n > 1 else None


class StrictOneCall(LoopMachine):
    def configs(self) -> st.SearchStrategy[LoopConfig]:
        return st.just(default())

    def loop_invariants(self) -> list[Invariant]:
        return [*super().loop_invariants(), AtMostOneCall()]


@pytest.mark.spec("ABS-2")
def test_an_added_invariant_is_checked_and_reported() -> None:
    with pytest.raises(InvariantViolation, match="MY-1 broken: a second model call"):
        run_state_machine_as_test(
            StrictOneCall,
            settings=settings(
                ci_settings(), max_examples=50, print_blob=False, report_multiple_bugs=False
            ),
        )


class Reference(LoopMachine):
    """The reference with the escalation gate on, checking even what its flags break."""

    skip_expected_breaks = False
    world = DEEP_WORLD

    def configs(self) -> st.SearchStrategy[LoopConfig]:
        return st.just(claude_code_2_1_88().with_overrides({"gates.max_tokens_escalation": True}))

    def requests(self) -> st.SearchStrategy[Request]:
        return st.just(Request(prompt="go"))


@pytest.mark.spec("INV-3", "INV-13")
def test_the_kit_finds_the_reference_flaws() -> None:
    quick = settings(
        ci_settings(),
        max_examples=200,
        phases=(Phase.generate,),  # no shrinking: finding it is the point
        report_multiple_bugs=False,
        print_blob=False,
        database=None,
    )
    with pytest.raises(InvariantViolation, match=r"INV-(3|7|8|13) broken"):
        run_state_machine_as_test(Reference, settings=quick)


@pytest.mark.spec("ABS-2")
@settings(ci_settings(), max_examples=40)
@given(cfg=configs(), req=requests(), data=st.data())
def test_strategies_draw_only_events_step_accepts(
    cfg: LoopConfig, req: Request, data: st.DataObject
) -> None:
    s, _ = start(req, cfg, None)
    for _ in range(30):
        if s.phase == "done":
            with pytest.raises(ValueError, match="no event is legal"):
                events_for(s, cfg)
            with pytest.raises(IllegalEvent):
                step(s, next(iter([_interrupt()])), cfg)
            return
        if data.draw(st.booleans(), label="single event"):
            ev = data.draw(events_for(s, cfg), label="event")
            s, _ = step(s, ev, cfg)  # never IllegalEvent
        else:
            mv = data.draw(moves_for(s, cfg), label="move")
            for ev in mv.events:
                s, _ = step(s, ev, cfg)


def _interrupt() -> Any:
    from steploop.reducer.events import Interrupted

    return Interrupted(kind="hard")


@given(cfg=configs())
@settings(ci_settings(), max_examples=60)
def test_configs_are_valid_and_small(cfg: LoopConfig) -> None:
    assert cfg.context_window <= 200_000
    assert cfg.effective_window > cfg.autocompact_buffer
    assert cfg.retry.max_retries <= 3


def test_settings_profiles_are_registered() -> None:
    ci, slow = ci_settings(), slow_settings()
    assert ci.deadline is None and slow.deadline is None
    assert slow.max_examples > ci.max_examples
    assert settings.get_profile(CI_PROFILE) == ci and settings.get_profile(SLOW_PROFILE) == slow


def test_importing_reducer_does_not_import_hypothesis() -> None:
    code = (
        "import sys, steploop.reducer, steploop.reducer.explore, steploop.reducer.testing\n"
        "assert 'hypothesis' not in sys.modules, 'hypothesis imported'\n"
        "steploop.reducer.testing.configs\n"
        "assert 'hypothesis' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=_root())


def _root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])


def test_the_docstring_example_runs() -> None:
    """The worked example in steploop/reducer/testing's docstring (the README shows it too)."""
    import steploop.reducer.testing as kit

    doc = kit.__doc__ or ""
    block = doc.split("subclassing ``LoopMachine``::", 1)[1].split("\nA rule with a monitor", 1)[0]
    namespace: dict[str, Any] = {"__name__": "example"}
    exec(textwrap.dedent(block), namespace)
    cls = namespace["OutputCapsHold"]
    assert namespace["TestOutputCapsHold"].settings.deadline is None
    run_state_machine_as_test(cls, settings=settings(ci_settings(), max_examples=60))


@pytest.mark.slow
@pytest.mark.spec(*ALL_INV)
def test_loop_machine_holds_under_the_slow_profile() -> None:
    run_state_machine_as_test(LoopMachine, settings=slow_settings())
