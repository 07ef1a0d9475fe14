"""``steploop temporal interrupt | status | trace`` and the worker's exit codes (specs/temporal.md
TEMPORAL-CLI-1, CLI-1), against the time-skipping test server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("temporalio")

from temporalio.testing import WorkflowEnvironment

from steploop.effects.cli import main as cli_main
from steploop.effects.run import PermissionPolicy
from steploop.effects.temporal.client import start_turn, turn_input, worker
from steploop.effects.trace import replay_exact
from tests.support.temporal_world import activities_for, time_skipping

STEPLOOP = str(Path(sys.executable).parent / "steploop")
WAIT_S = 60


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # temporalio runs on asyncio only


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("store")


@pytest.fixture(scope="module")
async def env(store: Path) -> AsyncIterator[WorkflowEnvironment]:
    async with time_skipping(store / "payloads") as e:
        yield e


class Exited(Exception):
    pass


@pytest.fixture
def exits(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The commands end with ``os._exit``: here it records the status instead."""
    codes: list[int] = []

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr(os, "_exit", fake_exit)
    yield codes


async def command(env: WorkflowEnvironment, store: Path, *argv: str) -> str:
    """Run ``steploop temporal ARGV`` in a thread of this process (its own event loop): what it
    printed (its exit status is the last of ``exits``)."""
    address = env.client.service_client.config.target_host
    out = io.StringIO()

    def run() -> None:
        with contextlib.suppress(Exited):
            cli_main(["temporal", *argv, "--address", address, "--store", str(store)], out)

    await asyncio.to_thread(run)
    return out.getvalue()


@pytest.mark.spec("TEMPORAL-CLI-1")
@pytest.mark.anyio
async def test_status_interrupt_and_trace_from_the_command_line(
    env: WorkflowEnvironment,
    store: Path,
    tmp_path: Path,
    exits: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``status`` says where a running turn stands and what it waits for, ``interrupt`` stops
    it (its running tool is cancelled), ``status`` then gives its terminal, ``trace`` writes
    its trace from the history (it replays exactly); a workflow that is not running cannot be
    interrupted and one the server does not know is a usage error."""
    script = [
        {"type": "response", "blocks": [{"type": "tool_use", "name": "Hang", "input": {"s": 3600}}],
         "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 1}},
    ]
    queue = f"q-{uuid.uuid4().hex[:8]}"
    wid = f"cli-{uuid.uuid4().hex[:8]}"
    async with worker(env.client, activities_for(tmp_path, script), task_queue=queue):
        inp = turn_input("go", permissions=PermissionPolicy(default="allow"))
        handle = await start_turn(env.client, inp, workflow_id=wid, task_queue=queue)
        log = tmp_path / "runs.log"
        deadline = time.monotonic() + WAIT_S
        while not log.exists():
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        said = await command(env, store, "status", wid)
        assert exits[-1] == 0, said
        assert f"workflow {wid}: running (steploop.turn)" in said
        assert "phase running_tools, round 1," in said
        said = await command(env, store, "interrupt", wid)
        assert exits[-1] == 0 and said == f"interrupted {wid} (hard)\n"
        with env.auto_time_skipping_disabled():
            result = await asyncio.wait_for(handle.result(), WAIT_S)
        assert result.terminal == {"type": "aborted_tools"}
        said = await command(env, store, "status", wid)
        assert exits[-1] == 0 and "completed (steploop.turn)" in said
        assert "terminal aborted_tools" in said
    out = tmp_path / "t.jsonl"
    said = await command(env, store, "trace", wid, "-o", str(out))
    assert exits[-1] == 0 and said.startswith(f"{out}: ")
    assert replay_exact(out).ok
    await command(env, store, "interrupt", wid)
    assert exits[-1] == 2 and "is not running (completed)" in capsys.readouterr().err
    await command(env, store, "status", "no-such-workflow")
    assert exits[-1] == 2
    assert "workflow no-such-workflow: " in capsys.readouterr().err


def _worker(env_address: str, store: Path, tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            STEPLOOP, "temporal", "worker", "--demo", "--workspace", str(tmp_path),
            "--address", env_address, "--store", str(store),
            "--task-queue", f"q-{uuid.uuid4().hex[:8]}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.spec("TEMPORAL-CLI-1", "CLI-1")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
@pytest.mark.anyio
async def test_the_worker_exits_130_on_ctrl_c_and_143_on_sigterm(
    env: WorkflowEnvironment, store: Path, tmp_path: Path, sig: int, code: int
) -> None:
    """A worker stopped by Ctrl-C says so and exits 130 (143 for SIGTERM), after shutting
    down; one that cannot reach the server exits 2 with one line."""
    proc = _worker(env.client.service_client.config.target_host, store, tmp_path)
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert line.startswith("worker on "), line + (proc.stderr.read() if proc.stderr else "")
        proc.send_signal(sig)
        _, err = await asyncio.to_thread(proc.communicate, None, WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == code, err
    assert "stopping the worker" in err


def test_a_worker_that_cannot_reach_the_server_exits_2(tmp_path: Path) -> None:
    """No server at the address: one line naming it, status 2."""
    proc = _worker("127.0.0.1:1", tmp_path / "store", tmp_path)
    _, err = proc.communicate(timeout=WAIT_S)
    assert proc.returncode == 2
    assert err.startswith("steploop: error: cannot reach Temporal at 127.0.0.1:1")
    assert len(err.strip().splitlines()) == 1
