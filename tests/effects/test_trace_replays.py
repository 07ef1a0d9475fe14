"""Traces: counterfactual replay, resume, the trace commands of the CLI."""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.hooks import PythonStopHook, StopHookResult, StopHooks
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.effects.trace import (
    INTERRUPTED_TOOL_RESULT,
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
)
from steploop.effects.trace_cli import main as cli_main
from steploop.effects.trace_cli import register
from steploop.reducer import (
    ConfigError,
    Request,
    claude_code_2_1_88,
    default,
    start,
    step,
)
from steploop.reducer.effects import (
    CallModel,
    Emit,
    Wait,
)
from steploop.reducer.events import (
    InterruptBehavior,
    Interrupted,
    ModelCallFailed,
    ToolFinished,
)
from steploop.reducer.messages import (
    Tombstone,
    UserMessage,
)
from tests.effects.trace_kit import (
    CORPUS,
    FIXED,
    assert_schema_valid,
    cli,
    record_tool_round,
    records,
    rewrite,
    scripted_world,
    text,
    tool_round_events,
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


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
    rewrite(path, 3, lambda o: o.update(digest="0" * 32))
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
