"""Context management: token count, thresholds, the tool-result budget and microcompact
(specs/rules.md, "Context management": R-TOK-1, R-CTX-1, R-CTX-0, R-CTX-3). Auto-compact, snip,
collapse and the task budget are in test_context_compaction.py, the persistent conversation in
test_context_conversation.py."""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import Conversation, LoopConfig, Request, claude_code_2_1_88, default, start
from steploop.reducer.config import Gates
from steploop.reducer.context import CLEARED_RESULT
from steploop.reducer.conversation import SYNTHETIC_MODEL
from steploop.reducer.effects import CallModel, Emit, Finish, PersistToolResult
from steploop.reducer.events import ToolTraits
from steploop.reducer.messages import (
    AssistantMessage,
    ErrorInfo,
    ImageBlock,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)
from tests.reducer.context_kit import MODEL, calls, compacts, result_texts, small, tool_round, u
from tests.reducer.driver import SAFE, Driver

BUDGETED = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=50_000)


def asst(mid: str, rid: str, block: Any, use: Usage | None = None, **kw: Any) -> AssistantMessage:
    return AssistantMessage(id=mid, response_id=rid, model=MODEL, content=(block,), usage=use, **kw)


def user(mid: str, *blocks: Any) -> UserMessage:
    return UserMessage(id=mid, content=tuple(blocks))


# --- R-TOK-1 ----------------------------------------------------------------------------------


@pytest.mark.spec("R-TOK-1")
@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("a", 0),  # 0.25 -> 0
        ("ab", 1),  # 0.5 rounds half up -> 1
        ("abc", 1),  # 0.75 -> 1
        ("abcd", 1),
        ("abcdef", 2),  # 1.5 -> 2
        ("x" * 400, 100),
        ("😀", 1),  # one code point, two UTF-16 units: 0.5 -> 1 (0 if counted as one)
        ("😀😀😀", 2),  # six UTF-16 units: 1.5 -> 2
        ("é", 0),  # a BMP character is one UTF-16 unit
    ],
)
def test_rough_estimate_utf16_half_up(text: str, tokens: int) -> None:
    """Text counts UTF-16 length / 4 rounded half up."""
    conv = Conversation.of([user("m1", TextBlock(text=text))])
    assert conv.token_count() == tokens


@pytest.mark.spec("R-TOK-1")
def test_estimate_per_block_kind() -> None:
    """Thinking, redacted thinking, tool results, tool_use name+input, images 2,000, system 0."""
    cases: list[tuple[Any, int]] = [
        (asst("m1", "r1", ThinkingBlock(thinking="abcdef", signature="sig" * 100)), 2),
        (asst("m1", "r1", RedactedThinkingBlock(data="abcdefgh")), 2),
        (user("m1", ToolResultBlock(tool_use_id="t1", content="abcdef")), 2),
        (asst("m1", "r1", ToolUseBlock(id="t1", name="Read", input={})), 2),  # "Read{}"
        (user("m1", ImageBlock(media_type="image/png", data="A" * 100_000)), 2_000),
        (user("m1", ImageBlock(media_type="image/png", data=""), TextBlock(text="abcd")), 2_001),
        (SystemMessage(id="m1", subtype="api_error", text="x" * 4_000), 0),
    ]
    for msg, tokens in cases:
        assert Conversation.of([msg]).token_count() == tokens, msg


@pytest.mark.spec("R-TOK-1")
def test_anchor_is_first_record_of_last_response_with_usage() -> None:
    """Count = usage total of the last real response + estimate after its *first* record."""
    prompt = user("m1", TextBlock(text="x" * 400))  # 100, covered by the usage
    a1 = asst("m2", "r1", TextBlock(text="y" * 40))  # 10, the anchor: covered
    a2 = asst(
        "m3",
        "r1",
        ToolUseBlock(id="t1", name="Read", input={}),  # 2, after the first record: counted
        Usage(
            input_tokens=600,
            output_tokens=100,
            cache_creation_input_tokens=200,
            cache_read_input_tokens=100,
        ),
    )
    res = user("m4", ToolResultBlock(tool_use_id="t1", content="z" * 80))  # 20
    conv = Conversation.of([prompt, a1, a2, res])
    assert conv.token_count() == 1_000 + 2 + 20
    # no usage anywhere: the estimate of everything
    assert Conversation.of([prompt, a1]).token_count() == 110
    # a later response without usage does not move the anchor; it is estimated
    a3 = asst("m5", "r2", TextBlock(text="w" * 40))
    assert conv.append(a3).token_count() == 1_000 + 2 + 20 + 10
    # a later response with real usage re-anchors at its own first record
    a4 = asst("m6", "r3", TextBlock(text="v" * 40), u(5_000, 7))
    assert conv.append(a3).append(a4).token_count() == 5_007


@pytest.mark.spec("R-TOK-1")
def test_synthetic_api_error_never_anchors() -> None:
    """A synthetic API-error message carrying usage is estimated, never used as the anchor."""
    base = Conversation.of(
        [user("m1", TextBlock(text="hi")), asst("m2", "r1", TextBlock(text="ok"), u(1_000))]
    )
    assert base.token_count() == 1_000
    err_text = "Prompt is too long"  # 18 chars -> 5 tokens (4.5 rounds up)
    synthetic = AssistantMessage(
        id="m3",
        response_id="r2",
        model=SYNTHETIC_MODEL,
        content=(TextBlock(text=err_text),),
        usage=u(90_000),
        api_error=ErrorInfo(kind="prompt_too_long", message=err_text),
    )
    assert base.append(synthetic).token_count() == 1_000 + 5
    api_error_real_model = AssistantMessage(
        id="m3",
        response_id="r2",
        model=MODEL,
        content=(TextBlock(text=err_text),),
        usage=u(90_000),
        api_error=ErrorInfo(kind="prompt_too_long", message=err_text),
    )
    assert base.append(api_error_real_model).token_count() == 1_000 + 5


@pytest.mark.spec("R-TOK-1")
def test_machine_counts_with_usage_of_the_response() -> None:
    """The count the thresholds use comes from ModelResponseEnded usage, not the estimate."""
    d = Driver(small(history_snip=False, context_collapse=False))
    fx = tool_round(d, "t1", content="", use=u(28_000, 999))  # 28,999 < 29,000
    assert calls(fx) and not compacts(fx)
    d = Driver(small(history_snip=False, context_collapse=False))
    fx = tool_round(d, "t1", content="abcd", use=u(28_000, 999))  # 28,999 + 1 (the result)
    assert compacts(fx) and compacts(fx)[0].pre_tokens == 29_000


# --- R-CTX-1 ----------------------------------------------------------------------------------


@pytest.mark.spec("R-CTX-1")
def test_thresholds_default_profile() -> None:
    """default(): 200,000 - min(min(32,000, 8,000), 20,000) = 192,000; -13,000; -3,000."""
    cfg = default()
    assert cfg.default_max_tokens == 8_000
    assert (cfg.effective_window, cfg.autocompact_threshold, cfg.blocking_limit) == (
        192_000,
        179_000,
        189_000,
    )


@pytest.mark.spec("R-CTX-1")
def test_thresholds_claude_code_profile() -> None:
    """claude_code_2_1_88(): no escalation gate, model default 32,000 capped by 20,000."""
    cfg = claude_code_2_1_88()
    assert cfg.default_max_tokens == 32_000
    assert (cfg.effective_window, cfg.autocompact_threshold, cfg.blocking_limit) == (
        180_000,
        167_000,
        177_000,
    )


@pytest.mark.spec("R-CTX-1")
def test_thresholds_env_override() -> None:
    """The env override wins over the capped default and the model default."""
    cfg = default(max_output_tokens_env_override=4_000)
    assert (cfg.effective_window, cfg.autocompact_threshold, cfg.blocking_limit) == (
        196_000,
        183_000,
        193_000,
    )
    cfg = default(max_output_tokens_env_override=30_000)  # capped by the 20,000 reserve
    assert cfg.effective_window == 180_000
    cfg = claude_code_2_1_88(max_output_tokens_env_override=12_000)
    assert (cfg.effective_window, cfg.autocompact_threshold, cfg.blocking_limit) == (
        188_000,
        175_000,
        185_000,
    )
    d = Driver(cfg)
    assert d.of(CallModel)[0].max_tokens == 12_000


@pytest.mark.spec("R-CTX-1")
def test_small_window_thresholds() -> None:
    """The small window the other tests use has the thresholds they assume."""
    cfg = small()
    assert cfg.effective_window == 42_000
    assert cfg.autocompact_threshold == 29_000
    assert cfg.blocking_limit == 39_000
    assert cfg.snip_threshold == 22_000
    assert cfg.collapse_threshold == 37_800


# --- R-CTX-0 ----------------------------------------------------------------------------------


@pytest.mark.spec("R-CTX-0", "G14")
def test_oversized_result_replaced_by_preview() -> None:
    """A result over min(max_result_chars, 50,000) becomes a 2,000-char preview + Persist."""
    big = "".join(chr(ord("a") + i % 26) for i in range(60_000))
    d = Driver(default())
    d.tool_use("t1", traits=BUDGETED)
    d.allow("t1")
    fx = d.finish_tool("t1", big)
    assert PersistToolResult(tool_use_id="t1", content=big) in fx
    d.end("tool_use")
    stored = result_texts(d.of(CallModel)[-1].conversation)["t1"]
    assert big[:2_000] in stored
    assert big[:2_001] not in stored
    assert "t1" in stored
    assert len(stored) < 3_000
    # frozen: the next round still sends the same preview
    d.reply("done")
    d.hooks_pass()
    assert result_texts(d.state.conversation)["t1"] == stored


@pytest.mark.spec("R-CTX-0")
def test_result_limit_is_min_of_tool_limit_and_50k() -> None:
    """A tool's own smaller limit applies; results at the limit are kept whole."""
    traits = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=1_000)
    d = Driver(default())
    d.tool_use("t1", traits=traits)
    d.tool_use("t2", traits=traits)
    d.allow("t1")
    d.allow("t2")
    fx1 = d.finish_tool("t1", "a" * 1_000)
    fx2 = d.finish_tool("t2", "b" * 1_001)
    assert not any(isinstance(e, PersistToolResult) for e in fx1)
    assert PersistToolResult(tool_use_id="t2", content="b" * 1_001) in fx2
    d.end("tool_use")
    texts = result_texts(d.state.conversation)
    assert texts["t1"] == "a" * 1_000
    assert texts["t2"] != "b" * 1_001


@pytest.mark.spec("R-CTX-0")
def test_unbudgeted_tool_never_replaced() -> None:
    """max_result_chars None (like Read) is never budgeted, however large."""
    huge = "r" * 300_000
    d = Driver(default())
    d.tool_use("t1", traits=SAFE)
    d.allow("t1")
    fx = d.finish_tool("t1", huge)
    assert not any(isinstance(e, PersistToolResult) for e in fx)
    d.end("tool_use")
    assert result_texts(d.state.conversation)["t1"] == huge


@pytest.mark.spec("R-CTX-0")
def test_round_aggregate_limit_200k() -> None:
    """A result that would take the round's results over 200,000 characters is replaced."""
    d = Driver(default())
    ids = [f"t{i}" for i in range(1, 6)]
    for tid in ids:
        d.tool_use(tid, traits=BUDGETED)
    for tid in ids:
        d.allow(tid)
    persisted: list[str] = []
    for tid in ids:  # 4 x 45,000 = 180,000 fit; the 5th would make 225,000
        persisted += [
            e.tool_use_id
            for e in d.finish_tool(tid, tid[-1] * 45_000)
            if isinstance(e, PersistToolResult)
        ]
    assert persisted == ["t5"]
    d.end("tool_use")
    texts = result_texts(d.state.conversation)
    assert [len(texts[t]) for t in ids[:4]] == [45_000] * 4
    assert len(texts["t5"]) < 3_000


@pytest.mark.spec("R-CTX-0")
def test_budget_gate_off_keeps_results() -> None:
    """With tool_result_budget off nothing is replaced."""
    d = Driver(default(gates=Gates(tool_result_budget=False)))
    d.tool_use("t1", traits=BUDGETED)
    d.allow("t1")
    fx = d.finish_tool("t1", "q" * 60_000)
    assert not any(isinstance(e, PersistToolResult) for e in fx)


# --- R-CTX-3 ----------------------------------------------------------------------------------

GAP = 60 * 60 * 1000
COMPACTABLE = ["Read", "Bash", "Grep", "Glob", "WebFetch", "Edit", "Write"]


def _seven_results_turn(cfg: LoopConfig, extra_tool: str | None = None) -> Driver:
    """One turn: 7 compactable tool results (plus an optional other tool), response at 1,000."""
    d = Driver(cfg)
    names = list(COMPACTABLE) + ([extra_tool] if extra_tool else [])
    for i, name in enumerate(names, 1):
        d.tool_use(f"t{i}", name=name)
    for i in range(1, len(names) + 1):
        d.allow(f"t{i}")
    d.end("tool_use", at_ms=500)
    for i in range(1, len(names) + 1):
        d.finish_tool(f"t{i}", f"result {i}", at_ms=600)
    d.text("done")
    d.end("end_turn", at_ms=1_000)
    d.hooks_pass()
    assert isinstance(d.finished(), Finish)
    return d


@pytest.mark.spec("R-CTX-3")
def test_microcompact_fires_only_after_gap() -> None:
    """A round starting >= 60 min after the last response clears all but the newest 5."""
    d = _seven_results_turn(default())
    session = d.state.session()
    _, fx = start(Request(prompt="again", at_ms=1_000 + GAP - 1), default(), session)
    texts = result_texts(calls(fx)[0].conversation)
    assert CLEARED_RESULT not in texts.values()
    _, fx = start(Request(prompt="again", at_ms=1_000 + GAP), default(), session)
    texts = result_texts(calls(fx)[0].conversation)
    assert texts["t1"] == CLEARED_RESULT
    assert texts["t2"] == CLEARED_RESULT
    assert [texts[f"t{i}"] for i in range(3, 8)] == [f"result {i}" for i in range(3, 8)]
    # emits nothing besides the prompt
    assert [type(e) for e in fx] == [Emit, CallModel]


@pytest.mark.spec("R-CTX-3")
@pytest.mark.parametrize(("finish_at", "fires"), [(10_000 + GAP - 1, False), (10_000 + GAP, True)])
def test_microcompact_within_a_turn_uses_event_time(finish_at: int, fires: bool) -> None:
    """Within a turn the round's clock is the triggering event's at_ms vs the response's."""
    d = Driver(default())
    for i in range(1, 8):
        d.tool_use(f"t{i}")
    for i in range(1, 8):
        d.allow(f"t{i}")
    d.end("tool_use", at_ms=10_000)
    for i in range(1, 7):
        d.finish_tool(f"t{i}", f"result {i}", at_ms=20_000)
    fx = d.finish_tool("t7", "result 7", at_ms=finish_at)  # starts the next round
    texts = result_texts(calls(fx)[0].conversation)
    if fires:
        assert texts["t1"] == texts["t2"] == CLEARED_RESULT
    else:
        assert (texts["t1"], texts["t2"]) == ("result 1", "result 2")
    assert texts["t3"] == "result 3"


@pytest.mark.spec("R-CTX-3")
def test_microcompact_spares_non_compactable_tools() -> None:
    """Only results of compactable tools are cleared or counted towards the kept five."""
    d = _seven_results_turn(default(), extra_tool="TodoWrite")
    _, fx = start(Request(prompt="again", at_ms=1_000 + GAP), default(), d.state.session())
    texts = result_texts(calls(fx)[0].conversation)
    assert texts["t8"] == "result 8"  # TodoWrite is not compactable
    assert [texts[f"t{i}"] for i in (1, 2)] == [CLEARED_RESULT] * 2
    assert texts["t3"] == "result 3"


@pytest.mark.spec("R-CTX-3")
@pytest.mark.parametrize("source", ["sdk", "agent:explore", "compact"])
def test_microcompact_only_main_thread_sources(source: str) -> None:
    """Non repl_main_thread sources never microcompact."""
    cfg = default(query_source=source)
    d = _seven_results_turn(cfg)
    _, fx = start(Request(prompt="again", at_ms=1_000 + 10 * GAP), cfg, d.state.session())
    assert CLEARED_RESULT not in result_texts(calls(fx)[0].conversation).values()


@pytest.mark.spec("R-CTX-3")
def test_microcompact_main_thread_variants() -> None:
    """repl_main_thread* sources (with a suffix) do microcompact."""
    cfg = default(query_source="repl_main_thread:outputStyle")
    d = _seven_results_turn(cfg)
    _, fx = start(Request(prompt="again", at_ms=1_000 + GAP), cfg, d.state.session())
    assert list(result_texts(calls(fx)[0].conversation).values()).count(CLEARED_RESULT) == 2


@pytest.mark.spec("R-CTX-3", "P-CC-1")
def test_microcompact_off_in_claude_code_profile() -> None:
    """claude_code_2_1_88() has time-based microcompact off."""
    cfg = claude_code_2_1_88()
    d = _seven_results_turn(cfg)
    _, fx = start(Request(prompt="again", at_ms=1_000 + 10 * GAP), cfg, d.state.session())
    assert CLEARED_RESULT not in result_texts(calls(fx)[0].conversation).values()
