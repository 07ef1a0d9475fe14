"""The loop as a durable Temporal workflow (the optional ``temporal`` extra; specs/temporal.md).

- :mod:`steploop.effects.temporal.world`: what each effect opens, withdraws or just does, in one table;
- :mod:`steploop.effects.temporal.turn`: :class:`SteploopTurn`, one turn as workflow code (no
  I/O: its trace goes to an activity), and :func:`run_turn` for a workflow of one's own;
- :mod:`steploop.effects.temporal.workflow`: :class:`TurnWorkflow`, the ready-made workflow
  (continue-as-new every N rounds; an update, signals and queries);
- :mod:`steploop.effects.temporal.activities`: :class:`SteploopActivities`, the model call,
  tools (idempotency keys, the ledger, the record of started calls), compaction, stop hooks,
  summaries, the trace;
- :mod:`steploop.effects.temporal.options`: the options of each kind of activity;
- :mod:`steploop.effects.temporal.storage`: large payloads in Temporal's external storage,
  chunked and kept once;
- :mod:`steploop.effects.temporal.plugin`: :class:`SteploopPlugin`, what a client, a worker and
  the Replayer need;
- :mod:`steploop.effects.temporal.history`: a turn's trace from its history, and the
  determinism check both ways;
- :mod:`steploop.effects.temporal.client`: connecting, starting turns, workers, histories;
- :mod:`steploop.effects.temporal.sink`: the trace file the trace activity writes;
- :mod:`steploop.effects.temporal.cli`, :mod:`steploop.effects.temporal.cli_ops`: the
  ``steploop temporal`` commands.

Nothing is imported here: importing a submodule needs ``temporalio`` (but ``paths``).
"""
