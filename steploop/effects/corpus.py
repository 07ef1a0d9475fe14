"""Corpus replay and stats: many traces at once, over local processes or a Dask cluster.

A trace is a pure fold (``start()`` then ``step()`` over its recorded events), so a corpus
splits by trace with nothing shared: each worker reads its traces by path and returns one small
:class:`TraceOutcome` per trace; the outcomes are put back in the order the traces were given
and merged into the same tables, and the same exit status, that one process computes. A failing
trace is an outcome too (``unreadable`` with the reader's one-line message, ``failed`` with what
went wrong in the worker), so none is ever dropped: the reports name it.

Where the work runs (:func:`map_corpus`):

- ``jobs=1``: in this process, one trace after the other (what the CLI did before);
- ``jobs=N`` (N > 1): ``N`` local worker processes (``concurrent.futures``, the ``forkserver``
  start method where the platform has it); no extra dependency;
- ``jobs=None`` (the CLI's default): one local process per core, but in this process for a
  corpus too small to pay for starting workers (fewer than ``2 * MIN_TRACES_PER_JOB`` traces);
- ``scheduler="tcp://HOST:PORT"``: the workers of a running Dask cluster (the optional ``dask``
  extra: ``pip install 'steploop[dask]'``). The workers need steploop installed and must see the
  traces at the paths given (a shared file system).

Traces are sent to workers in chunks (a few per worker, at most ``MAX_CHUNK`` traces each), so
the cost per trace is one function call, not one message. A local worker that dies (killed, out
of memory) breaks its pool: the traces that were running then are run again, each alone in a
pool of its own, the others in a fresh pool; a trace whose worker dies when it runs alone is
reported ``failed``, by name, and no other trace is. Dask retries a task whose worker died on
another worker by itself, and then reports its traces failed.

The command-line entry points are :func:`stats_command` and :func:`replay_command`
(``steploop stats`` and ``steploop replay`` with several traces, a directory, ``--jobs`` or
``--scheduler``). ``stats --format FORMAT OUT`` runs
:func:`steploop.effects.stats_export.export_task` instead of :func:`stats_task` and writes the
rows its outcomes carry as tables (:mod:`steploop.effects.stats_export`).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import math
import multiprocessing
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Literal, TextIO, TypeAlias

import attrs

from steploop.effects.cli_common import processes_problem
from steploop.effects.trace import (
    DEFAULT_CHECKPOINT_EVERY,
    StepRecord,
    TraceError,
    TraceReader,
    Verify,
    replay_exact,
)
from steploop.reducer import SteploopError
from steploop.reducer.events import CompactionFinished, ModelResponseEnded

__all__ = [
    "MAX_CHUNK",
    "MIN_TRACES_PER_JOB",
    "CorpusError",
    "CorpusSummary",
    "TraceOutcome",
    "collect",
    "map_corpus",
    "print_tables",
    "replay_command",
    "replay_task",
    "resolve_jobs",
    "stats_command",
    "stats_task",
    "summarize",
]

Status: TypeAlias = Literal["ok", "mismatch", "unreadable", "failed"]
Progress: TypeAlias = Callable[[int], None]
"""Called with the number of traces done so far (0 first, the corpus size last)."""

MIN_TRACES_PER_JOB = 16
MAX_CHUNK = 64
CONNECT_TIMEOUT_S = 10.0  # how long to try reaching a Dask scheduler
UNFINISHED = "(unfinished)"


class CorpusError(SteploopError):
    """A corpus that cannot be run as asked (no traces, no Dask, an unreachable scheduler)."""


@attrs.frozen(kw_only=True)
class TraceOutcome:
    """What one trace gave: counts for stats, the verdict of a replay, or why it failed.

    ``message`` is what a report prints for it: the replay's line, the mismatch (several
    lines), or the error (one line, naming the file)."""

    path: str
    status: Status
    message: str = ""
    transitions: tuple[tuple[str, int], ...] = ()
    terminal: str = UNFINISHED
    steps: int = 0
    effects: int = 0
    compactions: int = 0
    input_tokens: int = 0
    """Input tokens of every model response, cache creation and cache reads included."""
    output_tokens: int = 0
    rows: tuple[Any, ...] = ()
    """A table-making task's rows (``stats --format``: the turn's row and its rounds' rows)."""


Task: TypeAlias = Callable[[str], TraceOutcome]


# ----------------------------------------------------------------------------------------------
# The tasks: one trace in, one outcome out (module level, so a worker imports them by name)


@attrs.define
class _Tally:
    """What a trace's steps add up to: transitions, compactions and tokens."""

    transitions: Counter[str] = attrs.field(factory=Counter)
    compactions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, rec: StepRecord) -> None:
        if rec.transition is not None:
            self.transitions[rec.transition.TAG] += 1
        ev = rec.event
        if isinstance(ev, CompactionFinished):
            self.compactions += 1
        elif isinstance(ev, ModelResponseEnded):
            u = ev.usage
            self.input_tokens += (
                u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            )
            self.output_tokens += u.output_tokens

    def outcome(
        self, path: str, message: str, terminal: str, steps: int, effects: int = 0
    ) -> TraceOutcome:
        return TraceOutcome(
            path=path,
            status="ok",
            message=message,
            transitions=tuple(sorted(self.transitions.items())),
            terminal=terminal,
            steps=steps,
            effects=effects,
            compactions=self.compactions,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
        )


def stats_task(path: str) -> TraceOutcome:
    """Transition, terminal, compaction and token counts of one trace (read, not replayed)."""
    tally = _Tally()
    reader = TraceReader(path)
    steps = 0
    for rec in reader:
        if isinstance(rec, StepRecord):
            steps += 1
            tally.add(rec)
    terminal = reader.end.terminal.TAG if reader.end is not None else UNFINISHED
    return tally.outcome(path, "", terminal, steps)


def replay_task(
    path: str, verify: Verify = "every", checkpoint_every: int = DEFAULT_CHECKPOINT_EVERY
) -> TraceOutcome:
    """Exact replay of one trace; the recorded transitions, compactions and tokens are counted
    as it goes."""
    tally = _Tally()
    report = replay_exact(path, on_step=tally.add, verify=verify, checkpoint_every=checkpoint_every)
    if report.mismatch is not None:
        return TraceOutcome(
            path=path,
            status="mismatch",
            message=report.describe(),
            steps=report.steps,
            effects=report.effects,
        )
    end = f"terminal {report.terminal.TAG}" if report.terminal is not None else "no end record"
    resumed = f", resumed {report.resumes}x" if report.resumes else ""
    return tally.outcome(
        path,
        f"{report.path}: replayed exactly: {report.steps} steps, {report.effects} effects, "
        f"{report.messages} messages; {end}{resumed}",
        report.terminal.TAG if report.terminal is not None else UNFINISHED,
        report.steps,
        report.effects,
    )


def _one(task: Task, path: str) -> TraceOutcome:
    """Run ``task`` on one trace; whatever goes wrong becomes the trace's outcome."""
    try:
        return task(path)
    except TraceError as e:
        return TraceOutcome(path=path, status="unreadable", message=str(e))
    except Exception as e:  # a bug or a resource error: reported with the trace, never lost
        return TraceOutcome(path=path, status="failed", message=f"{path}: {_what(e)}")


def _chunk(task: Task, paths: Sequence[str]) -> list[TraceOutcome]:
    return [_one(task, p) for p in paths]


def _what(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# ----------------------------------------------------------------------------------------------
# Where the work runs


def _chunks(n: int, workers: int) -> list[range]:
    """About eight chunks per worker (even progress, even load), at most MAX_CHUNK each."""
    size = max(1, min(MAX_CHUNK, math.ceil(n / (workers * 8))))
    return [range(i, min(n, i + size)) for i in range(0, n, size)]


def resolve_jobs(n: int, jobs: int | None) -> int:
    """How many local processes ``map_corpus`` uses for ``n`` traces (1: this process)."""
    if jobs is None:
        cores = os.cpu_count() or 1
        jobs = max(1, min(cores, n // MIN_TRACES_PER_JOB))
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    return 1 if n <= 1 else jobs


def map_corpus(
    paths: Sequence[str | os.PathLike[str]],
    task: Task,
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    on_progress: Progress | None = None,
) -> list[TraceOutcome]:
    """Run ``task`` on every trace; the outcomes in the order of ``paths``, one per trace.

    Args:
        paths: the traces.
        task: a module-level function (workers import it by name), e.g. :func:`stats_task`
            or ``functools.partial(replay_task, verify="checkpoint")``.
        jobs: local worker processes; 1 runs here; None: one per core, or here for a small
            corpus.
        scheduler: a Dask scheduler address; the cluster's workers run the tasks (``jobs`` is
            then ignored).
        on_progress: told how many traces are done, as chunks come back.

    Raises:
        CorpusError: ``scheduler`` given but Dask is not installed or not reachable.
    """
    names = [os.fspath(p) for p in paths]
    report = on_progress or (lambda done: None)
    report(0)
    if scheduler is not None:
        return _on_dask(names, task, scheduler, report)
    workers = resolve_jobs(len(names), jobs)
    if workers == 1:
        out: list[TraceOutcome] = []
        for k, name in enumerate(names, 1):
            out.append(_one(task, name))
            report(k)
        return out
    return _on_processes(names, task, workers, report)


def _context() -> Any:
    """forkserver: workers fork from a clean server process, never from this one (which may
    run threads: an event loop, a test runner), and the server imports steploop once, so a
    worker starts without importing it again; spawn where there is no forkserver."""
    if "forkserver" not in multiprocessing.get_all_start_methods():  # pragma: no cover
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


# Each local worker writes, in its slot of a shared array, which trace it is running (its
# index + 1; 0 when idle). When a worker dies, the pool breaks and every trace it had not
# returned comes back as an error; the slots say which traces were running then (the
# suspects). The suspects run again one at a time, each alone in a pool of its own, and the
# other traces run again as before, in a fresh pool. A suspect whose worker dies alone is the
# one reported failed; no trace that merely shared the pool with it is.
_slots: Any = None
_slot = -1


def _init_worker(slots: Any, next_slot: Any) -> None:
    global _slots, _slot
    with next_slot.get_lock():
        _slot = next_slot.value
        next_slot.value += 1
    _slots = slots


def _indexed_chunk(task: Task, items: Sequence[tuple[int, str]]) -> list[TraceOutcome]:
    slots, slot = _slots, _slot
    out: list[TraceOutcome] = []
    for i, path in items:
        if slots is not None:
            slots[slot] = i + 1
        out.append(_one(task, path))
    if slots is not None:
        slots[slot] = 0
    return out


def _on_processes(
    names: list[str], task: Task, workers: int, report: Progress
) -> list[TraceOutcome]:
    results: list[TraceOutcome | None] = [None] * len(names)
    done = 0

    def settle(i: int, o: TraceOutcome) -> None:
        nonlocal done
        results[i] = o
        done += 1

    def run_pool(indices: list[int], size: int) -> tuple[str | None, set[int]]:
        """Run these traces; returns why the pool broke (None if it did not) and the
        traces that were running when it broke."""
        ctx = _context()
        slots, next_slot = ctx.Array("q", size), ctx.Value("i", 0)
        broke: str | None = None
        with ProcessPoolExecutor(
            max_workers=size, mp_context=ctx, initializer=_init_worker, initargs=(slots, next_slot)
        ) as pool:
            pending = {
                pool.submit(_indexed_chunk, task, [(indices[k], names[indices[k]]) for k in g]): g
                for g in _chunks(len(indices), size)
            }
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    group = pending.pop(fut)
                    try:
                        outcomes = fut.result()
                    except Exception as e:  # BrokenProcessPool: a worker died
                        broke = broke or _what(e)
                        continue
                    for k, o in zip(group, outcomes, strict=True):
                        settle(indices[k], o)
                    report(done)
        return broke, {v - 1 for v in slots[:] if v}

    remaining = list(range(len(names)))
    while remaining:
        broke, suspects = run_pool(remaining, min(workers, len(remaining)))
        remaining = [i for i in remaining if results[i] is None]
        if broke is None:
            break
        suspects &= set(remaining)
        for i in sorted(suspects):  # each alone: a death now is this trace's own
            alone, _ = run_pool([i], 1)
            if alone is not None:
                settle(
                    i,
                    TraceOutcome(
                        path=names[i],
                        status="failed",
                        message=f"{names[i]}: its worker process died running it, alone",
                    ),
                )
            report(done)
        if not suspects:  # died between traces: nothing to blame, report what is left
            for i in remaining:
                settle(
                    i,
                    TraceOutcome(
                        path=names[i],
                        status="failed",
                        message=f"{names[i]}: a worker process died ({broke})",
                    ),
                )
            report(done)
        remaining = [i for i in remaining if results[i] is None]
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _on_dask(names: list[str], task: Task, scheduler: str, report: Progress) -> list[TraceOutcome]:
    try:  # untyped, and optional: as Any
        distributed: Any = importlib.import_module("distributed")
    except ImportError:
        raise CorpusError(
            "--scheduler needs Dask: pip install 'steploop[dask]' (dask and distributed)"
        ) from None
    try:
        client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S, set_as_default=False)
    except Exception as e:  # OSError, TimeoutError, a bad address
        raise CorpusError(f"cannot reach the Dask scheduler at {scheduler}: {_what(e)}") from None
    results: list[TraceOutcome | None] = [None] * len(names)
    done = 0
    try:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        groups = _chunks(len(names), workers)
        # the workers do not run in this directory: they get absolute paths, and the outcomes
        # come back under the names given here
        absolute = [os.path.abspath(n) for n in names]
        futures = [
            client.submit(_chunk, task, [absolute[i] for i in g], pure=False) for g in groups
        ]
        where = {f.key: g for f, g in zip(futures, groups, strict=True)}
        for fut in distributed.as_completed(futures, loop=client.loop):
            group = where[fut.key]
            try:
                outcomes = fut.result()
            except Exception as e:  # KilledWorker, a worker without steploop, ...
                outcomes = [
                    TraceOutcome(path=names[i], status="failed", message=f"{names[i]}: {_what(e)}")
                    for i in group
                ]
            for i, o in zip(group, outcomes, strict=True):
                results[i] = _renamed(o, absolute[i], names[i])
            done += len(group)
            report(done)
    finally:
        client.close()
    assert all(r is not None for r in results)
    return [r for r in results if r is not None]


def _renamed(o: TraceOutcome, absolute: str, name: str) -> TraceOutcome:
    if absolute == name:
        return o
    message = name + o.message[len(absolute) :] if o.message.startswith(absolute) else o.message
    return attrs.evolve(o, path=name, message=message)


# ----------------------------------------------------------------------------------------------
# Collecting the traces and merging the outcomes


def collect(args: Sequence[str]) -> list[Path]:
    """The traces named by ``args``: a directory gives its ``*.jsonl`` regular files (sorted:
    a pipe or a device there would wait for ever for a writer), ``@FILE`` the
    paths listed in FILE (one per line; blank lines and ``#`` comments skipped; relative to
    FILE's directory), anything else is a trace file.

    Raises:
        CorpusError: a path that does not exist, a directory without traces, an unreadable list.
    """
    out: list[Path] = []
    for arg in args:
        if arg.startswith("@"):
            listing = Path(arg[1:])
            try:
                text = listing.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise CorpusError(f"{listing}: no such file (a list of traces)") from None
            except (OSError, UnicodeDecodeError) as e:
                raise CorpusError(f"{listing}: cannot read the list of traces: {e}") from None
            for line in text.splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    out.append(listing.parent / line)
            continue
        path = Path(arg)
        if path.is_dir():
            found = sorted(f for f in path.glob("*.jsonl") if f.is_file())
            if not found:
                raise CorpusError(f"{path}: no *.jsonl trace files")
            out.extend(found)
        elif path.exists():
            out.append(path)
        else:
            kind = "file" if path.suffix == ".jsonl" else "directory"
            raise CorpusError(f"{path}: no such {kind}")
    return out


@attrs.frozen(kw_only=True)
class CorpusSummary:
    """The merged tables of a corpus run."""

    traces: int
    transitions: Counter[str]
    terminals: Counter[str]
    by_status: Counter[str]
    steps: int
    effects: int
    compactions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def exit_status(self) -> int:
        """2 when a trace could not be read or failed, else 1 when one did not replay
        exactly, else 0."""
        if self.by_status["unreadable"] or self.by_status["failed"]:
            return 2
        return 1 if self.by_status["mismatch"] else 0


def summarize(outcomes: Iterable[TraceOutcome]) -> CorpusSummary:
    """Merge outcomes (counts of the traces that were read; statuses of all)."""
    transitions: Counter[str] = Counter()
    terminals: Counter[str] = Counter()
    by_status: Counter[str] = Counter()
    n = steps = effects = compactions = input_tokens = output_tokens = 0
    for o in outcomes:
        n += 1
        by_status[o.status] += 1
        steps += o.steps
        effects += o.effects
        if o.status == "ok":
            transitions.update(dict(o.transitions))
            terminals[o.terminal] += 1
            compactions += o.compactions
            input_tokens += o.input_tokens
            output_tokens += o.output_tokens
    return CorpusSummary(
        traces=n,
        transitions=transitions,
        terminals=terminals,
        by_status=by_status,
        steps=steps,
        effects=effects,
        compactions=compactions,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def _print_table(title: str, counts: Counter[str], width: int, out: TextIO) -> None:
    print(f"{title}:", file=out)
    for tag, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {tag.ljust(width)}  {n:>7,}", file=out)
    if not counts:
        print("  none", file=out)


def print_tables(summary: CorpusSummary, out: TextIO) -> None:
    """The compaction and token line, then the transitions and terminals tables, as
    ``steploop stats`` prints them."""
    print(
        f"compactions {summary.compactions:,}; tokens: {summary.input_tokens:,} in "
        f"(cache included), {summary.output_tokens:,} out",
        file=out,
    )
    width = max((len(k) for k in [*summary.transitions, *summary.terminals]), default=10)
    _print_table("transitions", summary.transitions, width, out)
    _print_table("terminals", summary.terminals, width, out)


# ----------------------------------------------------------------------------------------------
# The commands


def _where(args: argparse.Namespace, n: int) -> str:
    scheduler = getattr(args, "scheduler", None)
    if scheduler:
        return f"the Dask cluster at {scheduler}"
    jobs = resolve_jobs(n, getattr(args, "jobs", None))
    return "1 process" if jobs == 1 else f"{jobs} local processes"


def _label(args: Sequence[str]) -> str:
    return args[0] if len(args) == 1 else f"{len(args)} paths"


def _run(
    args: argparse.Namespace, inputs: Sequence[str], task: Task, label: str
) -> tuple[list[TraceOutcome], float]:
    from steploop.effects.cli_common import ProgressBar

    files = collect(inputs)
    err = sys.stderr
    shown = bool(getattr(args, "progress", False)) or err.isatty()
    t0 = time.perf_counter()
    with ProgressBar(len(files), label, "files", err, shown) as bar:
        last = 0

        def advance(done: int) -> None:
            nonlocal last
            if done > last:
                bar.advance(done - last)
                last = done

        outcomes = map_corpus(
            files,
            task,
            jobs=getattr(args, "jobs", None),
            scheduler=getattr(args, "scheduler", None),
            on_progress=advance,
        )
    return outcomes, time.perf_counter() - t0


def stats_command(args: argparse.Namespace, out: TextIO) -> int:
    """``steploop stats PATH...``: transition, terminal, compaction and token counts over the
    traces.

    A trace that cannot be read is skipped with a warning naming it (exit status 0 while
    another was read); one whose worker failed is reported as an error (exit status 2); when
    no trace could be read at all, the exit status is 2 (a bad input file), as ``replay``'s."""
    inputs: list[str] = list(args.dir) if isinstance(args.dir, list) else [args.dir]
    export = getattr(args, "format", None)
    task: Task = stats_task
    if export:
        from steploop.effects.stats_export import FORMATS, export_task

        if export[0] not in FORMATS:
            raise CorpusError(f"--format {export[0]!r}: expected one of {', '.join(FORMATS)}")
        task = export_task
    outcomes, _ = _run(args, inputs, task, "reading")
    err = sys.stderr
    for o in outcomes:
        if o.status == "unreadable":
            print(f"steploop: warning: {o.message} (skipped)", file=err)
        elif o.status == "failed":
            print(f"steploop: error: {o.message}", file=err)
    summary = summarize(outcomes)
    skipped = summary.traces - summary.by_status["ok"]
    print(
        f"{summary.by_status['ok']} trace(s) read, {skipped} skipped, in {_label(inputs)}",
        file=out,
    )
    print_tables(summary, out)
    if not summary.by_status["ok"]:
        print(f"steploop: error: none of the {summary.traces} trace(s) could be read", file=err)
        return 2
    if export:
        from steploop.effects.stats_export import write_tables

        read = [o for o in outcomes if o.status == "ok"]
        rounds = [r for o in read for r in o.rows[1]]
        for path in write_tables([o.rows[0] for o in read], rounds, export[0], export[1]):
            n = len(read) if path.stem == "turns" else len(rounds)
            print(f"wrote {path} ({n:,} rows)", file=out)
    return 2 if summary.by_status["failed"] else 0


def replay_command(args: argparse.Namespace, out: TextIO) -> int:
    """``steploop replay PATH...`` over a corpus: exact replay of every trace.

    Prints every trace that did not replay exactly (its mismatch, or its error), then the
    counts and the terminals of the traces that did. Exit status: 2 if a trace could not be
    read or failed, else 1 if one did not replay exactly, else 0."""
    inputs: list[str] = list(args.trace)
    task = functools.partial(
        replay_task,
        verify=args.verify or "every",
        checkpoint_every=args.checkpoint_every or DEFAULT_CHECKPOINT_EVERY,
    )
    outcomes, elapsed = _run(args, inputs, task, "replaying")
    for o in outcomes:
        if o.status == "mismatch":
            print(o.message, file=out)
        elif o.status != "ok":
            print(f"{o.message} ({o.status})", file=out)
    s = summarize(outcomes)
    rate = s.traces / elapsed if elapsed > 0 else float("inf")
    print(
        f"{s.traces} trace(s) in {_label(inputs)}: {s.by_status['ok']} replayed exactly, "
        f"{s.by_status['mismatch']} mismatched, {s.by_status['unreadable']} unreadable, "
        f"{s.by_status['failed']} failed; {s.steps:,} steps in {elapsed:.2f} s "
        f"({rate:,.0f} traces/s on {_where(args, s.traces)})",
        file=out,
    )
    print_tables(s, out)
    return s.exit_status()


def is_corpus(args: argparse.Namespace) -> bool:
    """Whether ``steploop replay``'s arguments name a corpus rather than one trace file."""
    traces = args.trace if isinstance(args.trace, list) else [args.trace]
    return bool(
        len(traces) != 1
        or getattr(args, "jobs", None)
        or getattr(args, "scheduler", None)
        or traces[0].startswith("@")
        or Path(traces[0]).is_dir()
    )


def _jobs(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    problem = processes_problem(n)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return n


def add_options(parser: argparse.ArgumentParser, *, progress: bool = False) -> None:
    """``--jobs N`` and ``--scheduler ADDR`` (and ``--progress``) on a corpus command."""
    parser.add_argument(
        "--jobs",
        type=_jobs,
        metavar="N",
        help="local worker processes (default: one per core; a small corpus runs in this "
        "process; 1: this process)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDR",
        help="run on the Dask cluster at ADDR (tcp://host:port; needs steploop[dask] here and "
        "on the workers, and the traces at the same paths there)",
    )
    if progress:
        parser.add_argument(
            "--progress", action="store_true", help="show the progress bar even off a terminal"
        )
