"""Claude Code's versions: one table of the behaviours that differ between them (specs/ VER-*).

:func:`claude_code` returns the profile of a given Claude Code version: the 2.1.88 profile
(:func:`~steploop.reducer.config.claude_code_2_1_88`) with every row of :data:`VERSION_ROWS`
set to the value that version had. A row names one config key (a ``legacy.*`` flag, a gate or a
constant), the versions the evidence shows with each value, and the evidence itself: a
transcript under ``tests/data/cc-transcripts/`` (file and line), or a rule of ``specs/``.

A version inside a range the evidence covers gets that range's value. A version between ranges
(or outside them all) gets the value of the *nearest* version the evidence covers, and
:func:`version_basis` says so, row by row: "2.1.60 -> rows known up to 2.1.56 and from 2.1.88;
used 2.1.56". Versions are ordered as (major, minor, patch); the distance between two is the
difference of ``major * 10^6 + minor * 10^3 + patch``, so a version's own minor series is
nearer than another and a version newer than 2.1.88 gets 2.1.88's values.

``claude_code("2.1.88") == claude_code_2_1_88()``: the last range of every row is 2.1.88's own
value, so the 2.1.88 profile is exactly what it always was. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Final

import attrs

from steploop.reducer.config import LoopConfig, claude_code_2_1_88
from steploop.reducer.errors import ConfigError

__all__ = [
    "LATEST",
    "VERSION_ROWS",
    "Known",
    "VersionRow",
    "claude_code",
    "parse_version",
    "version_basis",
    "version_profile_name",
    "versions_markdown",
]

Version = tuple[int, int, int]

#: The version whose source the machine follows (the facts file, specs/rules.md).
LATEST: Final = "2.1.88"

_VERSION = re.compile(r"^\s*v?(\d{1,4})\.(\d{1,4})\.(\d{1,5})")


def parse_version(text: str) -> Version | None:
    """``"2.1.56"`` -> ``(2, 1, 56)``; a suffix (``-beta``) is ignored; None when unreadable."""
    if not isinstance(text, str):
        return None
    m = _VERSION.match(text)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def _text(v: Version) -> str:
    return ".".join(str(x) for x in v)


def _number(v: Version) -> int:
    return v[0] * 1_000_000 + v[1] * 1_000 + v[2]


def _distance(a: Version, b: Version) -> int:
    return abs(_number(a) - _number(b))


@attrs.frozen
class Known:
    """A range of versions the evidence shows with ``value`` (``first`` .. ``last``, both
    included), and the evidence."""

    first: str
    last: str
    value: Any
    evidence: str

    @property
    def lo(self) -> Version:
        v = parse_version(self.first)
        assert v is not None, self.first
        return v

    @property
    def hi(self) -> Version:
        v = parse_version(self.last)
        assert v is not None, self.last
        return v


@attrs.frozen
class VersionRow:
    """One behaviour that differs between versions: the config key it sets (the dotted
    spelling of :meth:`LoopConfig.with_overrides`), the rule in specs/ that says what it does,
    a one-line description, and the ranges of versions the evidence covers, oldest first (the
    last holds 2.1.88's own value)."""

    key: str
    rule: str
    what: str
    known: tuple[Known, ...]

    def pick(self, v: Version) -> tuple[Known, str | None]:
        """The range whose value version ``v`` gets, and None when ``v`` lies inside it, else
        how it was chosen (the nearest known version)."""
        for k in self.known:
            if k.lo <= v <= k.hi:
                return k, None
        best: tuple[int, int, Known, Version] | None = None
        for n, k in enumerate(self.known):
            for end in (k.lo, k.hi):
                d = _distance(v, end)
                # on a tie the newer range wins (its behaviour is the machine's own)
                if best is None or (d, -n) < (best[0], -best[1]):
                    best = (d, n, k, end)
        assert best is not None
        _, _, k, end = best
        edges = ", ".join(
            f"{kk.first}" if kk.first == kk.last else f"{kk.first}-{kk.last}" for kk in self.known
        )
        return k, f"{self.rule} {self.key} known for {edges}: used {_text(end)}"


VERSION_ROWS: Final[tuple[VersionRow, ...]] = (
    VersionRow(
        "legacy.stop_hooks_after_api_error",
        "VER-1",
        "the stop hooks run after an API-error message (2.1.88 skips them: G1)",
        (
            Known(
                "2.1.56",
                "2.1.56",
                True,
                "tests/data/cc-transcripts/erk/393e5f27-e608-4173-adcc-fcef1abcc750.jsonl:163-165 "
                "(an HTTP 500 API-error message, the Stop hook's progress, a stop_hook_summary; "
                "seven times in the file)",
            ),
            Known(
                "2.1.88", "2.1.88", False, "specs/rules.md G1 (facts section 4.3, completed (a))"
            ),
        ),
    ),
    VersionRow(
        "legacy.no_stop_hook_summary",
        "VER-2",
        "no stop_hook_summary record is written, not even after stop-hook feedback",
        (
            Known(
                "2.0.76",
                "2.0.76",
                False,
                "tests/data/cc-transcripts/fasthooks/sample_main_transcript.jsonl:8 (a "
                "stop_hook_summary after hooks that passed)",
            ),
            Known(
                "2.1.14",
                "2.1.14",
                True,
                "specs/import.md VER-2 (real 2.1.14 sessions: `Stop hook feedback:` records and "
                "no stop_hook_summary); tests/data/cc-transcripts/derived/stop_hook_feedback_2_1_14.jsonl",
            ),
            Known(
                "2.1.38",
                "2.1.88",
                False,
                "tests/data/cc-transcripts/spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl:1845 "
                "(2.1.39); tests/data/cc-transcripts/erk/52bc43f3-2f5f-46f5-b693-bedf4ffd23db.jsonl:13 "
                "(2.1.53); specs/rules.md R-HOOK-1",
            ),
        ),
    ),
    VersionRow(
        "legacy.context_count",
        "VER-3",
        "how the context is counted against the auto-compact threshold (R-TOK-1)",
        (
            Known(
                "2.0.67",
                "2.0.67",
                "last_usage",
                "tests/data/cc-transcripts/erk/8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl:566 "
                "(preTokens 159,652: the usage of the response at line 561, 159,533 tokens in, "
                "and its output; the 30,839-character tool result at line 564 is not counted)",
            ),
            Known(
                "2.1.38",
                "2.1.39",
                "estimate_from_last",
                "specs/import.md section 10 (tests/data/cc-transcripts/spotter/"
                "258c7280-ae70-4798-800f-63464d01a85d.jsonl: preTokens 167,094 = the usage of "
                "the response's last record, 167,060, plus the tool result after it, 34)",
            ),
            Known("2.1.88", "2.1.88", "estimate_from_first", "specs/rules.md R-TOK-1"),
        ),
    ),
    VersionRow(
        "summary_output_reserve",
        "VER-4",
        "the output reserve under the window: auto-compact at 200,000 - 32,000 - 13,000 = "
        "155,000 (2.0.x), at 200,000 - 20,000 - 13,000 = 167,000 (2.1.x)",
        (
            Known(
                "2.0.67",
                "2.0.67",
                32_000,
                "tests/data/cc-transcripts/erk/8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl:205, "
                ":332, :566 (auto compactions at preTokens 158,956, 155,654 and 159,652; the "
                "round before each counts below 155,000)",
            ),
            Known(
                "2.1.38",
                "2.1.88",
                20_000,
                "tests/data/cc-transcripts/spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl:1041-1256 "
                "(2.1.39: 19 model calls at 155,005 to 166,759 tokens in, then the auto "
                "compaction at preTokens 167,094); specs/rules.md R-CTX-1",
            ),
        ),
    ),
    VersionRow(
        "gates.streaming_tool_execution",
        "VER-5",
        "tools start while the response streams (the streaming executor)",
        (
            Known(
                "1.0.29",
                "2.0.76",
                False,
                "tests/data/cc-transcripts/erk/8ced4264-c1fc-40fa-b5d9-9e14af62fad0.jsonl, "
                "fasthooks/sample_main_transcript.jsonl, ccviewer/"
                "fe5e1c67-53e7-4862-81ae-d0e013e3270b.jsonl (2.0.67, 2.0.76, 1.0.98: no tool "
                "result between the records of one response, in 223 responses of several records)",
            ),
            Known(
                "2.1.38",
                "2.1.88",
                True,
                "tests/data/cc-transcripts/spotter/subagent.jsonl:22 (2.1.38: a block of a "
                "response written after a tool result of the same response); "
                "erk/393e5f27-e608-4173-adcc-fcef1abcc750.jsonl:159-161 (2.1.56); "
                "specs/rules.md R-TOOL-1",
            ),
        ),
    ),
    VersionRow(
        "legacy.api_errors_1_0",
        "VER-6",
        "API-error messages carry no `error` category; a usage limit is the API's own text",
        (
            Known(
                "1.0.80",
                "1.0.90",
                True,
                "specs/import.md VER-6 (real 1.0.8x sessions: `API Error: 502 …` with no "
                "`error` field, `Claude AI usage limit reached|<epoch>`); "
                "tests/data/cc-transcripts/derived/api_error_502_1_0.jsonl, "
                "derived/usage_limit_1_0.jsonl",
            ),
            Known(
                "2.1.56",
                "2.1.88",
                False,
                "tests/data/cc-transcripts/erk/393e5f27-e608-4173-adcc-fcef1abcc750.jsonl:163 "
                "(`error: unknown` on an HTTP 500 message); specs/rules.md R-CATEGORY-1",
            ),
        ),
    ),
)
"""The behaviours that differ between Claude Code versions, one row each (specs/profiles.md)."""


def _rows_for(v: Version) -> tuple[dict[str, Any], list[str]]:
    values: dict[str, Any] = {}
    notes: list[str] = []
    for row in VERSION_ROWS:
        k, note = row.pick(v)
        values[row.key] = k.value
        if note is not None:
            notes.append(note)
    return values, notes


def version_profile_name(version: str) -> str:
    """The profile name of a version (``claude_code_2_1_56``); 2.1.88's is its own profile's."""
    v = parse_version(version)
    if v is None:
        raise ConfigError(f"not a Claude Code version: {version!r} (expected MAJOR.MINOR.PATCH)")
    return "claude_code_" + "_".join(str(x) for x in v)


def claude_code(version: str, **overrides: Any) -> LoopConfig:
    """[P-VERSION-1] The profile of Claude Code ``version`` (``"2.1.56"``): the 2.1.88 profile
    with every row of :data:`VERSION_ROWS` set as that version had it (the nearest known
    version's value where the evidence does not cover it: :func:`version_basis`).

    Raises:
        ConfigError: ``version`` is not ``MAJOR.MINOR.PATCH``, or an override is invalid.
    """
    v = parse_version(version)
    if v is None:
        raise ConfigError(f"not a Claude Code version: {version!r} (expected MAJOR.MINOR.PATCH)")
    values, _ = _rows_for(v)
    base = claude_code_2_1_88()
    cfg = base.with_overrides(values)
    if cfg != base:
        cfg = attrs.evolve(cfg, profile_name=version_profile_name(version))
    return attrs.evolve(cfg, **overrides) if overrides else cfg


def version_basis(version: str | None) -> str:
    """How the profile of ``version`` was chosen, in one line: ``"2.1.39: every row known"``,
    or for each row the evidence does not cover, the nearest known version used."""
    v = parse_version(version) if version else None
    if v is None:
        return f"version {version!r} unreadable -> the {LATEST} profile"
    _, notes = _rows_for(v)
    if not notes:
        return f"{_text(v)}: every row known"
    return f"{_text(v)} -> " + "; ".join(notes)


def versions_markdown() -> str:
    """The version table of specs/profiles.md: every row, its ranges and their evidence."""
    lines = [
        "## Versions",
        "",
        "Generated by `steploop.reducer.versions.versions_markdown()` from `VERSION_ROWS`;",
        "`claude_code(version)` sets each key to the value of the range the version lies in, or of",
        "the nearest version the evidence covers (specs/import.md VER-0, P-VERSION-1).",
        "",
        "| rule | key | versions | value | evidence |",
        "|---|---|---|---|---|",
    ]
    for row in VERSION_ROWS:
        for k in row.known:
            span = k.first if k.first == k.last else f"{k.first} - {k.last}"
            lines.append(f"| {row.rule} | `{row.key}` | {span} | `{k.value!r}` | {k.evidence} |")
    lines.append("")
    for row in VERSION_ROWS:
        lines.append(f"- {row.rule} `{row.key}`: {row.what}.")
    return "\n".join(lines) + "\n"
