"""Reading traces fast changes nothing a reader sees (steploop/effects/trace/read.py, steploop/reducer/serialize.py).

The fast paths (the serializer's compiled structurers, the per-tag decoders) return what the general code returns, or step aside so the general code words the
error: the malformed corpus gets the same messages with and without them, and every record of
the golden scenarios decodes to the same values.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import attrs
import pytest

import steploop.effects.trace as trace
import steploop.effects.trace.read as trace_read
import steploop.reducer.digest as digest_module
import steploop.reducer.serialize as serialize
from benchmarks.replay_throughput import build_synthetic
from steploop.effects.trace import (
    StepRecord,
    TraceError,
    TraceReader,
    record_sequence,
    replay_exact,
)
from steploop.effects.trace.format import FORMER, TraceHeader
from steploop.effects.trace.replay import Walk
from steploop.reducer import Request, default, start
from steploop.reducer.canonical import canonical_bytes, state_digest
from steploop.reducer.digest import StateDigester as _StateDigester
from steploop.reducer.events import Event, ModelBlockReceived, ModelResponseEnded, ToolTraits
from steploop.reducer.messages import ToolUseBlock, Usage

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "malformed_traces"
EXPECTED: dict[str, str] = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))
SCENARIOS = ROOT / "specs" / "scenarios"


class _NoFastPath(dict[Any, Any]):
    """A structurer table that has nothing: structure() goes straight to the converter."""

    def get(self, key: Any, default: Any = None) -> Any:
        return None

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: Any) -> Any:
        return None


def _general_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_read, "_FAST_EVENTS", {})
    monkeypatch.setattr(trace_read, "_FAST_EFFECTS", {})
    monkeypatch.setattr(trace_read, "_fast_effect", lambda data, b: None)
    monkeypatch.setattr(trace_read, "_FAST_MESSAGE", None)
    monkeypatch.setattr(serialize, "_FAST", _NoFastPath())


@pytest.mark.parametrize("paths", ["fast", "general"])
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_corpus_messages_do_not_depend_on_the_fast_paths(
    name: str, paths: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if paths == "general":
        _general_only(monkeypatch)
    monkeypatch.chdir(CORPUS)
    with pytest.raises(TraceError) as info:
        replay_exact(name)
    assert str(info.value) == EXPECTED[name]


def _decoded(path: Path) -> list[Any]:
    return [
        (r.i, r.event, r.effects, r.transition, r.digest) if isinstance(r, StepRecord) else r
        for r in TraceReader(path)
    ]


def test_scenarios_decode_to_the_same_records_on_both_paths(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    paths = sorted(SCENARIOS.glob("*.jsonl"))
    fast = [_decoded(p) for p in paths]
    with monkeypatch.context() as m:
        _general_only(m)
        general = [_decoded(p) for p in paths]
    assert len(fast) == len(paths) > 10
    for p, a, b in zip(paths, fast, general, strict=True):
        assert repr(a) == repr(b), p.name


def test_an_integer_beyond_64_bits_is_read_exactly(tmp_path: Path) -> None:
    """An integer beyond 64 bits (a float to some JSON parsers) is read exactly; replay is exact."""
    huge = 123456789012345678901234567890
    block = ToolUseBlock(id="t1", name="Read", input={"n": huge, "m": -(2**70), "x": 1.5})
    events: list[Event] = [
        ModelBlockReceived(call_id=1, block=block, tool=ToolTraits(concurrency_safe=True)),
        ModelResponseEnded(
            call_id=1, model="claude-sonnet-4-5", stop_reason="tool_use", usage=Usage()
        ),
    ]
    path = tmp_path / "huge.jsonl"
    record_sequence(path, default(), Request(prompt="count"), events, provenance={})
    assert str(huge) in path.read_text(encoding="utf-8")
    assert replay_exact(path).ok
    steps = [r for r in TraceReader(path) if isinstance(r, StepRecord)]
    got = steps[1].event
    assert isinstance(got, ModelBlockReceived) and isinstance(got.block, ToolUseBlock)
    assert got.block.input == {"n": huge, "m": -(2**70), "x": 1.5}
    assert type(got.block.input["n"]) is int


def test_json_only_spellings_still_parse(tmp_path: Path) -> None:
    """Lone surrogate escapes, which only Python's json takes, are read as before (a recorder
    writes one for a surrogate in the state); NaN and Infinity, which are not JSON and which no
    recorder writes, are refused with one line (trace-format.md, "Limits")."""
    line = b'{"a": 1.5, "b": "\\ud800", "c": 1}\n'
    reader = TraceReader(tmp_path / "x.jsonl")
    obj = reader._parse_line(line, 1, tail=False)
    assert obj is not None and obj["c"] == 1 and obj["b"] == "\ud800"
    for bad, why in (
        (b"NaN", "NaN is not a JSON number"),
        (b"-Infinity", "-Infinity is not"),
        (b"1e400", "1e400 is out of the range"),
    ):
        with pytest.raises(TraceError, match=why):
            reader._parse_line(b'{"a": ' + bad + b"}\n", 1, tail=False)


def test_the_composed_state_digest_is_state_digest_at_every_step(tmp_path: Path) -> None:
    """Every step of every golden scenario and of a synthetic run with compactions."""
    synthetic = tmp_path / "synthetic.jsonl"
    build_synthetic(synthetic, 600)
    steps = 0
    for path in [*sorted(SCENARIOS.glob("*.jsonl")), synthetic]:
        walk = Walk(TraceReader(path))
        digest: Any = None
        for rec in walk:
            if isinstance(rec, TraceHeader):  # the golden traces are version 1, the new one 2
                former = FORMER[rec.version]
                digest = _StateDigester(former)
            if isinstance(rec, StepRecord):
                assert walk.state is not None
                official = digest_module.digest_with(walk.state, former)
                assert digest(walk.state) == official == rec.digest, (path, rec.i)
                if not former:
                    assert official == state_digest(walk.state)
                steps += 1
    assert steps > 700


def test_recorded_field_digests_are_the_definition_at_every_step(tmp_path: Path) -> None:
    """The recorder takes field digests from the composed texts; each step record's "fields"
    must still be what _field_digest gives for every field whose digest changed."""
    synthetic = tmp_path / "synthetic.jsonl"
    build_synthetic(synthetic, 600)
    steps = 0
    for path in [*sorted(SCENARIOS.glob("*.jsonl")), synthetic]:
        last: dict[str, str] = {}
        walk = Walk(TraceReader(path))
        for rec in walk:
            if isinstance(rec, trace.ResumeRecord):
                continue
            if isinstance(rec, TraceHeader):
                fields = _StateDigester(FORMER[rec.version]).field_digests
            if isinstance(rec, StepRecord):
                assert walk.state is not None
                now = fields(walk.state)
                expected = {n: d for n, d in now.items() if last.get(n) != d}
                assert rec.fields == expected, (path, rec.i)
                last = now
                steps += 1
    assert steps > 700


def test_a_state_that_differs_in_one_nested_field_gets_another_digest() -> None:
    """The composition reuses a field's text only while it holds the same object."""
    state, _ = start(Request(prompt="hi"), default())
    digest = _StateDigester()
    first = digest(state)
    assert first == state_digest(state)
    changed = attrs.evolve(state, round=attrs.evolve(state.round, retry_attempt=1))
    assert digest(changed) == state_digest(changed) != first
    changed_back = attrs.evolve(changed, round=state.round)
    assert digest(changed_back) == first
    ids = attrs.evolve(state, ids=attrs.evolve(state.ids, wait=7))
    assert digest(ids) == state_digest(ids) != first


def test_a_changed_tool_slot_changes_the_digest(tmp_path: Path) -> None:
    """A slot's status or input changes in place (same tuple length, same other slots)."""
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 40)
    walk = Walk(TraceReader(path))
    state = next(
        walk.state
        for rec in walk
        if isinstance(rec, StepRecord) and walk.state is not None and walk.state.round.slots
    )
    digest = _StateDigester()
    assert digest(state) == state_digest(state)
    slot = state.round.slots[0]
    for change in ({"status": "done"}, {"input": {**slot.input, "offset": 1}}, {"synthetic": True}):
        other = attrs.evolve(
            state,
            round=attrs.evolve(state.round, slots=(attrs.evolve(slot, **change),)),
        )
        assert digest(other) == state_digest(other) != state_digest(state), change
        assert digest(state) == state_digest(state)


def test_a_wrong_composition_is_never_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the composed digest ever disagreed with state_digest, replay would use state_digest."""
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 50)
    monkeypatch.setattr(_StateDigester, "__call__", lambda self, state: "0" * 32)
    report = replay_exact(path)
    assert report.ok and report.steps == 51


@pytest.mark.parametrize("whole", ["LoopState", "Round", "Ids", "Slot"])
def test_a_class_encoded_whole_is_not_composed(
    whole: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Were a state class to get a TAG or its own canonical form, the digester would encode it
    whole (canonical_bytes) instead of composing it, and still give state_digest."""
    monkeypatch.setattr(digest_module, "_composed", lambda cls: cls.__name__ != whole)
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 60)
    walk = Walk(TraceReader(path))
    digest = _StateDigester()
    for rec in walk:
        if isinstance(rec, StepRecord):
            assert walk.state is not None and digest(walk.state) == rec.digest


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("digest", "A" * 32, "step 1: 'digest' must be 32 lowercase hex digits"),
        ("digest", "a" * 31, "step 1: 'digest' must be 32 lowercase hex digits"),
        ("digest", "a" * 31 + "\n", "step 1: 'digest' must be 32 lowercase hex digits"),
        ("digest", 7, "step 1: 'digest' must be 32 lowercase hex digits"),
        ("fields", {"round": "0123456789ABCDEF"}, "step 1: 'fields' must map"),
        ("fields", {"round": "0123456789abcde"}, "step 1: 'fields' must map"),
        ("fields", {"round": "0123456789abcdeg"}, "step 1: 'fields' must map"),
        ("fields", {"rounds": "0123456789abcdef"}, "step 1: 'fields' must map"),
        ("fields", {"round": 5}, "step 1: 'fields' must map"),
    ],
)
def test_digests_and_field_digests_are_lowercase_hex(
    key: str, value: Any, message: str, tmp_path: Path
) -> None:
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 3)
    lines = path.read_text(encoding="utf-8").splitlines()
    n = next(n for n, line in enumerate(lines) if line.startswith('{"record":"step","i":1,'))
    obj = json.loads(lines[n])
    obj[key] = value
    lines[n] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError, match=f":{n + 1}: " + re.escape(message)):
        replay_exact(path)


@pytest.mark.parametrize("value", [0, -1, 2**70, True, False, None, 'é\u2028"x', 1.5, (), ("a", 1)])
def test_a_field_value_is_written_as_canonical_bytes_writes_it(value: Any) -> None:
    assert digest_module._value_text(value) == canonical_bytes(value)
