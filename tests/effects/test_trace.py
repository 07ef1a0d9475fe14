"""Traces: recording, the reader's errors, exact and counterfactual replay, resume, the CLI."""

from __future__ import annotations

import argparse
import io
import json
import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from benchmarks.replay_throughput import build_synthetic
from steploop.effects import PermissionPolicy, run
from steploop.effects.cli import SAMPLE_PROJECT, demo_script
from steploop.effects.hooks import PythonStopHook, StopHookResult, StopHooks
from steploop.effects.model import AnthropicModelClient, make_client
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools
from steploop.effects.trace import (
    INTERRUPTED_TOOL_RESULT,
    Answer,
    EndRecord,
    ReplayError,
    ResumeRecord,
    StepRecord,
    TraceError,
    TraceReader,
    TraceRecorder,
    make_provenance,
    prepare_resume,
    record_driver,
    record_sequence,
    replay_counterfactual,
    replay_counterfactual_async,
    replay_exact,
    resume_trace,
    trace_schema,
)
from steploop.effects.trace_cli import main as cli_main
from steploop.effects.trace_cli import register
from steploop.reducer import (
    ConfigError,
    IllegalEvent,
    LoopConfig,
    LoopState,
    Request,
    canonical,
    claude_code_2_1_88,
    default,
    start,
    step,
)
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    Emit,
    RunStopHooks,
    StartTool,
    Wait,
)
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    InterruptBehavior,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.messages import (
    SystemMessage,
    TextBlock,
    Tombstone,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from tests.support.messages_server import MessagesServer, text_response

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "malformed_traces"
SCHEMA = json.loads((ROOT / "specs" / "trace.schema.json").read_text(encoding="utf-8"))
SAFE = ToolTraits(concurrency_safe=True)
FIXED = {"created_at": "2026-01-01T00:00:00Z", "client": "test"}
MODEL = "claude-sonnet-4-5"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# ---------------------------------------------------------------------------------------------
# Helpers


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_schema_valid(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for n, obj in enumerate(records(path), 1):
        errors = list(validator.iter_errors(obj))
        assert not errors, f"line {n}: {errors[0].message}"


def ended(call_id: int, stop: str = "end_turn", inp: int = 100, out: int = 10) -> Event:
    return ModelResponseEnded(
        call_id=call_id,
        model=MODEL,
        stop_reason=stop,
        usage=Usage(input_tokens=inp, output_tokens=out),
    )


def text(call_id: int, words: str) -> Event:
    return ModelBlockReceived(call_id=call_id, block=TextBlock(text=words))


def read_call(call_id: int, tid: str, path: str = "a.py") -> Event:
    block = ToolUseBlock(id=tid, name="Read", input={"file_path": path})
    return ModelBlockReceived(call_id=call_id, block=block, tool=SAFE)


def tool_round_events() -> list[Event]:
    """A Read round (text, tool_use, end, permission, result), then an answer and passing hooks."""
    return [
        text(1, "Let me read it."),
        read_call(1, "toolu_1"),
        ended(1, "tool_use"),
        PermissionAnswered(generation=1, tool_use_id="toolu_1", decision="allow"),
        ToolFinished(generation=1, tool_use_id="toolu_1", content="print('hi')"),
        text(2, "It prints hi."),
        ended(2),
        StopHooksFinished(hooks_id=1),
    ]


def record_tool_round(path: Path, config: LoopConfig | None = None) -> Path:
    record_sequence(
        path,
        config or default(),
        Request(prompt="What does a.py print?"),
        tool_round_events(),
        provenance=FIXED,
    )
    return path


def summary(c: int, text_: str = "The story so far.") -> tuple[SystemMessage, UserMessage]:
    return (
        SystemMessage(id=f"c{c}-boundary", subtype="compact_boundary", text="compacted"),
        UserMessage(
            id=f"c{c}-summary",
            content=(TextBlock(text=text_),),
            is_meta=True,
            origin="compact_summary",
        ),
    )


def scripted_world(usage_in: tuple[int, ...] = (1_000, 8_000, 9_000, 9_500)) -> Answer:
    """An ``answer`` for record_driver: model call n asks for Read until the last usage value,
    then answers in text; permissions allowed, tools answer, compactions summarise, hooks pass."""

    def answer(effect: Effect, state: LoopState) -> Iterable[Event]:
        match effect:
            case CallModel(call_id=c):
                n = c - 1
                if n < len(usage_in) - 1:
                    return [read_call(c, f"toolu_{c}"), ended(c, "tool_use", usage_in[n])]
                return [text(c, "All read."), ended(c, inp=usage_in[-1])]
            case AskPermission(generation=g, tool_use_id=t):
                return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow")]
            case StartTool(generation=g, tool_use_id=t):
                return [ToolFinished(generation=g, tool_use_id=t, content="x = 1")]
            case Compact(compact_id=c):
                return [CompactionFinished(compact_id=c, messages=summary(c))]
            case RunStopHooks(hooks_id=h):
                return [StopHooksFinished(hooks_id=h)]
        return []

    return answer


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    code = cli_main(argv, out)
    err = capsys.readouterr().err
    return code, out.getvalue(), err


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


def _rewrite(path: Path, step_i: int, fn: Any) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        obj = json.loads(line)
        if obj["record"] == "step" and obj["i"] == step_i:
            fn(obj)
            lines[n] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_mismatch_in_an_event_names_the_step_and_the_state_fields(tmp_path: Path) -> None:
    """A tampered usage keeps the effects but changes the state: the report names the step,
    both digests and exactly the fields that differ."""
    path = record_tool_round(tmp_path / "t.jsonl")

    def more_output(obj: dict[str, Any]) -> None:
        obj["event"]["usage"]["output_tokens"] = 999

    _rewrite(path, 3, more_output)
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

    _rewrite(path, 0, bigger)
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


# ---------------------------------------------------------------------------------------------
# Counterfactual replay


async def _record_blocking_hook_run(path: Path, rounds: int) -> None:
    """claude_code_2_1_88 (no stop-hook cap) with a hook that always blocks; the user
    interrupts after ``rounds`` blocks."""
    cfg = claude_code_2_1_88()
    hooks = StopHooks([PythonStopHook(lambda p: StopHookResult(blocking_error="tests still fail"))])
    model = ScriptedModel(
        [reply(f"Done (attempt {n}).") for n in range(1, rounds + 2)],
        traits_for=ToolRegistry([]).traits,
    )
    rec = TraceRecorder(path, provenance=make_provenance(model=model))
    r = rec.attach(
        run(
            Request(prompt="Make the tests pass"),
            model=model,
            config=cfg,
            stop_hooks=hooks,
            workspace=path.parent,
            observer=rec,
            clock_ms=lambda: 0,
        )
    )
    blocks = 0
    with rec:
        async with r:
            async for item in r:
                if isinstance(item, UserMessage) and item.origin == "stop_hook_feedback":
                    blocks += 1
                    if blocks == rounds:
                        r.interrupt()
    assert blocks == rounds


@pytest.mark.anyio
@pytest.mark.spec("G11")
async def test_blocking_hook_run_replayed_under_default_ends_at_the_cap(tmp_path: Path) -> None:
    """A 2.1.88 run whose stop hook blocks forever (12 rounds recorded), replayed under the
    default config, ends stop_hook_prevented after 8 blocking retries."""
    path = tmp_path / "forever.jsonl"
    await _record_blocking_hook_run(path, 12)
    rec = replay_exact(path)
    assert rec.ok
    report = await replay_counterfactual_async(path, {}, "stop", base=default())
    assert report.status == "finished", report.describe()
    assert report.terminal is not None and report.terminal.TAG == "stop_hook_prevented"
    assert report.transitions == ("stop_hook_blocking",) * 8 + ("stop_hook_prevented",)
    assert report.matched == {"call_model": 9, "run_stop_hooks": 9}
    assert report.state.stop_hook_blocks == 8
    assert report.recorded_transitions[:12] == ("stop_hook_blocking",) * 12
    # under its own config the recording replays as it happened: the cap never comes
    same = await replay_counterfactual_async(path, {}, "stop")
    assert same.status == "finished" and same.transitions == report.recorded_transitions


def _growing_trace(tmp_path: Path) -> Path:
    path = tmp_path / "grow.jsonl"
    record_driver(
        path, default(), Request(prompt="Read them all"), scripted_world(), provenance=FIXED
    )
    return path


def test_lower_autocompact_threshold_reports_the_missing_compaction(tmp_path: Path) -> None:
    """Replayed with a threshold the run crosses, the new run asks for a compaction the
    recording lacks: divergence kind compact, ordinal 1, recorded none."""
    path = _growing_trace(tmp_path)
    report = replay_counterfactual(path, {"autocompact_buffer": 185_000}, "stop")
    d = report.divergence
    assert report.status == "diverged" and d is not None
    assert (d.kind, d.ordinal, d.recorded) == ("compact", 1, None)
    assert d.effect.startswith("compact (auto, ")
    assert report.matched == {"call_model": 2, "ask_permission": 2, "start_tool": 2}
    assert "recorded at that ordinal: none" in report.describe()


def test_scripted_policy_answers_what_the_recording_lacks(tmp_path: Path) -> None:
    """Under "scripted", the new compaction and the model call after it come from the script."""
    path = _growing_trace(tmp_path)
    report = replay_counterfactual(
        path,
        {"autocompact_buffer": 185_000},
        "scripted",
        [reply("A summary of the reads."), reply("Everything was read.")],
    )
    assert report.status == "finished", report.describe()
    assert report.terminal is not None and report.terminal.TAG == "completed"
    assert report.by_policy == {"compact": 1, "call_model": 1}
    assert report.state.conversation.messages()[0].id == "c1-boundary"


def test_counterfactual_with_fewer_turns_and_policy_errors(tmp_path: Path) -> None:
    """max_turns=1 ends after the first tool round from recorded answers; bad inputs are
    clear errors."""
    path = record_tool_round(tmp_path / "t.jsonl")
    report = replay_counterfactual(path, {"max_turns": 1})
    assert report.status == "finished" and report.terminal is not None
    assert report.terminal.TAG == "max_turns" and report.transitions == ("max_turns",)
    with pytest.raises(ConfigError, match="unknown config key 'warp'"):
        replay_counterfactual(path, {"warp": 9})
    with pytest.raises(ReplayError, match="needs a script"):
        replay_counterfactual(path, {}, "scripted")
    with pytest.raises(ReplayError, match="needs a model client"):
        replay_counterfactual(path, {}, "live")


def test_interrupt_is_delivered_after_the_event_it_followed(tmp_path: Path) -> None:
    """A recorded interrupt during a running tool reaches the new run at the same point."""
    path = tmp_path / "int.jsonl"
    events = [*tool_round_events()[:4], Interrupted(kind="hard")]
    record_sequence(path, default(), Request(prompt="go"), events)
    report = replay_counterfactual(path, {"snip_keep_rounds": 2})
    assert report.status == "finished" and report.terminal is not None
    assert report.terminal.TAG == "aborted_tools"


def test_stalled_when_the_recording_ends_without_an_answer(tmp_path: Path) -> None:
    """A cut-off recording answers nothing after its end: the new run stalls, and says where."""
    path = tmp_path / "cut.jsonl"
    record_sequence(path, default(), Request(prompt="go"), tool_round_events()[:2])
    report = replay_counterfactual(path, {})
    assert report.status == "stalled" and report.stalled_phase == "streaming"


# ---------------------------------------------------------------------------------------------
# Resume


def _cut_after_step(path: Path, i: int, partial: bool = True) -> None:
    """Simulate a kill: keep records up to step ``i`` and half of the next line."""
    lines = path.read_bytes().splitlines(keepends=True)
    keep: list[bytes] = []
    for line in lines:
        keep.append(line)
        obj = json.loads(line)
        if obj["record"] == "step" and obj["i"] == i:
            break
    nxt = lines[len(keep)] if len(keep) < len(lines) else b""
    path.write_bytes(b"".join(keep) + (nxt[: len(nxt) // 2] if partial else b""))


class EchoTool:
    """A safe tool that answers at once."""

    name = "Read"
    description = "reads"
    input_schema: ClassVar[Any] = {"type": "object"}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def is_concurrency_safe(self, input: Any) -> bool:
        return True

    async def call(self, input: Any, ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=f"contents of {input.get('file_path')}")


async def _resume_and_finish(path: Path, script: list[Any]) -> tuple[Any, list[Any]]:
    tools = ToolRegistry([EchoTool()])
    model = ScriptedModel(script, traits_for=tools.traits)
    items: list[Any] = []
    with resume_trace(path, clock_ms=lambda: 5) as rs:
        async with rs.run(
            model=model,
            tools=tools,
            workspace=path.parent,
            permissions=PermissionPolicy(default="allow"),
            clock_ms=lambda: 5,
        ) as r:
            async for item in r:
                items.append(item)
    return rs, [*items, r.result]


@pytest.mark.anyio
@pytest.mark.spec("R-RETRY-5")
async def test_resume_reports_a_half_streamed_call_as_a_broken_stream(tmp_path: Path) -> None:
    """Killed after the first block of call 1 arrived: resume feeds stream_broken, the machine
    retries without streaming and tombstones the partial block; the trace grows and replays."""
    path = record_tool_round(tmp_path / "t.jsonl")
    _cut_after_step(path, 1)
    rs, items = await _resume_and_finish(
        path, [tool_call("Read", {"file_path": "a.py"}), reply("It prints hi.")]
    )
    (broken,) = rs.synthesized
    assert isinstance(broken, ModelCallFailed) and (broken.call_id, broken.kind) == (
        1,
        "stream_broken",
    )
    calls = [e for e in rs.effects if isinstance(e, CallModel)]
    assert len(calls) == 1 and calls[0].call_id == 2 and calls[0].streaming is False
    assert Tombstone(message_id="m2") in [e.item for e in rs.effects if isinstance(e, Emit)]
    assert items[-1].terminal.TAG == "completed"
    report = replay_exact(path)
    assert report.ok and report.complete and report.resumes == 1, report.describe()
    (resumed,) = [r for r in TraceReader(path) if isinstance(r, ResumeRecord)]
    assert resumed.after == 1 and resumed.reissued == ()  # settled, not issued again
    assert_schema_valid(path)


@pytest.mark.anyio
async def test_resume_answers_a_running_tool_with_an_interrupted_error(tmp_path: Path) -> None:
    """Killed while Read ran: its result becomes the interrupted error, the turn goes on."""
    path = record_tool_round(tmp_path / "t.jsonl")
    _cut_after_step(path, 4)  # StartTool issued, no ToolFinished
    rs, items = await _resume_and_finish(path, [reply("Sorry, the read was interrupted.")])
    (finished,) = rs.synthesized
    assert isinstance(finished, ToolFinished)
    assert finished.is_error and finished.content == INTERRUPTED_TOOL_RESULT
    assert items[-1].terminal.TAG == "completed"
    steps = [r for r in TraceReader(path) if isinstance(r, StepRecord)]
    assert [s.i for s in steps] == list(range(len(steps)))
    assert replay_exact(path).ok


def test_resume_issues_waits_and_permissions_again(tmp_path: Path) -> None:
    """A pending retry wait and a pending permission request are issued again as they were."""
    path = tmp_path / "w.jsonl"
    record_sequence(
        path,
        default(),
        Request(prompt="go"),
        [ModelCallFailed(call_id=1, kind="overloaded", status=529)],
    )
    point = prepare_resume(path)
    assert point.reissue == (Wait(wait_id=1, ms=500),) and not point.partial_calls
    path2 = record_tool_round(tmp_path / "p.jsonl")
    _cut_after_step(path2, 2, partial=False)  # AskPermission outstanding, call 1 streaming
    point = prepare_resume(path2)
    kinds = [type(e).__name__ for e in point.reissue]
    assert kinds == ["CallModel", "AskPermission"] and point.partial_calls == {1}


def test_resume_refuses_a_finished_or_inconsistent_trace(tmp_path: Path) -> None:
    """Nothing to resume after the end; a trace that does not replay is not extended."""
    path = record_tool_round(tmp_path / "t.jsonl")
    with pytest.raises(TraceError, match=r"already ended \(completed\) at step 8"):
        resume_trace(path)
    _rewrite(path, 3, lambda o: o.update(digest="0" * 32))
    _cut_after_step(path, 5)
    with pytest.raises(
        TraceError, match="cannot resume: the trace does not replay exactly at step 3"
    ):
        resume_trace(path)


def test_cli_resume_with_a_script_appends_and_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`steploop resume TRACE --scripted FILE` continues the cut run and appends to it; the
    run's script goes on from the answer the cut run did not use (its second)."""
    path = record_tool_round(tmp_path / "t.jsonl")
    _cut_after_step(path, 5)  # call 2 issued, nothing streamed yet
    script = tmp_path / "script.json"
    entries = [
        {"type": "tool_call", "name": "Read", "input": {"file_path": "a.py"}},
        {"type": "reply", "text": "It prints hi."},
    ]
    script.write_text(json.dumps(entries), encoding="utf-8")
    ws = tmp_path / "ws"
    ws.mkdir()
    code, out, err = cli(
        ["resume", str(path), "--scripted", str(script), "--workspace", str(ws), "--yes"], capsys
    )
    assert code == 0, err
    assert "resuming" in out and "after step 5 (dropped a truncated last line)" in out
    assert (
        "issued again: call_model (claude-sonnet-4-5, max_tokens 8000, streaming, 4 messages)"
        in out
    )
    assert "result: completed" in out
    recs = list(TraceReader(path))
    assert isinstance(recs[-1], EndRecord)
    (resumed,) = [r for r in recs if isinstance(r, ResumeRecord)]
    assert [e.TAG for e in resumed.reissued] == ["call_model"]
    assert replay_exact(path).ok


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_replay_exact_and_counterfactual(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """replay prints counts (exit 0), a divergence report (exit 1), or a one-line error (exit 2)."""
    path = _growing_trace(tmp_path)
    code, out, _ = cli(["replay", str(path)], capsys)
    assert code == 0 and "replayed exactly: 16 steps" in out and "terminal completed" in out
    code, out, _ = cli(["replay", str(path), "--set", "autocompact_buffer=185000"], capsys)
    assert code == 1
    assert "the new run asks for compact #1: compact (auto" in out
    assert "recorded at that ordinal: none" in out
    code, out, _ = cli(["replay", str(path), "--profile", "claude_code_2_1_88"], capsys)
    assert code == 0 and "terminal completed" in out
    for argv, msg in [
        (["--set", "nope=1"], "unknown config key 'nope'"),
        (["--profile", "fastest"], "unknown profile 'fastest'"),
        (["--set", "flag"], "--set takes KEY=VALUE"),
        (["--on-divergence", "scripted"], "needs --script FILE"),
        (
            ["--on-divergence", "scripted", "--script", str(tmp_path / "x.json")],
            "x.json: no such file",
        ),
    ]:
        code, out, err = cli(["replay", str(path), *argv], capsys)
        assert code == 2 and msg in err and err.count("\n") == 1 and "Traceback" not in err


class _TtyErr(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.spec("CLI-4")
def test_cli_replay_bars_exact_and_counterfactual(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both replays draw a bar on stderr: off a terminal only with --progress (plain text, no
    escape codes), on a terminal a rich bar, coloured unless NO_COLOR; the report is the same."""
    path = _growing_trace(tmp_path)
    kb = -(-path.stat().st_size // 1000)
    cf = ["--set", "autocompact_buffer=185000"]
    for argv, end in [([], "] 16/16 steps"), (cf, f"] {kb}/{kb} kB")]:
        code, quiet_out, err = cli(["replay", str(path), *argv], capsys)
        assert err == ""  # not a terminal, no --progress: no bar
        code2, out, err = cli(["replay", str(path), *argv, "--progress"], capsys)
        assert code2 == code and out.split(" in ")[0] == quiet_out.split(" in ")[0]
        assert err.startswith("\r[") and err.endswith(end + "\n") and "\x1b" not in err
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = _TtyErr()
    monkeypatch.setattr(sys, "stderr", tty)
    assert cli_main(["replay", str(path), *cf], io.StringIO()) == 1
    assert "replaying" in tty.getvalue() and "\x1b[32m" in tty.getvalue()  # a coloured bar
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _TtyErr()
    monkeypatch.setattr(sys, "stderr", plain)
    assert cli_main(["replay", str(path), *cf], io.StringIO()) == 1
    assert "replaying" in plain.getvalue() and "\x1b[32m" not in plain.getvalue()


def test_cli_replay_live_without_key_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """--on-divergence live with no API key says so and exits 2."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    path = record_tool_round(tmp_path / "t.jsonl")
    code, _, err = cli(["replay", str(path), "--on-divergence", "live"], capsys)
    assert code == 2 and "ANTHROPIC_API_KEY is not set" in err


def test_cli_show_prints_the_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """show: one row per round with transition, calls, tools, tokens and compactions."""
    path = tmp_path / "c.jsonl"
    record_driver(
        path,
        default(autocompact_buffer=185_000),
        Request(prompt="go"),
        scripted_world(),
        provenance=FIXED,
    )
    code, out, _ = cli(["show", str(path)], capsys)
    assert code == 0
    rows = [r.split() for r in out.splitlines() if r.strip()[:1].isdigit() and "steps," not in r]
    assert rows[0] == ["1", "next_turn", "1", "1", "1,000/10", "0"]
    assert rows[1] == ["2", "next_turn", "1", "1", "8,000/10", "0"]
    assert rows[2] == ["3", "next_turn", "1", "1", "9,000/10", "1"]  # compacted, then called
    assert rows[-1][1] == "completed" and len(rows) == 4
    assert "terminal completed" in out and "profile default" in out


def test_cli_diff_finds_the_first_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """diff: identical traces, then two that part at a different tool result."""
    a = record_tool_round(tmp_path / "a.jsonl")
    b = record_tool_round(tmp_path / "b.jsonl")
    code, out, _ = cli(["diff", str(a), str(b)], capsys)
    assert (code, out) == (0, "identical (9 steps; completed)\n")
    events = tool_round_events()
    events[4] = ToolFinished(generation=1, tool_use_id="toolu_1", content="print('bye')")
    record_sequence(b, default(), Request(prompt="What does a.py print?"), events)
    code, out, _ = cli(["diff", str(a), str(b)], capsys)
    assert code == 1 and out.startswith("first divergence at step 5: the events differ")
    assert "print('bye')" in out
    c = tmp_path / "c.jsonl"
    record_sequence(
        c, default(max_turns=1), Request(prompt="What does a.py print?"), tool_round_events()[:5]
    )
    code, out, _ = cli(["diff", str(a), str(c)], capsys)
    assert code == 1 and "configs differ: max_turns (None → 1)" in out
    assert "first divergence at step 5: same event, the effects differ" in out
    record_sequence(
        d := tmp_path / "d.jsonl",
        default(),
        Request(prompt="What does a.py print?"),
        tool_round_events()[:3],
    )
    code, out, _ = cli(["diff", str(a), str(d)], capsys)
    assert code == 1 and out.startswith(
        "first divergence at step 4: B ends after step 3; A continues"
    )


def test_cli_stats_counts_and_skips_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """stats: transition and terminal counts; a bad file is one warning; the bar only on
    request (stderr is not a terminal here)."""
    record_tool_round(tmp_path / "a.jsonl")
    _growing_trace(tmp_path)
    (tmp_path / "broken.jsonl").write_bytes((CORPUS / "newer_version.jsonl").read_bytes())
    code, out, err = cli(["stats", str(tmp_path)], capsys)
    assert code == 0
    assert "2 trace(s) read, 1 skipped" in out
    assert out.split("terminals:")[1].split("compactions")[0].split() == ["completed", "2"]
    assert out.split("transitions:")[1].split("terminals:")[0].split() == [
        "next_turn",
        "4",
        "completed",
        "2",
    ]
    (warning,) = err.splitlines()
    assert (
        warning.startswith("steploop: warning: ") and "broken.jsonl:1: format version 3" in warning
    )
    assert "\r[" not in err
    code, _, err = cli(["stats", str(tmp_path), "--progress"], capsys)
    assert code == 0 and "\r[" in err and "] 3/3 files" in err
    code, _, err = cli(["stats", str(tmp_path / "none")], capsys)
    assert code == 2 and err.endswith("none: no such directory\n")


def test_register_adds_every_trace_command() -> None:
    """register() wires replay, diff, show, stats and resume with their handlers."""
    parser = argparse.ArgumentParser()
    handlers = register(parser.add_subparsers(dest="command", required=True))
    assert set(handlers) == {"replay", "diff", "show", "stats", "resume"}
    args = parser.parse_args(
        ["replay", "t.jsonl", "--set", "max_turns=2", "--on-divergence", "stop"]
    )
    assert args.handler is handlers["replay"] and args.set == ["max_turns=2"]
    assert parser.parse_args(["stats", "d", "--progress"]).progress is True
    assert parser.parse_args(["resume", "t.jsonl", "--scripted", "s.json"]).scripted == "s.json"
    with pytest.raises(SystemExit):
        parser.parse_args(["replay", "t.jsonl", "--on-divergence", "guess"])


def test_recording_many_steps_is_streamed(tmp_path: Path) -> None:
    """Every step is on disk as soon as the recorder returns (flushed per step)."""
    path = tmp_path / "live.jsonl"
    cfg, req = default(), Request(prompt="go")
    with TraceRecorder(path, config=cfg, request=req) as rec:
        state, fx = start(req, cfg)
        rec(None, state, fx)
        assert records(path)[-1]["record"] == "step"
        state, fx = step(state, text(1, "hi"), cfg)
        rec(text(1, "hi"), state, fx)
        assert [r["i"] for r in records(path) if r["record"] == "step"] == [0, 1]


def test_a_control_character_in_a_line_is_named_once(tmp_path: Path) -> None:
    """json's own message ends in "at"; the reader's line says "at column" once, not twice."""
    path = record_tool_round(tmp_path / "t.jsonl")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[1] = lines[1][:-1] + ',"x":"a\x01b"}'
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(TraceError) as err:
        list(TraceReader(path))
    assert "Invalid control character at column" in str(err.value)
    assert "at at" not in str(err.value)
