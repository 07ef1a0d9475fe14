"""Traces: recording, the format and its schema, the reader's errors, exact replay."""

from __future__ import annotations

import io
import json
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from benchmarks.replay_throughput import build_synthetic
from steploop.effects import PermissionPolicy, run
from steploop.effects.cli import SAMPLE_PROJECT, demo_script
from steploop.effects.model import AnthropicModelClient, make_client
from steploop.effects.scripted import ScriptedModel
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.trace import (
    StepRecord,
    TraceError,
    TraceReader,
    TraceRecorder,
    make_provenance,
    record_driver,
    record_sequence,
    replay_exact,
    trace_schema,
)
from steploop.reducer import (
    IllegalEvent,
    LoopState,
    Request,
    canonical,
    default,
    start,
    step,
)
from steploop.reducer.effects import (
    CallModel,
    Compact,
    Effect,
    Emit,
)
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    Interrupted,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from tests.effects.trace_kit import (
    CORPUS,
    FIXED,
    SCHEMA,
    assert_schema_valid,
    cli,
    record_tool_round,
    records,
    rewrite,
    scripted_world,
    summary,
    text,
    tool_round_events,
)
from tests.support.messages_server import MessagesServer, text_response


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------------------------------------
# Format and recording


@pytest.mark.anyio
async def test_interpreter_run_records_a_trace_that_replays_exactly(tmp_path: Path) -> None:
    """The walk-through run through run() with the recorder as observer replays exactly."""
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE_PROJECT, ws)
    tools = ToolRegistry(builtin_tools(ws))
    model = ScriptedModel.from_json(demo_script(), traits_for=tools.traits)
    path = tmp_path / "demo.jsonl"
    calls = 0

    with TraceRecorder(path, provenance=make_provenance(model=model, workspace=ws)) as rec:

        def observer(e: Event | None, s: LoopState, fx: tuple[Effect, ...]) -> None:
            nonlocal calls
            calls += 1
            rec(e, s, fx)

        r = rec.attach(
            run(
                "Fix the bug",
                model=model,
                tools=tools,
                workspace=ws,
                observer=observer,
                permissions=PermissionPolicy(default="allow"),
            )
        )
        async with r:
            async for _ in r:
                pass
    assert r.result is not None and r.result.terminal.TAG == "completed"
    report = replay_exact(path)
    assert report.ok and report.complete, report.describe()
    assert report.steps == calls == 14
    assert report.terminal is not None and report.terminal.TAG == "completed"
    recs = records(path)
    assert recs[0]["record"] == "header" and recs[-1]["record"] == "end"
    assert recs[0]["provenance"]["client"] == "ScriptedModel"
    assert [r["i"] for r in recs if r["record"] == "step"] == list(range(14))
    assert_schema_valid(path)


def test_schema_file_is_generated_from_the_types() -> None:
    """specs/trace.schema.json is exactly what trace_schema() builds from the attrs classes."""
    assert SCHEMA == trace_schema()
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_schema_rejects_a_bad_line(tmp_path: Path) -> None:
    """The schema catches an unknown event tag and a step record without its digest."""
    path = record_tool_round(tmp_path / "t.jsonl")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    step1 = next(r for r in records(path) if r.get("i") == 1 and r["record"] == "step")
    assert validator.is_valid(step1)
    assert not validator.is_valid({**step1, "event": {**step1["event"], "type": "model_exploded"}})
    assert not validator.is_valid({k: v for k, v in step1.items() if k != "digest"})


def test_conversations_are_digests_and_messages_are_written_once(tmp_path: Path) -> None:
    """CallModel carries {length, digest}; every message record precedes its first ref, and a
    compaction's messages (in the event and in the Emits) are written once."""
    path = tmp_path / "c.jsonl"
    record_driver(
        path,
        default(autocompact_buffer=185_000),
        Request(prompt="go"),
        scripted_world(),
        provenance=FIXED,
    )
    recs = records(path)
    written: list[str] = []
    refs: list[str] = []
    for r in recs:
        if r["record"] == "message":
            written.append(r["id"])
        elif r["record"] == "step":
            blob = json.dumps(r)
            for e in r["effects"]:
                if e["type"] == "call_model":
                    assert set(e["conversation"]) == {"length", "digest"}
            for part in blob.split('{"ref": "')[1:]:
                ref = part.split('"', 1)[0]
                assert ref in written, f"{ref} referenced before it was written"
                refs.append(ref)
    assert len(written) == len(set(written))
    assert "c1-boundary" in refs and refs.count("c1-boundary") == 2  # event + its Emit
    assert replay_exact(path).ok
    assert_schema_valid(path)


def test_same_id_with_new_content_is_written_again(tmp_path: Path) -> None:
    """A compaction that reuses an id for other content rebinds it with a new message record."""
    path = tmp_path / "rebind.jsonl"

    def answer(effect: Effect, state: LoopState) -> Iterable[Event]:
        if isinstance(effect, Compact):
            text_ = f"summary number {effect.compact_id}"
            return [CompactionFinished(compact_id=effect.compact_id, messages=summary(1, text_))]
        return scripted_world(usage_in=(1_000, 8_000, 8_500, 9_000, 9_000))(effect, state)

    record_driver(path, default(autocompact_buffer=185_000), Request(prompt="go"), answer)
    bodies = [r["message"] for r in records(path) if r["record"] == "message"]
    summaries = [b["content"][0]["text"] for b in bodies if b["id"] == "c1-summary"]
    assert len(summaries) >= 2
    assert summaries == [f"summary number {k}" for k in range(1, len(summaries) + 1)]
    assert replay_exact(path).ok


def test_message_window_rewrites_messages_that_fell_out(tmp_path: Path) -> None:
    """With a window of 1, the messages of one record stay bound for that record, and a
    message referred to again after it fell out of the window is written again."""
    path = tmp_path / "w.jsonl"
    cfg, req = default(), Request(prompt="go")
    boundary, summ = summary(1)
    both = (Emit(item=boundary), Emit(item=summ))
    with TraceRecorder(path, config=cfg, request=req, message_window=1) as rec:
        state, fx = start(req, cfg)
        rec(None, state, fx)
        rec(CompactionFinished(compact_id=9, messages=(boundary, summ)), state, both)
        rec(Interrupted(), state, both)
    ids = [r["id"] for r in records(path) if r["record"] == "message"]
    assert ids == ["m1", "c1-boundary", "c1-summary", "c1-boundary"]
    steps = [r for r in TraceReader(path) if isinstance(r, StepRecord)]
    assert steps[1].event == CompactionFinished(compact_id=9, messages=(boundary, summ))
    assert steps[1].effects == steps[2].effects == both


@pytest.mark.anyio
async def test_api_key_never_reaches_the_trace(tmp_path: Path) -> None:
    """A run with the real Anthropic client (key sent to the server) leaves no key in the file."""
    secret = "sk-ant-test-SECRET123"
    path = tmp_path / "live.jsonl"
    with MessagesServer() as server:
        server.enqueue(
            text_response("Hello from the server.", usage={"input_tokens": 5, "output_tokens": 3})
        )
        client = make_client(server.base_url, secret, connect_timeout=1.0, read_timeout=5.0)
        try:
            model = AnthropicModelClient(client, traits_for=lambda n, i: ToolTraits())
            rec = TraceRecorder(path, provenance=make_provenance(model=model), secrets=())
            with rec:
                cfg = default(model="claude-test-1")
                r = rec.attach(
                    run(
                        Request(prompt="hi"),
                        model=model,
                        config=cfg,
                        workspace=tmp_path,
                        observer=rec,
                    )
                )
                async with r:
                    async for _ in r:
                        pass
        finally:
            await client.close()
        (request,) = server.requests
        assert any(secret in value for value in request.headers.values())  # the key was used
    assert r.result is not None and r.result.terminal.TAG == "completed"
    data = path.read_text(encoding="utf-8")
    assert "Hello from the server." in data
    assert secret not in data and "SECRET123" not in data
    assert "x-api-key" not in data.lower() and "authorization" not in data.lower()
    assert rec.redactions == 0
    assert replay_exact(path).ok


def test_secret_in_content_is_redacted_and_replays_exactly(tmp_path: Path) -> None:
    """A secret that reaches content (a tool read a .env) is replaced in the file by a marker of
    its length; the trace records the run with the marker in its place (the digests are of
    that run), so it replays exactly (it reported a mismatch at the step, and could not be
    resumed)."""
    secret = "sk-ant-api03-LEAKED-0123456789"
    events = tool_round_events()
    events[4] = ToolFinished(generation=1, tool_use_id="toolu_1", content=f"KEY={secret}")
    path = tmp_path / "leak.jsonl"
    with TraceRecorder(
        path, config=default(), request=Request(prompt="read .env"), secrets=[secret]
    ) as rec:
        state, fx = start(Request(prompt="read .env"), default())
        rec(None, state, fx)
        for ev in events:
            state, fx = step(state, ev, default())
            rec(ev, state, fx)
    data = path.read_text(encoding="utf-8")
    marker = "[REDACTED" + "*" * (len(secret) - 10) + "]"
    assert len(marker) == len(secret)
    assert secret not in data and f"KEY={marker}" in data and rec.redactions == 1
    assert rec.diverged_at is None
    assert replay_exact(path).ok


def test_provenance_refuses_secret_looking_keys() -> None:
    """Extra provenance may not carry anything named like a key or token."""
    with pytest.raises(ValueError, match="looks like a secret"):
        make_provenance(api_key="x")
    with pytest.raises(ValueError, match="looks like a secret"):
        TraceRecorder(io.StringIO(), provenance={"auth_header": "Bearer x"})
    prov = make_provenance(model=object(), run_label="nightly")
    assert prov["client"] == "object" and prov["run_label"] == "nightly"


def test_record_sequence_keeps_the_prefix_of_an_illegal_sequence(tmp_path: Path) -> None:
    """An event step() rejects raises IllegalEvent; the file holds a replayable prefix."""
    path = tmp_path / "bad.jsonl"
    with pytest.raises(IllegalEvent):
        record_sequence(
            path, default(), Request(prompt="go"), [text(1, "hi"), WaitElapsed(wait_id=1)]
        )
    report = replay_exact(path)
    assert report.ok and report.steps == 2 and not report.complete


# ---------------------------------------------------------------------------------------------
# Reading: the malformed corpus


EXPECTED: dict[str, str] = json.loads((CORPUS / "expected.json").read_text(encoding="utf-8"))


def test_corpus_has_at_least_30_cases_and_each_is_expected() -> None:
    """Every .jsonl in the corpus has an expected message, and there are at least 30."""
    files = sorted(p.name for p in CORPUS.glob("*.jsonl"))
    assert len(files) >= 30
    assert files == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_malformed_trace_gets_its_one_line_error(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The library raises the exact message; the CLI prints it on one line and exits 2."""
    monkeypatch.chdir(CORPUS)
    with pytest.raises(TraceError) as info:
        replay_exact(name)
    assert str(info.value) == EXPECTED[name]
    code, out, err = cli(["replay", name], capsys)
    assert code == 2 and out == ""
    assert err == f"steploop: error: {EXPECTED[name]}\n"


def test_truncated_tail_is_tolerated_on_request(tmp_path: Path) -> None:
    """A run killed mid-write leaves a valid prefix: the reader stops before the cut line."""
    path = record_tool_round(tmp_path / "t.jsonl")
    data = path.read_bytes()
    cut = data.index(b'{"record":"step","i":4')
    path.write_bytes(data[: cut + 30])
    with pytest.raises(TraceError, match=r"t.jsonl:9: the last line is truncated"):
        list(TraceReader(path))
    reader = TraceReader(path, tolerate_truncated_tail=True)
    steps = [r for r in reader if isinstance(r, StepRecord)]
    assert [s.i for s in steps] == [0, 1, 2, 3]
    assert reader.truncated_tail and reader.valid_bytes == cut


def test_missing_file_and_directory_are_one_line_errors(tmp_path: Path) -> None:
    """A path that is not a trace file is named in a one-line error."""
    with pytest.raises(TraceError, match=r"^.*nope.jsonl: no such file$"):
        replay_exact(tmp_path / "nope.jsonl")
    with pytest.raises(TraceError, match="is a directory"):
        replay_exact(tmp_path)


# ---------------------------------------------------------------------------------------------
# Exact replay


def test_mismatch_in_an_event_names_the_step_and_the_state_fields(tmp_path: Path) -> None:
    """A tampered usage keeps the effects but changes the state: the report names the step,
    both digests and exactly the fields that differ."""
    path = record_tool_round(tmp_path / "t.jsonl")

    def more_output(obj: dict[str, Any]) -> None:
        obj["event"]["usage"]["output_tokens"] = 999

    rewrite(path, 3, more_output)
    report = replay_exact(path)
    mm = report.mismatch
    assert not report.ok and mm is not None
    assert (mm.step, mm.what) == (3, "digest")
    assert mm.fields == ("turn_output_tokens", "last_usage", "round")
    assert "state fields that differ: turn_output_tokens, last_usage, round" in report.describe()


def test_mismatch_in_an_effect_shows_expected_and_actual(tmp_path: Path) -> None:
    """A tampered CallModel is reported with its index and both versions."""
    path = record_tool_round(tmp_path / "t.jsonl")

    def bigger(obj: dict[str, Any]) -> None:
        obj["effects"][1]["max_tokens"] = 1234

    rewrite(path, 0, bigger)
    mm = replay_exact(path).mismatch
    assert mm is not None and (mm.step, mm.what, mm.effect_index) == (0, "effects", 1)
    assert isinstance(mm.expected, CallModel) and mm.expected.max_tokens == 1234
    assert isinstance(mm.actual, CallModel) and mm.actual.max_tokens == 8000
    assert '"max_tokens": 1234' in mm.describe() and '"max_tokens": 8000' in mm.describe()


def test_end_record_must_agree_with_finish(tmp_path: Path) -> None:
    """An end record whose terminal is not the Finish effect's is a mismatch."""
    path = record_tool_round(tmp_path / "t.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[-1] == '{"record":"end","i":8,"terminal":{"type":"completed"}}'
    lines[-1] = '{"record":"end","i":8,"terminal":{"type":"hook_stopped"}}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    mm = replay_exact(path).mismatch
    assert mm is not None and mm.what == "terminal" and mm.step == 8


def test_replay_memory_is_flat_in_trace_length(tmp_path: Path) -> None:
    """Peak allocated blocks while replaying 20,000 events stay within a small tolerance of
    those for 2,000 events (history bounded by compaction; the reader streams)."""
    # steploop/reducer/canonical.py memoises canonical texts in a global cache of its own (bounded by
    # entry count, cleared when full); it is emptied while sampling so that what is measured
    # is what the replay itself keeps.
    memo = getattr(canonical, "_MEMO", None)

    def peak_growth(n: int) -> int:
        path = tmp_path / f"s{n}.jsonl"
        build_synthetic(path, n)
        if memo is not None:
            memo.clear()
        base = sys.getallocatedblocks()
        peak = base

        def sample(rec: StepRecord) -> None:
            nonlocal peak
            if rec.i % 32 == 0:
                if memo is not None:
                    memo.clear()
                peak = max(peak, sys.getallocatedblocks())

        report = replay_exact(path, on_step=sample)
        assert report.ok and report.steps == n + 1
        path.unlink()
        return peak - base

    small, large = peak_growth(2_000), peak_growth(20_000)
    assert large <= small * 1.2 + 2_000, (small, large)
