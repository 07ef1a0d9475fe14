"""``steploop check``: run the exhaustive explorer and print the invariant table.

``register(subparsers)`` adds the command; ``cmd_check(args, out)`` runs it. The explorer is
pure and reports progress through a callback; this shell measures the time, draws the
progress bar (stderr, only with ``--progress`` or when stderr is a terminal) and writes a JSON
trace for every broken invariant, recorded by the driver loop with the transitions of each
step (``steploop-check-INV-n.jsonl`` in ``--out``, default
``steploop-check/``, replayable with
``steploop replay``; the move labels and loop sit beside it in ``.json``).

Exit status: 0 when every invariant held and every applicable guard was exercised, 1 when an
invariant is broken, a guard was never exercised or ``step()`` raised, 2 for bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rich.text import Text

from steploop.effects.cli_common import CliError, config_from, console_for, processes_problem
from steploop.effects.explore_workers import process_workers
from steploop.reducer.drive import drive
from steploop.reducer.effects import Effect
from steploop.reducer.events import Event
from steploop.reducer.explore import (
    DEEP_WORLD,
    DEFAULT_ROUNDS,
    RETRY_DEEP_WORLD,
    Counterexample,
    ExploreProgress,
    Report,
    explore,
)
from steploop.reducer.state import LoopState

__all__ = ["cmd_check", "register"]


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``check`` to the ``steploop`` subcommands (``set_defaults(handler=cmd_check)``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "check",
        help="explore every abstract state of the machine and check the invariant catalogue",
        description=(
            "Explore the abstract state graph from the start of a user turn (specs/invariants.md "
            "ABS-1..3) and check every invariant on every transition."
        ),
    )
    p.add_argument(
        "--rounds",
        default=str(DEFAULT_ROUNDS),
        metavar="N",
        help=f"full alphabet within N model calls per path, 'none' for everywhere (default {DEFAULT_ROUNDS})",
    )
    p.add_argument(
        "--deep-rounds",
        default="none",
        metavar="N",
        help="bound the deep tier at N model calls ('none': explore it to the end, the default)",
    )
    p.add_argument(
        "--deep",
        choices=("default", "retries", "off"),
        default="default",
        help="the deep tier's alphabet: the default, with retries (slow), or off",
    )
    p.add_argument("--profile", default="default", help="default, claude_code_2_1_88 or full")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    p.add_argument("--max-states", default="none", metavar="N", help="stop after N states")
    p.add_argument(
        "--processes",
        default="1",
        metavar="N",
        help="expand the states in N worker processes; the report is the same (default 1)",
    )
    p.add_argument("--progress", action="store_true", help="show a progress bar on stderr")
    p.add_argument(
        "--out",
        default="steploop-check",
        metavar="DIR",
        help="the folder counterexample files go to, made when one is found (default steploop-check/)",
    )
    p.set_defaults(handler=cmd_check)
    return p


def _bound(raw: str, flag: str) -> int | None:
    if raw.strip().lower() in ("none", "all", "unbounded"):
        return None
    try:
        n = int(raw.replace("_", ""))
    except ValueError:
        raise CliError(f"{flag} takes a positive number or 'none', got {raw!r}") from None
    if n < 1:
        raise CliError(f"{flag} must be at least 1, got {n}")
    return n


class _Bar:
    """A one-line progress display: the call layer against the bound, states, rate."""

    def __init__(self, err: TextIO, enabled: bool, t0: float) -> None:
        self.err = err
        self.enabled = enabled
        self.t0 = t0
        self.last = 0.0
        self.drawn = False

    def __call__(self, p: ExploreProgress) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last < 0.1:
            return
        self.last = now
        rate = p.states / max(now - self.t0, 1e-9)
        tier = "deep tier" if p.deep else "full alphabet"
        if p.bound is not None:
            width = 20
            filled = min(width, round(width * p.rounds / p.bound))
            bar = f"[{'#' * filled}{'.' * (width - filled)}] calls {p.rounds}/{p.bound}"
        else:
            bar = f"calls {p.rounds}"
        line = f"\r{tier}: {bar}  {p.states:,} states  {p.transitions:,} transitions  {rate:,.0f}/s"
        self.err.write(line.ljust(100))
        self.err.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.err.write("\n")
            self.err.flush()


class _NotRecorded(Exception):
    """The trace recorder failed on a step (carries its exception)."""


class _Events:
    """The counterexample as a world (:class:`steploop.reducer.drive.World`): its events, in order, are
    the world's answers whatever the effects ask for (as in an exact replay)."""

    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.fed = 0

    def perform(self, effect: Effect, state: LoopState) -> None:
        return None

    def next_event(self, state: LoopState) -> Event | None:
        if self.fed >= len(self.events):
            return None
        self.fed += 1
        return self.events[self.fed - 1]


def _write_cex(
    cex: Counterexample, out_dir: Path, name: str | None = None
) -> tuple[Path, str | None]:
    """Write the counterexample as a trace ``steploop replay`` accepts (and its labels, loop
    and explanation as a JSON sidecar).

    The events are stepped by the driver loop (:func:`steploop.reducer.drive.drive`) and recorded with
    the transitions each step reports, as every recorder of steploop does. When ``step()``
    raises on one of the events (specs/ M-5: a crash the explorer found), the trace holds every
    step before it and the sidecar says which event raises and how; nothing propagates. Events
    after the turn's ``Finish`` (a machine that accepts an event after it, INV-12) are not in the
    trace, whose end record closes it: the sidecar counts them (``after_finish``).

    Returns:
        The trace's path, and the crash (``"event N (label): Type: message"``) or None.
    """
    from steploop.effects.trace import TraceRecorder

    path = out_dir / f"steploop-check-{name or cex.invariant}.jsonl"
    crash: str | None = None
    data = cex.to_json()
    world = _Events(cex.trace_events())
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        with TraceRecorder(
            path, config=cex.config, session=cex.session, request=cex.request
        ) as rec:

            def observe(*step: Any) -> None:
                try:
                    rec.observe(*step)
                except Exception as exc:  # the recorder's own failure, not the machine's
                    raise _NotRecorded(exc) from exc

            try:
                drive(world, cex.request, cex.config, cex.session, observer=observe)
            except _NotRecorded as e:
                raise CliError(f"cannot record {path}: {e.args[0]}") from None
            except Exception as exc:  # the crash itself: report it, write what came before
                k = world.fed - 1
                event = world.events[k]
                crash = f"event {k} ({type(event).__name__}): {type(exc).__name__}: {exc}"
                data["raises_at"] = k
                data["raises"] = f"{type(exc).__name__}: {exc}"
        if crash is None and world.fed < len(world.events):
            data["after_finish"] = len(world.events) - world.fed
        sidecar = path.with_suffix(".json")
        sidecar.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror or e}") from None
    return path, crash


_STATUS_STYLE = {"broken": "bold red", "unexercised": "yellow", "held": "green"}


def _status(r: Any) -> str:
    if r.status == "broken":
        return "BROKEN"
    if r.status == "unexercised":
        return "NEVER EXERCISED"
    return str(r.status)


def print_report(report: Report, seconds: float, out: TextIO, out_dir: Path) -> None:
    """The invariant table, the counters and where each counterexample went."""
    cfg = report.config
    tiers = (
        "the full alphabet everywhere"
        if report.rounds_bound is None
        else f"the full alphabet within {report.rounds_bound} model calls"
        + (
            ""
            if not report.deep
            else ", then the deep alphabet"
            + (
                " to the end"
                if report.deep_rounds_bound is None
                else f" up to {report.deep_rounds_bound}"
            )
        )
    )
    print(f"steploop check · profile {cfg.profile_name} · {tiers}", file=out)
    print("", file=out)
    rows = [(r.id, _status(r), f"{r.exercised:,}", r.title) for r in report.results]
    w0 = max(len("rule"), *(len(r[0]) for r in rows))
    w1 = max(len("status"), *(len(r[1]) for r in rows))
    w2 = max(len("exercised"), *(len(r[2]) for r in rows))
    print(f"{'rule':<{w0}}  {'status':<{w1}}  {'exercised':>{w2}}  invariant", file=out)
    console = console_for(out)
    for (rid, status, ex, title), r in zip(rows, report.results, strict=True):
        line = Text(f"{rid:<{w0}}  ")
        line.append(f"{status:<{w1}}", style=_STATUS_STYLE.get(r.status, ""))
        line.append(f"  {ex:>{w2}}  {title}")
        console.print(line)
        if r.status == "broken" and r.expected:
            print(f"{'':<{w0}}  expected under this config: {r.expected}", file=out)
        cex = r.counterexample
        if cex is not None:
            path, _ = _write_cex(cex, out_dir)
            kind = "lasso" if cex.loop_start is not None else "counterexample"
            print(f"{'':<{w0}}  {kind}: {cex.explanation}", file=out)
            print(
                f"{'':<{w0}}  {len(cex.labels)} moves, {len(cex.events)} events: "
                f"{' → '.join(cex.labels)}",
                file=out,
            )
            print(f"{'':<{w0}}  written to {path}", file=out)
    for k, cex in enumerate(report.errors, 1):
        name = cex.invariant if len(report.errors) == 1 else f"{cex.invariant}-{k}"
        path, crash = _write_cex(cex, out_dir, name)
        line = Text(f"{cex.invariant:<{w0}}  ")
        line.append(f"{'BROKEN':<{w1}}", style="bold red")
        line.append(f"  {'':>{w2}}  step() raises only IllegalEvent")
        console.print(line)
        print(f"{'':<{w0}}  counterexample: {cex.explanation}", file=out)
        print(f"{'':<{w0}}  {len(cex.labels)} moves: {' → '.join(cex.labels)}", file=out)
        where = f"; {crash}" if crash else ""
        print(f"{'':<{w0}}  written to {path} (the steps before the crash{where})", file=out)
    rate = report.states / seconds if seconds > 0 else float("inf")
    print("", file=out)
    print(
        f"states {report.states:,} · transitions {report.transitions:,} · "
        f"{rate:,.0f} states/s · {seconds:.1f} s · rounds reached {report.rounds_reached}"
        + (" (complete)" if report.complete else " (cut by the bound)"),
        file=out,
    )
    longest = report.longest_progress_free
    print(
        "longest progress-free path: "
        + ("unbounded (a progress-free cycle)" if longest is None else f"{longest} model answers")
        + ("" if report.complete or longest is None else " (at least; the graph was cut)"),
        file=out,
    )
    verdict = "ok" if report.ok else "FAILED"
    out.flush()
    why = []
    if report.broken:
        why.append(f"{len(report.broken)} broken")
    if report.unexercised:
        why.append(f"{len(report.unexercised)} never exercised")
    if report.errors:
        why.append("step() raised")
    console.print(
        Text(
            verdict + (f": {', '.join(why)}" if why else ""),
            style="green" if report.ok else "bold red",
        )
    )


def cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    """Run ``steploop check``; returns the exit status (0 ok, 1 failed)."""
    rounds = _bound(args.rounds, "--rounds")
    deep_rounds = _bound(args.deep_rounds, "--deep-rounds")
    max_states = _bound(args.max_states, "--max-states")
    processes = _bound(getattr(args, "processes", "1"), "--processes") or 1
    if (problem := processes_problem(processes)) is not None:
        raise CliError(f"--processes: {problem}")
    deep = {"default": DEEP_WORLD, "retries": RETRY_DEEP_WORLD, "off": None}[args.deep]
    cfg = config_from(args.profile, args.set)
    err = sys.stderr
    t0 = time.perf_counter()
    bar = _Bar(err, args.progress or err.isatty(), t0)
    try:
        report = explore(
            cfg,
            rounds=rounds,
            deep_world=deep,
            deep_rounds=deep_rounds,
            max_states=max_states,
            on_progress=bar,
            workers=process_workers(processes) if processes > 1 else None,
        )
    finally:
        bar.close()
    seconds = time.perf_counter() - t0
    print_report(report, seconds, out, Path(args.out))
    return 0 if report.ok else 1
