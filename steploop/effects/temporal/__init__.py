"""The loop as a durable Temporal workflow (the optional ``temporal`` extra).

- :mod:`steploop.effects.temporal.world`: what each effect opens, withdraws or just does, in one table;
- :mod:`steploop.effects.temporal.workflow`: :class:`TurnWorkflow`, ``start()``/``step()`` as workflow
  code, effects as activities, timers, an update and signals; ``continue_as_new`` every N
  rounds; the trace written as it steps;
- :mod:`steploop.effects.temporal.activities`: :class:`SteploopActivities`, the model call, tools
  (with idempotency keys and a ledger), compaction, stop hooks, summaries;
- :mod:`steploop.effects.temporal.codec`: large payloads by reference;
- :mod:`steploop.effects.temporal.sink`: the trace file, each step once however often the code runs;
- :mod:`steploop.effects.temporal.client`: connecting, starting a turn, a worker, the Replayer;
- :mod:`steploop.effects.temporal.cli`: ``steploop temporal worker`` and ``steploop temporal start``.

Nothing is imported here: importing a submodule needs ``temporalio``.
"""
