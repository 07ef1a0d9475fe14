"""Exact replay's checkpoint policy (``replay_exact(verify="checkpoint")``).

Effects are checked at every step, state digests at checkpoints; when a checkpoint (or any other
finding) shows a difference, the steps since the last checkpoint are checked one by one. Every
report here is compared field by field (all but the elapsed time) with the one ``"every"`` gives,
together with the steps ``on_step`` saw. The one thing the policy does not see, a recorded digest
that is wrong only between checkpoints, is pinned as well.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import pytest

from benchmarks.replay_throughput import build_synthetic
from steploop.effects.trace import (
    DEFAULT_CHECKPOINT_EVERY,
    ReplayReport,
    StepRecord,
    TraceError,
    replay_exact,
)
from steploop.effects.trace_cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "specs" / "scenarios"
EVERY_K = (1, 7, 32, DEFAULT_CHECKPOINT_EVERY)

Outcome = tuple[str, Any, list[int]]


def _outcome(path: Path, **kw: Any) -> Outcome:
    """(report without its timing, or the error's text), and the steps on_step saw."""
    seen: list[int] = []
    try:
        report = replay_exact(path, on_step=lambda r: seen.append(r.i), **kw)
    except TraceError as e:
        return "error", str(e), seen
    return "report", _facts(report), seen


def _facts(report: ReplayReport) -> dict[str, Any]:
    out = attrs.asdict(report, recurse=False)
    out.pop("elapsed_s")
    out["describe"] = report.mismatch.describe() if report.mismatch is not None else None
    return out


def _assert_same(path: Path) -> Outcome:
    every = _outcome(path)
    for k in EVERY_K:
        assert _outcome(path, verify="checkpoint", checkpoint_every=k) == every, k
    return every


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The lines of a 400-event synthetic trace (compactions included)."""
    path = tmp_path_factory.mktemp("ckpt") / "synthetic.jsonl"
    build_synthetic(path, 400)
    return path.read_text(encoding="utf-8").splitlines()


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _edit(lines: list[str], i: int, change: Callable[[dict[str, Any]], None]) -> list[str]:
    """The lines with step ``i``'s record changed."""
    out = list(lines)
    for n, line in enumerate(out):
        obj = json.loads(line)
        if obj["record"] == "step" and obj["i"] == i:
            change(obj)
            out[n] = json.dumps(obj, separators=(",", ":"))
            return out
    raise AssertionError(f"no step {i}")


def _step_of(lines: list[str], i: int) -> dict[str, Any]:
    return next(o for o in map(json.loads, lines) if o["record"] == "step" and o["i"] == i)


def _events_of(lines: list[str], tag: str) -> list[int]:
    return [
        o["i"]
        for o in map(json.loads, lines)
        if o["record"] == "step" and o["event"] is not None and o["event"]["type"] == tag
    ]


@pytest.mark.parametrize("name", sorted(p.stem for p in SCENARIOS.glob("*.jsonl")))
def test_scenarios_replay_the_same_under_both_policies(name: str) -> None:
    kind, facts, seen = _assert_same(SCENARIOS / f"{name}.jsonl")
    assert kind == "report" and facts["ok"] and facts["complete"] and seen


def test_a_clean_synthetic_trace_replays_the_same(tmp_path: Path, synthetic: list[str]) -> None:
    kind, facts, seen = _assert_same(_write(tmp_path / "t.jsonl", synthetic))
    assert kind == "report" and facts["ok"] and seen == list(range(401))


def _more_output(obj: dict[str, Any]) -> None:
    """One more output token: the effects agree, the turn's output count differs from here on."""
    obj["event"]["usage"]["output_tokens"] += 1


def _later(obj: dict[str, Any]) -> None:
    """A response one millisecond later: the state differs until the next response."""
    obj["event"]["at_ms"] += 1


def test_a_state_that_differs_from_a_step_on_is_reported_at_that_step(
    tmp_path: Path, synthetic: list[str]
) -> None:
    k = next(i for i in _events_of(synthetic, "model_response_ended") if i > 100 and i % 7)
    path = _write(tmp_path / "t.jsonl", _edit(synthetic, k, _more_output))
    kind, facts, seen = _assert_same(path)
    assert kind == "report" and not facts["ok"]
    mm = facts["mismatch"]
    assert (mm.step, mm.what) == (k, "digest") and "turn_output_tokens" in mm.fields
    assert facts["steps"] == k + 1 and seen == list(range(k))


@pytest.mark.parametrize("offset", [0, 1, 5])
def test_a_differing_effect_after_a_differing_state_reports_the_state(
    tmp_path: Path, synthetic: list[str], offset: int
) -> None:
    """An effect differs a few steps after the state did: the first difference is the state's."""
    k = next(i for i in _events_of(synthetic, "model_response_ended") if i > 200 and i % 7)
    lines = _edit(synthetic, k, _more_output)
    j = next(i for i in range(k + offset, 400) if _step_of(lines, i)["effects"])

    def other_effect(obj: dict[str, Any]) -> None:
        obj["effects"][-1] = {"type": "cancel_wait", "wait_id": 99}

    lines = _edit(lines, j, other_effect)
    _, facts, _ = _assert_same(_write(tmp_path / "t.jsonl", lines))
    mm = facts["mismatch"]
    if j == k:  # the same step: its effects are checked before its digest
        assert (mm.step, mm.what) == (k, "effects")
    else:
        assert (mm.step, mm.what) == (k, "digest")


def test_a_differing_effect_alone_is_reported_as_before(
    tmp_path: Path, synthetic: list[str]
) -> None:
    j = next(i for i in range(150, 400) if _step_of(synthetic, i)["effects"])

    def other_effect(obj: dict[str, Any]) -> None:
        obj["effects"][0] = {"type": "cancel_wait", "wait_id": 99}

    _, facts, _ = _assert_same(_write(tmp_path / "t.jsonl", _edit(synthetic, j, other_effect)))
    mm = facts["mismatch"]
    assert (mm.step, mm.what, mm.effect_index) == (j, "effects", 0)


@pytest.mark.parametrize("breakage", ["not json", "illegal event", "cut"])
def test_an_unreadable_line_after_a_differing_state_reports_the_state(
    tmp_path: Path, synthetic: list[str], breakage: str
) -> None:
    """'every' stops at the differing digest before it reads the bad line; so does checkpoint.
    Without the differing state both raise the same error."""
    k = next(i for i in _events_of(synthetic, "model_response_ended") if i > 100 and i % 7)
    j = k + 3
    broken = list(synthetic)
    n = next(n for n, line in enumerate(broken) if line.startswith(f'{{"record":"step","i":{j},'))
    if breakage == "not json":
        broken[n] = broken[n][:40] + "}"
    elif breakage == "illegal event":
        obj = json.loads(broken[n])
        obj["event"] = {"type": "wait_elapsed", "wait_id": 1, "at_ms": 0}
        broken[n] = json.dumps(obj, separators=(",", ":"))
    else:
        broken = broken[: n + 1]
        broken[n] = broken[n][:40]
    kind, error, _ = _assert_same(_write(tmp_path / "clean.jsonl", broken))
    assert kind == "error" and f":{n + 1}: " in error

    def later(obj: dict[str, Any]) -> None:
        obj["event"]["at_ms"] += 1

    kind, facts, _ = _assert_same(_write(tmp_path / "t.jsonl", _edit(broken, k, later)))
    assert kind == "report" and (facts["mismatch"].step, facts["mismatch"].what) == (k, "digest")


def test_the_end_record_is_checked_after_the_last_digest(tmp_path: Path) -> None:
    lines = (SCENARIOS / "completed.jsonl").read_text(encoding="utf-8").splitlines()
    end = json.loads(lines[-1])
    assert end["record"] == "end"
    lines[-1] = json.dumps({**end, "terminal": {"type": "max_turns", "turn_count": 1}})
    _, facts, _ = _assert_same(_write(tmp_path / "terminal.jsonl", lines))
    assert facts["mismatch"].what == "terminal"

    def wrong(obj: dict[str, Any]) -> None:
        obj["digest"] = "0" * 32

    lines = _edit(lines, end["i"], wrong)
    _, facts, _ = _assert_same(_write(tmp_path / "both.jsonl", lines))
    assert (facts["mismatch"].step, facts["mismatch"].what) == (end["i"], "digest")


def test_a_digest_wrong_at_a_checkpoint_is_found(tmp_path: Path, synthetic: list[str]) -> None:
    def wrong(obj: dict[str, Any]) -> None:
        obj["digest"] = "0" * 32

    for k in (7 * 20 - 1, 400):  # a checkpoint of every 7 steps (step i is the (i+1)-th); last
        path = _write(tmp_path / f"t{k}.jsonl", _edit(synthetic, k, wrong))
        every = _outcome(path)
        assert every[1]["mismatch"].step == k
        assert _outcome(path, verify="checkpoint", checkpoint_every=7) == every


def test_a_digest_wrong_only_between_checkpoints_is_seen_only_by_every(
    tmp_path: Path, synthetic: list[str]
) -> None:
    """The documented limit of the checkpoint policy: an edited digest between checkpoints."""

    def wrong(obj: dict[str, Any]) -> None:
        obj["digest"] = "0" * 32

    path = _write(tmp_path / "t.jsonl", _edit(synthetic, 150, wrong))
    every = replay_exact(path)
    assert every.mismatch is not None and (every.mismatch.step, every.mismatch.what) == (
        150,
        "digest",
    )
    assert replay_exact(path, verify="checkpoint", checkpoint_every=7).ok


def test_a_state_that_differs_only_between_checkpoints_is_seen_only_by_every(
    tmp_path: Path, synthetic: list[str]
) -> None:
    """The same limit for a real difference that heals: a response's clock differs until the
    next response overwrites it, and no checkpoint falls in between."""
    k = next(i for i in _events_of(synthetic, "model_response_ended") if i > 100 and i % 32 == 1)
    path = _write(tmp_path / "t.jsonl", _edit(synthetic, k, _later))
    every = replay_exact(path)
    assert every.mismatch is not None and every.mismatch.step == k
    assert every.mismatch.fields == ("last_assistant_at_ms",)
    assert replay_exact(path, verify="checkpoint", checkpoint_every=32).ok
    found = replay_exact(path, verify="checkpoint", checkpoint_every=1)
    assert found.mismatch == every.mismatch


def test_the_policy_arguments_are_checked(tmp_path: Path) -> None:
    path = SCENARIOS / "completed.jsonl"
    with pytest.raises(ValueError, match="verify must be one of every, checkpoint"):
        replay_exact(path, verify="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="checkpoint_every must be at least 1"):
        replay_exact(path, verify="checkpoint", checkpoint_every=0)


def test_cli_verify_option(tmp_path: Path, synthetic: list[str], capsys: Any) -> None:
    import io

    def run(argv: list[str]) -> tuple[int, str]:
        out = io.StringIO()
        return cli_main(argv, out), out.getvalue()

    path = _write(tmp_path / "t.jsonl", synthetic)
    code, text = run(["replay", str(path), "--verify", "checkpoint", "--checkpoint-every", "5"])
    assert code == 0 and "replayed exactly: 401 steps" in text
    k = next(i for i in _events_of(synthetic, "model_response_ended") if i > 100 and i % 5)
    _write(path, _edit(synthetic, k, _more_output))
    every = run(["replay", str(path)])
    lazy = run(["replay", str(path), "--verify", "checkpoint", "--checkpoint-every", "5"])
    assert every == lazy and every[0] == 1 and f"mismatch at step {k} " in every[1]
    with pytest.raises(SystemExit):
        run(["replay", str(path), "--checkpoint-every", "0"])
    assert "at least 1" in capsys.readouterr().err


def test_on_step_sees_records(tmp_path: Path, synthetic: list[str]) -> None:
    recs: list[StepRecord] = []
    replay_exact(
        _write(tmp_path / "t.jsonl", synthetic),
        on_step=recs.append,
        verify="checkpoint",
        checkpoint_every=64,
    )
    assert [r.i for r in recs] == list(range(401)) and all(isinstance(r, StepRecord) for r in recs)


@pytest.mark.parametrize("k", [0, 5, 63, 64, 200])
def test_an_on_step_that_raises_is_heard_once_per_step(
    tmp_path: Path, synthetic: list[str], k: int
) -> None:
    """The callback's exception comes out of both policies, after the same calls, each once."""
    path = _write(tmp_path / "t.jsonl", synthetic)

    def calls(**kw: Any) -> list[int]:
        seen: list[int] = []

        def hear(rec: StepRecord) -> None:
            seen.append(rec.i)
            if rec.i == k:
                raise KeyError("stop here")

        with pytest.raises(KeyError, match="stop here"):
            replay_exact(path, on_step=hear, **kw)
        return seen

    every = calls()
    assert every == list(range(k + 1))
    for n in EVERY_K:
        assert calls(verify="checkpoint", checkpoint_every=n) == every, n
