"""``steploop stats --format parquet|csv|json OUT``: a corpus as two tables for analysis
(specs/rules.md STATS-1; the columns are documented in docs/viewer.md and in :data:`TURNS` and
:data:`ROUNDS`).

- ``turns``: one row per trace (a trace records one user turn): where it comes from, how it
  ended, its counts and tokens, and, for a trace the importer made, whether it reproduced the
  Claude Code turn and the cause of its divergence;
- ``rounds``: one row per round of every trace: its transition and the rules behind it, tokens
  (the recorded usage and the machine's count), what each context layer removed, tools, hook
  blocks, retries, waits, time, and the thresholds it ran under (to plot against).

Each trace is read and replayed as the viewer does (:func:`steploop.effects.viewer.trace_view`),
in the corpus's workers (:func:`steploop.effects.corpus.map_corpus`). The files hold plain
types only (64-bit integers, strings, booleans; null where a value is unknown), so pandas, polars
and DuckDB read them without steploop. Parquet needs pyarrow (the ``parquet`` extra); CSV and
JSON Lines need nothing.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, TypeAlias

from steploop.effects.corpus import CorpusError, TraceOutcome
from steploop.reducer.transitions import CONTINUE_TYPES, TERMINAL_TYPES

__all__ = ["FORMATS", "ROUNDS", "TURNS", "export_task", "turn_rows", "write_tables"]

Format: TypeAlias = Literal["parquet", "csv", "json"]
FORMATS: tuple[str, ...] = ("parquet", "csv", "json")
SUFFIX = {"parquet": ".parquet", "csv": ".csv", "json": ".jsonl"}

#: The layers whose removals are counted, in the round pipeline's order.
LAYERS = ("budget", "snip", "microcompact", "collapse", "compaction")
TRANSITION_TAGS = tuple(t.TAG for t in (*CONTINUE_TYPES, *TERMINAL_TYPES))

Column: TypeAlias = tuple[str, str, str]  # (name, type: int | str | bool, nullable "?" suffix)

#: The ``turns`` table: (column, type, meaning). A type ending in ``?`` may be null.
TURNS: tuple[Column, ...] = (
    ("trace", "str", "the trace file, as given"),
    ("session_id", "str?", "the Claude Code session (imported traces)"),
    ("turn", "int?", "the turn's number in its session (imported traces)"),
    ("profile", "str", "the config's profile"),
    ("model", "str", "the model"),
    ("steploop_version", "str", "the steploop that wrote the trace"),
    ("format_version", "int", "the trace format's version"),
    ("claude_code_version", "str?", "the Claude Code that wrote the transcript (imported)"),
    ("created_at", "str?", "when the trace was written (ISO 8601)"),
    ("client", "str?", "the model client's class"),
    ("terminal", "str?", "the Terminal; null when the trace was cut off"),
    ("steps", "int", "step records"),
    ("rounds", "int", "rounds (a Continue starts the next)"),
    *((f"n_{tag}", "int", f"rounds that ended {tag}") for tag in TRANSITION_TAGS),
    ("compactions", "int", "compactions asked for (auto and reactive)"),
    ("tokens_in", "int", "input tokens of every response, cache reads and writes included"),
    ("tokens_out", "int", "output tokens of every response"),
    ("peak_context", "int", "the largest prompt (input + cache tokens of one response)"),
    ("model_calls", "int", "model calls"),
    ("tool_calls", "int", "tools run"),
    ("tools", "str", "tools run by name: 'Read:3,Bash:1'"),
    ("hook_blocks", "int", "stop-hook blocks and hook stops"),
    ("retries", "int", "failed model calls"),
    ("wait_ms", "int", "time waited before retries"),
    ("context_window", "int", "the config's context window"),
    ("autocompact_threshold", "int?", "auto-compact's threshold; null when it is off"),
    ("blocking_limit", "int", "the blocking limit"),
    *(
        (f"removed_{layer}", "int", f"estimated tokens {layer} took off requests")
        for layer in LAYERS
    ),
    ("replays_exactly", "bool", "this steploop computes the recorded effects at every step"),
    ("replay_note", "str?", "where and why it does not"),
    ("reproduced", "bool?", "the importer's verdict: the machine reproduced the turn"),
    ("divergence_cause", "str?", "the importer's cause id of the first divergence"),
    ("divergence", "str?", "the importer's description of the first divergence"),
)

#: The ``rounds`` table.
ROUNDS: tuple[Column, ...] = (
    ("trace", "str", "the trace file, as given"),
    ("session_id", "str?", "the Claude Code session (imported traces)"),
    ("turn", "int?", "the turn's number in its session (imported traces)"),
    ("profile", "str", "the config's profile"),
    ("claude_code_version", "str?", "the Claude Code that wrote the transcript (imported)"),
    ("round", "int", "the round's number, from 1"),
    ("first_step", "int?", "its first step; null for a round with none"),
    ("last_step", "int?", "its last step"),
    ("transition", "str?", "the transition that ended it; null: unfinished"),
    ("kind", "str", "continue, completed, terminal or open"),
    ("rules", "str", "the rules behind the transition: 'C-NEXT-1'"),
    ("model_calls", "int", "model calls"),
    ("tool_calls", "int", "tools run"),
    ("tools", "str", "tools by name: 'Read:1'"),
    ("tokens_in", "int", "input tokens of its responses, cache included"),
    ("tokens_out", "int", "output tokens of its responses"),
    ("context", "int", "the prompt's size at its last response (input + cache tokens)"),
    ("machine_count", "int?", "its request as the machine counts it (R-TOK-1)"),
    ("compactions", "int", "compactions asked for"),
    ("compacted_at", "int?", "the machine's count (R-TOK-1) when it asked for the first of them"),
    ("retries", "int", "failed model calls"),
    ("waits", "int", "waits"),
    ("wait_ms", "int", "time waited"),
    ("hook_blocks", "int", "stop-hook blocks and hook stops"),
    (
        "recoveries",
        "int",
        "recovery transitions (reactive compact, max output tokens, collapse drain)",
    ),
    *(
        (f"removed_{layer}", "int", f"estimated tokens {layer} took off its request")
        for layer in LAYERS
    ),
    ("duration_ms", "int?", "from the event that started it to its last event"),
    ("context_window", "int", "the config's context window"),
    ("autocompact_threshold", "int?", "auto-compact's threshold; null when it is off"),
    ("blocking_limit", "int", "the blocking limit"),
)


def _opt_int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _opt_str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _counts(d: dict[str, int]) -> str:
    return ",".join(f"{k}:{v}" for k, v in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def turn_rows(path: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The ``turns`` row and the ``rounds`` rows of one trace.

    Raises:
        TraceError: the trace is malformed.
    """
    from steploop.effects.viewer import trace_view

    data = trace_view(path, exact=True).data
    prov = data["provenance"]
    cfg = data["config"]
    rounds = data["rounds"]
    common = {
        "trace": path,
        "session_id": _opt_str(prov.get("session_id")),
        "turn": _opt_int(prov.get("turn")),
        "profile": data["profile"],
    }
    limits = {
        "context_window": cfg["context_window"],
        "autocompact_threshold": cfg["autocompact_threshold"],
        "blocking_limit": cfg["blocking_limit"],
    }
    version = _opt_str(prov.get("claude_code_version"))
    out_rounds: list[dict[str, Any]] = []
    tools: dict[str, int] = {}
    removed = dict.fromkeys(LAYERS, 0)
    for r in rounds:
        for k, v in r["tools"].items():
            tools[k] = tools.get(k, 0) + v
        for layer in LAYERS:
            removed[layer] += r["lay"].get(layer, 0)
        has_steps = r["s1"] >= r["s0"]
        steps = data["steps"]
        out_rounds.append(
            {
                **common,
                "claude_code_version": version,
                "round": r["n"],
                "first_step": steps[r["s0"]].get("i") if has_steps else None,
                "last_step": steps[r["s1"]].get("i") if has_steps else None,
                "transition": r["tr"] or None,
                "kind": r["kind"],
                "rules": ",".join(r["rules"]),
                "model_calls": r["calls"],
                "tool_calls": sum(r["tools"].values()),
                "tools": _counts(r["tools"]),
                "tokens_in": r["tin"],
                "tokens_out": r["tout"],
                "context": r["ctx"],
                "machine_count": r["est"],
                "compactions": r["comp"],
                "compacted_at": r["cat"],
                "retries": r["retry"],
                "waits": r["waits"],
                "wait_ms": r["wms"],
                "hook_blocks": r["hooks"],
                "recoveries": r["recov"],
                **{f"removed_{layer}": r["lay"].get(layer, 0) for layer in LAYERS},
                "duration_ms": r["t1"] - r["t0"] if r["t0"] is not None else None,
                **limits,
            }
        )
    ended = [r["tr"] for r in rounds if r["tr"]]
    reproduced = prov.get("reproduced")
    turn = {
        **common,
        "model": data["model"],
        "steploop_version": data["steploop"],
        "format_version": data["version"],
        "claude_code_version": version,
        "created_at": _opt_str(prov.get("created_at")),
        "client": _opt_str(prov.get("client")),
        "terminal": data["terminal"],
        "steps": data["steps_total"],
        "rounds": len(rounds),
        **{f"n_{tag}": ended.count(tag) for tag in TRANSITION_TAGS},
        "compactions": sum(r["comp"] for r in rounds),
        "tokens_in": sum(r["tin"] for r in rounds),
        "tokens_out": sum(r["tout"] for r in rounds),
        "peak_context": max((r["ctx"] for r in rounds), default=0),
        "model_calls": sum(r["calls"] for r in rounds),
        "tool_calls": sum(tools.values()),
        "tools": _counts(tools),
        "hook_blocks": sum(r["hooks"] for r in rounds),
        "retries": sum(r["retry"] for r in rounds),
        "wait_ms": sum(r["wms"] for r in rounds),
        **limits,
        **{f"removed_{layer}": removed[layer] for layer in LAYERS},
        "replays_exactly": bool(data["replay"]["ok"]),
        "replay_note": data["replay"]["note"],
        "reproduced": reproduced if isinstance(reproduced, bool) else None,
        "divergence_cause": _opt_str(prov.get("cause")),
        "divergence": _opt_str(prov.get("divergence")),
    }
    return turn, out_rounds


def export_task(path: str) -> TraceOutcome:
    """One trace's rows, as a corpus outcome (a worker runs it; module level for pickling)."""
    turn, rounds = turn_rows(path)
    return TraceOutcome(
        path=path,
        status="ok",
        terminal=turn["terminal"] or "(unfinished)",
        steps=turn["steps"],
        compactions=turn["compactions"],
        input_tokens=turn["tokens_in"],
        output_tokens=turn["tokens_out"],
        transitions=tuple(sorted((t[2:], n) for t, n in turn.items() if t.startswith("n_") and n)),
        rows=(turn, tuple(rounds)),
    )


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """A lone surrogate (an undecodable file name) becomes its ``\\udXXX`` escape: every
    format writes UTF-8."""
    out = {}
    for k, v in row.items():
        if isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                v = v.encode("utf-8", "backslashreplace").decode("utf-8")
        out[k] = v
    return out


def _arrow_schema(pa: Any, columns: Sequence[Column]) -> Any:
    types = {"int": pa.int64(), "str": pa.string(), "bool": pa.bool_()}
    return pa.schema(
        [
            pa.field(name, types[kind.rstrip("?")], nullable=kind.endswith("?"))
            for name, kind, _ in columns
        ]
    )


def write_tables(
    turns: Sequence[dict[str, Any]],
    rounds: Sequence[dict[str, Any]],
    fmt: str,
    out_dir: str | os.PathLike[str],
) -> list[Path]:
    """Write ``turns`` and ``rounds`` into ``out_dir`` (made if missing) as ``fmt``.

    Raises:
        CorpusError: an unknown format, no pyarrow for Parquet, or a directory that cannot be
            written (one line each).
    """
    if fmt not in FORMATS:
        raise CorpusError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")
    out = Path(out_dir)
    pa = pq = None
    if fmt == "parquet":
        try:  # optional and untyped: as Any
            pa = importlib.import_module("pyarrow")
            pq = importlib.import_module("pyarrow.parquet")
        except ImportError:
            raise CorpusError(
                "--format parquet needs pyarrow: pip install 'steploop[parquet]' (or write csv "
                "or json)"
            ) from None
    written: list[Path] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, given, columns in (("turns", turns, TURNS), ("rounds", rounds, ROUNDS)):
            rows = [_clean(r) for r in given]
            target = out / f"{name}{SUFFIX[fmt]}"
            names = [c[0] for c in columns]
            if fmt == "parquet":
                assert pa is not None and pq is not None
                table = pa.Table.from_pylist(rows, schema=_arrow_schema(pa, columns))
                pq.write_table(table, target)
            elif fmt == "csv":
                with target.open("w", encoding="utf-8", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(names)
                    for row in rows:
                        w.writerow(["" if row[n] is None else row[n] for n in names])
            else:
                with target.open("w", encoding="utf-8") as f:
                    for row in rows:
                        f.write(json.dumps({n: row[n] for n in names}) + "\n")
            written.append(target)
    except OSError as e:
        raise CorpusError(f"{out}: cannot write the tables: {e.strerror or e}") from None
    return written
