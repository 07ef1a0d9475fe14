"""The explorer's own cost and its parallel search (specs/invariants.md ABS-4).

Each comparison runs the same exploration once in this process and once over two worker
processes and compares everything the report holds; the bounds are small to keep them fast.
"""

from __future__ import annotations

from typing import Any

import pytest

import steploop.reducer.conversation as conversation_module
import steploop.reducer.explore.expand as expand_module
from steploop.effects.explore_workers import process_workers
from steploop.reducer import claude_code_2_1_88, default
from steploop.reducer.conversation import Conversation
from steploop.reducer.events import Event, ModelResponseEnded
from steploop.reducer.explore import (
    ExploreProgress,
    Invariant,
    Report,
    Verdict,
    World,
    catalogue,
    explore,
)
from steploop.reducer.explore import Observation as Obs
from steploop.reducer.explore.memo import ChainMemo
from steploop.reducer.explore.search import WorkersFactory
from steploop.reducer.messages import AssistantMessage, TextBlock, UserMessage


def _workers(processes: int) -> WorkersFactory | None:
    """The search over ``processes`` worker processes (1: in this process alone)."""
    return process_workers(processes) if processes > 1 else None


def _cex(c: Any) -> Any:
    if c is None:
        return None
    return (c.invariant, c.explanation, c.labels, c.events, c.loop_start)


def fingerprint(r: Report) -> Any:
    """Everything a report says, in comparable form."""
    return (
        r.states,
        r.transitions,
        r.expanded,
        r.rounds_reached,
        r.complete,
        r.longest_progress_free,
        _cex(r.longest_progress_free_witness),
        [
            (x.id, x.applicable, x.exercised, x.violations, _cex(x.counterexample))
            for x in r.results
        ],
        [_cex(e) for e in r.errors],
    )


class _EndsSeen(Invariant):
    """Not a rule: breaks on every response that ends with end_turn (a counterexample to find)."""

    id = "SEEN-end"
    title = "a response ended"

    def check(self, mon: Any, o: Obs) -> Verdict:
        e = o.event
        ended = isinstance(e, ModelResponseEnded) and e.stop_reason == "end_turn"
        return mon, ended, "a response ended" if ended else None


@pytest.mark.spec("ABS-4", "ABS-3")
def test_two_processes_give_the_serial_report() -> None:
    """The reference profile with the escalation gate (a lasso of INV-3 and a broken extra
    rule), cut at 2 calls per path: the same report from one process and from two."""
    cfg = claude_code_2_1_88().with_overrides({"gates.max_tokens_escalation": True})

    def run(processes: int) -> Report:
        return explore(
            cfg, rounds=2, invariants=[*catalogue(), _EndsSeen()], workers=_workers(processes)
        )

    serial, parallel = run(1), run(2)
    assert serial.states > 1_000 and serial.result("SEEN-end").counterexample is not None
    assert serial.broken  # something to compare beyond the counts
    assert fingerprint(parallel) == fingerprint(serial)


@pytest.mark.spec("ABS-4")
def test_two_processes_cut_and_report_progress_as_one() -> None:
    """A search stopped by max_states, with progress every 50 expansions: the same report and
    the same progress figures, in the same order."""
    seen: dict[int, list[ExploreProgress]] = {1: [], 2: []}

    def run(processes: int) -> Report:
        return explore(
            default(),
            max_states=1_500,
            on_progress=seen[processes].append,
            progress_every=50,
            workers=_workers(processes),
        )

    serial, parallel = run(1), run(2)
    assert not serial.complete and serial.states >= 1_500
    assert fingerprint(parallel) == fingerprint(serial)
    assert len(seen[1]) > 10 and seen[2] == seen[1]


@pytest.mark.spec("ABS-4", "M-5")
def test_two_processes_report_the_same_crashes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A step() that raises on every refusal (forked workers inherit the patch): the same
    M-5 counterexamples, in the same order, from one process and from two."""
    real = expand_module.advance  # type: ignore[attr-defined]

    def crashing(s: Any, ev: Event, cfg: Any) -> Any:
        if isinstance(ev, ModelResponseEnded) and ev.stop_reason == "refusal":
            raise ZeroDivisionError("refusal")
        return real(s, ev, cfg)

    monkeypatch.setattr(expand_module, "advance", crashing)
    serial = explore(default(), rounds=1, deep_world=None)
    parallel = explore(default(), rounds=1, deep_world=None, workers=_workers(2))
    assert serial.errors and "ZeroDivisionError" in serial.errors[0].explanation
    assert fingerprint(parallel) == fingerprint(serial)


@pytest.mark.spec("ABS-4", "R-COST-2")
def test_an_exploration_computes_no_conversation_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The explorer's memo tables are per conversation node: exploring hashes a conversation's
    canonical text only to compare one rebuilt beside the old (it cost a tenth of an
    exploration when every node was hashed)."""
    calls = [0]
    real = conversation_module.chain_digest  # type: ignore[attr-defined]

    def counted(d: bytes, m: Any) -> bytes:
        calls[0] += 1
        return real(d, m)

    monkeypatch.setattr(conversation_module, "chain_digest", counted)
    cfg = default().with_overrides({"gates.context_collapse": True})  # the segment count too
    rep = explore(cfg, rounds=1, deep_world=None)
    assert rep.states > 100 and not rep.errors
    assert calls[0] <= rep.transitions // 100


@pytest.mark.spec("ABS-4")
def test_moves_that_open_with_one_event_step_it_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Expanding a node steps each distinct opening event once and each later event once per
    move: the replies that open with the same text block share its step."""
    stepped = [0]
    real = expand_module.advance  # type: ignore[attr-defined]
    offered: list[tuple[Any, ...]] = []
    real_moves = expand_module.moves  # type: ignore[attr-defined]

    def counted(*a: Any) -> Any:
        stepped[0] += 1
        return real(*a)

    def recorded(*a: Any) -> Any:
        out = real_moves(*a)
        offered.append(out)
        return out

    monkeypatch.setattr(expand_module, "advance", counted)
    monkeypatch.setattr(expand_module, "moves", recorded)
    rep = explore(default(), rounds=1, deep_world=None, world=World(interrupts=()))
    want = sum(
        len({id(mv.events[0]) for mv in mvs}) + sum(len(mv.events) - 1 for mv in mvs)
        for mvs in offered
    )
    every = sum(len(mv.events) for mvs in offered for mv in mvs)
    assert stepped[0] == want + rep.expanded - len(offered)  # + the INV-12 probes of done nodes
    assert want < every  # something was shared
    # the counts per move are those of a search that steps every event
    ended = rep.result("INV-16").exercised
    assert ended > 0


@pytest.mark.spec("R-COST-2")
def test_the_chain_memo_folds_from_the_nearest_known_node() -> None:
    """A fold memoised per node: the value at every node of two chains that share a prefix,
    each node folded once, and the same value for an equal chain built apart."""
    folded: list[int] = []

    def fold(n: int, c: Conversation) -> int:
        folded.append(c.length)
        return n + (1 if isinstance(c.last, AssistantMessage) else 0)

    memo: ChainMemo[int] = ChainMemo(0, fold)
    u = UserMessage(id="m1", content=(TextBlock(text="hi"),))
    a = AssistantMessage(id="m2", content=(TextBlock(text="yo"),), response_id="r1", model="m")
    base = Conversation.empty().append(u).append(a)
    assert memo.get(base.append(a)) == 2
    assert memo.get(base.append(u)) == 1
    assert folded == [1, 2, 3, 3]  # the shared prefix once
    assert memo.get(Conversation.of([u, a, a])) == 2  # another chain: folded again, same value


@pytest.mark.spec("ABS-4", "ABS-3")
def test_cli_check_with_two_processes_prints_the_same_table(tmp_path: Any) -> None:
    """`steploop check --processes 2` prints what one process prints (but the timing)."""
    from tests.reducer.test_explore import _cli

    def run(n: str) -> tuple[int, list[str]]:
        argv = ["check", "--rounds", "1", "--deep", "off", "--processes", n]
        code, text = _cli([*argv, "--out", str(tmp_path / n)])
        lines = [ln for ln in text.splitlines() if "states/s" not in ln and "written to" not in ln]
        return code, lines

    one, two = run("1"), run("2")
    assert two == one and len(one[1]) > 15
