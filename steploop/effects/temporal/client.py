"""Connecting, starting turns and running workers: the pieces a user of the Temporal world
needs, with the data converter (large payloads by reference) and the sandbox settings in one
place, so clients, workers and the Replayer agree on them."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from temporalio.client import Client, WorkflowHandle
from temporalio.converter import DataConverter
from temporalio.worker import Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from steploop.effects.run import PermissionPolicy
from steploop.effects.temporal.activities import SteploopActivities
from steploop.effects.temporal.codec import DEFAULT_THRESHOLD, BlobCodec, DirectoryStore
from steploop.effects.temporal.workflow import TurnInput, TurnResult, TurnWorkflow
from steploop.effects.trace.provenance import _steploop_version
from steploop.reducer import LoopConfig, Request, Session
from steploop.reducer.serialize import unstructure

__all__ = [
    "TASK_QUEUE",
    "connect",
    "data_converter",
    "replayer",
    "sandbox",
    "start_turn",
    "turn_input",
    "worker",
]

TASK_QUEUE = "steploop"


def data_converter(
    blob_dir: str | os.PathLike[str] | None, threshold: int = DEFAULT_THRESHOLD
) -> DataConverter:
    """Temporal's default converter, with large payloads kept in ``blob_dir`` by reference
    (see :mod:`steploop.effects.temporal.codec`); None keeps every payload inline."""
    if blob_dir is None:
        return DataConverter.default
    return DataConverter(payload_codec=BlobCodec(DirectoryStore(blob_dir), threshold))


async def connect(
    address: str,
    *,
    namespace: str = "default",
    blob_dir: str | os.PathLike[str] | None = None,
    threshold: int = DEFAULT_THRESHOLD,
) -> Client:
    return await Client.connect(
        address, namespace=namespace, data_converter=data_converter(blob_dir, threshold)
    )


def sandbox() -> SandboxedWorkflowRunner:
    """Temporal's workflow sandbox, with steploop and its data libraries passed through:
    ``reducer`` is pure (it is the deterministic part), and imported once, not per run."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(
            "steploop", "attrs", "cattrs", "jsonschema", "anyio", "anthropic"
        )
    )


def worker(
    client: Client,
    activities: SteploopActivities,
    *,
    task_queue: str = TASK_QUEUE,
    **kwargs: Any,
) -> Worker:
    """A worker that runs the turn workflow and these activities."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[TurnWorkflow],
        activities=list(activities.all()),
        workflow_runner=sandbox(),
        **kwargs,
    )


def replayer(**kwargs: Any) -> Replayer:
    """Temporal's Replayer for the turn workflow (pass the clients' ``data_converter``)."""
    return Replayer(workflows=[TurnWorkflow], workflow_runner=sandbox(), **kwargs)


def turn_input(
    request: Request | str,
    *,
    config: LoopConfig | None = None,
    session: Session | None = None,
    permissions: PermissionPolicy | None = None,
    trace_path: str | os.PathLike[str] | None = None,
    provenance: dict[str, Any] | None = None,
    rounds_per_run: int = 50,
    **options: Any,
) -> TurnInput:
    """The workflow's input for one turn. ``options``: the other fields of
    :class:`~steploop.effects.temporal.workflow.TurnInput` (timeouts, ``tool_attempts``)."""
    req = (
        Request(prompt=request, at_ms=int(time.time() * 1000))
        if isinstance(request, str)
        else request
    )
    policy = permissions or PermissionPolicy()
    prov = {
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "client": "temporal",
        **(provenance or {}),
    }
    return TurnInput(
        request=unstructure(req),
        config=unstructure(config or LoopConfig()),
        session=unstructure(session) if session is not None else None,
        allow=sorted(policy.allow),
        deny=sorted(policy.deny),
        default_permission=policy.default,
        trace_path=os.fspath(trace_path) if trace_path is not None else None,
        provenance=prov,
        rounds_per_run=rounds_per_run,
        steploop_version=_steploop_version(),
        **options,
    )


async def start_turn(
    client: Client, inp: TurnInput, *, workflow_id: str, task_queue: str = TASK_QUEUE
) -> WorkflowHandle[TurnWorkflow, TurnResult]:
    return await client.start_workflow(TurnWorkflow.run, inp, id=workflow_id, task_queue=task_queue)


def _names(items: Sequence[Any]) -> list[str]:  # pragma: no cover - used by the CLI
    return [str(i) for i in items]
