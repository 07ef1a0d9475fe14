"""The Markdown summary of a suite run (``latest.md``), from the results dict of ``__main__``."""

from __future__ import annotations

from typing import Any

__all__ = ["markdown"]


def _num(x: float | int) -> str:
    if isinstance(x, int):
        return f"{x:,}"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}" if abs(x) < 1 else f"{x:.2f}"


def _s(summary: dict[str, Any] | None, unit: str = "") -> str:
    """median (q1–q3) for a summary dict."""
    if not summary:
        return "—"
    u = f" {unit}" if unit else ""
    return f"{_num(summary['median'])}{u} ({_num(summary['q1'])}–{_num(summary['q3'])})"


def _status(met: bool | None) -> str:
    return {True: "**met**", False: "**missed**", None: "not measured"}[met]


def _goal_rows(report: dict[str, Any]) -> list[str]:
    rows = []
    for key, item in report["items"].items():
        number = key.split("_", 1)[0]
        if not item.get("available", True):
            rows.append(
                f"| {number} | {key.split('_', 1)[1]} | not available: {item['reason']} | — |"
            )
            continue
        for goal in item.get("goals", {}).values():
            measured = goal.get("measured")
            if isinstance(measured, dict):
                shown = _s(measured)
            elif isinstance(measured, int | float):
                shown = _num(measured)
            else:
                shown = "—"
            if goal.get("fastest_peer"):
                shown += f" vs {goal['fastest_peer']}"
            met = goal.get("met")
            status = "reported (no goal)" if met is None and measured is not None else _status(met)
            rows.append(f"| {number} | {goal['goal']} | {shown} | {status} |")
        if number == "4" and "ratio_on_over_off" in item:
            rows.append(
                f"| 4 | on/off wall time, next to the ideal (p+T)/(p+2T) = {item['ideal_ratio']}"
                f" | {_s(item['ratio_on_over_off'])} | reported (no goal) |"
            )
        if number == "9" and "commands" in item:
            for command, c in item["commands"].items():
                rows.append(
                    f"| 9 | {command} over {item['corpus']['traces']:,} traces: 2 workers / 1"
                    f" | {_s(c['ratio_2_over_1'])} | reported (no goal) |"
                )
        if number == "6" and "results" in item:
            r = item["results"]
            if "states_per_cpu_s" in r:
                met = "met" if r["goal_met"] else "missed"
                rows.append(
                    f"| 6 | explorer throughput, {r['profile']} profile, {r['rounds_bound']} calls"
                    f" per path | {_num(r['states_per_cpu_s'])} states/s (CPU) |"
                    f" ≥ {_num(r['goal_states_per_cpu_s'])}: {met} |"
                )
            else:
                rows.append(
                    f"| 6 | explorer throughput, {r['profile']} profile, {r['rounds_bound']} calls"
                    f" per path | {_num(r['states_per_s'])} states/s | reported (no goal) |"
                )
            c = r.get("check_process")
            if c is not None:
                met = "met" if c["goal_met"] else "missed"
                rows.append(
                    f"| 6 | `steploop check` at the CI bound, whole process | {c['elapsed_s']} s"
                    f" ({c['cpu_s']} s CPU) | ≤ {c['goal_s']} s: {met} |"
                )
    return rows


def _loop_overhead(item: dict[str, Any]) -> list[str]:
    sizes = [str(n) for n in item["sizes"]]
    out = [
        "## 1. Loop overhead per tool turn",
        "",
        f"µs per turn, median (q1–q3) of {item['reps']} interleaved repetitions;"
        " flatness = mean turn cost in the last tenth of the run / the first tenth.",
        "",
        "| contender | version | "
        + " | ".join(f"n={n}" for n in sizes)
        + f" | flatness n={sizes[-1]} |",
        "|---|---|" + "---|" * (len(sizes) + 1),
    ]
    for name, c in item["contenders"].items():
        if not c.get("available", True) and sizes[0] not in c:
            out.append(f"| {name} | {c['version'] or '—'} | not available: {c['reason']} |")
            continue
        cells = [_s(c.get(n, {}).get("per_turn_us")) for n in sizes]
        flat = _s(c.get(sizes[-1], {}).get("flatness"))
        out.append(f"| {name} | {c['version']} | " + " | ".join(cells) + f" | {flat} |")
    out += ["", "Ratios measured side by side (per repetition, then median (q1–q3)):", ""]
    out.append("| ratio | " + " | ".join(f"n={n}" for n in sizes) + " |")
    out.append("|---|" + "---|" * len(sizes))
    keys: list[str] = []
    for n in sizes:
        for k in item["ratios"].get(n, {}):
            if k not in keys:
                keys.append(k)
    for k in keys:
        cells = [_s(item["ratios"].get(n, {}).get(k)) for n in sizes]
        out.append(f"| {k.replace('_over_', ' / ')} | " + " | ".join(cells) + " |")
    out += ["", f"Cost along the run at n={sizes[-1]} (median µs per turn in each tenth):", ""]
    out.append("| contender | " + " | ".join(str(i) for i in range(1, 11)) + " |")
    out.append("|---|" + "---|" * 10)
    for name, c in item["contenders"].items():
        tenths = c.get(sizes[-1], {}).get("tenths_us_median")
        if tenths:
            out.append(f"| {name} | " + " | ".join(_num(t) for t in tenths) + " |")
    out.append("")
    return out


def _round_cost(item: dict[str, Any]) -> list[str]:
    out = [
        "## 2. One round through step() by history size",
        "",
        "µs per round (tool block, permission, tool result, response end → pipeline → next"
        f" CallModel), median (q1–q3) of {item['blocks']} interleaved blocks of"
        f" {item['rounds_per_block']} rounds.",
        "",
        "| messages | µs per round |",
        "|---|---|",
    ]
    for n in item["sizes"]:
        out.append(f"| {n:,} | {_s(item['us_per_round'][str(n)])} |")
    out.append(f"| ratio largest/smallest | {_s(item['ratio_largest_over_smallest'])} |")
    out.append("")
    return out


def _streaming(item: dict[str, Any]) -> list[str]:
    return [
        "## 4. Streaming tool execution",
        "",
        f"T = {item['T_s']} s (tool time and stream after the tool block), p = {item['p_s']} s.",
        "",
        "| | measured s | ideal s |",
        "|---|---|---|",
        f"| streaming execution on | {_s(item['on_s'])} | {item['ideal_on_s']} |",
        f"| streaming execution off | {_s(item['off_s'])} | {item['ideal_off_s']} |",
        f"| ratio on/off | {_s(item['ratio_on_over_off'])} | {item['ideal_ratio']} |",
        "",
        f"Measured ratio is {item['excess_over_ideal_pct']}% above the ideal; fixed overhead"
        f" per run {item['overhead_on_ms']} ms (on) and {item['overhead_off_ms']} ms (off).",
        "",
    ]


def _sdk(item: dict[str, Any]) -> list[str]:
    return [
        "## 5. Interpreter overhead over the raw anthropic SDK",
        "",
        f"{item['calls_per_side']} streamed calls per side ({item['turns_per_run']} per run),"
        " server in a separate process.",
        "",
        "| side | ms per call |",
        "|---|---|",
        f"| steploop (run() + AnthropicModelClient) | {_s(item['steploop_ms_per_call'])} |",
        f"| bare loop over messages.create(stream=True) | {_s(item['bare_ms_per_call'])} |",
        f"| ratio steploop / bare | {_s(item['ratio_steploop_over_bare'])} |",
        "",
    ]


def _replay(item: dict[str, Any]) -> list[str]:
    out = ["## 3. Exact replay throughput and peak memory", ""]
    if not item.get("available", True):
        return [*out, f"Not available: {item['reason']}", ""]
    out += [
        f"From `{item['entry_point']}`; {item['note']}.",
        "",
        "| events | events/s | peak RSS MB (before replay) | tracemalloc peak MB"
        " | allocated blocks growth | trace MB | record s | replay s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in item["runs"]:
        rss = f"{r['peak_rss_mb']} ({r['rss_baseline_mb']})" if "peak_rss_mb" in r else "—"
        out.append(
            f"| {r['events']:,} | {_num(r['events_per_s'])} | {rss}"
            f" | {r.get('peak_replay_mb', '—')}"
            f" | {r.get('peak_allocated_blocks_growth', '—')} | {r.get('file_mb', '—')}"
            f" | {r.get('record_s', '—')} | {r.get('replay_s', '—')} |"
        )
    out.append("")
    parts = next((r["breakdown"] for r in item["runs"] if "breakdown" in r), None)
    if parts is not None:
        us = parts["us_per_event"]
        out += [
            f"Where the time goes, replaying {parts['events']:,} events in a fresh interpreter:"
            f" each part timed alone, interleaved over {parts['reps']} repetitions, median µs"
            " per event.",
            "",
            "| part | µs per event | events/s |",
            "|---|---|---|",
            f"| reading and decoding the trace (TraceReader) | {us['read']} |"
            f" {_num(round(1e6 / us['read']))} |",
            f"| step() over the decoded events | {us['step']} |"
            f" {_num(parts['step_ceiling_events_per_s'])} |",
            f"| replay_exact, verify=every (the default) | {us['replay_every']} |"
            f" {_num(parts['events_per_s']['every'])} |",
            f"| replay_exact, verify=checkpoint | {us['replay_checkpoint']} |"
            f" {_num(parts['events_per_s']['checkpoint'])} |",
            "",
            "step() alone is the ceiling: no replay of these events can pass"
            f" {_num(parts['step_ceiling_events_per_s'])} events/s on this machine, however"
            " cheap reading and checking become.",
            "",
        ]
    return out


def _corpus(item: dict[str, Any]) -> list[str]:
    c = item["corpus"]
    out = [
        "## 9. Corpus throughput: traces per second, 1 worker and 2",
        "",
        f"{c['traces']:,} traces ({c['templates']} templates cycled, {c['steps_per_trace']}"
        f" steps per trace, {c['mb']} MB), {item['reps']} repetition(s), interleaved.",
        "",
        f"| command | {item['contenders'][0]}: traces/s | {item['contenders'][1]}: traces/s"
        " | ratio |",
        "|---|---|---|---|",
    ]
    for command, r in item["commands"].items():
        out.append(
            f"| {command} | {_s(r['traces_per_s_1'])} | {_s(r['traces_per_s_2'])}"
            f" | {_s(r['ratio_2_over_1'])} |"
        )
    out.append("")
    return out


def _explorer(item: dict[str, Any]) -> list[str]:
    out = ["## 6. Explorer throughput at the CI bound", ""]
    if not item.get("available", True):
        return [*out, f"Not available: {item['reason']}", ""]
    r = item["results"]
    cut = "" if r["max_states"] is None else f", stopped at {r['max_states']:,} states"
    out += [
        f"`{item['entry_point']}` on the {r['profile']} profile, {r['rounds_bound']} model calls"
        f" per path{cut}; complete: {r['complete']}, report ok: {r['report_ok']}.",
        "",
        "| abstract states | transitions | seconds | states/s | transitions/s |",
        "|---|---|---|---|---|",
        f"| {r['states']:,} | {r['transitions']:,} | {r['elapsed_s']} | {_num(r['states_per_s'])}"
        f" | {_num(r['transitions_per_s'])} |",
        "",
    ]
    if "cpu_s" in r:
        out += [
            "| run | wall s | CPU s | states/s (wall) | states/s (CPU) |",
            "|---|---|---|---|---|",
            f"| one process | {r['elapsed_s']} | {r['cpu_s']} | {_num(r['states_per_s'])}"
            f" | {_num(r['states_per_cpu_s'])} |",
        ]
        two = r.get("two_processes")
        if two is not None:
            out.append(
                f"| two worker processes (CPU: all processes; same counts: {two['same_counts']})"
                f" | {two['elapsed_s']} | {two['cpu_s']} | {_num(two['states_per_s'])}"
                f" | {_num(two['states_per_cpu_s'])} |"
            )
        out.append("")
    c = r.get("check_process")
    if c is not None:
        out += [
            f"`steploop check` as a whole process: {c['elapsed_s']} s wall, {c['cpu_s']} s CPU"
            f" (exit {c['exit_status']}); `steploop check --help`: {c['help_elapsed_s']} s"
            f" ({c['help_cpu_s']} s CPU); importing its module alone: {c['import_elapsed_s']} s"
            f" ({c['import_cpu_s']} s CPU).",
            "",
        ]
    return out


def _import(item: dict[str, Any]) -> list[str]:
    out = ["## 7. Importing Claude Code transcripts", ""]
    if "ratios" in item:
        out += [
            "The import beside a plain `json.loads` of every line of the same files, in one"
            " interpreter, per repetition (the folder: per copy); ratio: median (q1–q3).",
            "",
            "| workload | steploop | MB | import s | JSON s | ratio | turns reproduced |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in item["ratios"]:
            for label, v in r.items():
                if label == "workload":
                    continue
                q = v["ratio"]
                out.append(
                    f"| {r['workload']} | {label} | {v['bytes'] / 1e6:.1f} | {v['import_s']['median']}"
                    f" | {v['json_s']['median']} | {q['median']} ({q['q1']}–{q['q3']})"
                    f" | {v['reproduced']}/{v['turns']} |"
                )
        out += [
            "",
            "| shipped folder | steploop | peak RSS MB (baseline) | import s |",
            "|---|---|---|---|",
        ]
        for m in item.get("folder_memory", []):
            out.append(
                f"| x{m['copies']} | {m['tree']} | {m['peak_rss_mb']} ({m['baseline_rss_mb']})"
                f" | {m['import_s']} |"
            )
        for label, ph in item.get("phases", {}).items():
            parts = ", ".join(f"{k} {v}" for k, v in ph["phases_x_json"].items())
            out += [
                "",
                f"CPU time by phase, shipped folder ({label}), in plain JSON reads: the import"
                f" {round(ph['import_cpu_s'] / ph['json_cpu_s'], 1)}; {parts}.",
            ]
        for label, prof in item.get("profile", {}).items():
            phases = ", ".join(f"{k} {v}%" for k, v in prof["phases_pct"].items())
            out += [
                "",
                f"cProfile of the shipped folder ({label}, {prof['total_s']} s profiled): {phases};"
                f" inside the machine's begin()/advance(): {prof['machine_step_pct']}%.",
            ]
        out.append("")
    out += [
        f"`{item['source']}` copied k times into one session (a manual compaction between"
        " copies), imported in a fresh interpreter; the traces of k = 1 replayed exactly.",
        "",
        "| copies | records | MB | records/s | turns reproduced | peak RSS MB (baseline)"
        " | trace records/s (replay) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in item["runs"]:
        out.append(
            f"| {r['copies']} | {r['records']:,} | {r['bytes'] / 1e6:.1f}"
            f" | {_num(r['records_per_s'])} | {r['reproduced']}/{r['turns']}"
            f" | {r['peak_rss_mb']} ({r['baseline_rss_mb']})"
            f" | {_num(r['trace_records_per_s']) if 'trace_records_per_s' in r else '—'} |"
        )
    out.append("")
    return out


def _profile(title: str, prof: dict[str, Any], limit: int = 12) -> list[str]:
    out = [
        f"### Profile: {title}",
        "",
        f"cProfile, {prof['total_s']} s profiled. Cumulative share: "
        + ", ".join(f"`{k}` {v}%" for k, v in prof.get("cumulative_share_pct", {}).items()),
        "",
        "| function | calls | own s | own % | cumulative s |",
        "|---|---|---|---|---|",
    ]
    for row in prof["top_by_tottime"][:limit]:
        out.append(
            f"| `{row['function']}` | {row['ncalls']:,} | {row['tottime_s']}"
            f" | {row['tottime_pct']} | {row['cumtime_s']} |"
        )
    out.append("")
    return out


def _counterfactual(item: dict[str, Any]) -> list[str]:
    out = [
        "## 8. Counterfactual replay against exact replay, per event",
        "",
        f"Change: `{item['change']}`; {item['reps']} interleaved repetitions; µs per event,"
        " median (q1–q3); the ratio is taken per repetition.",
        "",
        "| rounds | events | trace MB | exact | counterfactual | counterfactual / exact |",
        "|---|---|---|---|---|---|",
    ]
    for s in item["sizes"]:
        out.append(
            f"| {s['rounds']:,} | {s['events']:,} | {s['bytes'] / 1e6:.1f}"
            f" | {_s(s['exact_us_per_event'])} | {_s(s['counterfactual_us_per_event'])}"
            f" | {_s(s['ratio'])} |"
        )
    return [*out, ""]


def _viewer(item: dict[str, Any]) -> list[str]:
    out = [
        "## 10. show --html against text show",
        "",
        f"{item['reps']} interleaved repetitions; seconds, median (q1–q3); the ratio is taken"
        " per repetition. Commands: a fresh `python -m steploop.effects.cli` each time.",
        "",
        "| trace | steps | page KB | how | show | show --html | --html / show |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, t in item["traces"].items():
        for how in ("command", "in_process"):
            if how in t:
                c = t[how]
                out.append(
                    f"| {name} | {t['steps']:,} | {t['page_bytes'] / 1e3:,.0f} | {how.replace('_', ' ')}"
                    f" | {_s(c['show_s'])} | {_s(c['html_s'])} | {_s(c['ratio'])} |"
                )
    big = item.get("big")
    if big:
        b = big.get("browser")
        seen = (
            f"; in headless Chromium: open {b['open_s']} s, `#round=9000` {b['deep_link_s']} s,"
            f" {b['rows_in_the_dom']} rows in the DOM"
            if b
            else "; no browser here"
        )
        out += [
            "",
            f"A {big['rounds']:,}-round page: written in {big['write_s']} s,"
            f" {big['page_bytes'] / 1e6:.1f} MB (the trace: {big['trace_bytes'] / 1e6:.1f} MB){seen}.",
        ]
    return [*out, ""]


def markdown(report: dict[str, Any]) -> str:
    """The summary: machine, the goal table, each item's figures, profiles of missed goals."""
    m = report["machine"]
    lines = [
        "# steploop benchmarks: latest run",
        "",
        f"- date: {m['date_utc']}; command: `{report['command']}`"
        f"{' (quick smoke run: not for quoting)' if report['quick'] else ''}",
        f"- machine: {m['cpu']}, {m['cores']} cores, {m['platform']}, {m['python']};"
        f" load average (1/5/15 min) {m['loadavg_1_5_15']} at start,"
        f" {m.get('loadavg_at_end')} at end",
        f"- duration: {report.get('duration_s')} s. Absolute times are for this machine only;"
        " ratios are measured side by side in this run.",
        "",
        "## Goals",
        "",
        "| item | goal | measured: median (q1–q3) | status |",
        "|---|---|---|---|",
        *_goal_rows(report),
        "",
    ]
    items = report["items"]
    profiles: list[str] = []
    for key, item in items.items():
        number = key.split("_", 1)[0]
        if not item.get("available", True) and number not in ("3", "6"):
            lines += [f"## {key}", "", f"Not available: {item['reason']}", ""]
            continue
        if number == "1":
            lines += _loop_overhead(item)
            if "profile" in item:
                profiles += _profile(
                    "item 1, steploop as shipped, one run at the largest n", item["profile"]
                )
        elif number == "2":
            lines += _round_cost(item)
            if "profile" in item:
                profiles += _profile("item 2, rounds at the largest history", item["profile"])
        elif number == "3":
            lines += _replay(item)
            if "profile" in item:
                profiles += _profile(
                    "item 3, replay_exact on a 5,000-event trace (fresh interpreter, warm)",
                    item["profile"],
                )
        elif number == "4":
            lines += _streaming(item)
        elif number == "5":
            lines += _sdk(item)
            if "profile" in item:
                profiles += _profile("item 5, one steploop run against the server", item["profile"])
        elif number == "6":
            lines += _explorer(item)
        elif number == "7":
            lines += _import(item)
        elif number == "8":
            lines += _counterfactual(item)
        elif number == "9":
            lines += _corpus(item)
        elif number == "10":
            lines += _viewer(item)
        elif number == "11":
            from benchmarks.temporal_payloads import markdown as payloads

            lines += payloads(item)
    if profiles:
        lines += ["## Where the time goes (missed goals)", "", *profiles]
    return "\n".join(lines).rstrip() + "\n"
