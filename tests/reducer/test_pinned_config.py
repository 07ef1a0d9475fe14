"""Behaviour an outside mutation run found unpinned (issue 27) in the config and the texts:
``profile_for()`` keeps a recorded run's own identity (``RUN_IDENTITY``: its model, fallback,
context window, output cap, query source and agent), and the API-error category of "prompt is
too long" under Claude Code's texts."""

from __future__ import annotations

import pytest

from steploop.reducer.config import (
    PROFILES,
    RUN_IDENTITY,
    claude_code_2_1_88,
    default,
    profile,
    profile_for,
)
from steploop.reducer.events import ModelCallFailed
from steploop.reducer.messages import AssistantMessage
from steploop.reducer.texts import error_category
from tests.reducer.driver import Driver

# a run unlike every profile in each of its identity fields
RUN = default().with_overrides(
    {
        "model": "claude-haiku-4-5-20251001",
        "fallback_model": "claude-sonnet-4-5",
        "context_window": 123_456,
        "max_output_tokens": 12_345,
        "query_source": "sdk",
        "agent_id": "agent-7",
    }
)


@pytest.mark.spec("P-RUN-1")
def test_run_identity_names_what_a_run_keeps() -> None:
    """RUN_IDENTITY is the run's model, fallback, window, output cap, query source and agent."""
    assert RUN_IDENTITY == (
        "model",
        "fallback_model",
        "context_window",
        "max_output_tokens",
        "query_source",
        "agent_id",
    )


@pytest.mark.spec("P-RUN-1")
@pytest.mark.parametrize("name", sorted(PROFILES))
def test_profile_for_keeps_the_runs_own_identity(name: str) -> None:
    """Each identity field comes from the run (its own context window among them), every
    other field from the named profile."""
    got = profile_for(name, RUN)
    base = profile(name)
    for key in RUN_IDENTITY:
        assert getattr(base, key) != getattr(RUN, key), key  # the run differs from the profile
        assert getattr(got, key) == getattr(RUN, key), key
    assert got.context_window == 123_456
    assert got.profile_name == base.profile_name and got.gates == base.gates
    assert got.compat == base.compat and got.texts == base.texts


@pytest.mark.spec("P-RUN-1")
def test_profile_for_a_run_under_its_own_profile_is_the_run() -> None:
    """Applying a run's own profile to it gives back the run's config."""
    assert profile_for("default", RUN) == RUN


@pytest.mark.spec("R-CATEGORY-1")
@pytest.mark.parametrize(
    ("kind", "status", "message"),
    [
        ("invalid_request", 400, "prompt is too long: 210000 tokens > 200000 maximum"),
        ("invalid_request", 400, "Prompt is too long"),
        ("unknown", None, "input length and `max_tokens` exceed context limit: prompt is too long"),
    ],
)
def test_prompt_is_too_long_is_an_invalid_request_whatever_the_kind(
    kind: str, status: int | None, message: str
) -> None:
    """The API's "prompt is too long" (any case) is Claude Code's ``invalid_request`` even
    when the failure was not classified as prompt_too_long."""
    assert error_category(kind, status, message) == "invalid_request"


@pytest.mark.spec("R-CATEGORY-1")
def test_an_invalid_request_saying_prompt_is_too_long_is_categorised_under_claude_codes_texts() -> None:
    """Under claude_code_2_1_88() the API-error message of a 400 whose words say "prompt is
    too long" carries ``invalid_request`` (the default profile's carries none)."""
    raw = "prompt is too long: 210000 tokens > 200000 maximum"
    for make, expected in ((claude_code_2_1_88, "invalid_request"), (default, None)):
        d = Driver(make())
        d.feed(ModelCallFailed(call_id=1, kind="invalid_request", status=400, message=raw))
        err = next(m for m in d.emitted() if isinstance(m, AssistantMessage) and m.api_error)
        assert err.api_error is not None and err.api_error.category == expected
