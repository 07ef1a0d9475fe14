"""The trace commands of the ``steploop`` CLI: replay, diff, show, stats and resume.

:func:`register` adds them to the main parser's subparsers; each handler has the signature
``(args, out) -> int`` and reports a user error by raising ``effects.cli.CliError`` or a
``reducer.SteploopError`` (one line, exit status 2). Exit status 1 means "ran, but the answer
is no": a replay mismatch or divergence, or two traces that differ.

``python -m effects.trace_cli`` runs these commands on their own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import typing
from collections.abc import Callable, Iterator, Sequence
from itertools import zip_longest
from pathlib import Path
from typing import Any, TextIO

import attrs

from effects.trace import (
    DEFAULT_CHECKPOINT_EVERY,
    POLICIES,
    VERIFY_POLICIES,
    EndRecord,
    Policy,
    ResumeRecord,
    StepRecord,
    TraceHeader,
    TraceReader,
    describe_effect,
    describe_request,
    make_provenance,
    replay_counterfactual_async,
    replay_exact,
    resume_trace,
)
from reducer import LoopConfig, SteploopError, profile
from reducer.canonical import to_data
from reducer.effects import CallModel, Compact, Effect, StartTool
from reducer.events import Event, ModelResponseEnded
from reducer.transitions import CONTINUE_TYPES

__all__ = ["TRACE_COMMANDS", "main", "register"]

Handler = Callable[[argparse.Namespace, TextIO], int]


def _cli_error(message: str) -> Exception:
    from effects.cli import CliError

    return CliError(message)


# ----------------------------------------------------------------------------------------------
# Helpers


def _at_least_one(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def _overrides(pairs: Sequence[str] | None) -> dict[str, Any]:
    from effects.cli import _parse_value

    out: dict[str, Any] = {}
    for kv in pairs or ():
        if "=" not in kv:
            raise _cli_error(f"--set takes KEY=VALUE, got {kv!r}")
        key, raw = kv.split("=", 1)
        out[key.strip()] = _parse_value(raw.strip())
    return out


def _load_json(path: str) -> Any:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise _cli_error(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise _cli_error(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise _cli_error(f"{path}: cannot read: {e.strerror}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _cli_error(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from None


def _live_model(traits_for: Callable[[str, dict[str, Any]], Any], tools: Any) -> tuple[Any, Any]:
    if not os.environ.get("ANTHROPIC_API_KEY"):
        raise _cli_error(
            "ANTHROPIC_API_KEY is not set: set it to go live, or answer from a script instead"
        )
    from effects.model import AnthropicModelClient, make_client

    client = make_client(connect_timeout=10.0, read_timeout=120.0)
    model = AnthropicModelClient(
        client,
        system="You are a careful coding agent working in the user's workspace.",
        tools=tools,
        traits_for=traits_for,
    )
    return client, model


def _short(text: str, n: int) -> str:
    text = text.replace("\n", "⏎ ")
    return text if len(text) <= n else text[: n - 1] + "…"


def _steps(reader: TraceReader) -> Iterator[StepRecord]:
    for rec in reader:
        if isinstance(rec, StepRecord):
            yield rec


# ----------------------------------------------------------------------------------------------
# replay


def cmd_replay(args: argparse.Namespace, out: TextIO) -> int:
    counterfactual = bool(args.set or args.profile or args.on_divergence or args.script)
    from effects import corpus  # several traces, a directory, --jobs, --scheduler

    if corpus.is_corpus(args):
        if counterfactual:
            raise _cli_error("counterfactual replay takes one trace file")
        return corpus.replay_command(args, out)
    args.trace = args.trace[0] if isinstance(args.trace, list) else args.trace
    if not counterfactual:
        report = replay_exact(
            args.trace,
            verify=args.verify or "every",
            checkpoint_every=args.checkpoint_every or DEFAULT_CHECKPOINT_EVERY,
        )
        print(report.describe(), file=out)
        return 0 if report.ok else 1
    if args.verify or args.checkpoint_every:
        raise _cli_error("--verify and --checkpoint-every apply to exact replay only")
    import anyio

    policy: Policy = args.on_divergence or "stop"
    if args.script and policy != "scripted":
        raise _cli_error("--script goes with --on-divergence scripted")
    if policy == "scripted" and not args.script:
        raise _cli_error("--on-divergence scripted needs --script FILE (a JSON list of responses)")
    base: LoopConfig | None = profile(args.profile) if args.profile else None
    overrides = _overrides(args.set)
    script = _load_json(args.script) if args.script else None
    client: Any = None
    model: Any = None
    if policy == "live":
        from effects.tools import ToolRegistry, builtin_tools

        registry = ToolRegistry(builtin_tools("."))
        client, model = _live_model(registry.traits, registry.definitions())

    async def go() -> Any:
        try:
            return await replay_counterfactual_async(
                args.trace, overrides, policy, script, base=base, model=model
            )
        finally:
            if client is not None:
                await client.close()

    report = anyio.run(go)
    what = [f"profile {args.profile}" if args.profile else "the recorded config"]
    if overrides:
        what.append("overrides " + ", ".join(f"{k}={v!r}" for k, v in overrides.items()))
    print(
        f"counterfactual replay of {args.trace} with {'; '.join(what)}; on divergence: {policy}",
        file=out,
    )
    print(report.describe(), file=out)
    return 0 if report.ok else 1


# ----------------------------------------------------------------------------------------------
# diff


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def _timeless(event: Event | None) -> Event | None:
    if event is None:
        return None
    return typing.cast(Event, attrs.evolve(typing.cast(Any, event), at_ms=0))


def _effect_lines(label: str, effects: Sequence[Effect]) -> list[str]:
    if not effects:
        return [f"  {label} effects: none"]
    lines = [f"  {label} effects ({len(effects)}):"]
    for k, e in enumerate(effects[:20]):
        lines.append(f"    {k}: {describe_effect(e, 200)}")
    if len(effects) > 20:
        lines.append(f"    … {len(effects) - 20} more")
    return lines


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    a, b = TraceReader(args.a), TraceReader(args.b)
    steps_a, steps_b = _steps(a), _steps(b)
    first_a, first_b = next(steps_a, None), next(steps_b, None)
    ha, hb = a.header, b.header
    assert ha is not None and hb is not None
    fa, fb = _flat(to_data(ha.config)), _flat(to_data(hb.config))
    changed = [k for k in fa if fa.get(k) != fb.get(k)]
    if changed:
        shown = ", ".join(f"{k} ({fa[k]!r} → {fb.get(k)!r})" for k in changed[:8])
        more = f" and {len(changed) - 8} more" if len(changed) > 8 else ""
        print(f"configs differ: {shown}{more}", file=out)
    if ha.request != hb.request:
        print("requests differ", file=out)

    def chain(first: StepRecord | None, rest: Iterator[StepRecord]) -> Iterator[StepRecord]:
        if first is not None:
            yield first
            yield from rest

    n = 0
    for sa, sb in zip_longest(chain(first_a, steps_a), chain(first_b, steps_b)):
        if sa is None or sb is None:
            longer, rec, shorter = ("B", sb, "A") if sa is None else ("A", sa, "B")
            assert rec is not None
            print(
                f"first divergence at step {rec.i}: {shorter} ends after step {n - 1}; "
                f"{longer} continues with {describe_effect(rec.event, 200)}",
                file=out,
            )
            return 1
        same_event = (
            sa.event == sb.event if args.exact else _timeless(sa.event) == _timeless(sb.event)
        )
        if not same_event:
            print(f"first divergence at step {sa.i}: the events differ", file=out)
            print(f"  A event: {describe_effect(sa.event, 400)}", file=out)
            print(f"  B event: {describe_effect(sb.event, 400)}", file=out)
            return 1
        if sa.effects != sb.effects:
            print(f"first divergence at step {sa.i}: same event, the effects differ", file=out)
            for line in _effect_lines("A", sa.effects) + _effect_lines("B", sb.effects):
                print(line, file=out)
            return 1
        if args.exact and sa.digest != sb.digest:
            print(f"first divergence at step {sa.i}: the state digests differ", file=out)
            print(f"  A: {sa.digest}\n  B: {sb.digest}", file=out)
            return 1
        n += 1
    ea, eb = a.end, b.end
    ta = ea.terminal.TAG if ea else "no end record"
    tb = eb.terminal.TAG if eb else "no end record"
    if ta != tb:
        print(f"first divergence after step {n - 1}: A ends {ta}, B ends {tb}", file=out)
        return 1
    print(f"identical ({n} steps; {ta})", file=out)
    return 0


# ----------------------------------------------------------------------------------------------
# show


@attrs.define
class _Row:
    round: int
    transition: str = "(unfinished)"
    calls: int = 0
    tools: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    compactions: int = 0


def _count_effects(row: _Row, effects: Sequence[Effect]) -> None:
    for e in effects:
        if isinstance(e, CallModel):
            row.calls += 1
        elif isinstance(e, StartTool):
            row.tools += 1
        elif isinstance(e, Compact):
            row.compactions += 1


def _payload(t: Any) -> str:
    data = {k: v for k, v in to_data(t).items() if k != "type"}
    if not data:
        return ""
    if "error" in data and isinstance(data["error"], dict):
        data["error"] = data["error"].get("message", "")
    return " (" + ", ".join(f"{k}={v}" for k, v in data.items()) + ")"


def timeline(reader: TraceReader) -> tuple[TraceHeader, list[_Row], EndRecord | None, int, int]:
    """Rounds of a trace: a step that records a Continue ends its round with its event, and
    its effects (the next round's model call) count for the next round.

    Returns:
        The header, the rows, the end record (None when cut off), steps and resumes.
    """
    rows = [_Row(round=1)]
    steps = resumes = 0
    for rec in reader:
        if isinstance(rec, ResumeRecord):
            resumes += 1
        if not isinstance(rec, StepRecord):
            continue
        steps += 1
        row = rows[-1]
        if isinstance(rec.event, ModelResponseEnded):
            u = rec.event.usage
            row.tokens_in += (
                u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
            )
            row.tokens_out += u.output_tokens
        t = rec.transition
        if t is not None:
            row.transition = t.TAG + _payload(t)
            if isinstance(t, CONTINUE_TYPES):
                rows.append(_Row(round=row.round + 1))
        _count_effects(rows[-1], rec.effects)
    assert reader.header is not None
    return reader.header, rows, reader.end, steps, resumes


def cmd_show(args: argparse.Namespace, out: TextIO) -> int:
    reader = TraceReader(args.trace)
    header, rows, end, steps, resumes = timeline(reader)
    cfg, prov = header.config, header.provenance
    prompt = header.request.prompt
    text = prompt if isinstance(prompt, str) else "(blocks)"
    print(f"trace {reader.name}", file=out)
    print(
        f"  profile {cfg.profile_name} · model {cfg.model} · recorded "
        f"{prov.get('created_at', '?')} with {prov.get('client') or 'no model client'}",
        file=out,
    )
    print(f"  prompt: {_short(text, 90)}", file=out)
    headers = ("round", "transition", "model calls", "tools run", "tokens in/out", "compactions")
    cells = [
        (
            str(r.round),
            r.transition,
            str(r.calls),
            str(r.tools),
            f"{r.tokens_in:,}/{r.tokens_out:,}",
            str(r.compactions),
        )
        for r in rows
    ]
    widths = [max(len(h), *(len(c[k]) for c in cells)) for k, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        parts = [v.ljust(widths[k]) if k == 1 else v.rjust(widths[k]) for k, v in enumerate(values)]
        return "  ".join(parts).rstrip()

    print(line(headers), file=out)
    for c in cells:
        print(line(c), file=out)
    ended = f"terminal {end.terminal.TAG}" if end is not None else "no end record (cut off)"
    resumed = f"; resumed {resumes}x" if resumes else ""
    print(f"{steps} steps, {len(rows)} round(s); {ended}{resumed}", file=out)
    return 0


# ----------------------------------------------------------------------------------------------
# stats


def cmd_stats(args: argparse.Namespace, out: TextIO) -> int:
    from effects.corpus import stats_command  # in parallel: effects/corpus.py

    return stats_command(args, out)


# ----------------------------------------------------------------------------------------------
# resume


def cmd_resume(args: argparse.Namespace, out: TextIO) -> int:
    import anyio

    from effects.cli import Display, _ask_terminal, _drive, _print_result
    from effects.run import PermissionPolicy
    from effects.tools import ToolRegistry, builtin_tools

    # read the trace before anything else: a bad trace is the first thing to report
    head = TraceReader(args.trace, tolerate_truncated_tail=True)
    for _ in head:
        break
    assert head.header is not None
    recorded_ws = head.header.provenance.get("workspace")
    ws_arg = args.workspace or (recorded_ws if isinstance(recorded_ws, str) else ".")
    workspace = Path(ws_arg).resolve()
    if not workspace.is_dir():
        raise _cli_error(f"workspace {workspace} is not a directory (pass --workspace DIR)")
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=args.enable_bash))
    client: Any = None
    model: Any
    if args.scripted:
        from effects.scripted import ScriptedModel

        model = ScriptedModel.from_json(_load_json(args.scripted), traits_for=registry.traits)
    else:
        client, model = _live_model(registry.traits, registry.definitions())
    with resume_trace(
        args.trace, provenance=make_provenance(model=model, workspace=workspace)
    ) as rs:
        point = rs.point
        cut = " (dropped a truncated last line)" if point.truncated_tail else ""
        print(f"resuming {point.path} after step {point.last_step}{cut}", file=out)
        for ev in rs.synthesized:
            print(f"  settled: {describe_effect(ev, 160)}", file=out)
        for e in rs.reissued:
            print(f"  issued again: {describe_request(e)}", file=out)
        for e in rs.requested:
            print(f"  then: {describe_request(e)}", file=out)
        r = rs.run(
            model=model,
            tools=registry,
            workspace=workspace,
            permissions=PermissionPolicy(
                allow=frozenset({"Read", "Glob", "Grep"}), default="allow" if args.yes else "ask"
            ),
        )
        display = Display(out)

        async def go() -> Any:
            try:
                return await _drive(r, display, _ask_terminal)
            finally:
                if client is not None:
                    await client.close()

        res = anyio.run(go)
    _print_result(res, out)
    print(f"appended to {point.path}", file=out)
    return 0


# ----------------------------------------------------------------------------------------------
# Registration


TRACE_COMMANDS: dict[str, Handler] = {
    "replay": cmd_replay,
    "diff": cmd_diff,
    "show": cmd_show,
    "stats": cmd_stats,
    "resume": cmd_resume,
}


def register(subparsers: Any) -> dict[str, Handler]:
    """Add the trace commands to ``parser.add_subparsers(...)``; returns name -> handler
    (each subparser also carries it as the ``handler`` default)."""
    from effects.corpus import add_options as corpus_options

    p = subparsers.add_parser(
        "replay",
        help="replay a trace exactly, or under another config (counterfactual)",
        description="Without options: exact replay (every effect and state digest checked). "
        "With --set/--profile/--on-divergence: counterfactual replay.",
    )
    p.add_argument("trace", metavar="TRACE", nargs="+", help="a trace, or several, a DIR, @LIST")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override a config key (repeatable)"
    )
    p.add_argument(
        "--profile", metavar="NAME", help="start from this profile, not the recorded config"
    )
    p.add_argument(
        "--on-divergence",
        choices=POLICIES,
        help="when the recording cannot answer: stop (default), scripted, or live",
    )
    p.add_argument("--script", metavar="FILE", help="the JSON script for --on-divergence scripted")
    p.add_argument(
        "--verify",
        choices=VERIFY_POLICIES,
        help="exact replay: check the state digest after every step (default), or only at "
        "checkpoints (faster; effects are still checked at every step, and a difference is "
        "reported at its first step, but a digest wrong only between checkpoints is not seen)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=_at_least_one,
        metavar="N",
        help=f"steps between checkpoints (default {DEFAULT_CHECKPOINT_EVERY})",
    )
    corpus_options(p, progress=True)
    p.set_defaults(handler=cmd_replay)

    d = subparsers.add_parser("diff", help="the first divergence between two traces")
    d.add_argument("a", metavar="A")
    d.add_argument("b", metavar="B")
    d.add_argument("--exact", action="store_true", help="compare event times and state digests too")
    d.set_defaults(handler=cmd_diff)

    s = subparsers.add_parser("show", help="a trace's timeline, one row per round")
    s.add_argument("trace", metavar="TRACE")
    s.set_defaults(handler=cmd_show)

    st = subparsers.add_parser("stats", help="transition and terminal counts over *.jsonl in DIR")
    st.add_argument("dir", metavar="DIR", nargs="+", help="directories, traces, @LIST files")
    corpus_options(st, progress=True)
    st.set_defaults(handler=cmd_stats)

    r = subparsers.add_parser("resume", help="continue a killed run, appending to its trace")
    r.add_argument("trace", metavar="TRACE")
    r.add_argument("--scripted", metavar="FILE", help="answer model calls from a JSON script")
    r.add_argument("--workspace", metavar="DIR", help="default: the one recorded in the trace")
    r.add_argument("--enable-bash", action="store_true", help="offer the Bash tool")
    r.add_argument("--yes", action="store_true", help="allow every tool call without asking")
    r.set_defaults(handler=cmd_resume)
    return dict(TRACE_COMMANDS)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run one trace command (what ``steploop`` does for these commands)."""
    from effects.cli import CliError

    out = out or sys.stdout
    parser = argparse.ArgumentParser(prog="steploop", description="steploop trace commands")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args, out))
    except (CliError, SteploopError) as e:
        print(f"steploop: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("steploop: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
