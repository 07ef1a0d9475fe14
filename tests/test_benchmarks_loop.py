"""Item 1 (benchmarks/loop_overhead.py) on short runs: process time beside the wall time, and
the interpreter measured alone with step() canned."""

from __future__ import annotations

import anyio

from benchmarks import loop_overhead
from benchmarks.workload import Stamps, run_steploop, run_steploop_shell


def test_each_sample_reads_the_process_time_at_the_first_and_last_call() -> None:
    """A sample of n turns has a CPU per turn from two process-time reads, and the ratios to
    the floor come in process time too."""
    out = loop_overhead.measure((12,), 2, peers=False, warmup_turns=5, shell=True)
    for name in ("steploop", "floor", "steploop-shell"):
        entry = out["contenders"][name]["12"]
        assert entry["per_turn_cpu_us"]["n"] == 2 and entry["per_turn_cpu_us"]["median"] > 0
    row = out["ratios"]["12"]
    assert {"steploop_over_floor_cpu", "steploop-shell_over_floor_cpu"} <= set(row)
    assert out["goals"]["within_floor"]["measured_cpu"]["n"] == 2


def test_the_canned_run_does_the_interpreters_work_with_steps_replayed() -> None:
    """steploop-shell replays what step() returned, in order: the run completes with every
    model call made, and takes the passes of the event loop the real run takes."""
    stamps = Stamps(last=30)
    anyio.run(run_steploop_shell, 30, stamps)  # asserts the turn completed
    assert len(stamps.calls) == 30 and len(stamps.cpu) == 2
    real = loop_overhead.passes_per_turn(run_steploop, 30)
    assert loop_overhead.passes_per_turn(run_steploop_shell, 30) == real
