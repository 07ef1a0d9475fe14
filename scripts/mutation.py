"""Mutation check: does the suite have teeth?

Each mutant changes one guard or rule of the machine the way real bugs do (a threshold off by
one, a flag not set, a counter reset in the wrong transition, a reset missing). For each, the
script copies the repository to a scratch directory, applies the mutant, and runs the reducer
tests (unit, property, explorer). A mutant is *killed* when the run fails. Survivors are either
killed by a new test or justified in specs/invariants.md.

    .venv/bin/python scripts/mutation.py [--only ID ...] [--jobs N]

Prints one line per mutant and the kill rate; exit status 1 when any mutant survives.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
M = "reducer/machine.py"


@dataclass(frozen=True)
class Mutant:
    id: str
    rules: str  # the rules and guards it attacks
    what: str
    file: str
    old: str
    new: str


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "G1-hooks-after-api-error",
        "G1",
        "stop hooks run after an API-error response",
        M,
        "    if r.error_message is not None:  # [G1]",
        "    if False and r.error_message is not None:  # [G1]",
    ),
    Mutant(
        "G2-hooks-after-ptl",
        "G2 T-PTL-1",
        "an unrecoverable PTL falls through to the stop hooks",
        M,
        "        return _surface(s, cfg, fx, PromptTooLong())  # [T-PTL-1] no stop hooks [G2]",
        "        s = evolve(s, round=evolve(s.round, withheld=None))",
    ),
    Mutant(
        "G3-reset-reactive-on-block",
        "G3",
        "stop_hook_blocking resets has_attempted_reactive_compact",
        M,
        "                stop_hook_active=True,\n            )",
        "                stop_hook_active=True,\n                has_attempted_reactive_compact=False,\n            )",
    ),
    Mutant(
        "G4-drain-twice",
        "G4 C-COLLAPSE-1",
        "the collapse drain ignores the previous transition",
        M,
        "not isinstance(s.transition, CollapseDrainRetry)",
        "True",
    ),
    Mutant(
        "G5-media-spiral",
        "G5",
        "media recovery ignores the reactive attempt flag",
        M,
        "        if cfg.media_recovery_enabled and not s.has_attempted_reactive_compact:",
        "        if cfg.media_recovery_enabled:",
    ),
    Mutant(
        "G6-breaker-off-by-one",
        "G6",
        "the breaker trips one failure late",
        M,
        "    return s.tracking.consecutive_failures >= cfg.max_autocompact_failures  # [G6]",
        "    return s.tracking.consecutive_failures > cfg.max_autocompact_failures  # [G6]",
    ),
    Mutant(
        "G6-breaker-scope-lost",
        "G6 R-SESSION-1",
        "the session-scoped breaker forgets its count",
        "reducer/machine.py",
        'failures = session.autocompact_failures if config.autocompact_breaker_scope == "session" else 0',
        "failures = 0",
    ),
    Mutant(
        "G7-no-post-compact-exemption",
        "G7 T-BLOCKING-1",
        "the blocking check runs right after a compaction",
        M,
        "    if s.compacted_this_round or cfg.query_source in QUERY_SOURCES_NO_BLOCKING:",
        "    if cfg.query_source in QUERY_SOURCES_NO_BLOCKING:",
    ),
    Mutant(
        "G8-compact-source-compacts",
        "G8",
        "the compact source may auto-compact",
        "reducer/config.py",
        'QUERY_SOURCES_NO_AUTOCOMPACT = frozenset({"compact", "session_memory", "marble_origami"})',
        'QUERY_SOURCES_NO_AUTOCOMPACT = frozenset({"session_memory", "marble_origami"})',
    ),
    Mutant(
        "G9-no-withholding",
        "G9 R-PTL-1",
        "prompt-too-long is never withheld",
        M,
        "        withhold = cfg.gates.reactive_compact or cfg.gates.context_collapse",
        "        withhold = False",
    ),
    Mutant(
        "G10-reescalate",
        "G10 C-ESCALATE-1",
        "escalation forgets it already fired this turn",
        M,
        "        and (cfg.compat.reescalate_after_recovery or not s.escalated)  # [Q-1]",
        "        and True  # [Q-1]",
    ),
    Mutant(
        "G10-escalated-not-set",
        "G10",
        "escalation does not set its once-per-turn flag",
        M,
        "                escalated=True,\n",
        "",
    ),
    Mutant(
        "G11-cap-off-by-one",
        "G11",
        "the stop-hook cap lets one more block through",
        M,
        "        if cap is not None and s.stop_hook_blocks >= cap:  # [G11] the cap",
        "        if cap is not None and s.stop_hook_blocks > cap:  # [G11] the cap",
    ),
    Mutant(
        "G12-stale-generation",
        "G12 R-TOOL-8",
        "a discarded attempt keeps its generation",
        M,
        "            r, generation=nxt, blocks=(), slots=(), results=(), sibling_error=None, hook_stop=False",
        "            r, blocks=(), slots=(), results=(), sibling_error=None, hook_stop=False",
    ),
    Mutant(
        "G13-orphan-queued",
        "G13",
        "queued calls get no synthetic result on an interrupt",
        M,
        '        if kind == "submit" and sl.status == "running" and sl.traits.interrupt == "block":',
        '        if sl.status == "queued" or (kind == "submit" and sl.status == "running" and sl.traits.interrupt == "block"):',
    ),
    Mutant(
        "G14-budget-threshold",
        "G14 R-CTX-0",
        "the per-tool result limit ignores the 50,000 cap",
        M,
        "    per_tool = min(limit, cfg.default_max_result_chars)",
        "    per_tool = limit",
    ),
    Mutant(
        "MOT-limit-off-by-one",
        "C-MOT-1",
        "four recovery nudges instead of three",
        M,
        "    if s.mot_recovery_count < cfg.mot_recovery_limit:",
        "    if s.mot_recovery_count <= cfg.mot_recovery_limit:",
    ),
    Mutant(
        "MOT-count-reset-on-recovery",
        "C-MOT-1 C-RESET-1",
        "the recovery count resets in the recovery itself",
        M,
        "                mot_recovery_count=attempt,",
        "                mot_recovery_count=0,",
    ),
    Mutant(
        "REACTIVE-twice",
        "C-REACTIVE-1",
        "reactive compaction ignores its once flag",
        M,
        "        if cfg.gates.reactive_compact and not s.has_attempted_reactive_compact:",
        "        if cfg.gates.reactive_compact:",
    ),
    Mutant(
        "REACTIVE-flag-not-set",
        "C-REACTIVE-1 G3",
        "reactive compaction does not set its flag",
        M,
        "                has_attempted_reactive_compact=True,",
        "                has_attempted_reactive_compact=False,",
    ),
    Mutant(
        "MAXTURNS-off-by-one",
        "T-MAXTURNS-1",
        "max_turns allows one more round",
        M,
        "    if cfg.max_turns is not None and next_count > cfg.max_turns:  # [T-MAXTURNS-1]",
        "    if cfg.max_turns is not None and next_count > cfg.max_turns + 1:  # [T-MAXTURNS-1]",
    ),
    Mutant(
        "FINISH-not-last",
        "M-4 R-CMD-2",
        "Finish comes before the acknowledgement",
        M,
        "    if s.consumed_commands:  # [R-CMD-2] acknowledged only on a normal return\n        fx.append(AcknowledgeCommands(command_ids=s.consumed_commands))\n    fx.append(Finish(terminal=terminal))",
        "    fx.append(Finish(terminal=terminal))\n    if s.consumed_commands:  # [R-CMD-2] acknowledged only on a normal return\n        fx.append(AcknowledgeCommands(command_ids=s.consumed_commands))",
    ),
    Mutant(
        "TRUNCATED-runs",
        "R-TOOL-4",
        "a truncated tool input is run",
        M,
        "    if isinstance(block, ToolUseBlock) and not e.input_complete:",
        "    if False:",
    ),
    Mutant(
        "ORDER-results",
        "R-TOOL-5",
        "results are released in completion order",
        M,
        "        elif not out_of_order or (",
        "        elif False and not out_of_order or (",
    ),
    Mutant(
        "SIBLING-on-success",
        "R-TOOL-7",
        "a successful Bash cancels its siblings",
        M,
        "    if e.is_error and sl.traits.cancels_siblings_on_error and s.round.sibling_error is None:",
        "    if sl.traits.cancels_siblings_on_error and s.round.sibling_error is None:",
    ),
    Mutant(
        "NONSAFE-mid-stream",
        "R-TOOL-2",
        "a non-safe tool starts before the response ended",
        M,
        "        allowed_now = r.ended or (safe and cfg.gates.streaming_tool_execution)",
        "        allowed_now = r.ended or cfg.gates.streaming_tool_execution",
    ),
    Mutant(
        "RETRY-no-limit",
        "R-RETRY-4",
        "retries never give up",
        M,
        "    if r.retry_attempt >= policy.max_retries:",
        "    if False:",
    ),
    Mutant(
        "FALLBACK-529-off-by-one",
        "R-RETRY-2",
        "fallback needs one more 529",
        M,
        "c529 >= policy.max_consecutive_529",
        "c529 > policy.max_consecutive_529",
    ),
    Mutant(
        "BUDGET-threshold",
        "C-BUDGET-1",
        "the budget continues up to 100% instead of 90%",
        M,
        "        if not diminishing and turn * 100 < budget * cfg.budget_completion_pct:",
        "        if not diminishing and turn < budget:",
    ),
    Mutant(
        "BUDGET-diminishing-off",
        "C-BUDGET-1",
        "diminishing returns never stop the budget",
        M,
        "        if not diminishing and turn * 100",
        "        if turn * 100",
    ),
    Mutant(
        "SHA-not-sticky",
        "C-RESET-1 Q-11",
        "recoveries clear stop_hook_active in the default machine",
        M,
        "    clear_sha = cfg.compat.stop_hook_active_cleared_by_recovery  # [Q-11]",
        "    clear_sha = True  # [Q-11]",
    ),
    Mutant(
        "CAP-removed",
        "G11 INV-7 INV-13",
        "the default machine has no stop-hook cap (the unbounded loop)",
        "reducer/config.py",
        "stop_hook_block_cap: int | None = attrs.field(default=8,",
        "stop_hook_block_cap: int | None = attrs.field(default=None,",
    ),
    Mutant(
        "AUTOCOMPACT-threshold",
        "R-CTX-4",
        "auto-compact fires one token late",
        M,
        "and _count(s) >= cfg.autocompact_threshold",
        "and _count(s) > cfg.autocompact_threshold",
    ),
)


def run_one(m: Mutant, timeout: float) -> tuple[Mutant, str, float]:
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="steploop-mut-") as tmp:
        dst = Path(tmp)
        for part in ("reducer", "effects", "tests", "specs", "pyproject.toml", "README.md"):
            src = ROOT / part
            if src.is_dir():
                shutil.copytree(
                    src, dst / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
                )
            else:
                shutil.copy2(src, dst / part)
        target = dst / m.file
        text = target.read_text(encoding="utf-8")
        if text.count(m.old) != 1:
            return m, f"not applied (pattern found {text.count(m.old)} times)", 0.0
        target.write_text(text.replace(m.old, m.new), encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(dst), "PYTHONDONTWRITEBYTECODE": "1"}
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/reducer",
            "tests/test_readme.py",
        ]
        try:
            proc = subprocess.run(
                cmd, cwd=dst, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return m, "killed (timeout)", time.perf_counter() - t0
        verdict = "SURVIVED" if proc.returncode == 0 else "killed"
        if proc.returncode not in (0, 1):
            verdict = f"killed (pytest exit {proc.returncode})"
        return m, verdict, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="mutant ids to run")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    mutants = [m for m in MUTANTS if not args.only or m.id in args.only]
    if args.list:
        for m in mutants:
            print(f"{m.id:34s} {m.rules:24s} {m.what}")
        return 0
    killed = 0
    applied = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for i, (m, verdict, secs) in enumerate(
            pool.map(lambda m: run_one(m, args.timeout), mutants), 1
        ):
            if not verdict.startswith("not applied"):
                applied += 1
                killed += verdict.startswith("killed")
            print(
                f"[{i}/{len(mutants)}] {m.id:34s} {verdict:12s} {secs:5.1f}s  ({m.rules}: {m.what})",
                flush=True,
            )
    rate = killed / applied if applied else 0.0
    print(
        f"\nkilled {killed} of {applied} applied mutants ({rate:.0%}); {len(mutants) - applied} not applied"
    )
    return 0 if killed == applied == len(mutants) else 1


if __name__ == "__main__":
    raise SystemExit(main())
