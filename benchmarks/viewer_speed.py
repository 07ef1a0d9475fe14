"""``steploop show --html`` against text ``steploop show``, side by side (item 10).

Two traces: the golden walk-through (specs/scenarios/walkthrough.jsonl, 14 steps) and a
synthetic session of 1,000 tool rounds (:func:`benchmarks.counterfactual.build`, 5,004 steps).
Each repetition runs both commands on each trace, in an order that rotates, and the ratio is
taken per repetition:

- as a user runs them: ``python -m steploop.effects.cli show TRACE [--html OUT]`` in a fresh
  process (wall time: interpreter start, imports, reading, replaying, writing);
- in this process (``steploop.effects.cli.main``, warm imports): what the commands themselves
  cost, without the start.

Goals (issue 25), on the commands: ``show --html`` of the golden trace within 2x of text
``show``, of the 1,000-round trace within 3x. Before this item the page reran the state explorer
to draw the diagram: 17-27 s on any trace.

Reported without a goal: a 10,000-round page (the seconds to write it, its size) and, where
Chromium, chromedriver and Selenium are installed, the seconds from opening it to the first
drawn round, and to open round 9,000 through its deep link.

Run alone: ``python -m benchmarks.viewer_speed [--reps N] [--rounds 1000] [--big 10000]``.
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import progress, ratio_summary, summarize
from benchmarks.counterfactual import build

__all__ = ["GOAL_GOLDEN", "GOAL_LONG", "measure"]

GOAL_GOLDEN = 2.0  # show --html / show, the golden trace, as commands
GOAL_LONG = 3.0  # the same, 1,000 rounds
ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "specs" / "scenarios" / "walkthrough.jsonl"


def _command(trace: Path, html: Path | None) -> float:
    argv = [sys.executable, "-m", "steploop.effects.cli", "show", str(trace)]
    if html is not None:
        argv += ["--html", str(html)]
    t0 = time.perf_counter()
    done = subprocess.run(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False, cwd=ROOT
    )
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def _in_process(trace: Path, html: Path | None) -> float:
    from steploop.effects.cli import main

    argv = ["show", str(trace)] + (["--html", str(html)] if html is not None else [])
    gc.collect()
    t0 = time.perf_counter()
    code = main(argv, out=io.StringIO())
    elapsed = time.perf_counter() - t0
    if code != 0:
        raise SystemExit(f"steploop {' '.join(argv)}: exit {code}")
    return elapsed


def _pair(trace: Path, html: Path, reps: int, run: Any) -> dict[str, Any]:
    run(trace, None)  # a warm-up of each (the file cache, the interpreter's bytecode)
    run(trace, html)
    text: list[float] = []
    page: list[float] = []
    for k in range(reps):
        for which in ("text", "html")[:: 1 if k % 2 == 0 else -1]:
            if which == "text":
                text.append(run(trace, None))
            else:
                page.append(run(trace, html))
    return {
        "show_s": summarize(text),
        "html_s": summarize(page),
        "ratio": ratio_summary(page, text),
    }


def _browser(page: Path) -> dict[str, Any] | None:
    """Seconds to the first drawn round, and to a deep link's round, in headless Chromium."""
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        return None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        return None
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.binary_location = chromium
    browser = webdriver.Chrome(service=Service(driver), options=options)
    try:
        t0 = time.perf_counter()
        browser.get(page.as_uri())
        browser.find_element("css selector", "body[data-rounds]")
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        browser.get(page.as_uri() + "#round=9000")
        browser.find_element("css selector", "body[data-selected-round='9000']")
        deep = time.perf_counter() - t0
        rows = len(browser.find_elements("css selector", "#rounds .row"))
    finally:
        browser.quit()
    return {"open_s": round(first, 2), "deep_link_s": round(deep, 2), "rows_in_the_dom": rows}


def measure(
    rounds: int = 1_000, reps: int = 5, *, commands: bool = True, big: int | None = 10_000
) -> dict[str, Any]:
    """The ratios per trace (commands and in-process), the goals, and the big page."""
    out: dict[str, Any] = {"reps": reps, "traces": {}}
    with tempfile.TemporaryDirectory(prefix="steploop-viewer-") as tmp:
        long = Path(tmp) / f"session-{rounds}.jsonl"
        progress(f"viewer: recording {rounds:,} rounds")
        build(long, rounds)
        for name, trace in (("golden", GOLDEN), (f"{rounds}_rounds", long)):
            html = Path(tmp) / f"{name}.html"
            entry: dict[str, Any] = {
                "trace": str(trace.relative_to(ROOT)) if trace.is_relative_to(ROOT) else trace.name
            }
            with trace.open("rb") as f:
                entry["steps"] = sum(1 for line in f if line.startswith(b'{"record":"step"'))
            if commands:
                entry["command"] = _pair(trace, html, reps, _command)
            entry["in_process"] = _pair(trace, html, reps, _in_process)
            entry["page_bytes"] = html.stat().st_size
            progress(
                f"viewer: {name}: html / show "
                + ", ".join(
                    f"{k} {entry[k]['ratio']['median']}"
                    for k in ("command", "in_process")
                    if k in entry
                )
            )
            out["traces"][name] = entry
        if big:
            path = Path(tmp) / f"session-{big}.jsonl"
            progress(f"viewer: recording {big:,} rounds")
            build(path, big)
            page = Path(tmp) / "big.html"
            write = _in_process(path, page)
            out["big"] = {
                "rounds": big + 1,
                "trace_bytes": path.stat().st_size,
                "page_bytes": page.stat().st_size,
                "write_s": round(write, 2),
                "browser": _browser(page),
            }
            progress(f"viewer: {big:,} rounds: page written in {write:.1f} s")
    golden = out["traces"]["golden"]
    longest = out["traces"][f"{rounds}_rounds"]
    key = "command" if commands else "in_process"
    out["goals"] = {
        "golden": {
            "goal": f"show --html / show, the golden walk-through ({key}) <= {GOAL_GOLDEN:g}",
            "measured": golden[key]["ratio"],
            "met": golden[key]["ratio"]["median"] <= GOAL_GOLDEN,
        },
        "long": {
            "goal": f"show --html / show, {rounds:,} rounds ({key}) <= {GOAL_LONG:g}",
            "measured": longest[key]["ratio"],
            "met": longest[key]["ratio"]["median"] <= GOAL_LONG,
        },
    }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.viewer_speed")
    ap.add_argument("--rounds", type=int, default=1_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--big", type=int, default=10_000, help="the big page's rounds (0: none)")
    args = ap.parse_args(argv)
    json.dump(measure(args.rounds, args.reps, big=args.big or None), sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
