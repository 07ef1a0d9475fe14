"""Side effects at most once, or said to be maybe-twice (specs/temporal.md TEMPORAL-ONCE-1), and
interrupts that stop tools at once (TEMPORAL-STOP-1), on the time-skipping test server with the
real Bash tool: a worker process killed while Bash runs, the call found started and not finished
by the next attempt, reported as unknown or asked about; an interrupt that kills a running Bash
process before the turn ends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
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

from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from steploop.effects.run import PermissionPolicy
from steploop.effects.temporal.activities import Ledger
from steploop.effects.temporal.client import fetch_histories, start_turn, turn_input, worker
from steploop.effects.temporal.history import check_histories, turn_traces
from steploop.effects.temporal.options import ActivityOptions
from steploop.effects.temporal.workflow import TurnWorkflow
from steploop.effects.trace.resume import INTERRUPTED_TOOL_RESULT
from steploop.reducer.events import ToolFinished
from steploop.reducer.serialize import structure
from tests.support.temporal_world import activities_for, time_skipping

FIXED = {"created_at": "2026-01-01T00:00:00Z"}
ROOT = Path(__file__).resolve().parents[2]
ALLOW = PermissionPolicy(default="allow")
QUICK = {"tools": ActivityOptions(heartbeat_s=1.0)}
WAIT_S = 60


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # temporalio runs on asyncio only


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
async def env(store: Path) -> AsyncIterator[WorkflowEnvironment]:
    async with time_skipping(store) as e:
        yield e


def calls(name: str, **inp: Any) -> dict[str, Any]:
    return {
        "type": "response",
        "blocks": [{"type": "tool_use", "name": name, "input": inp}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


REPLY = {"type": "reply", "text": "Done.", "usage": {"input_tokens": 100, "output_tokens": 5}}
LONG_BASH = "echo $$ > bash.pid; echo start >> side.log; sleep 60; echo end >> side.log"


def gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for init to reap it counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"waited {WAIT_S} s for {what}"
        await asyncio.sleep(0.05)


async def tool_results(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]) -> list[Any]:
    (trace,) = await turn_traces(await fetch_histories(env.client, handle.id), env.client.data_converter)
    out = []
    for line in trace.text.splitlines():
        rec = json.loads(line)
        event = rec.get("event") if rec.get("record") == "step" else None
        if event is not None and event.get("type") == "tool_finished":
            out.append(structure(event, ToolFinished))
    return out


async def both_checks(env: WorkflowEnvironment, handle: WorkflowHandle[Any, Any]) -> None:
    histories = await fetch_histories(env.client, handle.id)
    report = await check_histories(histories, data_converter=env.client.data_converter)
    assert report.ok, report.problems


@pytest.mark.spec("TEMPORAL-ONCE-1", "W-ONCE-1")
@pytest.mark.anyio
async def test_a_worker_killed_mid_bash_never_runs_the_command_twice(
    env: WorkflowEnvironment, tmp_path: Path, store: Path
) -> None:
    """Worker A (a process of its own) runs a long Bash command; it is killed with SIGKILL
    while the command sleeps. The command dies with it (it never writes its last line), and
    worker B, taking the retried call, finds it started and not finished: it does not run it
    again but answers with the documented interrupted-unknown result, and the turn goes on.
    The command's side effect happened once."""
    script = [calls("Bash", command=LONG_BASH), REPLY]
    (tmp_path / "script.json").write_text(json.dumps(script))
    queue = f"q-{uuid.uuid4().hex[:8]}"
    address = env.client.service_client.config.target_host
    argv = [sys.executable, "-m", "tests.support.temporal_world", address, queue, str(tmp_path)]
    proc = subprocess.Popen(
        [*argv, "--bash", "--store", str(store)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    ws = tmp_path / "ws"
    try:
        await until(lambda: (tmp_path / "worker.ready").exists() or proc.poll() is not None, "A")
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else b""
        inp = turn_input("go", permissions=ALLOW, provenance=FIXED, activities=QUICK)
        wid = f"kill-{uuid.uuid4().hex[:8]}"
        handle = await start_turn(
            env.client, inp, workflow_id=wid, task_queue=queue, task_timeout=timedelta(seconds=1)
        )
        side = ws / "side.log"
        await until(lambda: side.exists() and (ws / "bash.pid").exists(), "Bash to start")
        await until(lambda: (ws / "bash.pid").read_text().strip() != "", "the pid")
        pid = int((ws / "bash.pid").read_text())
        proc.send_signal(signal.SIGKILL)
        assert await asyncio.to_thread(proc.wait, WAIT_S) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    await until(lambda: gone(pid), "the command to die with its worker")
    acts_b = activities_for(tmp_path, script, bash=True)
    async with worker(env.client, acts_b, task_queue=queue):
        result = await asyncio.wait_for(handle.result(), WAIT_S)
    assert result.terminal == {"type": "completed"}
    assert acts_b.tool_runs == []  # B ran nothing
    assert side.read_text() == "start\n"  # once, and never finished
    (finished,) = await tool_results(env, handle)
    assert finished.is_error and finished.content == INTERRUPTED_TOOL_RESULT
    await both_checks(env, handle)


class Crashed(Ledger):
    """A ledger that says the first call started before (as a killed worker leaves it)."""

    def started(self, key: str) -> bool:
        return key.endswith("/toolu_001") or super().started(key)


@pytest.mark.spec("TEMPORAL-ONCE-1")
@pytest.mark.anyio
async def test_a_started_unfinished_call_is_reported_or_asked_about(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A guarded call its ledger says started and did not finish: by default the turn gets
    the interrupted-unknown result and the tool does not run; with ``on_unfinished="ask"``
    the question goes to the client through the permission channel (``pending_permissions``,
    ``answer_permission``): rejected, the same result; allowed, the tool runs once more. A
    Python tool is given the call's idempotency key either way."""
    script = [calls("Change", say="done"), REPLY]
    queue = f"q-{uuid.uuid4().hex[:8]}"
    acts = activities_for(tmp_path, script, guarded={"Change"})
    acts.ledger = Crashed(tmp_path / "ledger")
    log = tmp_path / "runs.log"

    async def turn(on_unfinished: str, decision: str | None) -> list[ToolFinished]:
        acts.ledger = Crashed(tmp_path / f"ledger-{on_unfinished}-{decision}")
        inp = turn_input("go", permissions=ALLOW, provenance=FIXED, on_unfinished=on_unfinished)
        handle = await start_turn(
            env.client, inp, workflow_id=f"ask-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        if decision is not None:
            asked: list[dict[str, Any]] = []
            while not asked:
                asked = await handle.query(TurnWorkflow.pending_permissions)
                await asyncio.sleep(0.02)
            assert asked == [
                {"tool_use_id": "toolu_001", "name": "Change", "input": {"say": "done"},
                 "unfinished": True}
            ]
            await handle.execute_update(
                TurnWorkflow.answer_permission, args=["toolu_001", decision]
            )
        result = await asyncio.wait_for(handle.result(), WAIT_S)
        assert result.terminal == {"type": "completed"}
        await both_checks(env, handle)
        return await tool_results(env, handle)

    async with worker(env.client, acts, task_queue=queue):
        (reported,) = await turn("report", None)
        (rejected,) = await turn("ask", "rejected_by_user")
        assert not log.exists()  # neither ran the tool
        (rerun,) = await turn("ask", "allow")
    for r in (reported, rejected):
        assert r.is_error and r.content == INTERRUPTED_TOOL_RESULT
    assert not rerun.is_error and rerun.content == "done"
    assert log.read_text().splitlines() == ["Change toolu_001", "Change toolu_001 done"]
    change = acts.tools.get("Change")
    assert len(change.keys) == 1 and change.keys[0].endswith("/turn/1/toolu_001")


@pytest.mark.spec("TEMPORAL-STOP-1")
@pytest.mark.anyio
async def test_an_interrupt_kills_a_running_bash_before_the_turn_ends(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """A Bash command that would sleep a minute, interrupted: the turn ends aborted_tools,
    and by then the command's process is gone (the history records the activity cancelled
    before the workflow completed: nothing of the turn runs after it ended). The bound is
    2 s; on this shared machine the test allows 10 s between the signal and the result."""
    script = [calls("Bash", command=LONG_BASH), REPLY]
    queue = f"q-{uuid.uuid4().hex[:8]}"
    acts = activities_for(tmp_path, script, bash=True)
    ws = tmp_path / "ws"
    async with worker(env.client, acts, task_queue=queue):
        inp = turn_input("go", permissions=ALLOW, provenance=FIXED)
        handle = await start_turn(
            env.client, inp, workflow_id=f"stop-{uuid.uuid4().hex[:8]}", task_queue=queue
        )
        await until(lambda: (ws / "side.log").exists(), "Bash to start")
        pid = int((ws / "bash.pid").read_text())
        with env.auto_time_skipping_disabled():
            t0 = time.monotonic()
            await handle.signal(TurnWorkflow.interrupt, "hard")
            result = await asyncio.wait_for(handle.result(), WAIT_S)
            elapsed = time.monotonic() - t0
            ended = gone(pid)
    assert result.terminal == {"type": "aborted_tools"}
    assert ended, "the Bash command outlived the turn"
    assert elapsed < 10, f"{elapsed:.1f} s from the interrupt to the turn's end"
    assert (ws / "side.log").read_text() == "start\n"
    (history,) = await fetch_histories(env.client, handle.id)
    kinds = [e.event_type for e in history.events]
    from temporalio.api.enums.v1 import EventType

    cancelled = kinds.index(EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED)
    assert cancelled < kinds.index(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED)
    await both_checks(env, handle)
