"""``steploop diff A B``: the first divergence between two traces, as data and as the lines the
command prints (``diff --html`` and ``replay --html`` show the same divergence in the viewer).

Steps are compared in order: the event (times left out unless ``exact``), then the effects, then
(``exact``) the state digest; then the terminals, then the headers. The first difference is the
divergence: the step, what differs (``length``: one trace ends first, ``events``, ``effects``,
``digest``, ``terminal``, ``headers``) and the lines that name the fields. Every text from a trace
is printed with its secrets hidden and its control characters escaped by the caller
(:func:`steploop.effects.cli_common.for_terminal`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from itertools import zip_longest
from typing import Any, Literal, TypeAlias

import attrs

from steploop.effects.cli_common import for_terminal, short
from steploop.effects.trace import StepRecord, TraceReader, describe_effect
from steploop.reducer.canonical import to_data
from steploop.reducer.effects import Effect

__all__ = ["TraceDiff", "diff_traces", "field_diff"]

What: TypeAlias = Literal[
    "identical", "length", "events", "effects", "digest", "terminal", "headers"
]

_TIME_KEYS = ("at_ms",)


@attrs.frozen(kw_only=True)
class TraceDiff:
    """Where two traces first differ (``what == "identical"``: nowhere)."""

    what: What
    step: int | None  # the first step that differs (None: none, or after the last)
    lines: tuple[str, ...]  # the report, as ``steploop diff`` prints it
    same_steps: int  # steps equal before the divergence
    effect_index: int | None = None  # ``effects``: the first effect that differs
    configs: tuple[tuple[str, Any, Any], ...] = ()  # config fields that differ (A, B)
    requests: tuple[tuple[str, Any, Any], ...] = ()

    @property
    def identical(self) -> bool:
        return self.what == "identical"


def _flat(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for k, v in data.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    if isinstance(data, list) and data:
        out = {}
        for k, v in enumerate(data):
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: data}


def field_diff(a: Any, b: Any, exact: bool) -> list[tuple[str, Any, Any]]:
    """The leaves that differ, as (dotted path, A's value, B's value); times ignored unless
    ``exact`` (a field named ``at_ms`` at any depth)."""
    fa, fb = _flat(to_data(a)), _flat(to_data(b))
    out = []
    for key in list(fa) + [k for k in fb if k not in fa]:
        if not exact and key.rsplit(".", 1)[-1] in _TIME_KEYS:
            continue
        va, vb = fa.get(key, "(absent)"), fb.get(key, "(absent)")
        if va != vb:
            out.append((key, va, vb))
    return out


def _cut(value: Any, n: int) -> str:
    """A value's repr on one line: secrets hidden before it is cut to ``n`` characters."""
    return short(for_terminal(repr(value)), n)


def _show_fields(
    diffs: list[tuple[str, Any, Any]], indent: str = "  ", limit: int = 8
) -> list[str]:
    lines = [f"{indent}{k}: {_cut(va, 160)} → {_cut(vb, 160)}" for k, va, vb in diffs[:limit]]
    if len(diffs) > limit:
        lines.append(f"{indent}… and {len(diffs) - limit} more field(s)")
    return lines


def _inline_fields(diffs: list[tuple[str, Any, Any]], limit: int = 8) -> str:
    shown = ", ".join(f"{k} ({_cut(va, 60)} → {_cut(vb, 60)})" for k, va, vb in diffs[:limit])
    return shown + (f" and {len(diffs) - limit} more" if len(diffs) > limit else "")


def _effect_lines(label: str, effects: Sequence[Effect]) -> list[str]:
    if not effects:
        return [f"  {label} effects: none"]
    lines = [f"  {label} effects ({len(effects)}):"]
    for k, e in enumerate(effects[:20]):
        lines.append(f"    {k}: {describe_effect(e, 200)}")
    if len(effects) > 20:
        lines.append(f"    … {len(effects) - 20} more")
    return lines


def _steps(reader: TraceReader) -> Iterator[StepRecord]:
    for rec in reader:
        if isinstance(rec, StepRecord):
            yield rec


def diff_traces(
    a_path: str | os.PathLike[str], b_path: str | os.PathLike[str], *, exact: bool = False
) -> TraceDiff:
    """The first divergence between two traces (module docstring).

    Raises:
        TraceError: a trace is malformed.
    """
    a, b = TraceReader(a_path), TraceReader(b_path)
    steps_a, steps_b = _steps(a), _steps(b)
    first_a, first_b = next(steps_a, None), next(steps_b, None)
    ha, hb = a.header, b.header
    assert ha is not None and hb is not None
    head: list[str] = []
    changed = field_diff(ha.config, hb.config, True)
    if changed:
        head.append(f"configs differ: {_inline_fields(changed)}")
    requests = field_diff(ha.request, hb.request, exact)
    if requests:
        head.append(f"requests differ: {_inline_fields(requests)}")

    def chain(first: StepRecord | None, rest: Iterator[StepRecord]) -> Iterator[StepRecord]:
        if first is not None:
            yield first
            yield from rest

    def found(what: What, step: int | None, lines: list[str], **kw: Any) -> TraceDiff:
        return TraceDiff(
            what=what,
            step=step,
            lines=(*head, *lines),
            same_steps=n,
            configs=tuple(changed),
            requests=tuple(requests),
            **kw,
        )

    n = 0
    for sa, sb in zip_longest(chain(first_a, steps_a), chain(first_b, steps_b)):
        if sa is None or sb is None:
            longer, rec, shorter = ("B", sb, "A") if sa is None else ("A", sa, "B")
            assert rec is not None
            line = (
                f"first divergence at step {rec.i}: {shorter} ends after step {n - 1}; "
                f"{longer} continues with {describe_effect(rec.event, 200)}"
            )
            return found("length", rec.i, [line])
        if sa.event is None or sb.event is None:
            same_event = sa.event is sb.event
            event_diff: list[tuple[str, Any, Any]] = []
        else:
            event_diff = field_diff(sa.event, sb.event, exact)
            same_event = not event_diff
        if not same_event:
            lines = [
                f"first divergence at step {sa.i}: the events differ",
                *_show_fields(event_diff),
            ]
            lines.append(f"  A event: {describe_effect(sa.event, 400)}")
            lines.append(f"  B event: {describe_effect(sb.event, 400)}")
            return found("events", sa.i, lines)
        if sa.effects != sb.effects:
            lines = [f"first divergence at step {sa.i}: same event, the effects differ"]
            index = None
            for k, (ea_, eb_) in enumerate(zip_longest(sa.effects, sb.effects)):
                if ea_ == eb_:
                    continue
                index = k
                if ea_ is None or eb_ is None:
                    who = "B" if ea_ is None else "A"
                    lines.append(f"  effect {k}: only {who} has {describe_effect(ea_ or eb_, 200)}")
                else:
                    lines.append(f"  effect {k} ({ea_.TAG} / {eb_.TAG}):")
                    lines.extend(_show_fields(field_diff(ea_, eb_, True), "    "))
                break
            lines += _effect_lines("A", sa.effects) + _effect_lines("B", sb.effects)
            return found("effects", sa.i, lines, effect_index=index)
        if exact and sa.digest != sb.digest:
            lines = [f"first divergence at step {sa.i}: the state digests differ"]
            lines.append(f"  A: {sa.digest}\n  B: {sb.digest}")
            return found("digest", sa.i, lines)
        n += 1
    ea, eb = a.end, b.end
    ta = ea.terminal.TAG if ea else "no end record"
    tb = eb.terminal.TAG if eb else "no end record"
    if ta != tb:
        return found(
            "terminal", None, [f"first divergence after step {n - 1}: A ends {ta}, B ends {tb}"]
        )
    if changed or requests:
        return found("headers", None, [f"the same {n} steps ({ta}) from different headers"])
    return found("identical", None, [f"identical ({n} steps; {ta})"])
