"""The exhaustive explorer (specs/invariants.md ABS-1..ABS-3, and the graph rules INV-7, INV-13).

The CI-bound runs are cached per process (``ci_report``, ``cc_report``) and shared with
tests/reducer/test_invariants.py, so each is paid for once.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import attrs
import pytest

from steploop.reducer import LoopConfig, Request, claude_code_2_1_88, default, full, start, step
from steploop.reducer.events import Event
from steploop.reducer.explore import (
    DEEP_WORLD,
    DEFAULT_REQUEST,
    DEFAULT_ROUNDS,
    RETRY_DEEP_WORLD,
    Abstraction,
    ExploreProgress,
    Invariant,
    Report,
    Verdict,
    World,
    catalogue,
    check_step,
    expected_breaks,
    explore,
    initial_monitors,
    moves,
    usage_for,
)
from steploop.reducer.explore import Observation as Obs
from steploop.reducer.machine import advance, begin
from steploop.reducer.serialize import structure
from steploop.reducer.transitions import MaxOutputTokensEscalate, StopHookBlocking

# a generous ceiling for one CI-bound run on a slow runner, in CPU seconds of this process
# (the explorer runs in it): the bound is on the work, and a shared machine's wall time is not
# (under a parallel mutation run the same exploration took 133 s of wall time, 14 s of CPU)
CI_SECONDS = 45.0


def escalation_gate_on() -> LoopConfig:
    """The reference profile with the escalation gate switched on (issue 5)."""
    return claude_code_2_1_88().with_overrides({"gates.max_tokens_escalation": True})


def explore_with_keys(cfg: LoopConfig) -> tuple[Report, set[Any], float]:
    """A CI-bound run that also collects every abstraction key it created."""
    import steploop.reducer.explore.state_graph as explore_module

    keys: set[Any] = set()
    real = explore_module.Graph.add

    def add(self: Any, key: Any, *a: Any, **k: Any) -> int:
        keys.add(key)
        return real(self, key, *a, **k)

    explore_module.Graph.add = add  # type: ignore[method-assign]
    t0 = time.process_time()
    try:
        rep = explore(cfg)
    finally:
        explore_module.Graph.add = real  # type: ignore[method-assign]
    return rep, keys, time.process_time() - t0


@lru_cache(maxsize=1)
def _ci() -> tuple[Report, set[Any], float]:
    return explore_with_keys(default())


@lru_cache(maxsize=1)
def _cc() -> tuple[Report, set[Any], float]:
    return explore_with_keys(escalation_gate_on())


def ci_report() -> tuple[Report, float]:
    """The default profile at the CI bound (and how long it took)."""
    rep, _, seconds = _ci()
    return rep, seconds


def cc_report() -> Report:
    """The reference profile with the escalation gate on, at the CI bound."""
    return _cc()[0]


# --- helpers ---------------------------------------------------------------------------------


def run_labels(cfg: LoopConfig, labels: list[str], world: World | None = None) -> Any:
    """Play moves by label from the start; returns (state, monitors, abstraction key)."""
    invs = catalogue()
    s, fx, passed = begin(DEFAULT_REQUEST, cfg, None)
    mons, _, _ = check_step(
        invs, initial_monitors(invs, cfg, DEFAULT_REQUEST), Obs(cfg, None, None, fx, s, passed)
    )
    absn = Abstraction(cfg)
    for lab in labels:
        mv = next(m for m in moves(s, cfg, world) if m.label == lab)
        for ev in mv.events:
            nxt, fx, passed = advance(s, ev, cfg)
            mons, _, _ = check_step(invs, mons, Obs(cfg, s, ev, fx, nxt, passed))
            s = nxt
    return s, mons, absn.key(s)


def replay_keys(cfg: LoopConfig, events: list[Event]) -> list[Any]:
    """The abstraction key (with monitors) after start and after every event."""
    invs = catalogue()
    absn = Abstraction(cfg)
    s, fx, passed = begin(DEFAULT_REQUEST, cfg, None)
    mons, _, _ = check_step(
        invs, initial_monitors(invs, cfg, DEFAULT_REQUEST), Obs(cfg, None, None, fx, s, passed)
    )
    keys = [(absn.key(s), mons)]
    for ev in events:
        nxt, fx, passed = advance(s, ev, cfg)
        mons, _, _ = check_step(invs, mons, Obs(cfg, s, ev, fx, nxt, passed))
        s = nxt
        keys.append((absn.key(s), mons))
    return keys


# --- ABS-3: the runs the issue asks for -------------------------------------------------------


@pytest.mark.spec("ABS-3", "INV-13")
def test_default_profile_at_the_ci_bound_holds_and_exercises_every_guard() -> None:
    """Default profile, full alphabet within 3 calls then the deep tier to the end: no
    violation, every applicable invariant exercised, the run complete and fast."""
    rep, seconds = ci_report()
    assert rep.ok, [(r.id, r.status) for r in rep.results]
    assert rep.errors == ()
    assert rep.complete
    assert rep.rounds_bound == DEFAULT_ROUNDS and rep.deep
    status = {r.id: r.status for r in rep.results}
    assert status.pop("INV-11") == "n/a"  # max_turns is unset in the default profile
    assert set(status.values()) == {"held"}
    assert all(r.exercised > 0 for r in rep.results if r.applicable)
    assert rep.states > 10_000 and rep.transitions > rep.states
    assert rep.rounds_reached > 9  # deep enough for the stop-hook cap (9 hook rounds)
    assert rep.longest_progress_free is not None and rep.longest_progress_free >= 20
    assert seconds < CI_SECONDS


@pytest.mark.spec("INV-3", "INV-7", "INV-13")
def test_reference_with_escalation_gate_re_escalates_and_loops_in_stop_hooks() -> None:
    """claude_code_2_1_88 with the escalation gate on: the re-escalation within one user turn
    and the unbounded stop-hook loop come back as counterexamples."""
    rep = cc_report()
    assert not rep.ok
    broken = {r.id for r in rep.broken}
    assert {"INV-3", "INV-7", "INV-13"} <= broken
    assert broken <= set(expected_breaks(rep.config))  # nothing the flags do not explain
    # INV-3: escalate, nudge, escalate again: three truncated replies, the shortest possible
    esc = rep.result("INV-3").counterexample
    assert esc is not None and esc.loop_start is None
    assert [lab.split(":")[0] for lab in esc.labels] == ["max_tokens"] * 3
    trace = esc.replay()
    escalations = [s for s, _ in trace if isinstance(s.transition, MaxOutputTokensEscalate)]
    assert len({id(s.transition) for s in escalations}) == 2
    # INV-7 / INV-13: reply, hooks block, reply, hooks block, ... (a lasso)
    for inv in ("INV-7", "INV-13"):
        loop = rep.result(inv).counterexample
        assert loop is not None and loop.loop_start is not None
        # a reply that ends the turn (a pause does too: the reference has no resume, S-PAUSE-1)
        assert loop.labels[-2] in ("reply:low", "pause:low") and loop.labels[-1] == "hooks:block"
        assert rep.longest_progress_free is None


@pytest.mark.spec("ABS-3", "INV-13")
def test_a_lasso_goes_round_its_loop_again() -> None:
    """Replaying the loop part of a lasso returns to the abstract state where it began, and
    the loop can be fed again with its ids recomputed (labels name moves without ids)."""
    cfg = escalation_gate_on()
    loop = cc_report().result("INV-13").counterexample
    assert loop is not None and loop.loop_start is not None and loop.loop_move is not None
    keys = replay_keys(cfg, loop.trace_events())
    assert keys[loop.loop_start] == keys[-1]
    lap = list(loop.loop_labels())
    assert lap in (["reply:low", "hooks:block"], ["pause:low", "hooks:block"])
    for laps in (2, 5):
        s, mons, key = run_labels(cfg, list(loop.labels) + lap * (laps - 1))
        assert (key, mons) == keys[-1]
        assert isinstance(s.transition, StopHookBlocking)
        assert s.stop_hook_blocks == laps + loop.loop_move // 2  # the count never stops


@pytest.mark.spec("ABS-3")
def test_counterexamples_are_replayable_and_serialize() -> None:
    """Every counterexample replays through start() and step() and its JSON events structure
    back into the same events."""
    for cex in cc_report().counterexamples:
        states = cex.replay()
        assert len(states) == len(cex.events) + 1
        data = json.loads(json.dumps(cex.to_json()))
        assert data["invariant"] == cex.invariant
        assert data["profile"] == "claude_code_2_1_88"
        back = [structure(e, Event) for e in data["events"]]
        assert back == list(cex.events)
        assert structure(data["config"], LoopConfig) == cex.config


@pytest.mark.spec("ABS-3")
def test_the_longest_progress_free_path_has_a_witness() -> None:
    rep, _ = ci_report()
    w = rep.longest_progress_free_witness
    assert w is not None and rep.longest_progress_free is not None
    assert w.replay()  # feeds without IllegalEvent
    assert str(rep.longest_progress_free) in w.explanation


@pytest.mark.spec("ABS-3")
def test_a_bound_cuts_the_search_and_says_so() -> None:
    rep = explore(default(), rounds=1, deep_world=None)
    assert not rep.complete
    assert rep.rounds_reached == 1
    assert rep.unexercised  # the deep guards are out of reach: the run is not ok
    assert not rep.ok


@pytest.mark.spec("ABS-3")
def test_max_states_stops_the_search() -> None:
    rep = explore(default(), rounds=2, max_states=300)
    assert not rep.complete
    assert rep.states <= 300 + 60  # the last expansion may add its successors


@pytest.mark.spec("ABS-3")
def test_progress_is_reported_through_the_callback() -> None:
    seen: list[ExploreProgress] = []
    explore(default(), rounds=1, deep_world=None, on_progress=seen.append, progress_every=50)
    assert seen and seen[-1].states >= seen[0].states
    assert {p.deep for p in seen} == {False}
    assert all(p.bound == 1 for p in seen)


@pytest.mark.spec("ABS-3")
def test_a_guard_never_exercised_fails_the_run() -> None:
    """Hooks that never block leave INV-7 unexercised: the run is not ok."""
    quiet = World(stop_hooks=("pass", "prevent"))
    rep = explore(
        default(), rounds=1, world=quiet, deep_world=attrs.evolve(DEEP_WORLD, stop_hooks=("pass",))
    )
    assert rep.result("INV-7").status == "unexercised"
    assert not rep.broken
    assert not rep.ok


@pytest.mark.spec("ABS-3")
def test_a_step_that_raises_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """specs/ M-5: step() may raise only IllegalEvent, and never on a generated move."""
    import steploop.reducer.explore.expand as explore_module

    real = advance  # the machine's advance(), which steploop.reducer.explore.expand imports and calls
    assert vars(explore_module)["advance"] is real

    def flaky(state: Any, event: Any, config: Any) -> Any:
        if type(event).__name__ == "StopHooksFinished":
            raise RuntimeError("boom")
        return real(state, event, config)

    monkeypatch.setattr(explore_module, "advance", flaky)
    rep = explore(default(), rounds=1, deep_world=None)
    assert rep.errors and not rep.ok
    assert rep.errors[0].invariant == "M-5"
    assert "RuntimeError: boom" in rep.errors[0].explanation
    assert rep.errors[0].labels[-1].startswith("hooks:")


@pytest.mark.spec("INV-11", "ABS-3")
def test_max_turns_is_exercised_when_set() -> None:
    rep = explore(default(max_turns=2), rounds=3, deep_world=None)
    r = rep.result("INV-11")
    assert r.status == "held" and r.exercised > 0
    assert not rep.broken and not rep.errors


@pytest.mark.spec("ABS-3", "INV-13")
def test_budget_continuations_are_progress() -> None:
    """With a token budget, continuations appear and, adding output, count as progress."""
    cfg = default()
    req = Request(prompt="go", token_budget=1_000)
    rep = explore(cfg, rounds=2, deep_world=None, request=req)
    assert not rep.broken and not rep.errors
    s, _ = start(req, cfg, None)
    for label in ("reply:low", "hooks:pass"):
        mv = next(m for m in moves(s, cfg) if m.label == label)
        (ev,) = mv.events[-1:]
        for e in mv.events[:-1]:
            s, _ = step(s, e, cfg)
        before = s
        s, fx, passed = advance(s, ev, cfg)
    o = Obs(cfg, before, ev, fx, s, passed)
    assert type(o.continued).__name__ == "TokenBudgetContinuation"
    assert o.progress


@pytest.mark.spec("ABS-3")
def test_full_profile_breaks_only_what_its_flags_explain() -> None:
    rep = explore(full(), rounds=1)
    assert {r.id for r in rep.broken} <= set(expected_breaks(full()))
    assert rep.result("INV-1").status == "n/a"  # collapse owns overflow: no auto-compact
    assert rep.result("INV-5").status == "held"


@pytest.mark.slow
@pytest.mark.spec("ABS-3")
def test_default_profile_with_retries_in_the_deep_tier() -> None:
    """The slow run: the full alphabet within 4 calls, then every retry chain in every round
    context to the end of the graph (about 700,000 states; over ten minutes on a loaded machine)."""
    rep = explore(default(), rounds=4, deep_world=RETRY_DEEP_WORLD)
    assert rep.ok and rep.complete
    assert rep.longest_progress_free is not None and rep.longest_progress_free > 100


# --- ABS-1: the abstraction key -------------------------------------------------------------


def _walk_keys(cfg: LoopConfig, walks: int, seed: int) -> list[tuple[list[str], Any]]:
    """Random walks in the explorer's own tiers: (labels, key) for every state visited."""
    rng = random.Random(seed)
    absn = Abstraction(cfg)
    out = []
    for _ in range(walks):
        invs = catalogue()
        s, fx, passed = begin(DEFAULT_REQUEST, cfg, None)
        o = Obs(cfg, None, None, fx, s, passed)
        mons, _, _ = check_step(invs, initial_monitors(invs, cfg, DEFAULT_REQUEST), o)
        calls = len(o.calls)
        labels: list[str] = []
        while s.phase != "done" and len(labels) < 60:
            world = World() if calls <= DEFAULT_ROUNDS else DEEP_WORLD
            mv = rng.choice(moves(s, cfg, world))
            labels.append(mv.label)
            for ev in mv.events:
                nxt, fx, passed = advance(s, ev, cfg)
                o = Obs(cfg, s, ev, fx, nxt, passed)
                mons, _, _ = check_step(invs, mons, o)
                calls += len(o.calls)
                s = nxt
            k = absn.key(s)
            out.append((list(labels), k if s.phase == "done" else (k, mons)))
    return out


@pytest.mark.spec("ABS-1")
@pytest.mark.parametrize("which", ["default", "cc+gate"])
def test_random_walks_reach_only_explored_keys(which: str) -> None:
    """The key is exact enough: states it merges have the same futures, so a random walk in
    the same alphabet never reaches a key the explorer did not find."""
    rep, keys, _ = _ci() if which == "default" else _cc()
    for labels, key in _walk_keys(rep.config, walks=300, seed=5):
        assert key in keys, labels


@pytest.mark.spec("ABS-1")
def test_key_ignores_ids_and_text_but_not_counters() -> None:
    cfg = default()
    a, _, ka = run_labels(cfg, ["tool:safe", "end_tools:low"])
    b, _, kb = run_labels(cfg, ["fail:rate_limited", "wait:elapsed", "tool:safe", "end_tools:low"])
    assert a.round.slots[0].tool_use_id != b.round.slots[0].tool_use_id
    absn = Abstraction(cfg)
    assert ka != kb  # the retry counter differs
    assert absn.key(attrs.evolve(b, round=attrs.evolve(b.round, retry_attempt=0))) == ka
    # saturation: counts past the bound share one bucket, below it they are exact
    hi = [absn.key(attrs.evolve(a, stop_hook_blocks=n)) for n in (7, 8, 9, 50)]
    assert hi[0] != hi[1] != hi[2] and hi[2] == hi[3]
    # text and ids do not matter
    renamed = attrs.evolve(a, ids=attrs.evolve(a.ids, msg=999))
    assert absn.key(renamed) == ka


@pytest.mark.spec("ABS-1")
def test_done_states_merge_by_terminal() -> None:
    cfg = default()
    a, _, ka = run_labels(cfg, ["interrupt:hard"])
    b, _, kb = run_labels(cfg, ["tool:safe", "interrupt:submit"])
    assert a.phase == b.phase == "done"
    assert ka == kb == ("done", "aborted_streaming")


@pytest.mark.spec("ABS-1")
def test_uncapped_stop_hook_counter_saturates_at_one() -> None:
    cfg = escalation_gate_on()
    absn = Abstraction(cfg)
    s, _, _ = run_labels(cfg, ["reply:low", "hooks:block"])
    keys = [absn.key(attrs.evolve(s, stop_hook_blocks=n)) for n in (0, 1, 2, 30)]
    assert keys[0] != keys[1] == keys[2] == keys[3]


# --- ABS-2: the world alphabet --------------------------------------------------------------


@pytest.mark.spec("ABS-2")
def test_start_state_offers_every_model_answer() -> None:
    cfg = claude_code_2_1_88()
    s, _ = start(DEFAULT_REQUEST, cfg, None)
    labels = {m.label for m in moves(s, cfg)}
    for c in ("low", "mid", "high"):
        assert {f"reply:{c}", f"max_tokens:{c}", f"cut_tool:{c}"} <= labels
    kinds = ("prompt_too_long", "media", "image_client", "overloaded", "rate_limited")
    assert {f"fail:{k}" for k in (*kinds, "stream_broken", "auth", "unknown")} <= labels
    assert {"tool:safe", "tool:unsafe", "interrupt:hard", "interrupt:submit"} <= labels


@pytest.mark.spec("ABS-2")
def test_usage_classes_land_in_their_bands() -> None:
    for cfg in (default(), claude_code_2_1_88(), default(context_window=40_000)):
        low, mid, high = (usage_for(cfg, c).total for c in ("low", "mid", "high"))
        assert low < cfg.autocompact_threshold <= mid < cfg.blocking_limit <= high
        assert high < cfg.context_window
    with pytest.raises(ValueError, match="unknown usage class"):
        usage_for(default(), "huge")


@pytest.mark.spec("ABS-2")
def test_classes_in_the_same_band_are_tried_once() -> None:
    """In the default machine the blocking check never applies (G7), so mid and high behave
    alike: only one is tried. The reference profile checks it: all three are tried."""
    s, _ = start(DEFAULT_REQUEST, default(), None)
    assert {m.label for m in moves(s, default()) if m.label.startswith("reply:")} == {
        "reply:low",
        "reply:mid",
    }


@pytest.mark.spec("ABS-2")
def test_every_phase_has_its_answers_and_done_has_none() -> None:
    cfg = default()
    cases = {
        "stop_hooks": (["reply:low"], {"hooks:pass", "hooks:block", "hooks:prevent"}),
        "waiting_retry": (["fail:overloaded"], {"wait:elapsed"}),
        "compacting": (["reply:mid", "hooks:block"], {"compact:ok", "compact:fail"}),
        "reactive_compacting": (["fail:media"], {"compact:ok", "compact:fail"}),
        "running_tools": (
            ["tool:unsafe", "end_tools:low"],
            {f"permission:0:{d}" for d in ("allow", "deny_by_rule", "rejected_by_user")},
        ),
    }
    for phase, (labels, expected) in cases.items():
        s, _, _ = run_labels(cfg, labels)
        assert s.phase == phase
        got = {m.label for m in moves(s, cfg)}
        assert expected | {"interrupt:hard", "interrupt:submit"} <= got, phase
    done, _, _ = run_labels(cfg, ["interrupt:hard"])
    assert moves(done, cfg) == ()


@pytest.mark.spec("ABS-2")
def test_every_generated_move_is_accepted() -> None:
    """Across the CI run no generated move made step() raise (the report would say so), and
    a walk through the deep alphabet feeds every move without IllegalEvent."""
    rep, _ = ci_report()
    assert rep.errors == ()
    for labels, _ in _walk_keys(default(), walks=50, seed=11):
        assert labels  # _walk_keys feeds every move through step()


# --- the CLI (steploop/effects/check_cli.py) ---------------------------------------------------------


def _cli(argv: list[str]) -> tuple[int, str]:
    from steploop.effects.check_cli import register

    parser = argparse.ArgumentParser(prog="steploop")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    out = io.StringIO()
    return args.handler(args, out), out.getvalue()


@pytest.mark.spec("ABS-3")
def test_cli_check_passes_on_the_default_machine(tmp_path: Path) -> None:
    code, text = _cli(
        ["check", "--rounds", "2", "--set", "stop_hook_block_cap=2", "--out", str(tmp_path)]
    )
    assert code == 0, text
    assert "INV-7" in text and "held" in text and "states/s" in text
    assert "longest progress-free path:" in text and text.rstrip().endswith("ok")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.spec("ABS-3", "INV-3", "INV-13")
def test_cli_check_reports_the_reference_flaws_and_writes_counterexamples(tmp_path: Path) -> None:
    code, text = _cli(
        [
            "check",
            "--profile",
            "claude_code_2_1_88",
            "--set",
            "gates.max_tokens_escalation=true",
            "--rounds",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 1
    assert "BROKEN" in text and "Q-1 reescalate_after_recovery" in text
    assert "unbounded (a progress-free cycle)" in text
    written = {p.name for p in tmp_path.iterdir()}
    assert {"steploop-check-INV-3.json", "steploop-check-INV-13.json"} <= written
    assert {"steploop-check-INV-3.jsonl", "steploop-check-INV-13.jsonl"} <= written
    data = json.loads((tmp_path / "steploop-check-INV-13.json").read_text())
    assert data["loop_start"] is not None and data["events"]
    # each counterexample is a trace that `steploop replay` accepts and replays exactly
    from steploop.effects.trace import replay_exact

    for inv in ("INV-3", "INV-13"):
        report = replay_exact(tmp_path / f"steploop-check-{inv}.jsonl")
        assert (
            report.ok
            and report.steps
            == len(json.loads((tmp_path / f"steploop-check-{inv}.json").read_text())["events"]) + 1
        )
    from steploop.effects.cli import main

    replay_out = io.StringIO()
    assert main(["replay", str(tmp_path / "steploop-check-INV-3.jsonl")], out=replay_out) == 0, (
        replay_out.getvalue()
    )
    # ... and carries, at every step, the transition advance() reports (the last it passed)
    from steploop.effects.trace import StepRecord, TraceReader

    for inv in ("INV-3", "INV-13"):
        path = tmp_path / f"steploop-check-{inv}.jsonl"
        recorded = [r.transition for r in TraceReader(path) if isinstance(r, StepRecord)]
        cex = rep_cex(path.with_suffix(".json"))
        s, _, passed = begin(cex.request, cex.config, cex.session)
        expected = [passed[-1] if passed else None]
        for ev in cex.trace_events():
            s, _, passed = advance(s, ev, cex.config)
            expected.append(passed[-1] if passed else None)
        assert recorded == expected
        assert any(isinstance(t, MaxOutputTokensEscalate) for t in recorded) or inv != "INV-3"
        assert any(isinstance(t, StopHookBlocking) for t in recorded) or inv != "INV-13"


def rep_cex(sidecar: Path) -> Any:
    """The counterexample a ``steploop check`` sidecar describes."""
    from steploop.reducer.explore import Counterexample

    data = json.loads(sidecar.read_text())
    return Counterexample(
        config=structure(data["config"], LoopConfig),
        request=structure(data["request"], Request),
        events=tuple(structure(e, Event) for e in data["events"]),
        invariant=data["invariant"],
        explanation=data["explanation"],
    )


@pytest.mark.spec("ABS-3")
def test_cli_check_rejects_bad_input() -> None:
    from steploop.effects.cli import CliError
    from steploop.reducer import ConfigError

    with pytest.raises(CliError, match="--rounds must be at least 1"):
        _cli(["check", "--rounds", "0"])
    with pytest.raises(CliError, match="--deep-rounds takes a positive number"):
        _cli(["check", "--deep-rounds", "many"])
    with pytest.raises(ConfigError, match="unknown config key"):
        _cli(["check", "--set", "no_such_key=1"])


class _FallbackSeen(Invariant):
    """Not a rule: counts transitions that switched to the fallback model."""

    id = "SEEN-fallback"
    title = "model fallback taken"

    def check(self, mon: Any, o: Obs) -> Verdict:
        seen = any(getattr(m, "subtype", None) == "model_fallback" for m in o.emitted)
        return mon, seen, None


@pytest.mark.spec("INV-8", "ABS-3")
def test_pairing_holds_through_model_fallback() -> None:
    """G12: with a fallback model, 529s mid-stream (tools asked for or running) switch models;
    every CallModel conversation stays paired."""
    cfg = default().with_overrides(
        {"fallback_model": "claude-haiku-4-5", "retry.max_consecutive_529": 1}
    )
    rep = explore(cfg, rounds=2, deep_world=None, invariants=[*catalogue(), _FallbackSeen()])
    assert rep.result("SEEN-fallback").exercised > 0
    assert rep.result("INV-8").status == "held" and rep.result("INV-8").exercised > 0
    assert not rep.broken and not rep.errors
