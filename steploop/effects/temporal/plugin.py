"""The plugin Temporal users compose: :class:`SteploopPlugin`.

As the plugins of other agent frameworks on Temporal do, it is a ``temporalio.plugin.SimplePlugin``
(a client plugin and a worker plugin in one): given to ``Client.connect(..., plugins=[...])`` it
sets the data converter (large payloads in a :class:`~steploop.effects.temporal.storage.PayloadStore`
through the SDK's external storage), and every worker made from that client (or given the
plugin itself) gets

- the ready-made :class:`~steploop.effects.temporal.workflow.TurnWorkflow` (``workflows=False``
  leaves it out);
- steploop's activities, when the plugin is given a
  :class:`~steploop.effects.temporal.activities.SteploopActivities` (a client that only starts
  turns needs none);
- the workflow sandbox with steploop and its data libraries passed through (the machine is pure:
  it is the deterministic part, imported once rather than per run);
- a heartbeat throttle of :data:`~steploop.effects.temporal.options.HEARTBEAT_EVERY_S`, so that a
  cancellation (an interrupt) reaches a running activity within about a second whatever its
  heartbeat timeout;
- the steploop versions whose turns this worker also takes (``accept_versions``).

A turn then runs in a workflow of one's own with
:func:`~steploop.effects.temporal.turn.run_turn` (or as a child workflow of the ready-made one)::

    client = await Client.connect("localhost:7233",
                                  plugins=[SteploopPlugin(store=root, activities=acts)])

    @workflow.defn
    class Review:
        @workflow.run
        async def run(self, prompt: str) -> str:
            result = await run_turn(turn_input_here(prompt, permissions=...))
            return result.terminal["type"]

    async with Worker(client, task_queue="q", workflows=[Review]):
        ...

The Replayer takes the same plugin (``Replayer(workflows=[Review], plugins=[plugin])``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from temporalio.converter import DataConverter
from temporalio.plugin import SimplePlugin
from temporalio.worker import ReplayerConfig, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from steploop.effects.temporal import turn as turn_module
from steploop.effects.temporal.activities import SteploopActivities
from steploop.effects.temporal.options import HEARTBEAT_EVERY_S
from steploop.effects.temporal.storage import (
    DEFAULT_THRESHOLD,
    PayloadStore,
    external_storage,
)
from steploop.effects.temporal.storage import for_replay as storage_for_replay
from steploop.effects.temporal.workflow import TurnWorkflow

__all__ = [
    "PASSTHROUGH",
    "SteploopPlugin",
    "data_converter",
    "for_replay",
    "sandbox",
    "with_passthrough",
]

PASSTHROUGH = ("steploop", "attrs", "cattrs", "jsonschema", "anyio", "anthropic")
"""Modules the workflow sandbox takes from outside rather than importing again per run."""


def with_passthrough(runner: WorkflowRunner | None) -> WorkflowRunner:
    """``runner`` (default: a new sandbox) with :data:`PASSTHROUGH` passed through; a runner
    without a sandbox is returned as it is."""
    if runner is None:
        return sandbox()
    if isinstance(runner, SandboxedWorkflowRunner):
        return dataclasses.replace(
            runner, restrictions=runner.restrictions.with_passthrough_modules(*PASSTHROUGH)
        )
    return runner


def sandbox() -> SandboxedWorkflowRunner:
    """Temporal's workflow sandbox with :data:`PASSTHROUGH` passed through."""
    return SandboxedWorkflowRunner(
        restrictions=SandboxRestrictions.default.with_passthrough_modules(*PASSTHROUGH)
    )


def for_replay(converter: DataConverter) -> DataConverter:
    """``converter`` for a replay: its payload stores read, and never write (a replay makes
    the commands of the code again; they go nowhere)."""
    storage = storage_for_replay(converter.external_storage)
    if storage is converter.external_storage:
        return converter
    return dataclasses.replace(converter, external_storage=storage)


def data_converter(
    store: PayloadStore | str | os.PathLike[str] | None,
    threshold: int = DEFAULT_THRESHOLD,
    base: DataConverter | None = None,
) -> DataConverter:
    """``base`` (default: Temporal's) with payloads of ``threshold`` bytes or more kept in
    ``store``; None keeps every payload inline."""
    base = base or DataConverter.default
    if store is None:
        return base
    return dataclasses.replace(base, external_storage=external_storage(store, threshold))


class SteploopPlugin(SimplePlugin):
    """See the module docstring.

    Args:
        store: the payload store (a directory every client and worker of the namespace
            shares); None keeps payloads inline.
        activities: the activities this worker runs (None: none).
        threshold: payloads of at least this many bytes go to the store.
        workflows: register the ready-made turn workflow.
        heartbeat_every_s: the worker's heartbeat throttle (how soon a cancellation arrives).
        accept_versions: steploop versions whose turns this worker also takes.
    """

    def __init__(
        self,
        *,
        store: PayloadStore | str | os.PathLike[str] | None = None,
        activities: SteploopActivities | None = None,
        threshold: int = DEFAULT_THRESHOLD,
        workflows: bool = True,
        heartbeat_every_s: float = HEARTBEAT_EVERY_S,
        accept_versions: Iterable[str] = (),
    ) -> None:
        self.store = (
            store if isinstance(store, PayloadStore) or store is None else PayloadStore(store)
        )
        self.steploop_activities = activities
        self.heartbeat_every = timedelta(seconds=heartbeat_every_s)
        self.accept_versions = frozenset(accept_versions)
        store_ = self.store

        def converter(existing: DataConverter | None) -> DataConverter:
            return data_converter(store_, threshold, existing)

        super().__init__(
            "steploop",
            data_converter=converter if store_ is not None else None,
            workflows=self._add_workflow if workflows else None,
            activities=self._add_activities,
            workflow_runner=with_passthrough,
        )

    @staticmethod
    def _add_workflow(existing: Sequence[type] | None) -> Sequence[type]:
        have = list(existing or [])
        return have if TurnWorkflow in have else [*have, TurnWorkflow]

    def _add_activities(self, existing: Sequence[Any] | None) -> Sequence[Any]:
        have = list(existing or [])
        if self.steploop_activities is None:
            return have
        names = {getattr(getattr(a, "__temporal_activity_definition", None), "name", None) for a in have}
        mine = self.steploop_activities.all()
        return have + [
            a
            for a in mine
            if getattr(getattr(a, "__temporal_activity_definition", None), "name", None)
            not in names
        ]

    def configure_replayer(self, config: ReplayerConfig) -> ReplayerConfig:
        config = super().configure_replayer(config)
        converter = config.get("data_converter")
        if converter is not None:
            config["data_converter"] = for_replay(converter)
        return config

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        config = super().configure_worker(config)
        every = self.heartbeat_every
        most = config.get("max_heartbeat_throttle_interval")
        if most is None or most > every:
            config["max_heartbeat_throttle_interval"] = every
        usual = config.get("default_heartbeat_throttle_interval")
        if usual is None or usual > every:
            config["default_heartbeat_throttle_interval"] = every
        turn_module.ACCEPTED_VERSIONS.update(self.accept_versions)
        return config
