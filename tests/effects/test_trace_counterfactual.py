"""Counterfactual replay stays linear in the trace, and replays report their progress."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

import steploop.effects.trace.counterfactual as counterfactual
import steploop.effects.trace.fingerprints as fingerprints
from benchmarks.counterfactual import CHANGE, build
from steploop.effects.trace import ReplayProgress, TraceReader, replay_counterfactual, replay_exact
from steploop.effects.trace.format import StepRecord
from steploop.reducer import fastpaths
from steploop.reducer.effects import CallModel


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cf") / "session.jsonl"
    build(path, 150)  # 150 tool rounds, history never compacted
    return path


def test_each_message_is_encoded_once_per_run(
    session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model call's fingerprint is chained from the previous call's: each message's content
    is encoded once in the recording and once in the new run, never the history per call
    (that made a 1,000-round session take 33 s)."""
    encoded = [0]
    real = fingerprints.message_content

    def counting(m: object) -> bytes:
        encoded[0] += 1
        return real(m)  # type: ignore[arg-type]

    monkeypatch.setattr(fingerprints, "message_content", counting)
    report = replay_counterfactual(session, CHANGE)
    assert report.status == "finished" and report.matched["call_model"] == 151
    last_call = [
        e
        for rec in TraceReader(session)
        if isinstance(rec, StepRecord)
        for e in rec.effects
        if isinstance(e, CallModel)
    ][-1]
    assert encoded[0] <= 2 * last_call.conversation.length


def test_a_long_recording_is_let_go_as_it_is_used(session: Path) -> None:
    """The index reads the recording as far as the new run needs it and drops what it used:
    at the end it holds no recorded answer of a matched request."""
    fps = fingerprints.Fingerprints()
    index = counterfactual._Index(session, fps)
    assert index.steps < 5  # nothing read beyond the start yet
    r = index.ordinal("call_model", 3)
    assert r is not None and index.steps < 30
    index.use(r)
    assert r.key not in index.answers


def test_replays_report_progress(session: Path) -> None:
    size = session.stat().st_size
    seen: list[ReplayProgress] = []
    assert replay_exact(session, progress=seen.append, progress_every=100).ok
    assert [p.phase for p in seen] == ["reading"] * len(seen) and len(seen) >= 7
    assert all(a.done <= b.done for a, b in itertools.pairwise(seen))
    assert seen[-1].done == size and seen[-1].fraction == 1.0
    seen.clear()
    report = replay_counterfactual(session, CHANGE, progress=seen.append, progress_every=100)
    assert report.ok and len(seen) >= 7
    assert {p.phase for p in seen} == {"reading", "running"}
    assert max(p.done for p in seen) == size


def _calls(*messages: object) -> CallModel:
    from steploop.reducer.conversation import Conversation

    return CallModel(call_id=1, model="m", conversation=Conversation.of(messages), max_tokens=100)


def test_same_requests_proves_only_what_the_fingerprints_say() -> None:
    """The object comparison (fast path: same request) says "same" only for requests whose
    fingerprints are equal; where the canonical texts differ (1 against True, a list against a
    tuple in a tool input) it never does, and the fingerprints decide."""
    from steploop.reducer.effects import StartTool
    from steploop.reducer.messages import AssistantMessage, TextBlock, ToolUseBlock, UserMessage

    fps = fingerprints.Fingerprints()
    use = ToolUseBlock(id="t1", name="Read", input={"n": 1})

    def asst(mid: str, *blocks: object) -> AssistantMessage:
        return AssistantMessage(id=mid, response_id=f"r{mid}", model="m", content=blocks)  # type: ignore[arg-type]

    base = [UserMessage(id="u0", content=(TextBlock(text="go"),)), asst("a1", use)]
    pairs = [
        (base, [UserMessage(id="x0", content=(TextBlock(text="go"),)), asst("y1", use)], True),
        (base, [*base[:1], asst("a1", ToolUseBlock(id="t1", name="Read", input={"n": 1}))], None),
        (
            base,
            [*base[:1], asst("a1", ToolUseBlock(id="t1", name="Read", input={"n": True}))],
            False,
        ),
        (base, [*base[:1], asst("a1", TextBlock(text="go"))], False),
        (base, base[:1], False),
    ]
    for a, b, proven in pairs:
        ea, eb = _calls(*a), _calls(*b)
        equal = fps(ea) == fps(eb)
        said = fingerprints.SameRequests().request(ea, eb)
        assert not said or equal  # a proof is never wrong
        if proven is not None:
            assert said is proven and (equal if proven else True)
    one = StartTool(generation=1, tool_use_id="t1", name="Read", input=use.input)
    assert fingerprints.SameRequests().request(one, one)
    other = StartTool(generation=1, tool_use_id="t1", name="Read", input={"n": True})
    assert not fingerprints.SameRequests().request(one, other) and fps(one) != fps(other)


@pytest.fixture
def counterfactual_fast_paths() -> Iterator[None]:
    """The counterfactual replay's fast paths on for the test (the suite may run with every
    fast path off, STEPLOOP_NO_FAST_PATHS=1), as they were after."""
    with fastpaths.off("same_request", "same_address"):
        fastpaths.enable("same_request", "same_address")
        yield


@pytest.mark.usefixtures("counterfactual_fast_paths")
def test_a_replay_that_follows_the_recording_encodes_no_message(
    session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The new run's requests are shown the recording's by comparing objects: no message is
    encoded for a fingerprint (at most once per message class, for its field layout)."""
    encoded = [0]
    real = fingerprints.message_content

    def counting(m: object) -> bytes:
        encoded[0] += 1
        return real(m)  # type: ignore[arg-type]

    monkeypatch.setattr(fingerprints, "message_content", counting)
    report = replay_counterfactual(session, CHANGE)
    assert report.status == "finished" and report.out_of_order == 0
    assert encoded[0] <= 3


@pytest.mark.usefixtures("counterfactual_fast_paths")
def test_an_answer_already_addressed_is_taken_as_recorded() -> None:
    """A recorded answer whose ids are the new request's is used as it is (fast path: same
    address); another is readdressed, as readdress() does."""
    from steploop.reducer.events import ModelResponseEnded
    from steploop.reducer.messages import Usage
    from steploop.reducer.protocol import kind_of, opens, readdress

    ended = ModelResponseEnded(call_id=1, model="m", stop_reason="end_turn", usage=Usage())
    call = _calls()
    key = opens(call)
    assert key is not None
    assert counterfactual._readdressed(ended, call, kind_of(key)) is ended
    later = CallModel(call_id=7, model="m", conversation=call.conversation, max_tokens=100)
    got = counterfactual._readdressed(ended, later, kind_of(key))
    assert got == readdress(ended, later) and isinstance(got, ModelResponseEnded)
    assert got.call_id == 7


def test_requests_are_found_by_fingerprint_when_first_needed(session: Path) -> None:
    """The index takes no fingerprint while requests match in order; a match out of order
    finds every unused recorded request by its fingerprint, in recorded order, and never one
    already used."""
    fps = fingerprints.Fingerprints()
    index = counterfactual._Index(session, fps)
    used = index.ordinal("call_model", 2)
    assert used is not None
    index.use(used)
    index.finish()
    assert not index.by_fp and not index._fps  # nothing fingerprinted yet
    used_fp = fps(index.used_effects[used.key])
    assert list(index.with_fingerprint("call_model", used_fp)) == []
    calls = index.by_kind["call_model"]
    for r in (calls[0], calls[2], calls[-1]):
        assert list(index.with_fingerprint("call_model", fps(index.effects[r.key]))) == [r]
    assert (
        sum(len(v) for v in index.by_fp.values()) == sum(len(v) for v in index.by_kind.values()) - 1
    )
