"""Config validation (specs/ P-CONFIG-2): every field and group is checked when the config is
built, and the ConfigError names the field by its dotted key."""

from __future__ import annotations

import typing
from typing import Any

import attrs
import pytest

from steploop.reducer import ConfigError, LoopConfig, claude_code_2_1_88, default, full, start
from steploop.reducer.config import PROFILES, Compat, Gates, RetryPolicy
from steploop.reducer.state import Request

GROUPS: dict[str, type] = {
    "": LoopConfig,
    "gates.": Gates,
    "compat.": Compat,
    "retry.": RetryPolicy,
}


def _wrong_values(hint: Any) -> list[Any]:
    """Values of the wrong type for a field annotated ``hint`` (never one the field accepts)."""
    args = typing.get_args(hint)
    optional = type(None) in args
    base = next((a for a in args if a is not type(None)), hint) if args else hint
    if typing.get_origin(hint) is typing.Literal:
        return ["forever", 1, None, ["turn"]]
    wrong: list[Any]
    if base is bool:
        wrong = ["false", "true", 1, 0, 1.0]
    elif base is int:
        wrong = [2.9, "3", True, False, [3]]
    elif base is str:
        wrong = [["x"], 42, True, b"x", ""]
    elif attrs.has(base):
        wrong = ["yes", 42, True, {}, attrs.asdict(base())]
    else:  # pragma: no cover - a new field type this test does not know
        raise AssertionError(f"no wrong values known for {hint!r}")
    if not optional:
        wrong.append(None)
    return wrong


def _cases() -> list[Any]:
    cases = []
    for prefix, cls in GROUPS.items():
        hints = typing.get_type_hints(cls)
        for f in attrs.fields(cls):
            for bad in _wrong_values(hints[f.name]):
                cases.append(pytest.param(prefix + f.name, bad, id=f"{prefix}{f.name}={bad!r}"))
    return cases


@pytest.mark.spec("P-CONFIG-2")
@pytest.mark.parametrize(("key", "bad"), _cases())
def test_every_field_refuses_a_wrong_type(key: str, bad: Any) -> None:
    """A wrong type for any field is a ConfigError naming the field, through the constructor
    and through with_overrides (the ``--set`` path), never a coercion or a later crash."""
    prefix, _, name = key.rpartition(".")
    cls = GROUPS[prefix + "." if prefix else ""]
    with pytest.raises(ConfigError) as direct:
        cls(**{name: bad})
    assert key in str(direct.value), str(direct.value)
    with pytest.raises(ConfigError) as via:
        default().with_overrides({key: bad})
    assert key in str(via.value), str(via.value)


@pytest.mark.spec("P-CONFIG-2")
@pytest.mark.parametrize(
    ("build", "names"),
    [
        pytest.param(lambda: default(gates="yes"), "gates", id="gates-str"),
        pytest.param(lambda: default(retry=None), "retry", id="retry-none"),
        pytest.param(lambda: default(compat=42), "compat", id="compat-int"),
        pytest.param(
            lambda: default(escalated_max_output_tokens=1),
            "escalated_max_output_tokens",
            id="escalation-lowers-cap",
        ),
        pytest.param(
            lambda: default(escalated_max_output_tokens=8_000),
            "escalated_max_output_tokens",
            id="escalation-equal-cap",
        ),
        pytest.param(
            lambda: default(retry=RetryPolicy(base_delay_ms=1_000, max_delay_ms=999)),
            "retry.max_delay_ms",
            id="max-delay-below-base",
        ),
        pytest.param(
            lambda: default().with_overrides({"retry.max_delay_ms": 100}),
            "retry.max_delay_ms",
            id="max-delay-below-base-override",
        ),
        pytest.param(
            lambda: default(blocking_buffer=500_000), "blocking_buffer", id="blocking-buffer"
        ),
        pytest.param(
            lambda: default(
                context_window=25_000, autocompact_buffer=0, snip_buffer=0, blocking_buffer=17_000
            ),
            "blocking_buffer",
            id="blocking-buffer-equal-window",
        ),
        pytest.param(lambda: default(collapse_commit_pct=101), "collapse_commit_pct", id="pct"),
        pytest.param(
            lambda: default(budget_completion_pct=0), "budget_completion_pct", id="pct-zero"
        ),
        pytest.param(lambda: default(max_turns=2.9), "max_turns", id="max-turns-float"),
        pytest.param(
            lambda: default().with_overrides({"gates.auto_compact": "false"}),
            "gates.auto_compact",
            id="bool-as-string",
        ),
        pytest.param(lambda: default(profile_name=["x"]), "profile_name", id="profile-list"),
        pytest.param(lambda: full(model=""), "model", id="empty-model"),
        pytest.param(
            lambda: claude_code_2_1_88(autocompact_breaker_scope=["turn"]),
            "autocompact_breaker_scope",
            id="scope-list",
        ),
    ],
)
def test_issue_cases_raise_config_error(build: Any, names: str) -> None:
    """The cases of issue #17: each was accepted (or raised AttributeError) before."""
    with pytest.raises(ConfigError) as e:
        build()
    assert names in str(e.value)


@pytest.mark.spec("P-CONFIG-2")
@pytest.mark.parametrize("name", list(PROFILES))
def test_profiles_and_their_round_trip_stay_valid(name: str) -> None:
    """Control: every profile builds, and rebuilding it field by field gives the same config."""
    cfg = PROFILES[name]()
    fields = {f.name: getattr(cfg, f.name) for f in attrs.fields(LoopConfig)}
    assert LoopConfig(**fields) == cfg
    assert default(escalated_max_output_tokens=8_001).escalated_max_output_tokens == 8_001
    assert RetryPolicy(base_delay_ms=700, max_delay_ms=700).delay_ms(3, None) == 700


@pytest.mark.spec("P-CONFIG-2")
def test_valid_config_runs_step() -> None:
    """Control: a config at the edge of every limit still starts a turn."""
    cfg = default(
        context_window=25_000,
        autocompact_buffer=16_999,
        blocking_buffer=16_999,
        collapse_commit_pct=100,
        budget_completion_pct=100,
    )
    state, fx = start(Request(prompt="go"), cfg)
    assert state.phase != "done"
    assert not any(type(e).__name__ == "Finish" for e in fx)
