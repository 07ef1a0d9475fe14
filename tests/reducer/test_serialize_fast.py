"""The serializer's fast path is a partial function of the converter (steploop/reducer/serialize.py).

For every value it takes it returns exactly what the cattrs converter returns; everything else
(other shapes, coercible scalars, unknown tags, validator failures) goes to the converter, so
errors keep their words. Checked on every value of the golden scenario traces, on synthetic
ones, and on many mutations of each.
"""

from __future__ import annotations

import copy
import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from benchmarks.replay_throughput import build_synthetic
from steploop.effects.trace import StepRecord, TraceHeader, TraceReader
from steploop.effects.trace.replay import Walk
from steploop.reducer import LoopConfig, Session, default
from steploop.reducer.events import Event, ModelCallFailed
from steploop.reducer.messages import AttachmentMessage, Message, TextBlock, Usage
from steploop.reducer.serialize import (
    SerializationError,
    converter,
    fast_structurer,
    structure,
    unstructure,
)
from steploop.reducer.state import Ids
from steploop.reducer.transitions import Terminal, Transition

SCENARIOS = Path(__file__).resolve().parents[2] / "specs" / "scenarios"
_SENTINELS: tuple[Any, ...] = ("5", 5, 0, True, False, None, 5.0, [], {}, ["x"], {"type": "text"})


def _slow(data: Any, cls: Any) -> tuple[str, Any]:
    try:
        return "ok", converter.structure(data, cls)
    except Exception as e:
        return "error", type(e).__name__


def _same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (True is not 1, a tuple is not a list)."""
    return type(a) is type(b) and a == b and repr(a) == repr(b)


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Any, Any]]:
    """(data, type) for every value the scenario traces and a synthetic one hold, as JSON."""
    synthetic = tmp_path_factory.mktemp("fast") / "synthetic.jsonl"
    build_synthetic(synthetic, 300)
    paths = [*sorted(SCENARIOS.glob("*.jsonl")), synthetic]
    return [(json.loads(json.dumps(data)), cls) for data, cls in _unstructured(paths)]


def _unstructured(paths: list[Path]) -> Iterator[tuple[Any, Any]]:
    for path in paths:
        walk = Walk(TraceReader(path))
        for rec in walk:
            if isinstance(rec, TraceHeader):
                yield unstructure(rec.config), LoopConfig
                if rec.session is not None:
                    yield unstructure(rec.session), Session
            elif isinstance(rec, StepRecord):
                if rec.event is not None:
                    yield unstructure(rec.event), Event
                if rec.transition is not None:
                    yield unstructure(rec.transition), Transition
                for e in walk.effects:  # real conversations, messages inline
                    yield unstructure(e), type(e)
                state = walk.state  # set by every step record the walk has replayed
                assert state is not None
                if state.conversation.last is not None:
                    yield unstructure(state.conversation.last), Message
                if isinstance(state.transition, Terminal):
                    yield unstructure(state.transition), Terminal


def _mutations(data: Any) -> Iterator[Any]:
    """Copies of ``data`` with one place changed: a value replaced, a key dropped or added."""
    paths: list[tuple[Any, ...]] = []

    def visit(x: Any, path: tuple[Any, ...]) -> None:
        if isinstance(x, dict):
            paths.append(path)
            for k, v in x.items():
                visit(v, (*path, k))
        elif isinstance(x, list):
            for k, v in enumerate(x):
                visit(v, (*path, k))
            if path:
                paths.append(path)

    visit(data, ())

    def at(root: Any, path: tuple[Any, ...]) -> Any:
        for k in path:
            root = root[k]
        return root

    for path in paths:
        target = at(data, path)
        if isinstance(target, dict):
            for key in list(target):
                for value in _SENTINELS:
                    if type(value) is type(target[key]) and value == target[key]:
                        continue
                    out = copy.deepcopy(data)
                    at(out, path)[key] = value
                    yield out
                out = copy.deepcopy(data)
                del at(out, path)[key]
                yield out
            out = copy.deepcopy(data)
            at(out, path)["zz_extra"] = 1
            yield out
        else:  # a list: as a tuple, a string, or with an item of another type
            for value in ((), "ab", [*target, 5]):
                out = copy.deepcopy(data)
                parent = at(out, path[:-1])
                parent[path[-1]] = value
                yield out


def _check(data: Any, cls: Any) -> str:
    fast = fast_structurer(cls)
    slow = _slow(data, cls)
    got: tuple[str, Any]
    try:
        got = ("ok", fast(data)) if fast is not None else ("none", None)
    except Exception:
        got = ("declined", None)
    if got[0] == "ok":
        assert slow[0] == "ok", (data, cls, got[1], slow)
        assert _same(got[1], slow[1]), (data, got[1], slow[1])
    # structure() agrees with the converter either way (same value, or an error)
    try:
        public: tuple[str, Any] = ("ok", structure(data, cls))
    except SerializationError:
        public = ("error", None)
    assert public[0] == slow[0], (data, cls, public, slow)
    if public[0] == "ok":
        assert _same(public[1], slow[1]), (data, public[1], slow[1])
    return got[0]


def test_the_fast_path_takes_every_recorded_value_and_returns_what_the_converter_returns(
    values: list[tuple[Any, Any]],
) -> None:
    outcomes: dict[str, int] = {}
    seen = 0
    for data, cls in values:
        seen += 1
        got = _check(data, cls)
        outcomes[got] = outcomes.get(got, 0) + 1
        if cls is not LoopConfig and cls is not Session:
            assert got == "ok", (data, cls)  # what unstructure writes is taken
    assert seen > 500 and outcomes["ok"] > 500, outcomes


def test_mutated_values_are_either_the_converters_value_or_left_to_the_converter(
    values: list[tuple[Any, Any]],
) -> None:
    per_kind: dict[Any, int] = {}
    checked = declined = 0
    for data, cls in values:
        kind = (cls, data.get("type") if isinstance(data, dict) else None)
        if per_kind.get(kind, 0) >= 3 or (isinstance(data, dict) and len(str(data)) > 4000):
            continue
        per_kind[kind] = per_kind.get(kind, 0) + 1
        for mutated in itertools.islice(_mutations(data), 400):
            checked += 1
            if _check(mutated, cls) != "ok":
                declined += 1
    assert checked > 2000 and declined > 1000, (checked, declined)


def test_coercions_and_errors_stay_with_the_converter() -> None:
    """What the converter coerces the fast path declines, so the value is the converter's."""
    assert structure({"input_tokens": True}, Usage) == Usage(input_tokens=1)
    assert type(structure({"input_tokens": True}, Usage).input_tokens) is int
    assert structure({"text": 5, "type": "text"}, TextBlock) == TextBlock(text="5")
    with pytest.raises(SerializationError, match=r"invalid value @ \$"):  # the converter's words
        structure(
            {
                "call_id": 1,
                "kind": "nope",
                "message": "",
                "status": None,
                "retry_after_ms": None,
                "at_ms": 0,
                "type": "model_call_failed",
            },
            Event,
        )
    assert fast_structurer(ModelCallFailed) is not None
    att = AttachmentMessage(id="a1", attachment_type="x", data=(("k", 1), ("b", True)))
    data = json.loads(json.dumps(unstructure(att)))
    fast = fast_structurer(Message)
    assert fast is not None and _same(fast(data), att) and _same(structure(data, Message), att)
    data["data"][0].append(2)  # a pair of three: the converter's error
    with pytest.raises(SerializationError):
        structure(data, Message)
    with pytest.raises(Exception):  # noqa: B017 - declined
        fast(data)


def test_config_and_session_round_trip_on_the_fast_path() -> None:
    cfg = default(context_window=120_000)
    data = unstructure(cfg)
    fast = fast_structurer(LoopConfig)
    assert fast is not None and _same(fast(data), cfg)
    sess = Session(ids=Ids(msg=4))
    fs = fast_structurer(Session)
    assert fs is not None and fs(unstructure(sess)) == sess
    assert attrs.has(LoopConfig)
