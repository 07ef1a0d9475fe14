"""The reader's fast paths change nothing a reader sees (steploop/effects/trace/read.py, TraceReader).

Records are decoded with the compiled structurers and cheap checks
first; any line a fast check declines takes the general code, which words the error. Here
mutated records read the same with everything fast and with everything general: the same
records, the same reader counters, or the same error.
"""

from __future__ import annotations

import copy
import io
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import steploop.effects.trace as trace
import steploop.effects.trace.read as trace_read
from benchmarks.replay_throughput import build_synthetic
from steploop.effects.trace import TraceReader
from tests.effects.test_trace_fast import _general_only as _no_fast_paths
from tests.support.json_mutations import get as _get
from tests.support.json_mutations import paths as _paths

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "specs" / "scenarios"


def _general_only(m: pytest.MonkeyPatch) -> None:
    """No compiled structurer: the general code for every record."""
    _no_fast_paths(m)  # test_trace_fast's: no fast tables or structurers


def _outcome(path: Path, tolerate: bool = True) -> tuple[Any, ...]:
    reader = TraceReader(path, tolerate_truncated_tail=tolerate)
    seen: list[str] = []
    try:
        for rec in reader:
            seen.append(repr(rec))
            if isinstance(rec, trace.StepRecord):
                seen.append(repr(rec.fields))
    except Exception as e:  # a TraceError, or whatever else both paths raise alike
        seen.append(f"{type(e).__name__}: {e}")
    counters = (reader.messages, reader.valid_bytes, reader.missing_newline, reader.truncated_tail)
    return (*seen, counters)


def _both(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    fast = _outcome(path)
    with monkeypatch.context() as m:
        _general_only(m)
        general = _outcome(path)
    return fast, general


# --- mutations of a record's JSON ------------------------------------------------------------

_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    7,
    2**64,
    -(2**70),
    1.5,
    "",
    "x",
    "step",
    "message",
    "emit",
    "streaming",
    "m1",
    "\ud800",
    "é",
    "0123456789abcdef",
    "0123456789ABCDEF",
    "0123456789abcde",
    "0123456789abcdeg",
    "0123456789abcdef0",
    "a" * 32,
    "A" * 32,
    "a" * 31 + "\n",
    "a" * 31 + "é",
    [],
    ["x"],
    [1, 2],
    {},
    {"ref": "m1"},
    {"ref": "m999"},
    {"ref": 1},
    {"ref": "m1", "x": 1},
    {"type": "emit"},
    {"type": ["x"]},
    {"length": 1, "digest": "a" * 32},
    {"length": -1, "digest": "a" * 32},
    {"length": True, "digest": "a" * 32},
    {"length": 1, "digest": "A" * 32},
    {"round": "0123456789abcdef"},
    {"round": "0123456789abcdef", "ids": 5},
    {"round": "0123456789abcdef", "nope": "0123456789abcdef"},
    {"round": "0123456789abcde", "ids": "0123456789abcdef0"},
]


def _mutate(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    path = rng.choice(_paths(obj)[1:])
    parent = _get(obj, path[:-1])
    key = path[-1]
    roll = rng.random()
    if roll < 0.15 and isinstance(parent, dict):
        del parent[key]
    elif roll < 0.25 and isinstance(parent, dict):
        parent[rng.choice(["zz", "type", "ref", "transition", "fields", "id"])] = rng.choice(
            _VALUES
        )
    elif roll < 0.3 and isinstance(parent, list):
        parent.append(copy.deepcopy(rng.choice(_VALUES)))
    else:
        parent[key] = copy.deepcopy(rng.choice(_VALUES))
    return obj


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> list[list[str]]:
    synthetic = tmp_path_factory.mktemp("reader") / "synthetic.jsonl"
    build_synthetic(synthetic, 60)
    scenarios = [_lines(p) for p in sorted(SCENARIOS.glob("*.jsonl"))]
    return [_lines(synthetic), *scenarios]


def test_unmutated_traces_read_the_same_on_both_paths(
    sources: list[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n, lines in enumerate(sources):
        path = tmp_path / f"t{n}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        fast, general = _both(path, monkeypatch)
        assert fast == general, n
        assert not fast[-2].startswith("TraceError"), fast[-2]


@pytest.mark.parametrize("seed", range(4))
def test_mutated_step_and_message_records_read_the_same_on_both_paths(
    seed: int, sources: list[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "t.jsonl"
    errors = 0
    for _ in range(300):
        lines = list(rng.choice(sources))
        targets = [
            k
            for k, line in enumerate(lines)
            if '"record":"step"' in line or '"record":"message"' in line
        ]
        k = rng.choice(targets)
        lines[k] = json.dumps(_mutate(json.loads(lines[k]), rng), separators=(",", ":"))
        del lines[min(len(lines), k + 4) :]  # a few records after it: the window, the next step
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        fast, general = _both(path, monkeypatch)
        assert fast == general, lines[k]
        errors += "Error" in str(fast[-2])
    assert errors > 100  # most mutations are errors, and those read the same too


@pytest.mark.parametrize(
    "change",
    [
        {"fields": {"round": "0123456789abcdef", "ids": "0123456789abcdef"}},
        {"fields": {}},
        {"fields": {"round": "0123456789abcde\u00e9"}},
        {"fields": {"round": "\ud800123456789abcde"}},
        {"fields": {"round": ["0123456789abcdef"]}},
        {"fields": {"round": "0123456789abcdef", "ids": "0123456789abcdef" * 2}},
        {"fields": {"round": "0123456789abcde", "ids": "0123456789abcdef0"}},
        {"fields": []},
        {"fields": "0123456789abcdef"},
        {"digest": "\ud800" * 32},
        {"digest": "0123456789abcdef0123456789abcdeF"},
        {"transition": None},
        {"effects": [{"type": ["unhashable"]}]},
        {"effects": [{"type": "emit", "item": {"ref": "m1"}, "x": 1}]},
        {"effects": [{"type": "emit", "item": {"ref": "nope"}}, {"type": {"a": 1}}]},
        {"event": {"type": "model_block_received"}},
    ],
)
def test_a_changed_step_record_reads_the_same_on_both_paths(
    change: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _with_changed_record(tmp_path, '{"record":"step","i":1,', change)
    fast, general = _both(path, monkeypatch)
    assert fast == general


def _with_changed_record(tmp_path: Path, prefix: str, change: dict[str, Any]) -> Path:
    """A short synthetic trace whose first record starting with ``prefix`` has ``change``
    merged into it."""
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 6)
    lines = _lines(path)
    n = next(n for n, line in enumerate(lines) if line.startswith(prefix))
    lines[n] = json.dumps({**json.loads(lines[n]), **change})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "change",
    [
        {"id": 1},
        {"id": "m9"},
        {"message": {"type": ["x"]}},
        {"message": []},
        {"message": None},
        {"extra": 1},
    ],
)
def test_a_changed_message_record_reads_the_same_on_both_paths(
    change: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _with_changed_record(tmp_path, '{"record":"message"', change)
    fast, general = _both(path, monkeypatch)
    assert fast == general
    assert "Error" in str(fast[-2])


# --- reading a block of lines at a time -------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    content=st.lists(
        st.sampled_from([b"\n", b"a", b"1" * 7, b"2", b"\r", b"\x00", b'{"x":1}']), max_size=60
    ).map(b"".join),
    block=st.integers(min_value=1, max_value=24),
)
def test_blocks_split_a_file_as_iterating_it_does(content: bytes, block: int) -> None:
    want = list(io.BytesIO(content))
    got: list[bytes] = []
    with pytest.MonkeyPatch.context() as m:
        m.setattr(trace_read, "_BLOCK", block)
        for lines, nl, huge in trace_read._blocks(io.BytesIO(content)):
            got += [line + b"\n" * nl for line in lines]
            assert nl == 1 or lines == [want[-1]]
            if not huge:  # then no line holds a run of digits longer than the limit
                assert not any(
                    trace_read._HUGE_NUMBER in x.translate(trace_read._DIGITS) for x in lines
                )
    assert got == want


@pytest.mark.parametrize("block", [1, 5, 64, 4096])
def test_the_block_size_changes_nothing_a_reader_sees(
    block: int, sources: list[list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whole traces, traces cut anywhere (tolerated or not), a line with a 19-digit number."""
    rng = random.Random(block)
    path = tmp_path / "t.jsonl"
    texts = ["\n".join(lines) + "\n" for lines in sources[:6]]
    texts.append(texts[0].replace('"at_ms":10,', '"at_ms":12345678901234567890123,', 1))
    assert texts[-1] != texts[0]
    for text in texts:
        data = text.encode("utf-8")
        for cut in [len(data), *(rng.randrange(len(data)) for _ in range(8))]:
            path.write_bytes(data[:cut] + (b"\x00" * 3 if cut % 3 == 0 else b""))
            want = [_outcome(path, tolerate) for tolerate in (True, False)]
            with monkeypatch.context() as m:
                m.setattr(trace_read, "_BLOCK", block)
                assert [_outcome(path, tolerate) for tolerate in (True, False)] == want, cut


# --- a tag that is not a string ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("where", "tag"),
    [
        ("event", ["x"]),
        ("event", {"a": 1}),
        ("event", 7),
        ("effect", ["x"]),
        ("effect", {"a": 1}),
        ("message", ["x"]),
    ],
)
def test_a_tag_that_is_not_a_string_is_a_trace_error(where: str, tag: Any, tmp_path: Path) -> None:
    """A list or an object as a "type" is unhashable: it must end reading as a TraceError
    naming the line, on the fast path and the careful one alike (it was a bare TypeError)."""
    path = tmp_path / "t.jsonl"
    build_synthetic(path, 6)
    lines = _lines(path)

    def retag(rec: dict[str, Any]) -> bool:
        if where == "message":
            if rec["record"] != "message":
                return False
            rec["message"]["type"] = tag
            return True
        if rec["record"] != "step" or rec["i"] < 1:
            return False
        if where == "event":
            rec["event"]["type"] = tag
            return True
        if not rec["effects"]:
            return False
        rec["effects"][0]["type"] = tag
        return True

    records = [json.loads(line) for line in lines]
    n = next(k for k, rec in enumerate(records) if retag(rec))
    rec = records[n]
    lines[n] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(trace.TraceError) as exc:
        list(TraceReader(path))
    assert f"{path}:{n + 1}:" in str(exc.value)
