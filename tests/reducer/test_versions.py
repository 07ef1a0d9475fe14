"""Claude Code's versions: the table VERSION_ROWS, claude_code(version), and each row's effect on
the machine (specs/ P-VERSION-1, VER-1..VER-6, R-MODEL-2, Q-14)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from steploop.reducer import (
    ConfigError,
    LoopConfig,
    Request,
    Session,
    claude_code,
    claude_code_2_1_88,
    profile,
    version_basis,
)
from steploop.reducer import versions as V
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import AskPermission, CallModel, Compact, RunStopHooks
from steploop.reducer.events import ModelBlockReceived, ModelCallFailed, StopHooksFinished
from steploop.reducer.machine import begin
from steploop.reducer.machine.helpers import count
from steploop.reducer.messages import (
    AssistantMessage,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.testing import LoopMachine, ci_settings, configs
from tests.reducer.driver import SAFE, UNSAFE, Driver

ROOT = Path(__file__).resolve().parents[2]
SPEC_IDS = set(
    re.findall(
        r"^### (\S+) ·",
        "".join((ROOT / "specs" / n).read_text("utf-8") for n in ("rules.md", "import.md")),
        re.M,
    )
)


# --- the table and claude_code(version) -----------------------------------------------------------


@pytest.mark.spec("P-VERSION-1")
def test_the_2_1_88_profile_is_its_own_version() -> None:
    """claude_code("2.1.88") is exactly the shipped profile; a version past it gets its values."""
    assert claude_code("2.1.88") == claude_code_2_1_88()
    assert claude_code("2.3.0") == claude_code_2_1_88()
    assert version_basis("2.1.88") == "2.1.88: every row known"


@pytest.mark.spec("P-VERSION-1")
@pytest.mark.parametrize(
    ("row", "known"),
    [(row, k) for row in V.VERSION_ROWS for k in row.known],
    ids=lambda x: getattr(x, "rule", None) or f"{getattr(x, 'first', '')}",
)
def test_every_row_sets_its_key_in_every_range_it_knows(row: V.VersionRow, known: V.Known) -> None:
    """Both ends of every range of every row get the range's value, and the evidence a range
    names exists: a shipped transcript (its cited lines inside the file) or a rule of specs/."""
    for version in (known.first, known.last):
        cfg = claude_code(version)
        value: Any = cfg
        for part in row.key.split("."):
            value = getattr(value, part)
        assert value == known.value, (row.key, version)
        assert row.pick(V.parse_version(version) or (0, 0, 0)) == (known, None)
    files = re.findall(r"([\w./-]+\.jsonl)(?::(\d+))?", known.evidence)
    rules = re.findall(r"\b([A-Z]+-\d+|G\d+|R-[A-Z]+-\d+)\b", known.evidence)
    assert files or rules, known.evidence
    base = ROOT / "tests" / "data" / "cc-transcripts"
    for name, line in files:
        path = ROOT / name if name.startswith("tests/") else base / name
        assert path.is_file(), name
        if line:
            assert int(line) <= len(path.read_text("utf-8").splitlines()), (name, line)
    for rule in rules:
        assert rule in SPEC_IDS, rule
    assert row.rule in SPEC_IDS


@pytest.mark.spec("P-VERSION-1")
def test_a_version_the_evidence_does_not_cover_takes_the_nearest_and_says_so() -> None:
    """2.1.60 lies between 2.1.56 (stop hooks after API errors) and 2.1.88 (none): the nearer,
    2.1.56, applies, and the basis names the row and the version used."""
    cfg = claude_code("2.1.60")
    assert cfg.legacy.stop_hooks_after_api_error is True
    assert cfg.profile_name == "claude_code_2_1_60"
    basis = version_basis("2.1.60")
    assert basis.startswith("2.1.60 -> ")
    assert "VER-1 legacy.stop_hooks_after_api_error known for 2.1.56, 2.1.88: used 2.1.56" in basis
    # 2.1.80 is nearer 2.1.88
    assert claude_code("2.1.80").legacy.stop_hooks_after_api_error is False
    assert "used 2.1.88" in version_basis("2.1.80")
    assert version_basis("banana") == "version 'banana' unreadable -> the 2.1.88 profile"


@pytest.mark.spec("P-VERSION-1")
def test_version_names_and_errors() -> None:
    """profile() takes a version's profile name; an unreadable version is a ConfigError."""
    assert profile("claude_code_2_1_56") == claude_code("2.1.56")
    assert profile("claude_code_2_1_88") == claude_code_2_1_88()
    assert V.parse_version("2.0.0-beta.1") == (2, 0, 0)
    with pytest.raises(ConfigError, match="not a Claude Code version"):
        claude_code("2.1")
    with pytest.raises(ConfigError, match="claude_code_MAJOR_MINOR_PATCH"):
        profile("claude_code_2_1")
    assert claude_code("2.1.56", model="claude-haiku-4-5").model == "claude-haiku-4-5"


# --- what each row does to the machine ------------------------------------------------------------


def _api_error_turn(cfg: LoopConfig) -> Driver:
    d = Driver(cfg)
    d.feed(
        ModelCallFailed(call_id=d.call_id, kind="invalid_request", message="400 bad", status=400)
    )
    return d


def _stop_hooks_after_error(cfg: LoopConfig) -> bool:
    return bool(_api_error_turn(cfg).of(RunStopHooks))


def _summary_after_feedback(cfg: LoopConfig) -> bool:
    d = Driver(cfg)
    d.reply("done")
    d.feed(
        StopHooksFinished(
            hooks_id=d.state.round.pending_id, blocking_errors=("tests fail",), hook_count=1
        )
    )
    return any(
        isinstance(m, SystemMessage) and m.subtype == "stop_hook_summary" for m in d.emitted()
    )


def _history() -> Session:
    """A response of two records (usage 1,000 on each), then a 4,000-character tool result."""
    u = Usage(input_tokens=990, output_tokens=10)
    a1 = AssistantMessage(
        id="a1", response_id="r1", model="m", content=(TextBlock(text="x" * 400),), usage=u
    )
    a2 = AssistantMessage(
        id="a2",
        response_id="r1",
        model="m",
        content=(ToolUseBlock(id="t1", name="Read", input={"file_path": "/a"}),),
        usage=u,
    )
    res = UserMessage(
        id="u2",
        content=(ToolResultBlock(tool_use_id="t1", content="y" * 4_000),),
        origin="tool_result",
    )
    prompt = UserMessage(id="u1", content=(TextBlock(text="go"),), origin="prompt")
    return Session(conversation=Conversation.of([prompt, a1, a2, res]))


def _count_at_start(cfg: LoopConfig) -> int:
    s, _, _ = begin(Request(prompt="next"), cfg, _history())
    return count(s, cfg)


def _compacts_at_160k(cfg: LoopConfig) -> bool:
    """A session whose last response counted 160,000 tokens and nothing after it."""
    a = AssistantMessage(
        id="a1",
        response_id="r1",
        model="m",
        content=(TextBlock(text="ok"),),
        usage=Usage(input_tokens=159_990, output_tokens=10),
    )
    session = Session(conversation=Conversation.of([a]))
    _, fx, _ = begin(Request(prompt="next"), cfg, session)
    return any(isinstance(e, Compact) for e in fx)


def _tool_starts_mid_stream(cfg: LoopConfig) -> bool:
    d = Driver(cfg)
    d.tool_use("t1", "Read", SAFE, file_path="/a")
    return bool(d.of(AskPermission))


def _error_field(cfg: LoopConfig) -> str | None:
    (err,) = [
        m for m in _api_error_turn(cfg).emitted() if isinstance(m, AssistantMessage) and m.api_error
    ]
    assert err.api_error is not None
    return err.api_error.category


#: rule -> (what the machine does under a config, {the row's value: what it does then})
ROW_CHECKS: dict[str, tuple[Callable[[LoopConfig], object], dict[object, object]]] = {
    "VER-1": (_stop_hooks_after_error, {True: True, False: False}),
    "VER-2": (_summary_after_feedback, {True: False, False: True}),
    # usage 1,000; the second record's tool_use 6, the result 1,000, the new prompt 1
    "VER-3": (
        _count_at_start,
        {"estimate_from_first": 2_007, "estimate_from_last": 2_001, "last_usage": 1_000},
    ),
    "VER-4": (_compacts_at_160k, {32_000: True, 20_000: False}),
    "VER-5": (_tool_starts_mid_stream, {False: False, True: True}),
    "VER-6": (_error_field, {True: "", False: "unknown"}),
}


def test_every_row_has_a_check() -> None:
    """A row added to VERSION_ROWS needs its check here (its rule, its values)."""
    assert sorted(ROW_CHECKS) == sorted(row.rule for row in V.VERSION_ROWS)
    for row in V.VERSION_ROWS:
        assert {k.value for k in row.known} <= set(ROW_CHECKS[row.rule][1]), row.rule


@pytest.mark.spec("VER-1", "VER-2", "VER-3", "VER-4", "VER-5", "VER-6", "P-VERSION-1")
@pytest.mark.parametrize("row", V.VERSION_ROWS, ids=lambda r: r.rule)
def test_each_row_changes_what_the_machine_does_and_removing_it_undoes_that(
    row: V.VersionRow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each range of the row, the profile of its first version does what the row's value
    does (the evidence: the range's own); without the row, a version of the oldest range that
    differs from 2.1.88 does what 2.1.88 does, so the outcome changes."""
    observe, expected = ROW_CHECKS[row.rule]
    outcomes = {k.value: observe(claude_code(k.first)) for k in row.known}
    for k in row.known:
        assert outcomes[k.value] == expected[k.value], (row.rule, k.first, k.evidence)
    assert len(set(map(repr, outcomes.values()))) == len(outcomes)  # each value matters
    latest = row.known[-1].value
    old = next(k for k in row.known if k.value != latest)
    monkeypatch.setattr(V, "VERSION_ROWS", tuple(r for r in V.VERSION_ROWS if r is not row))
    assert observe(claude_code(old.first)) == expected[latest] != expected[old.value]


# --- VER-1 in full: the hooks run on the conversation with the error, and may block ----------------


@pytest.mark.spec("VER-1", "G1")
def test_stop_hooks_after_an_api_error_see_it_and_may_block() -> None:
    """Under 2.1.56 the API error is committed before the hooks run (their conversation ends with
    it); a blocking hook sends its feedback and the loop calls the model again."""
    d = _api_error_turn(claude_code("2.1.56"))
    (hooks,) = d.of(RunStopHooks)
    last = hooks.conversation.messages()[-1]
    assert isinstance(last, AssistantMessage) and last.api_error is not None
    d.feed(StopHooksFinished(hooks_id=d.state.round.pending_id, blocking_errors=("retry",)))
    assert d.phase == "streaming" and len(d.of(CallModel)) == 2
    msgs = d.state.conversation.messages()
    assert sum(1 for m in msgs if isinstance(m, AssistantMessage) and m.api_error) == 1
    d2 = _api_error_turn(claude_code("2.1.56"))
    d2.hooks_pass()
    assert d2.finished() is not None and d2.transition.TAG == "completed"
    assert d2.state.conversation.messages()[-1] == last


# --- R-MODEL-2: a tool that switches the model ------------------------------------------------------


@pytest.mark.spec("R-MODEL-2")
@pytest.mark.parametrize(("traits", "switched"), [(UNSAFE, True), (SAFE, False)])
def test_a_tool_result_with_a_model_switches_the_main_loop_for_the_rest_of_the_turn(
    traits: Any, switched: bool
) -> None:
    """A Skill's result naming a model: every later call of the turn asks for it (a
    concurrency-safe tool's modifier is not applied); the next turn starts on the configured
    model again."""
    cfg = claude_code_2_1_88()
    d = Driver(cfg)
    d.tool_use("t1", "Skill", traits, skill="x")
    d.end("tool_use")
    d.allow("t1")
    d.finish_tool("t1", "Launching skill: x", model="claude-haiku-4-5")
    want = "claude-haiku-4-5" if switched else cfg.model
    assert d.of(CallModel)[-1].model == want
    d.reply("done")
    emitted = [m for m in d.emitted() if isinstance(m, AssistantMessage)]
    assert emitted[-1].model == want
    d.hooks_pass()
    nxt = Driver(cfg, "again", session=d.state.session())
    assert nxt.of(CallModel)[-1].model == cfg.model


# --- a non-streaming answer is one message ---------------------------------------------------


@pytest.mark.spec("Q-14", "R-RETRY-5", "Q-3")
@pytest.mark.parametrize("flag", [True, False])
def test_a_non_streaming_answer_is_one_message(flag: bool) -> None:
    """After a broken stream the call is made again without streaming; its blocks form one
    message under Q-14 (the earlier partial message tombstoned, its tool still runs); without
    the flag each block is its own message (and Q-3 drops the blocks before the last)."""
    cfg = claude_code_2_1_88().with_overrides({"compat.nonstreaming_single_message": flag})
    d = Driver(cfg)
    d.feed(ModelCallFailed(call_id=d.call_id, kind="stream_broken"))
    assert d.of(CallModel)[-1].streaming is False
    d.text("let me look")
    d.tool_use("t1", "Read", SAFE, file_path="/a")
    d.end("tool_use")
    d.allow("t1")
    d.finish_tool("t1", "contents")
    stored = [m for m in d.state.conversation.messages() if isinstance(m, AssistantMessage)]
    if flag:
        assert len(stored) == 1 and [type(b).__name__ for b in stored[0].content] == [
            "TextBlock",
            "ToolUseBlock",
        ]
    else:
        assert [type(b).__name__ for m in stored for b in m.content] == ["ToolUseBlock"]
    assert d.phase == "streaming"  # the tool ran and the next round began


def test_the_block_event_takes_the_served_model() -> None:
    """A block that names its serving model is recorded with it (R-MODEL-1)."""
    d = Driver(claude_code_2_1_88())
    d.feed(ModelBlockReceived(call_id=d.call_id, block=TextBlock(text="hi"), model="claude-x"))
    (m,) = [x for x in d.emitted() if isinstance(x, AssistantMessage)]
    assert m.model == "claude-x"


class LegacyMachine(LoopMachine):
    """The Hypothesis machine under the Claude Code profiles with the legacy behaviours drawn."""

    def configs(self) -> st.SearchStrategy[LoopConfig]:
        return configs(profiles=("claude_code_2_1_88", "full"), toggle_legacy=True)


@pytest.mark.spec("P-VERSION-1", "VER-1", "VER-2", "VER-3", "VER-6")
def test_the_invariants_hold_under_every_version_s_behaviours() -> None:
    """Random sessions under the Claude Code profiles with every legacy behaviour drawn: every
    invariant of the catalogue holds on every transition (INV-6 not under VER-1)."""
    run_state_machine_as_test(LegacyMachine, settings=ci_settings())
