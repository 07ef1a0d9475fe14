"""The determinism check both ways (specs/temporal.md TEMPORAL-CHECK-1, TEMPORAL-IO-1), on the
time-skipping test server: a replay reads and writes no file (the trace is in the history, the
workflow writes none), and ``steploop temporal check`` fails when ``step()`` decides otherwise
than it did (a changed backoff) or the workflow schedules another activity (a renamed one)."""

from __future__ import annotations

import asyncio
import io
import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio")

from temporalio.client import WorkflowHistory
from temporalio.testing import WorkflowEnvironment

from steploop.effects.cli import build_parser
from steploop.effects.cli import main as cli_main
from steploop.effects.run import PermissionPolicy
from steploop.effects.temporal.activities import ACTIVITY_NAMES
from steploop.effects.temporal.client import (
    fetch_histories,
    replayer,
    start_turn,
    turn_input,
    worker,
)
from steploop.effects.temporal.history import check_histories, turn_traces
from steploop.reducer.config import RetryPolicy
from tests.support.temporal_world import (
    activities_for,
    file_activity,
    replay_executor,
    time_skipping,
    unexpected,
)

FIXED = {"created_at": "2026-01-01T00:00:00Z"}
ROOT = Path(__file__).resolve().parents[2]


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
OVERLOADED = {"type": "failure", "kind": "overloaded", "status": 529}  # retried after a backoff


@pytest.fixture(scope="module")
async def recorded(
    env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> list[WorkflowHistory]:
    """One turn, continued as new after each round: a model call that fails and is retried
    after the machine's backoff (a durable timer), a tool, a 40 KB result (by reference)."""
    tmp = tmp_path_factory.mktemp("turn")
    script = [OVERLOADED, calls("Look", size=40_000), calls("Look", say="small"), REPLY]
    queue = f"q-{uuid.uuid4().hex[:8]}"
    trace = tmp / "turn.jsonl"
    async with worker(env.client, activities_for(tmp, script), task_queue=queue):
        inp = turn_input(
            "go",
            permissions=PermissionPolicy(default="allow"),
            trace_path=trace,
            provenance=FIXED,
            rounds_per_run=1,
        )
        wid = f"check-{uuid.uuid4().hex[:8]}"
        handle = await start_turn(env.client, inp, workflow_id=wid, task_queue=queue)
        result = await asyncio.wait_for(handle.result(), 60)
    assert result.terminal == {"type": "completed"} and result.runs == 3
    trace.unlink()  # the file is not needed by anything that follows
    return await fetch_histories(env.client, wid)


@pytest.mark.spec("TEMPORAL-IO-1")
@pytest.mark.anyio
async def test_a_replay_in_an_empty_directory_reads_and_writes_no_file(
    env: WorkflowEnvironment,
    recorded: list[WorkflowHistory],
    store: Path,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Temporal's Replayer over every run of a continued-as-new turn, from an empty directory
    and with the trace file gone: it passes, writes no file and reads none of the tests' files
    but the payload store's (the 40 KB result), and leaves the directory empty."""
    monkeypatch.chdir(tmp_path)
    rp = replayer(
        data_converter=env.client.data_converter, workflow_task_executor=replay_executor()
    )
    with file_activity() as opened:
        for history in recorded:
            await rp.replay_workflow(history)
    assert unexpected(opened, store, tmp_path_factory.getbasetemp()) == []
    store_root = os.path.realpath(store)
    assert any(os.path.realpath(p).startswith(store_root) for p, _ in opened)  # the 40 KB result
    assert list(tmp_path.iterdir()) == []


@pytest.mark.spec("TEMPORAL-CHECK-1")
@pytest.mark.anyio
async def test_the_check_passes_on_the_code_that_made_the_histories(
    env: WorkflowEnvironment, recorded: list[WorkflowHistory]
) -> None:
    """Both checks pass, over the three runs joined in order (the trace's parts meet)."""
    report = await check_histories(recorded, data_converter=env.client.data_converter)
    assert report.ok, report.problems
    assert (report.histories, report.turns) == (3, 1) and report.steps > 10
    (trace,) = await turn_traces(list(reversed(recorded)), env.client.data_converter)
    assert trace.problem is None and trace.text.count('"record":"resume"') == 2


@pytest.mark.spec("TEMPORAL-CHECK-1")
@pytest.mark.anyio
async def test_a_changed_backoff_fails_both_checks(
    env: WorkflowEnvironment, recorded: list[WorkflowHistory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``step()`` waiting 100 ms longer before a retry (a changed constant of the machine, no
    other command changed): Temporal's Replayer fails on it (the trace part's activity id
    carries the trace's digest) and steploop's exact replay names the step."""
    delay = RetryPolicy.delay_ms
    monkeypatch.setattr(RetryPolicy, "delay_ms", lambda self, a, r: delay(self, a, r) + 100)
    report = await check_histories(recorded, data_converter=env.client.data_converter)
    temporal = [p for p in report.problems if "Temporal's replay" in p]
    steploop = [p for p in report.problems if "steploop's replay" in p]
    assert temporal and "does not match activity id" in temporal[0]
    assert len(steploop) == 1 and "step 1" in steploop[0], steploop


@pytest.mark.spec("TEMPORAL-CHECK-1")
@pytest.mark.anyio
async def test_a_renamed_activity_fails_the_check(
    env: WorkflowEnvironment, recorded: list[WorkflowHistory], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model call's activity under another name: the machine decides the same (steploop's
    replay passes), Temporal's Replayer fails, and so does the check."""
    monkeypatch.setitem(ACTIVITY_NAMES, "model", "steploop.model_call")
    report = await check_histories(recorded, data_converter=env.client.data_converter)
    assert not report.ok
    assert all("Temporal's replay" in p for p in report.problems), report.problems
    assert "steploop.model_call" in report.problems[0]


@pytest.mark.spec("TEMPORAL-CHECK-1")
def test_the_check_command_reads_history_files_and_says_which_check_failed(
    recorded: list[WorkflowHistory],
    store: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``steploop temporal check H1.json H2.json H3.json``: exit 0 when both checks pass, 1
    (each problem on a line) when the machine changed, 2 for a file that is no history."""
    files = []
    for k, h in enumerate(recorded):
        path = tmp_path / f"{h.workflow_id}.run{k}.json"
        path.write_text(h.to_json(), encoding="utf-8")
        files.append(str(path))
    payloads = tmp_path / "cli-store"
    payloads.mkdir()
    os.symlink(store, payloads / "payloads")  # --store DIR keeps payloads in DIR/payloads
    codes: list[int] = []

    class Exited(Exception):
        pass

    def fake_exit(code: int) -> None:
        codes.append(code)
        raise Exited

    monkeypatch.setattr(os, "_exit", fake_exit)

    def check(*argv: str) -> str:
        args = build_parser().parse_args(["temporal", "check", "--store", str(payloads), *argv])
        out = io.StringIO()
        with pytest.raises(Exited):
            args.handler(args, out)
        return out.getvalue()

    said = check(*files)
    assert codes[-1] == 0 and "3 histories, 1 turn(s)" in said and "both checks passed" in said
    delay = RetryPolicy.delay_ms
    monkeypatch.setattr(RetryPolicy, "delay_ms", lambda self, a, r: delay(self, a, r) + 100)
    said = check(*files)
    assert codes[-1] == 1
    assert "✗" in said and "Temporal's replay" in said and "steploop's replay" in said
    (tmp_path / "bad.json").write_text("{}")
    assert cli_main(["temporal", "check", str(tmp_path / "bad.json")], io.StringIO()) == 2
    assert "bad.json: not a workflow history" in capsys.readouterr().err
