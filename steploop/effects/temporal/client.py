"""Connecting, starting turns, running workers, reading histories: the pieces a user of the
Temporal world needs, with the data converter, the sandbox and the heartbeat throttle in one
place (the plugin, :class:`~steploop.effects.temporal.plugin.SteploopPlugin`), so clients,
workers and the Replayer agree on them."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHandle, WorkflowHistory
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Replayer, Worker

from steploop.effects.answer import PermissionPolicy
from steploop.effects.temporal.activities import SteploopActivities
from steploop.effects.temporal.history import CheckReport, TurnTrace, check_histories, turn_traces
from steploop.effects.temporal.options import ActivityOptions
from steploop.effects.temporal.plugin import SteploopPlugin, data_converter, for_replay, sandbox
from steploop.effects.temporal.storage import DEFAULT_THRESHOLD, PayloadStore
from steploop.effects.temporal.turn import make_input
from steploop.effects.temporal.workflow import TurnInput, TurnResult, TurnWorkflow
from steploop.reducer import LoopConfig, Request, Session

__all__ = [
    "TASK_QUEUE",
    "alive",
    "check",
    "connect",
    "data_converter",
    "fetch_histories",
    "replayer",
    "sandbox",
    "start_turn",
    "traces",
    "turn_input",
    "worker",
]

TASK_QUEUE = "steploop"


async def connect(
    address: str,
    *,
    namespace: str = "default",
    store: PayloadStore | str | os.PathLike[str] | None = None,
    threshold: int = DEFAULT_THRESHOLD,
    activities: SteploopActivities | None = None,
    accept_versions: Sequence[str] = (),
) -> Client:
    """A client with the steploop plugin (payloads over ``threshold`` bytes in ``store``);
    workers made from it run ``activities`` too."""
    plugin = SteploopPlugin(
        store=store, threshold=threshold, activities=activities, accept_versions=accept_versions
    )
    return await Client.connect(address, namespace=namespace, plugins=[plugin])


def worker(
    client: Client,
    activities: SteploopActivities | None = None,
    *,
    task_queue: str = TASK_QUEUE,
    **kwargs: Any,
) -> Worker:
    """A worker that runs the turn workflow and ``activities``: the client's steploop plugin
    (:func:`connect`) sets it up, or one made here does (for a client made otherwise)."""
    if _has_plugin(client):
        extra = list(activities.all()) if activities is not None else []
        return Worker(client, task_queue=task_queue, activities=extra, **kwargs)
    plugin = SteploopPlugin(activities=activities)
    return Worker(client, task_queue=task_queue, plugins=[plugin], **kwargs)


def _has_plugin(client: Client) -> bool:
    return any(isinstance(p, SteploopPlugin) for p in client.config()["plugins"])


def replayer(*, workflows: Sequence[type] = (), **kwargs: Any) -> Replayer:
    """Temporal's Replayer for the turn workflow and ``workflows`` (pass the clients'
    ``data_converter``: its payload stores only read)."""
    converter = kwargs.pop("data_converter", None)
    if converter is not None:
        kwargs["data_converter"] = for_replay(converter)
    return Replayer(
        workflows=[TurnWorkflow, *(w for w in workflows if w is not TurnWorkflow)],
        workflow_runner=sandbox(),
        **kwargs,
    )


def turn_input(
    request: Request | str,
    *,
    config: LoopConfig | None = None,
    session: Session | None = None,
    permissions: PermissionPolicy | None = None,
    trace_path: str | os.PathLike[str] | None = None,
    provenance: dict[str, Any] | None = None,
    rounds_per_run: int = 50,
    activities: dict[str, ActivityOptions] | None = None,
    **options: Any,
) -> TurnInput:
    """The workflow's input for one turn, made in a client (its clock). ``trace_path`` is
    made absolute here (the worker writes it); ``options``: the other fields of
    :class:`~steploop.effects.temporal.workflow.TurnInput` (``on_unfinished``, ``turn_id``)."""
    req = (
        Request(prompt=request, at_ms=int(time.time() * 1000))
        if isinstance(request, str)
        else request
    )
    return make_input(
        req,
        created_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        config=config,
        session=session,
        permissions=permissions,
        trace_path=str(Path(trace_path).resolve()) if trace_path is not None else None,
        provenance=provenance,
        rounds_per_run=rounds_per_run,
        activities=activities,
        **options,
    )


async def start_turn(
    client: Client,
    inp: TurnInput,
    *,
    workflow_id: str,
    task_queue: str = TASK_QUEUE,
    **kwargs: Any,
) -> WorkflowHandle[TurnWorkflow, TurnResult]:
    """Start the ready-made workflow on ``inp``; ``kwargs`` go to ``Client.start_workflow``
    (``task_timeout``: how soon a workflow task a lost worker held is handed to another)."""
    return await client.start_workflow(
        TurnWorkflow.run, inp, id=workflow_id, task_queue=task_queue, **kwargs
    )


async def fetch_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run's history of ``workflow_id``, first run first (following continue-as-new)."""
    first = await client.get_workflow_handle(workflow_id).describe()
    run_id: str | None = first.raw_description.workflow_execution_info.first_run_id or None
    histories = []
    while run_id:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1] if history.events else None
        run_id = (
            last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
            if last is not None
            and last.HasField("workflow_execution_continued_as_new_event_attributes")
            else None
        )
    return histories


async def traces(client: Client, workflow_id: str) -> list[TurnTrace]:
    """The trace of every turn of ``workflow_id``, from its history."""
    return await turn_traces(await fetch_histories(client, workflow_id), client.data_converter)


async def check(client: Client, workflow_ids: Sequence[str]) -> CheckReport:
    """Both determinism checks over every run of these workflows, as the server holds them."""
    histories = [h for wid in workflow_ids for h in await fetch_histories(client, wid)]
    return await check_histories(histories, data_converter=client.data_converter)


async def alive(client: Client, namespace: str, workflow_id: str) -> bool:
    """Whether the server still knows ``workflow_id`` (open, or closed within its namespace's
    retention); a workflow of another namespace is taken to be alive."""
    if namespace and namespace != client.namespace:
        return True
    try:
        await client.get_workflow_handle(workflow_id).describe()
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return True
