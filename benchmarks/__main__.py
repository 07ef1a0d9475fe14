"""Run the whole suite: ``python -m benchmarks [--quick] [--out DIR] [--only 1,2,...]``.

A full run writes ``DIR/latest.json`` (every figure) and ``DIR/latest.md`` (the summary table, goal
by goal), with progress lines on stderr. ``--quick`` is a smoke test (under two minutes): fewer
sizes and repetitions, same code paths. A quick run or one with ``--only`` writes
``DIR/partial.json`` and ``DIR/partial.md`` instead, so it never replaces the figures of the last
full run (``--name`` picks another file name). See benchmarks/README.md for what each item measures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import (
    counterfactual,
    external,
    import_speed,
    loop_overhead,
    round_cost,
    sdk_overhead,
    streaming_tools,
)
from benchmarks.common import machine, progress
from benchmarks.report import markdown

ITEMS = {
    "1": "loop_overhead",
    "2": "round_cost",
    "3": "replay",
    "4": "streaming_tools",
    "5": "sdk_overhead",
    "6": "explorer",
    "7": "import_speed",
    "8": "counterfactual",
    "9": "corpus",
    "10": "viewer",
    "11": "temporal_payloads",
}


def _missed(result: dict[str, Any]) -> bool:
    return any(g.get("met") is False for g in result.get("goals", {}).values())


def item_loop_overhead(quick: bool) -> dict[str, Any]:
    sizes, reps = ((50, 200), 3) if quick else ((50, 200, 1000), 5)
    result = loop_overhead.measure(sizes, reps)
    if _missed(result):
        n = max(sizes)
        progress(f"loop overhead: profiling steploop at {n} turns")
        result["profile"] = loop_overhead.profile(n)
    return result


def item_round_cost(quick: bool) -> dict[str, Any]:
    sizes = (100, 1_000, 10_000)
    result = round_cost.measure(sizes, reps=100 if quick else 200, blocks=5 if quick else 15)
    if _missed(result):
        progress(f"round cost: profiling rounds at {sizes[-1]} messages")
        result["profile"] = round_cost.profile(sizes[-1])
    return result


def item_replay(quick: bool) -> dict[str, Any]:
    return external.replay(quick)


def item_streaming_tools(quick: bool) -> dict[str, Any]:
    return streaming_tools.measure(0.2, 3 if quick else 9)


def item_sdk_overhead(quick: bool) -> dict[str, Any]:
    turns, reps = (20, 7) if quick else (40, 31)
    return sdk_overhead.measure(turns, reps, with_profile=True)


def item_explorer(quick: bool) -> dict[str, Any]:
    return external.explorer(quick)


def item_import_speed(quick: bool) -> dict[str, Any]:
    return import_speed.measure(
        (1, 2) if quick else (1, 4, 16), folder_copies=2 if quick else 16, reps=1 if quick else 3
    )


def item_counterfactual(quick: bool) -> dict[str, Any]:
    rounds, reps = ((300, 1_000), 2) if quick else ((1_000, 10_000), 3)
    return counterfactual.measure(rounds, reps)


def item_corpus(quick: bool) -> dict[str, Any]:
    from benchmarks import corpus_throughput

    return corpus_throughput.measure(2_000 if quick else 20_000, reps=1)


def item_viewer(quick: bool) -> dict[str, Any]:
    from benchmarks import viewer_speed

    return viewer_speed.measure(1_000, reps=3 if quick else 7, big=None if quick else 10_000)


def item_temporal_payloads(quick: bool) -> dict[str, Any]:
    from benchmarks import temporal_payloads

    return temporal_payloads.measure((20, 60) if quick else (40, 160))


RUNNERS: dict[str, Callable[[bool], dict[str, Any]]] = {
    "loop_overhead": item_loop_overhead,
    "round_cost": item_round_cost,
    "replay": item_replay,
    "streaming_tools": item_streaming_tools,
    "sdk_overhead": item_sdk_overhead,
    "explorer": item_explorer,
    "import_speed": item_import_speed,
    "counterfactual": item_counterfactual,
    "corpus": item_corpus,
    "viewer": item_viewer,
    "temporal_payloads": item_temporal_payloads,
}


def results_name(chosen: list[str], quick: bool) -> str:
    """'latest' for a full run of every item; 'partial' otherwise, so a smoke run or a single
    item never replaces the figures the README quotes."""
    return "latest" if not quick and sorted(chosen) == sorted(ITEMS) else "partial"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a short smoke run (< 2 minutes)")
    ap.add_argument("--out", default="benchmarks/results", help="where latest.json/md go")
    ap.add_argument("--only", default="", help="comma-separated item numbers (default: all)")
    ap.add_argument(
        "--name",
        default=None,
        help="file name (no suffix) of the results; default 'latest' for a full run, "
        "'partial' for a quick run or one with --only",
    )
    args = ap.parse_args(argv)
    chosen = [x.strip() for x in args.only.split(",") if x.strip()] or list(ITEMS)
    unknown = [x for x in chosen if x not in ITEMS]
    if unknown:
        ap.error(f"unknown item(s) {', '.join(unknown)}; items are {', '.join(ITEMS)}")
    name = results_name(chosen, args.quick) if args.name is None else args.name
    if not name or "/" in name or "\\" in name or name.startswith("."):
        ap.error(f"--name must be a plain file name without a suffix, got {name!r}")

    command = "python -m benchmarks" + (" " + " ".join(sys.argv[1:]) if argv is None else "")
    report: dict[str, Any] = {
        "suite": "steploop benchmarks (issue 6)",
        "command": command.strip(),
        "quick": args.quick,
        "machine": machine(),
        "items": {},
    }
    start = time.perf_counter()
    for key in chosen:
        item = ITEMS[key]
        progress(f"item {key}: {item}")
        t0 = time.perf_counter()
        try:
            result = RUNNERS[item](args.quick)
        except Exception as exc:
            traceback.print_exc()
            result = {"available": False, "reason": f"crashed: {type(exc).__name__}: {exc}"}
        result["elapsed_s"] = round(time.perf_counter() - t0, 1)
        report["items"][f"{key}_{item}"] = result
        progress(f"item {key}: {item} done in {result['elapsed_s']} s")
    report["duration_s"] = round(time.perf_counter() - start, 1)
    report["machine"]["loadavg_at_end"] = machine()["loadavg_1_5_15"]

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    (out / f"{name}.md").write_text(markdown(report))
    progress(f"wrote {out / (name + '.json')} and {out / (name + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
