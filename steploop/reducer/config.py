"""LoopConfig: one frozen snapshot of everything the machine reads (specs/ P-*, Q-*).

Three profiles (specs/profiles.md has the full table):

* :func:`default` -- the seed's semantics, every layer on, every guard tight, the reference's
  flaws fixed;
* :func:`claude_code_2_1_88` -- the shipped build: its gates and every compatibility flag on;
* :func:`full` -- the 2.1.88 build with every gate on (collapse on switches auto-compact off).

Earlier Claude Code versions are :func:`steploop.reducer.versions.claude_code` (one table of the
behaviours that differ by version, ``VERSION_ROWS``): the 2.1.88 profile with the ``legacy``
group and a few constants set as each version had them.

Invalid values raise :class:`steploop.reducer.ConfigError` when the config is built, never in step().
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

import attrs

from steploop.reducer.errors import ConfigError

__all__ = [
    "PROFILES",
    "Compat",
    "Gates",
    "Legacy",
    "LoopConfig",
    "RetryPolicy",
    "claude_code_2_1_88",
    "default",
    "full",
    "profile",
    "profile_for",
]


# Every message names the field as a dotted key (``retry.max_delay_ms``), the spelling
# ``--set`` and :meth:`LoopConfig.with_overrides` take.
_GROUP_PREFIX = {
    "Gates": "gates.",
    "Compat": "compat.",
    "Legacy": "legacy.",
    "RetryPolicy": "retry.",
}


def _key(inst: object, name: str) -> str:
    return _GROUP_PREFIX.get(type(inst).__name__, "") + name


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# [P-CONFIG-3] The largest value of each integer key: far above any real setting, far below
# what breaks arithmetic, a timer or a JSON reader (2**53). A key not listed has INT_LIMIT.
TOKEN_LIMIT = 100_000_000  # tokens: a hundred times the largest context window
COUNT_LIMIT = 1_000_000  # turns, retries, rounds, failures, resumes, continuations
MS_LIMIT = 365 * 24 * 3_600_000  # milliseconds: a year
INT_LIMIT = 1_000_000_000  # anything else (characters)
LIMITS: dict[str, tuple[int, str]] = {
    **{
        k: (TOKEN_LIMIT, "tokens")
        for k in (
            "context_window",
            "max_output_tokens",
            "capped_max_output_tokens",
            "escalated_max_output_tokens",
            "max_output_tokens_env_override",
            "summary_output_reserve",
            "autocompact_buffer",
            "blocking_buffer",
            "snip_buffer",
            "budget_diminishing_tokens",
            "thinking_budget",
            "overflow_safety_buffer",
            "floor_output_tokens",
        )
    },
    **{
        k: (COUNT_LIMIT, "a count")
        for k in (
            "max_turns",
            "max_autocompact_failures",
            "snip_keep_rounds",
            "collapse_keep_rounds",
            "microcompact_keep_recent",
            "mot_recovery_limit",
            "stop_hook_block_cap",
            "budget_min_continuations",
            "pause_turn_resumes",
            "retry.max_retries",
            "retry.max_consecutive_529",
        )
    },
    **{
        k: (MS_LIMIT, "milliseconds")
        for k in ("microcompact_gap_ms", "retry.base_delay_ms", "retry.max_delay_ms")
    },
}


def _bounded(inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    key = _key(inst, attr.name)
    limit, unit = LIMITS.get(key, (INT_LIMIT, "characters"))
    if value > limit:
        raise ConfigError(f"{key} must be at most {limit:,} ({unit}), got {value:,}")


def _positive(inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if not _is_int(value) or value <= 0:
        raise ConfigError(f"{_key(inst, attr.name)} must be a positive integer, got {value!r}")
    _bounded(inst, attr, value)


def _non_negative(inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if not _is_int(value) or value < 0:
        raise ConfigError(f"{_key(inst, attr.name)} must be a non-negative integer, got {value!r}")
    _bounded(inst, attr, value)


def _opt_positive(inst: object, attr: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None:
        _positive(inst, attr, value)


def _percent(inst: object, attr: attrs.Attribute[Any], value: int) -> None:
    if not _is_int(value) or not 0 < value <= 100:
        raise ConfigError(
            f"{_key(inst, attr.name)} must be an integer percentage in 1..100, got {value!r}"
        )


def _bool(inst: object, attr: attrs.Attribute[Any], value: bool) -> None:
    if not isinstance(value, bool):
        raise ConfigError(f"{_key(inst, attr.name)} must be true or false, got {value!r}")


def _name(inst: object, attr: attrs.Attribute[Any], value: str) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{_key(inst, attr.name)} must be a non-empty string, got {value!r}")


def _opt_name(inst: object, attr: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None:
        _name(inst, attr, value)


def _one_of(*choices: str) -> Any:
    def check(inst: object, attr: attrs.Attribute[Any], value: str) -> None:
        if not isinstance(value, str) or value not in choices:
            raise ConfigError(
                f"{_key(inst, attr.name)} must be one of "
                f"{', '.join(repr(c) for c in choices)}, got {value!r}"
            )

    return check


def _group(cls: type) -> Any:
    """A sub-config (gates, compat, retry) must be that group, not a bool, None or a dict."""

    def check(inst: object, attr: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, cls):
            raise ConfigError(
                f"{_key(inst, attr.name)} must be a {cls.__name__}, got "
                f"{type(value).__name__} {value!r:.60}"
            )

    return check


@attrs.frozen(kw_only=True)
class Gates:
    """Feature gates (specs/ P-GATE-*)."""

    streaming_tool_execution: bool = attrs.field(default=True, validator=_bool)
    tool_result_budget: bool = attrs.field(default=True, validator=_bool)
    history_snip: bool = attrs.field(default=True, validator=_bool)
    time_based_microcompact: bool = attrs.field(default=True, validator=_bool)
    context_collapse: bool = attrs.field(default=True, validator=_bool)
    auto_compact: bool = attrs.field(default=True, validator=_bool)
    reactive_compact: bool = attrs.field(default=True, validator=_bool)
    max_tokens_escalation: bool = attrs.field(default=True, validator=_bool)
    token_budget: bool = attrs.field(default=True, validator=_bool)
    tool_use_summaries: bool = attrs.field(default=False, validator=_bool)
    fallback_on_overload: bool = attrs.field(default=True, validator=_bool)
    # [R-REFRESH-1] off unless asked: a trace written before the gate existed replays without it
    tool_refresh: bool = attrs.field(default=False, validator=_bool)


@attrs.frozen(kw_only=True)
class Compat:
    """Compatibility flags: each reproduces one flaw of the reference (facts file section 11).

    All are off in the default machine and on in :func:`claude_code_2_1_88` (specs/ Q-1..Q-13).
    """

    reescalate_after_recovery: bool = attrs.field(default=False, validator=_bool)
    ignore_midstream_hook_stop: bool = attrs.field(default=False, validator=_bool)
    sticky_streaming_fallback: bool = attrs.field(default=False, validator=_bool)
    blocking_limit_with_auto_compact: bool = attrs.field(default=False, validator=_bool)
    out_of_order_safe_results: bool = attrs.field(default=False, validator=_bool)
    unyielded_nudges: bool = attrs.field(default=False, validator=_bool)
    no_tombstone_on_escalate: bool = attrs.field(default=False, validator=_bool)
    image_error_skips_orphan_repair: bool = attrs.field(default=False, validator=_bool)
    model_error_leaves_tools_running: bool = attrs.field(default=False, validator=_bool)
    summary_dropped_on_abort: bool = attrs.field(default=False, validator=_bool)
    stop_hook_active_cleared_by_recovery: bool = attrs.field(default=False, validator=_bool)
    nonsafe_tools_start_mid_stream: bool = attrs.field(default=False, validator=_bool)
    stop_hook_summary_last: bool = attrs.field(default=False, validator=_bool)
    nonstreaming_single_message: bool = attrs.field(default=False, validator=_bool)


#: How the context is counted against the thresholds (specs/ R-TOK-1, VER-3).
ContextCount = Literal["estimate_from_first", "estimate_from_last", "last_usage"]


@attrs.frozen(kw_only=True)
class Legacy:
    """Behaviours of Claude Code versions before 2.1.88 (specs/ VER-*, specs/profiles.md).

    Every field's default is the 2.1.88 behaviour, so every named profile leaves the group at
    its defaults; :func:`steploop.reducer.versions.claude_code` sets the fields a version had
    otherwise, from the one table ``VERSION_ROWS``.
    """

    # VER-1: an API-error message is followed by the stop hooks (2.1.88 skips them: G1)
    stop_hooks_after_api_error: bool = attrs.field(default=False, validator=_bool)
    # VER-2: no stop_hook_summary record is written, whatever the hooks did
    no_stop_hook_summary: bool = attrs.field(default=False, validator=_bool)
    # VER-3: the context count (R-TOK-1): anchored at the last response's first record
    # (2.1.88), at its last record, or its usage alone (nothing estimated after it)
    context_count: ContextCount = attrs.field(
        default="estimate_from_first",
        validator=_one_of("estimate_from_first", "estimate_from_last", "last_usage"),
    )
    # VER-6: API-error messages carry no `error` category, and a usage-limit error is the
    # API's own text (`Claude AI usage limit reached|<epoch>`), not `API Error: ...`
    api_errors_1_0: bool = attrs.field(default=False, validator=_bool)


@attrs.frozen(kw_only=True)
class RetryPolicy:
    """API retries (specs/ R-RETRY-*). Backoff is deterministic: no jitter."""

    max_retries: int = attrs.field(default=10, validator=_non_negative)
    base_delay_ms: int = attrs.field(default=500, validator=_positive)
    max_delay_ms: int = attrs.field(default=32_000, validator=_positive)
    max_consecutive_529: int = attrs.field(default=3, validator=_positive)
    # [R-RETRY-6] which models the consecutive-529 limit counts for: "all" (steploop's
    # default: the reference with FALLBACK_FOR_ALL_PRIMARY_MODELS set) or "opus" (the
    # reference without it, for an API-key user: first-party Opus models only)
    consecutive_529_models: Literal["all", "opus"] = attrs.field(
        default="all", validator=_one_of("all", "opus")
    )

    def __attrs_post_init__(self) -> None:
        if self.max_delay_ms < self.base_delay_ms:
            raise ConfigError(
                f"retry.max_delay_ms {self.max_delay_ms} is below retry.base_delay_ms "
                f"{self.base_delay_ms}: the backoff cap would shorten the first delay"
            )

    def counts_529(self, model: str) -> bool:
        """[R-RETRY-6] Whether consecutive 529s of calls to ``model`` count toward
        ``max_consecutive_529``: every model, or under "opus" a first-party Opus id
        (``claude-opus-*``; a custom name or a Claude 3 Opus is not one)."""
        return self.consecutive_529_models == "all" or model.lower().startswith("claude-opus-")

    def delay_ms(self, attempt: int, retry_after_ms: int | None) -> int:
        """Delay before retry ``attempt`` (1-based): retry-after wins, else 500*2^(n-1) capped."""
        if retry_after_ms is not None:
            return max(0, retry_after_ms)
        return min(self.base_delay_ms * (1 << min(attempt - 1, 30)), self.max_delay_ms)


QUERY_SOURCES_NO_AUTOCOMPACT = frozenset({"compact", "session_memory", "marble_origami"})
QUERY_SOURCES_NO_BLOCKING = frozenset({"compact", "session_memory"})


@attrs.frozen(kw_only=True)
class LoopConfig:
    """Everything step() reads besides the state and the event. Build once, never mutate."""

    profile_name: str = attrs.field(default="default", validator=_name)
    model: str = attrs.field(default="claude-sonnet-4-5", validator=_name)
    fallback_model: str | None = attrs.field(default=None, validator=_opt_name)
    context_window: int = attrs.field(default=200_000, validator=_positive)
    max_output_tokens: int = attrs.field(default=32_000, validator=_positive)
    capped_max_output_tokens: int = attrs.field(default=8_000, validator=_positive)
    escalated_max_output_tokens: int = attrs.field(default=64_000, validator=_positive)
    max_output_tokens_env_override: int | None = attrs.field(default=None, validator=_opt_positive)
    max_turns: int | None = attrs.field(default=None, validator=_opt_positive)
    query_source: str = attrs.field(default="repl_main_thread", validator=_name)
    agent_id: str | None = attrs.field(default=None, validator=_opt_name)
    # context thresholds (R-CTX-*)
    summary_output_reserve: int = attrs.field(default=20_000, validator=_non_negative)
    autocompact_buffer: int = attrs.field(default=13_000, validator=_non_negative)
    blocking_buffer: int = attrs.field(default=3_000, validator=_non_negative)
    max_autocompact_failures: int = attrs.field(default=3, validator=_positive)
    autocompact_breaker_scope: Literal["turn", "session"] = attrs.field(
        default="session", validator=_one_of("turn", "session")
    )
    snip_buffer: int = attrs.field(default=20_000, validator=_non_negative)
    snip_keep_rounds: int = attrs.field(default=4, validator=_positive)
    collapse_commit_pct: int = attrs.field(default=90, validator=_percent)
    collapse_keep_rounds: int = attrs.field(default=2, validator=_positive)
    microcompact_gap_ms: int = attrs.field(default=60 * 60 * 1000, validator=_positive)
    microcompact_keep_recent: int = attrs.field(default=5, validator=_positive)
    default_max_result_chars: int = attrs.field(default=50_000, validator=_positive)
    per_message_result_chars: int = attrs.field(default=200_000, validator=_positive)
    preview_chars: int = attrs.field(default=2_000, validator=_positive)
    # recovery and hooks
    mot_recovery_limit: int = attrs.field(default=3, validator=_non_negative)
    stop_hook_block_cap: int | None = attrs.field(default=8, validator=_opt_positive)
    strip_signatures_on_fallback: bool = attrs.field(default=True, validator=_bool)
    collapse_disables_auto_compact: bool = attrs.field(default=False, validator=_bool)
    # token budget (R-BUDGET-*)
    budget_completion_pct: int = attrs.field(default=90, validator=_percent)
    budget_diminishing_tokens: int = attrs.field(default=500, validator=_non_negative)
    budget_min_continuations: int = attrs.field(default=3, validator=_non_negative)
    # fidelity to the API and to Claude Code's own texts (specs/ R-OVERFLOW-1, R-REFUSAL-1,
    # S-PAUSE-1, R-TEXTS-1)
    texts: Literal["steploop", "claude_code"] = attrs.field(
        default="steploop", validator=_one_of("steploop", "claude_code")
    )
    non_interactive: bool = attrs.field(default=False, validator=_bool)
    pause_turn_resumes: int = attrs.field(default=5, validator=_non_negative)
    thinking_budget: int | None = attrs.field(default=None, validator=_opt_positive)
    overflow_safety_buffer: int = attrs.field(default=1_000, validator=_non_negative)
    floor_output_tokens: int = attrs.field(default=3_000, validator=_positive)
    retry: RetryPolicy = attrs.field(factory=RetryPolicy, validator=_group(RetryPolicy))
    gates: Gates = attrs.field(factory=Gates, validator=_group(Gates))
    compat: Compat = attrs.field(factory=Compat, validator=_group(Compat))
    legacy: Legacy = attrs.field(factory=Legacy, validator=_group(Legacy))

    def __attrs_post_init__(self) -> None:
        # the field validators ran first, so every value here has its type
        cap = min(self.max_output_tokens, self.capped_max_output_tokens)
        if self.escalated_max_output_tokens <= cap:
            raise ConfigError(
                f"escalated_max_output_tokens {self.escalated_max_output_tokens} must be above "
                f"the capped default {cap} (min of max_output_tokens and "
                "capped_max_output_tokens): escalation may only raise the cap"
            )
        if self.effective_window <= self.autocompact_buffer:
            raise ConfigError(
                f"context_window {self.context_window} leaves no room: effective window "
                f"{self.effective_window} <= autocompact_buffer {self.autocompact_buffer}"
            )
        if self.effective_window <= self.blocking_buffer:
            raise ConfigError(
                f"blocking_buffer {self.blocking_buffer} is not below the effective window "
                f"{self.effective_window} (context_window {self.context_window}): every turn "
                "would end at the blocking limit before any model call"
            )
        if self.fallback_model is not None and self.fallback_model == self.model:
            raise ConfigError(f"fallback_model must differ from model {self.model!r}")

    # --- derived thresholds (R-CTX-1) ---------------------------------------------------------
    # Computed once per config (step() reads them on every round); not fields, so they are
    # neither serialized nor compared.

    @functools.cached_property
    def default_max_tokens(self) -> int:
        """max_tokens for a call with no override: env override, else capped default, else
        the model default (reference getMaxOutputTokensForModel)."""
        if self.max_output_tokens_env_override is not None:
            return self.max_output_tokens_env_override
        if self.gates.max_tokens_escalation:
            return min(self.max_output_tokens, self.capped_max_output_tokens)
        return self.max_output_tokens

    @functools.cached_property
    def effective_window(self) -> int:
        return self.context_window - min(self.default_max_tokens, self.summary_output_reserve)

    @functools.cached_property
    def autocompact_threshold(self) -> int:
        return self.effective_window - self.autocompact_buffer

    @functools.cached_property
    def blocking_limit(self) -> int:
        return self.effective_window - self.blocking_buffer

    @functools.cached_property
    def snip_threshold(self) -> int:
        return self.effective_window - self.snip_buffer

    @functools.cached_property
    def collapse_threshold(self) -> int:
        return self.effective_window * self.collapse_commit_pct // 100

    @functools.cached_property
    def auto_compact_enabled(self) -> bool:
        """Auto-compact runs: gate on, not a recursion-prone source (G8), and not in the
        reference's collapse-owns-it configuration (the full profile, P-FULL-1)."""
        if not self.gates.auto_compact or self.query_source in QUERY_SOURCES_NO_AUTOCOMPACT:
            return False
        return not (self.gates.context_collapse and self.collapse_disables_auto_compact)

    @functools.cached_property
    def media_recovery_enabled(self) -> bool:
        return self.gates.reactive_compact

    @functools.cached_property
    def is_subagent(self) -> bool:
        return self.agent_id is not None or self.query_source.startswith("agent:")

    def with_overrides(self, overrides: dict[str, Any]) -> LoopConfig:
        """A copy with dotted keys replaced (``{"gates.reactive_compact": False}``).

        Raises:
            ConfigError: an unknown key, or a value the field rejects.
        """
        cfg: LoopConfig = self
        for key, value in overrides.items():
            cfg = _set_path(cfg, key.split("."), value, key)
        return cfg


def _set_path(obj: Any, path: list[str], value: Any, full: str) -> Any:
    names = {f.name: f for f in attrs.fields(type(obj))}
    head = path[0]
    if head not in names:
        raise ConfigError(
            f"unknown config key {full!r}; {type(obj).__name__} has: {', '.join(sorted(names))}"
        )
    if len(path) > 1:
        child = getattr(obj, head)
        if not attrs.has(type(child)):
            raise ConfigError(f"config key {full!r}: {head!r} has no sub-keys")
        value = _set_path(child, path[1:], value, full)
    elif attrs.has(type(getattr(obj, head))):
        raise ConfigError(f"config key {full!r} is a group; set one of its keys")
    try:
        return attrs.evolve(obj, **{head: value})
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:
        raise ConfigError(f"config key {full!r}: {e}") from None


def default(**overrides: Any) -> LoopConfig:
    """The default machine: the seed's semantics with every guard tight."""
    return LoopConfig(**overrides)


def claude_code_2_1_88(**overrides: Any) -> LoopConfig:
    """The shipped Claude Code 2.1.88 build: its gates, its constants, every quirk on."""
    base = LoopConfig(
        profile_name="claude_code_2_1_88",
        gates=Gates(
            history_snip=False,
            time_based_microcompact=False,
            context_collapse=False,
            reactive_compact=False,
            max_tokens_escalation=False,
            tool_use_summaries=False,
            tool_refresh=True,
        ),
        compat=Compat(**{f.name: True for f in attrs.fields(Compat)}),
        autocompact_breaker_scope="turn",
        stop_hook_block_cap=None,
        strip_signatures_on_fallback=False,
        collapse_disables_auto_compact=True,
        texts="claude_code",  # [R-TEXTS-1]
        pause_turn_resumes=0,  # [S-PAUSE-1] pause_turn is treated as end_turn
        retry=RetryPolicy(consecutive_529_models="opus"),  # [R-RETRY-6]
    )
    return attrs.evolve(base, **overrides) if overrides else base


def full(**overrides: Any) -> LoopConfig:
    """The 2.1.88 build with every gate on; collapse then owns overflow (no auto-compact)."""
    base = claude_code_2_1_88()
    base = attrs.evolve(
        base,
        profile_name="full",
        gates=Gates(tool_use_summaries=True, tool_refresh=True),
    )
    return attrs.evolve(base, **overrides) if overrides else base


PROFILES = {"default": default, "claude_code_2_1_88": claude_code_2_1_88, "full": full}


def profile(name: str) -> LoopConfig:
    """The named profile, or a Claude Code version's (``claude_code_2_1_56``, the name
    :func:`steploop.reducer.versions.claude_code` gives it). Raises ConfigError for an unknown
    name."""
    make = PROFILES.get(name)
    if make is not None:
        return make()
    m = _VERSION_NAME.match(name) if isinstance(name, str) else None
    if m is not None:
        from steploop.reducer.versions import claude_code

        return claude_code(".".join(m.groups()))
    raise ConfigError(
        f"unknown profile {name!r}; choose one of {', '.join(PROFILES)}, or a Claude Code "
        "version as claude_code_MAJOR_MINOR_PATCH (claude_code_2_1_56)"
    )


_VERSION_NAME = re.compile(r"^claude_code_(\d{1,4})_(\d{1,4})_(\d{1,5})$")


#: What belongs to a run rather than to a machine: kept when a profile is applied to it.
RUN_IDENTITY: tuple[str, ...] = (
    "model",
    "fallback_model",
    "context_window",
    "max_output_tokens",
    "query_source",
    "agent_id",
)


def profile_for(name: str, run: LoopConfig) -> LoopConfig:
    """[P-RUN-1] The named profile's machine for a recorded run: its gates, flags and
    constants, with the run's own model, fallback, window, output cap, query source and agent."""
    return attrs.evolve(profile(name), **{k: getattr(run, k) for k in RUN_IDENTITY})


def profiles_markdown() -> str:
    """The table of every gate, constant and compatibility flag per profile (specs/profiles.md)."""
    cfgs = {name: make() for name, make in PROFILES.items()}
    names = list(cfgs)
    lines = [
        "# Profiles",
        "",
        "Generated by `steploop.reducer.config.profiles_markdown()`; `tests/reducer/test_profiles_table.py`",
        "fails when this file and the code disagree. Rules: P-DEFAULT-1, P-CC-1, P-FULL-1,",
        "P-VERSION-1; the `legacy` group is set only by `claude_code(version)` (Versions, below).",
        "",
        "| key | " + " | ".join(f"`{n}`" for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]

    def rows(prefix: str, objs: dict[str, Any]) -> None:
        first = next(iter(objs.values()))
        for f in attrs.fields(type(first)):
            vals = [getattr(o, f.name) for o in objs.values()]
            if attrs.has(type(vals[0])):
                rows(f"{prefix}{f.name}.", {n: getattr(o, f.name) for n, o in objs.items()})
                continue
            cells = " | ".join(f"`{v!r}`" for v in vals)
            lines.append(f"| `{prefix}{f.name}` | {cells} |")

    rows("", cfgs)
    derived = (
        "default_max_tokens",
        "effective_window",
        "autocompact_threshold",
        "blocking_limit",
        "snip_threshold",
        "collapse_threshold",
        "auto_compact_enabled",
    )
    lines.append("")
    lines.append("Derived thresholds (R-CTX-1):")
    lines.append("")
    lines.append("| value | " + " | ".join(f"`{n}`" for n in names) + " |")
    lines.append("|---|" + "---|" * len(names))
    for d in derived:
        lines.append(
            f"| `{d}` | " + " | ".join(f"`{getattr(c, d)!r}`" for c in cfgs.values()) + " |"
        )
    lines += _fidelity_rows()
    from steploop.reducer.versions import versions_markdown  # imports this module: loaded here

    return "\n".join(lines) + "\n\n" + versions_markdown()


def _fidelity_rows() -> list[str]:
    """The rules of API fidelity and the keys they read (specs/ R-OVERFLOW-1 ... R-CATEGORY-1)."""
    return [
        "",
        "Rules that read these keys (API fidelity): R-OVERFLOW-1 (`overflow_safety_buffer`,",
        "`floor_output_tokens`, `thinking_budget`; every profile), R-THINK-1 (`thinking_budget`,",
        "the one thinking budget: every model call carries it), R-REFUSAL-1 (`texts`,",
        "`non_interactive`; every profile), S-PAUSE-1 (`pause_turn_resumes`: 0 is the reference's",
        "pause_turn-as-end_turn), R-TEXTS-1 and R-CATEGORY-1 (`texts`), R-BLOCK-1/2 (no key:",
        "every profile keeps and resends every content block).",
    ]
