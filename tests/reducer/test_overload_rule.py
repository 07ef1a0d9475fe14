"""Which models the "consecutive 529s" rule counts for (R-RETRY-6), each branch: every model
(steploop's default), first-party Opus models only (the 2.1.88 profile), and what a model that
is not counted gets instead (the ordinary retries up to the limit)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import ConfigError, LoopConfig, RetryPolicy, claude_code_2_1_88, default
from steploop.reducer.config import full
from steploop.reducer.effects import CallModel, Emit, Finish, Wait
from steploop.reducer.events import ModelCallFailed, WaitElapsed
from steploop.reducer.messages import AssistantMessage, SystemMessage
from steploop.reducer.transitions import Completed
from tests.reducer.driver import Driver

SONNET = "claude-sonnet-4-5"
OPUS = "claude-opus-4-6"
HAIKU = "claude-haiku-4-5"


def _overloads(d: Driver, n: int) -> list[Any]:
    """Fail the outstanding call with a 529 up to ``n`` times, letting each wait elapse;
    the effects of the last failure."""
    fx: tuple[Any, ...] = ()
    for _ in range(n):
        fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        waits = [e for e in fx if isinstance(e, Wait)]
        if not waits:
            break
        d.feed(WaitElapsed(wait_id=waits[0].wait_id))
    return list(fx)


def _calls(d: Driver) -> list[str]:
    return [c.model for c in d.of(CallModel)]


def _switched(d: Driver) -> bool:
    return any(isinstance(m, SystemMessage) and m.subtype == "model_fallback" for m in d.emitted())


@pytest.mark.spec("R-RETRY-6")
def test_the_2_1_88_profile_retries_a_sonnet_up_to_the_retry_limit() -> None:
    """2.1.88 with Sonnet and no fallback: 529s are ordinary retries, 11 calls, then give up."""
    d = Driver(claude_code_2_1_88(model=SONNET))
    fx = _overloads(d, 20)
    assert len(_calls(d)) == 11  # the first call and 10 retries
    assert len(d.of(Wait)) == 10
    assert isinstance(fx[-1], Finish) and fx[-1].terminal == Completed()
    errors = [
        e.item
        for e in fx
        if isinstance(e, Emit) and isinstance(e.item, AssistantMessage) and e.item.api_error
    ]
    assert [m.api_error.kind for m in errors if m.api_error] == ["overloaded"]


@pytest.mark.spec("R-RETRY-6")
def test_the_2_1_88_profile_never_falls_back_from_a_sonnet() -> None:
    """2.1.88 with Sonnet and a fallback model: 529s are not counted, so no fallback ever."""
    d = Driver(claude_code_2_1_88(model=SONNET, fallback_model=HAIKU))
    _overloads(d, 20)
    assert _calls(d) == [SONNET] * 11
    assert not _switched(d)


@pytest.mark.spec("R-RETRY-6")
@pytest.mark.parametrize("opus", ["claude-opus-4-6", "claude-opus-4-1-20250805", "Claude-Opus-4-5"])
def test_the_2_1_88_profile_counts_529s_for_an_opus(opus: str) -> None:
    """2.1.88 with a first-party Opus and no fallback: the third 529 gives up (3 calls)."""
    d = Driver(claude_code_2_1_88(model=opus))
    fx = _overloads(d, 20)
    assert len(_calls(d)) == 3
    assert isinstance(fx[-1], Finish) and fx[-1].terminal == Completed()


@pytest.mark.spec("R-RETRY-6")
def test_the_2_1_88_profile_falls_back_from_an_opus() -> None:
    """2.1.88 with an Opus and a fallback: the third 529 switches to the fallback."""
    d = Driver(claude_code_2_1_88(model=OPUS, fallback_model=SONNET))
    _overloads(d, 3)
    assert _calls(d) == [OPUS, OPUS, OPUS, SONNET]
    assert _switched(d)


@pytest.mark.spec("R-RETRY-6")
def test_on_a_sonnet_fallback_the_2_1_88_profile_stops_counting() -> None:
    """Once on a Sonnet fallback, the rule no longer counts: its 529s get the full retries."""
    d = Driver(claude_code_2_1_88(model=OPUS, fallback_model=SONNET))
    _overloads(d, 3)
    _overloads(d, 20)
    assert _calls(d)[:4] == [OPUS, OPUS, OPUS, SONNET]
    assert _calls(d)[3:] == [SONNET] * 11
    assert d.phase == "done"


@pytest.mark.spec("R-RETRY-6")
@pytest.mark.parametrize("model", ["my-opus-deployment", "claude-3-opus-20240229", "opus"])
def test_a_custom_or_older_opus_name_is_not_counted(model: str) -> None:
    """A name that is not a first-party claude-opus-* id is not counted: 11 calls."""
    d = Driver(claude_code_2_1_88(model=model))
    _overloads(d, 20)
    assert len(_calls(d)) == 11


@pytest.mark.spec("R-RETRY-6")
@pytest.mark.parametrize("make", [default, full], ids=["default", "full"])
def test_the_default_counts_every_model(make: Any) -> None:
    """The default profile counts 529s for every model (the FALLBACK_FOR_ALL_PRIMARY_MODELS
    reading); the full profile, for Opus only like 2.1.88."""
    cfg: LoopConfig = make(model=SONNET)
    d = Driver(cfg)
    _overloads(d, 20)
    assert len(_calls(d)) == (3 if make is default else 11)


@pytest.mark.spec("R-RETRY-6")
def test_the_scope_can_be_set_per_config() -> None:
    """retry.consecutive_529_models switches the rule: "all" on 2.1.88 counts a Sonnet too,
    "opus" on the default counts it no more."""
    cc_all = claude_code_2_1_88(model=SONNET).with_overrides(
        {"retry.consecutive_529_models": "all"}
    )
    d = Driver(cc_all)
    _overloads(d, 20)
    assert len(_calls(d)) == 3
    opus_only = attrs.evolve(default(), retry=RetryPolicy(consecutive_529_models="opus"))
    d = Driver(opus_only)
    _overloads(d, 20)
    assert len(_calls(d)) == 11


@pytest.mark.spec("R-RETRY-6", "P-CONFIG-2")
def test_the_scope_is_checked() -> None:
    """Only "all" and "opus" are accepted, naming the dotted key."""
    with pytest.raises(ConfigError, match=r"retry\.consecutive_529_models must be one of"):
        RetryPolicy(consecutive_529_models="sonnet")  # type: ignore[arg-type]


@pytest.mark.spec("R-RETRY-6")
def test_counts_529_predicate() -> None:
    """The predicate the machine asks, on its own."""
    every = RetryPolicy()
    opus = RetryPolicy(consecutive_529_models="opus")
    assert every.counts_529(SONNET) and every.counts_529("anything")
    assert opus.counts_529(OPUS) and opus.counts_529("claude-opus-4-20250514")
    assert not opus.counts_529(SONNET) and not opus.counts_529("claude-3-opus-20240229")
