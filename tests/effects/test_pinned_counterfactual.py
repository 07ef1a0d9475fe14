"""Counterfactual replay (steploop/effects/trace/counterfactual.py): behaviour an outside mutation
run found nothing pinned (issue 27): the live policy answers from the client it is given, a
recorded call stays usable when only ``max_tokens`` changes and its answer cannot depend on
it, a withdrawn request's recorded answer is never delivered, and the recorded world's clock
never runs backwards."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

import steploop.effects.trace.counterfactual as counterfactual
import steploop.effects.trace_cli as trace_cli
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.trace import (
    ReplayError,
    TraceReader,
    record_driver,
    record_sequence,
    replay_counterfactual,
)
from steploop.effects.trace.fingerprints import Fingerprints
from steploop.reducer import LoopState, Request, default
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    CancelTools,
    Compact,
    Effect,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.messages import SystemMessage, TextBlock, ToolUseBlock, Usage, UserMessage

MODEL = "claude-sonnet-4-5"
SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
BASH = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)


def _ended(call_id: int, stop: str = "end_turn", out: int = 10, inp: int = 100) -> Event:
    usage = Usage(input_tokens=inp, output_tokens=out)
    return ModelResponseEnded(call_id=call_id, model=MODEL, stop_reason=stop, usage=usage)


def _text(call_id: int, words: str) -> Event:
    return ModelBlockReceived(call_id=call_id, block=TextBlock(text=words))


def _growing(path: Path) -> Path:
    """Three Read rounds whose context grows (1,000 to 9,000 input tokens), then an answer:
    replayed with ``autocompact_buffer=185000`` the new run compacts where the recording did
    not, so its compaction and the call after it must come from the policy."""
    usage_in = (1_000, 8_000, 9_000, 9_500)

    def answer(effect: Effect, state: LoopState) -> list[Event]:
        match effect:
            case CallModel(call_id=c):
                if c < len(usage_in):
                    block = ToolUseBlock(id=f"toolu_{c}", name="Read", input={"file_path": "a.py"})
                    return [
                        ModelBlockReceived(call_id=c, block=block, tool=SAFE),
                        _ended(c, "tool_use", inp=usage_in[c - 1]),
                    ]
                return [_text(c, "All read."), _ended(c, inp=usage_in[-1])]
            case AskPermission(generation=g, tool_use_id=t):
                return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow")]
            case StartTool(generation=g, tool_use_id=t):
                return [ToolFinished(generation=g, tool_use_id=t, content="x = 1")]
            case Compact(compact_id=c):
                boundary = SystemMessage(id=f"c{c}-b", subtype="compact_boundary", text="compacted")
                summary = UserMessage(
                    id=f"c{c}-s",
                    content=(TextBlock(text="so far"),),
                    is_meta=True,
                    origin="compact_summary",
                )
                return [CompactionFinished(compact_id=c, messages=(boundary, summary))]
            case RunStopHooks(hooks_id=h):
                return [StopHooksFinished(hooks_id=h)]
        return []

    record_driver(path, default(), Request(prompt="Read them all"), answer)
    return path


# --- the live policy -------------------------------------------------------------------------


def _traits(name: str, _input: dict[str, Any]) -> ToolTraits:
    return SAFE


def test_the_live_policy_answers_from_the_model_client_it_is_given(tmp_path: Path) -> None:
    """policy "live" hands what the recording lacks to the ``model`` given: the replay finishes
    with the compaction and the call after it answered by that client."""
    path = _growing(tmp_path / "grow.jsonl")
    client = ScriptedModel(
        [reply("A summary of the reads."), reply("Everything was read.")], _traits
    )
    report = replay_counterfactual(path, {"autocompact_buffer": 185_000}, "live", model=client)
    assert report.status == "finished", report.describe()
    assert report.terminal is not None and report.terminal.TAG == "completed"
    assert report.by_policy == {"compact": 1, "call_model": 1}
    assert client.remaining == 0


class _Closable:
    def __init__(self) -> None:
        self.closed = 0

    async def close(self) -> None:
        self.closed += 1


def test_cli_on_divergence_live_hands_the_replay_its_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``steploop replay --on-divergence live`` answers the divergence from the client it made
    (exit 0, terminal completed) and closes the SDK client after."""
    path = _growing(tmp_path / "grow.jsonl")
    sdk = _Closable()
    model = ScriptedModel(
        [reply("A summary of the reads."), reply("Everything was read.")], _traits
    )
    made: list[Any] = []

    def live_model(traits_for: Any, tools: Any, *, instead: str) -> tuple[Any, Any]:
        made.append(instead)
        return sdk, model

    monkeypatch.setattr(trace_cli, "live_model", live_model)
    out = io.StringIO()
    argv = ["replay", str(path), "--set", "autocompact_buffer=185000", "--on-divergence", "live"]
    code = trace_cli.main(argv, out)
    assert code == 0, out.getvalue()
    assert "on divergence: live" in out.getvalue() and "terminal completed" in out.getvalue()
    assert model.remaining == 0 and sdk.closed == 1 and len(made) == 1


# --- max_tokens alone --------------------------------------------------------------------------


def _one_call(path: Path, answer: list[Event]) -> Path:
    record_sequence(path, default(), Request(prompt="go"), answer)
    return path


def _recorded_max_tokens(path: Path) -> int:
    from steploop.effects.trace.format import StepRecord

    for rec in TraceReader(path):
        if isinstance(rec, StepRecord):
            for e in rec.effects:
                if isinstance(e, CallModel):
                    return e.max_tokens
    raise AssertionError("no call_model recorded")


def test_a_failed_call_stays_compatible_when_only_max_tokens_changes(tmp_path: Path) -> None:
    """A recorded call that failed does not depend on max_tokens: asked again with a lower cap
    (4,000 instead of 8,000) it is answered from the recording, no divergence."""
    failed = ModelCallFailed(call_id=1, kind="invalid_request", status=400, message="bad")
    path = _one_call(tmp_path / "failed.jsonl", [failed])
    assert _recorded_max_tokens(path) == 8_000
    report = replay_counterfactual(path, {"capped_max_output_tokens": 4_000})
    assert report.status == "finished", report.describe()
    assert report.matched == {"call_model": 1} and report.by_policy == {}


@pytest.mark.parametrize(
    ("stop", "out", "cap", "matches"),
    [
        ("end_turn", 16_000, 16_000, True),  # the answer fits the new cap exactly
        ("end_turn", 16_001, 16_000, False),  # it would have been cut off
        ("max_tokens", 10, 16_000, False),  # it was cut off: a new cap changes the answer
        ("max_tokens", 10, 32_000, True),  # the same cap: the same answer
    ],
)
def test_an_answered_call_matches_only_if_its_answer_fits_the_new_cap(
    tmp_path: Path, stop: str, out: int, cap: int, matches: bool
) -> None:
    """A recorded answer is reused under another max_tokens only when it ended on its own and
    its output fits the new cap; otherwise the replay diverges at that call."""
    cfg = default().with_overrides({"gates.max_tokens_escalation": False})  # 32,000 a call
    answer = [_text(1, "hi"), _ended(1, stop, out=out)]
    if stop == "end_turn":
        answer.append(StopHooksFinished(hooks_id=1))
    path = tmp_path / "answered.jsonl"
    record_sequence(path, cfg, Request(prompt="go"), answer)
    assert _recorded_max_tokens(path) == 32_000
    report = replay_counterfactual(path, {"max_output_tokens": cap})
    if matches:
        assert report.divergence is None, report.describe()
        assert report.matched.get("call_model", 0) >= 1
    else:
        d = report.divergence
        assert report.status == "diverged" and d is not None, report.describe()
        assert (d.kind, d.ordinal, d.reason) == ("call_model", 1, "no recorded effect matches it")


# --- withdrawn requests ----------------------------------------------------------------------


def test_a_withdrawn_tools_recorded_answer_is_never_delivered(tmp_path: Path) -> None:
    """Bash fails and cancels its sibling Read, whose result the recording holds as a late
    answer: the new run's world drops it (the cancel is recorded), so the new run steps one
    event fewer than the recording and never sees Read's result."""
    events = [
        ModelBlockReceived(
            call_id=1, block=ToolUseBlock(id="t1", name="Bash", input={}), tool=BASH
        ),
        ModelBlockReceived(
            call_id=1, block=ToolUseBlock(id="t2", name="Read", input={}), tool=SAFE
        ),
        _ended(1, "tool_use"),
        PermissionAnswered(generation=1, tool_use_id="t1", decision="allow"),
        PermissionAnswered(generation=1, tool_use_id="t2", decision="allow"),
        ToolFinished(generation=1, tool_use_id="t1", content="exit 2", is_error=True),
        ToolFinished(generation=1, tool_use_id="t2", content="late"),  # after the cancel
        _text(2, "done"),
        _ended(2),
        StopHooksFinished(hooks_id=1),
    ]
    path = tmp_path / "cancel.jsonl"
    record_sequence(path, default(), Request(prompt="go"), events)
    new = tmp_path / "new.jsonl"
    report = replay_counterfactual(path, {"snip_keep_rounds": 2}, record=new)
    assert report.status == "finished", report.describe()
    assert (report.steps, report.recorded_steps) == (10, 11)
    finished = [
        json.loads(line)["event"]["tool_use_id"]
        for line in new.read_text(encoding="utf-8").splitlines()
        if '"tool_finished"' in line and json.loads(line).get("record") == "step"
    ]
    assert finished == ["t1"]


def _world(tmp_path: Path) -> Any:
    path = _one_call(
        tmp_path / "w.jsonl", [_text(1, "hi"), _ended(1), StopHooksFinished(hooks_id=1)]
    )
    fps = Fingerprints()
    index = counterfactual._Index(path, fps)
    return counterfactual._RecordedWorld(index, fps, "stop", None, 1_000, None, 256)


def _drain(world: Any, state: Any) -> list[int]:
    async def main() -> list[int]:
        got: list[int] = []
        while (ev := await world.next_event(state)) is not None:
            assert isinstance(ev, WaitElapsed)
            got.append(ev.wait_id)
        return got

    return anyio.run(main)


def test_a_cancel_drops_the_queued_answers_of_what_it_withdraws(tmp_path: Path) -> None:
    """The world records what a cancel withdraws: answers queued for those requests are
    skipped, the others delivered in order."""
    world = _world(tmp_path)
    for n, tid in enumerate(("a", "b", "c"), 1):
        world.push(float(n), WaitElapsed(wait_id=n), ("start_tool", 1, tid), None)
    state = world.index.header  # next_event does not read the state
    world.perform(CancelTools(generation=1, tool_use_ids=("b",), reason="sibling_error"), state)
    assert ("start_tool", 1, "b") in world.cancelled
    assert _drain(world, state) == [1, 3]


def test_the_recorded_worlds_clock_never_runs_backwards(tmp_path: Path) -> None:
    """The clock is the recorded place of the latest event delivered: an earlier recorded
    answer delivered after it (a request matched out of order) does not move it back, so an
    answer the policy gives then comes after every recorded answer already queued up to it."""
    world = _world(tmp_path)
    state = world.index.header
    world.push(7.0, WaitElapsed(wait_id=7), None, None)

    async def first() -> Any:
        return await world.next_event(state)

    assert anyio.run(first) == WaitElapsed(wait_id=7) and world.clock == 7.0
    world.push(3.0, WaitElapsed(wait_id=3), None, None)  # recorded earlier, queued now
    world.push(5.0, WaitElapsed(wait_id=5), None, None)
    assert anyio.run(first) == WaitElapsed(wait_id=3) and world.clock == 7.0
    world.answered("wait", ("wait", 9), [WaitElapsed(wait_id=9)])  # the policy's, at 7.5
    assert _drain(world, state) == [5, 9]
    assert world.clock == 7.5


# --- the wording users read ----------------------------------------------------------------------


def test_the_policy_errors_are_worded_exactly(tmp_path: Path) -> None:
    """A policy without its script or model, or an unknown one, is one ReplayError whose text
    says what is missing and how to give it."""
    path = _one_call(
        tmp_path / "t.jsonl", [_text(1, "hi"), _ended(1), StopHooksFinished(hooks_id=1)]
    )
    cases = [
        ("scripted", "policy 'scripted' needs a script (a list of responses)"),
        (
            "live",
            "policy 'live' needs a model client (steploop replay makes one from ANTHROPIC_API_KEY)",
        ),
        ("later", "unknown policy 'later'; expected one of stop, scripted, live"),
    ]
    for policy, text in cases:
        with pytest.raises(ReplayError) as err:
            replay_counterfactual(path, {}, policy)  # type: ignore[arg-type]
        assert str(err.value) == text


def test_a_run_past_max_steps_is_stopped_with_its_count(tmp_path: Path) -> None:
    """max_steps bounds the new run: past it, one ReplayError naming the bound."""
    path = _one_call(
        tmp_path / "t.jsonl", [_text(1, "hi"), _ended(1), StopHooksFinished(hooks_id=1)]
    )
    with pytest.raises(ReplayError) as err:
        replay_counterfactual(path, {}, max_steps=2)
    assert str(err.value) == "the counterfactual run passed 2 steps; stopped"


def test_a_divergence_the_policy_cannot_answer_says_what_it_answers(tmp_path: Path) -> None:
    """Under "scripted", a tool the script's answer asks for has no recorded permission: the
    divergence says the policy answers model calls, compactions, waits and summaries only."""
    path = _one_call(
        tmp_path / "t.jsonl", [_text(1, "hi"), _ended(1), StopHooksFinished(hooks_id=1)]
    )
    script = [tool_call("Read", {"file_path": "a.py"})]
    report = replay_counterfactual(path, {"model": "claude-opus-4-1"}, "scripted", script)
    d = report.divergence
    assert report.status == "diverged" and d is not None, report.describe()
    assert d.kind == "ask_permission" and d.recorded is None
    assert d.reason == (
        "no recorded effect matches it, and policy 'scripted' answers model calls, "
        "compactions, waits and summaries only"
    )


def test_a_script_run_dry_is_a_divergence_naming_the_policys_model(tmp_path: Path) -> None:
    """A script with no entry left for the call the recording lacks: the replay diverges at
    that call, the reason naming the policy's model and its error."""
    path = _one_call(
        tmp_path / "t.jsonl", [_text(1, "hi"), _ended(1), StopHooksFinished(hooks_id=1)]
    )
    report = replay_counterfactual(
        path, {"model": "claude-opus-4-1"}, "scripted", ScriptedModel([], _traits)
    )
    d = report.divergence
    assert report.status == "diverged" and d is not None, report.describe()
    assert (d.kind, d.ordinal) == ("call_model", 1)
    head = "the scripted model failed: "
    assert d.reason.startswith(head) and len(d.reason) > len(head)
