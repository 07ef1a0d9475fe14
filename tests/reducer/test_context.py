"""Context management: token count, thresholds, budgets, microcompact, auto-compact, snip,
collapse, task budget and the persistent conversation (specs/rules.md, "Context management")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import attrs
import pytest

from steploop.reducer import (
    Conversation,
    LoopConfig,
    Request,
    claude_code_2_1_88,
    default,
    full,
    start,
)
from steploop.reducer.config import Gates
from steploop.reducer.context import CLEARED_RESULT
from steploop.reducer.conversation import SYNTHETIC_MODEL
from steploop.reducer.effects import (
    CallModel,
    Compact,
    Emit,
    Finish,
    PersistToolResult,
    TaskBudget,
)
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    ModelCallFailed,
    ToolTraits,
)
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
from steploop.reducer.transitions import BlockingLimit, CollapseDrainRetry
from tests.reducer.driver import SAFE, Driver

MODEL = "claude-sonnet-4-5"
BUDGETED = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=50_000)


# --- helpers ----------------------------------------------------------------------------------


def small(**gates: bool) -> LoopConfig:
    """default() with a 50,000-token window: effective 42,000, auto-compact 29,000,
    blocking 39,000, snip 22,000, collapse 37,800 (see test_small_window_thresholds)."""
    return default(context_window=50_000, gates=Gates(**gates))


def u(inp: int, out: int = 0) -> Usage:
    return Usage(input_tokens=inp, output_tokens=out)


def tool_round(
    d: Driver,
    tid: str,
    content: str = "",
    use: Usage | None = None,
    name: str = "Read",
    traits: ToolTraits = SAFE,
    end_ms: int = 0,
    finish_ms: int = 0,
) -> tuple[Any, ...]:
    """One round: a single safe tool_use, allowed mid-stream, the response ends, the tool
    finishes (which starts the next round). Returns the effects of the finishing step."""
    d.tool_use(tid, name=name, traits=traits)
    d.allow(tid)
    d.end("tool_use", use or u(100), at_ms=end_ms)
    return d.finish_tool(tid, content, at_ms=finish_ms)


def calls(fx: Any) -> list[CallModel]:
    return [e for e in fx if isinstance(e, CallModel)]


def compacts(fx: Any) -> list[Compact]:
    return [e for e in fx if isinstance(e, Compact)]


def asst(mid: str, rid: str, block: Any, use: Usage | None = None, **kw: Any) -> AssistantMessage:
    return AssistantMessage(id=mid, response_id=rid, model=MODEL, content=(block,), usage=use, **kw)


def user(mid: str, *blocks: Any) -> UserMessage:
    return UserMessage(id=mid, content=tuple(blocks))


def result_texts(conv: Conversation) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in conv.messages():
        if isinstance(m, UserMessage):
            for b in m.content:
                if isinstance(b, ToolResultBlock):
                    out[b.tool_use_id] = b.content
    return out


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


# --- R-CTX-4 ----------------------------------------------------------------------------------


def _to_threshold(cfg: LoopConfig, total: int = 29_000, **request: Any) -> tuple[Driver, Any]:
    d = Driver(cfg, **request)
    fx = tool_round(d, "t1", content="", use=u(total - 500, 500))
    return d, fx


@pytest.mark.spec("R-CTX-4")
def test_auto_compact_at_threshold() -> None:
    """At the threshold the round emits Compact(trigger='auto') and waits in compacting."""
    cfg = small(history_snip=False, context_collapse=False)
    d, fx = _to_threshold(cfg, 28_999)
    assert calls(fx) and not compacts(fx)
    d, fx = _to_threshold(cfg, 29_000)
    (c,) = compacts(fx)
    assert c.trigger == "auto"
    assert c.pre_tokens == 29_000
    assert c.conversation == d.state.conversation
    assert not calls(fx)
    assert d.phase == "compacting"


@pytest.mark.spec("R-CTX-4")
def test_auto_compact_success_replaces_conversation() -> None:
    """Success: messages replace the conversation, are emitted, then the model is called."""
    cfg = small(history_snip=False, context_collapse=False)
    d, fx = _to_threshold(cfg)
    cid = compacts(fx)[0].compact_id
    boundary = SystemMessage(id="c1", subtype="compact_boundary", text="Conversation compacted")
    summary = UserMessage(id="c2", content=(TextBlock(text="summary"),), is_meta=True)
    fx = d.feed(CompactionFinished(compact_id=cid, messages=(boundary, summary)))
    assert [e.item for e in fx if isinstance(e, Emit)] == [boundary, summary]
    assert isinstance(fx[-1], CallModel)
    assert fx[-1].conversation == Conversation.of([boundary, summary])
    assert d.state.conversation.messages() == (boundary, summary)
    assert d.state.tracking.compacted
    assert d.state.tracking.consecutive_failures == 0
    assert d.phase == "streaming"


@pytest.mark.spec("R-CTX-4", "G7")
def test_auto_compact_success_skips_blocking_check() -> None:
    """After a successful compaction the blocking check is skipped for the round."""
    cfg = default(
        context_window=50_000,
        gates=Gates(history_snip=False, context_collapse=False, reactive_compact=False),
    ).with_overrides({"compat.blocking_limit_with_auto_compact": True})
    d, fx = _to_threshold(cfg)
    cid = compacts(fx)[0].compact_id
    huge = UserMessage(id="c1", content=(TextBlock(text="s" * 4 * 40_000),))  # 40,000 > 39,000
    fx = d.feed(CompactionFinished(compact_id=cid, messages=(huge,)))
    assert isinstance(fx[-1], CallModel)
    assert not any(isinstance(e, Finish) for e in fx)


@pytest.mark.spec("R-CTX-4", "G7")
def test_auto_compact_failure_counts_then_blocking_and_call() -> None:
    """Failure: consecutive_failures + 1, then the blocking check, then CallModel."""
    cfg = small(history_snip=False, context_collapse=False)
    d, fx = _to_threshold(cfg)
    fx = d.feed(CompactionFailed(compact_id=compacts(fx)[0].compact_id, reason="boom"))
    assert d.state.tracking.consecutive_failures == 1
    assert isinstance(fx[-1], CallModel)
    # with the blocking check applying, an over-limit count ends the turn after a failure
    cfg = default(
        context_window=50_000,
        gates=Gates(history_snip=False, context_collapse=False, reactive_compact=False),
    ).with_overrides({"compat.blocking_limit_with_auto_compact": True})
    d, fx = _to_threshold(cfg, 39_000)
    fx = d.feed(CompactionFailed(compact_id=compacts(fx)[0].compact_id))
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, BlockingLimit)


@pytest.mark.spec("R-CTX-4", "G6")
def test_auto_compact_breaker_after_three_failures() -> None:
    """No auto-compact attempt once three consecutive attempts failed."""
    cfg = small(history_snip=False, context_collapse=False)
    d, fx = _to_threshold(cfg)
    for n in range(1, 4):
        (c,) = compacts(fx)
        d.feed(CompactionFailed(compact_id=c.compact_id))
        assert d.state.tracking.consecutive_failures == n
        fx = tool_round(d, f"t{n + 1}", content="", use=u(30_000))
    assert not compacts(fx)
    assert calls(fx)


@pytest.mark.spec("R-CTX-4", "G8")
@pytest.mark.parametrize("source", ["compact", "session_memory", "marble_origami"])
def test_no_auto_compact_for_recursive_sources(source: str) -> None:
    """compact, session_memory and marble_origami never auto-compact."""
    cfg = default(
        context_window=50_000,
        query_source=source,
        gates=Gates(history_snip=False, context_collapse=False),
    )
    _, fx = _to_threshold(cfg, 30_000)
    assert not compacts(fx)


@pytest.mark.spec("R-CTX-4", "P-FULL-1")
def test_no_auto_compact_when_collapse_owns_overflow() -> None:
    """In full() collapse owns overflow: no Compact at the auto-compact threshold."""
    cfg = full(context_window=50_000)
    assert cfg.autocompact_threshold <= 30_000 < cfg.collapse_threshold
    _, fx = _to_threshold(cfg, 30_000)
    assert not compacts(fx)
    assert calls(fx)


@pytest.mark.spec("R-CTX-4")
def test_auto_compact_gate_off() -> None:
    """With the auto_compact gate off no Compact is emitted."""
    cfg = small(history_snip=False, context_collapse=False, auto_compact=False)
    _, fx = _to_threshold(cfg, 30_000)
    assert not compacts(fx)


# --- S-SNIP-1 ---------------------------------------------------------------------------------

SEG = 2_002  # one segment: tool_use "Read{}" (2) + an 8,000-char result (2,000)


def _rounds(
    cfg: LoopConfig, n: int, last_usage: int, names: list[str] | None = None
) -> tuple[Driver, Any]:
    d = Driver(cfg)
    fx: Any = ()
    for i in range(1, n + 1):
        name = names[i - 1] if names else "Read"
        use = u(last_usage) if i == n else u(1_000)
        fx = tool_round(d, f"t{i}", content="x" * 8_000, use=use, name=name)
    return d, fx


@pytest.mark.spec("S-SNIP-1")
def test_snip_drops_oldest_while_over_threshold() -> None:
    """Segments are dropped only while the count stays at or over effective - 20,000."""
    cfg = small(context_collapse=False, auto_compact=False)
    d, fx = _rounds(cfg, 6, 21_500)  # count 23,500 >= 22,000; one segment brings it under
    boundaries = [e.item for e in fx if isinstance(e, Emit) and isinstance(e.item, SystemMessage)]
    assert len(boundaries) == 1 and boundaries[0].subtype == "snip_boundary"
    sent = calls(fx)[0].conversation.messages()
    assert sent[1] == boundaries[0]
    assert isinstance(sent[0], UserMessage) and sent[0].origin == "prompt"
    assert "t1" not in result_texts(calls(fx)[0].conversation)
    assert set(result_texts(calls(fx)[0].conversation)) == {"t2", "t3", "t4", "t5", "t6"}
    assert d.state.tokens_freed == SEG


@pytest.mark.spec("S-SNIP-1")
def test_snip_keeps_four_segments() -> None:
    """However far over, more than 4 segments must remain for another drop."""
    cfg = small(context_collapse=False, auto_compact=False)
    d, fx = _rounds(cfg, 6, 30_000)
    assert set(result_texts(calls(fx)[0].conversation)) == {"t3", "t4", "t5", "t6"}
    assert d.state.tokens_freed == 2 * SEG
    # 4 segments only: nothing to drop, nothing emitted
    d, fx = _rounds(cfg, 4, 30_000)
    assert not any(isinstance(e, Emit) and isinstance(e.item, SystemMessage) for e in fx)


@pytest.mark.spec("S-SNIP-1")
def test_snip_below_threshold_or_gate_off() -> None:
    """Below the threshold, or with the gate off, nothing is snipped."""
    cfg = small(context_collapse=False, auto_compact=False)
    _, fx = _rounds(cfg, 6, 19_999)  # 21,999 < 22,000
    assert len(result_texts(calls(fx)[0].conversation)) == 6
    cfg = small(history_snip=False, context_collapse=False, auto_compact=False)
    _, fx = _rounds(cfg, 6, 30_000)
    assert len(result_texts(calls(fx)[0].conversation)) == 6


@pytest.mark.spec("S-SNIP-1", "R-TOK-1", "R-ORDER-1")
def test_snip_freed_tokens_subtracted_until_next_usage() -> None:
    """Snip runs before auto-compact and its freed estimate lowers the count until new usage."""
    with_snip = small(context_collapse=False)
    without = small(context_collapse=False, history_snip=False)
    _, fx = _rounds(without, 6, 27_500)  # 29,500 >= 29,000
    assert compacts(fx)
    d, fx = _rounds(with_snip, 6, 27_500)  # snip frees 4,004 -> 25,496
    assert not compacts(fx) and calls(fx)
    assert d.state.tokens_freed == 2 * SEG
    tool_round(d, "t7", content="", use=u(5_000))
    assert d.state.tokens_freed == 0


# --- S-COLLAPSE-1 / S-COLLAPSE-2 ---------------------------------------------------------------


def _stub(conv: Conversation) -> UserMessage:
    stubs = [m for m in conv.messages() if isinstance(m, UserMessage) and m.origin == "collapse"]
    assert len(stubs) == 1
    return stubs[0]


@pytest.mark.spec("S-COLLAPSE-1")
def test_collapse_folds_oldest_while_over_90_percent() -> None:
    """Over 90% of the effective window the oldest segments fold into one meta stub."""
    cfg = small(history_snip=False, auto_compact=False)
    d, fx = _rounds(cfg, 5, 36_500)  # 38,500 >= 37,800; one segment brings it under
    sent = calls(fx)[0].conversation
    stub = _stub(sent)
    assert stub.is_meta
    assert stub.content == (
        TextBlock(text="[Context collapsed: 2 earlier messages folded; tools used: Read]"),
    )
    assert sent.messages()[1] == stub
    assert set(result_texts(sent)) == {"t2", "t3", "t4", "t5"}
    # emits nothing
    assert not any(isinstance(e, Emit) and e.item == stub for e in d.effects)
    assert [type(e) for e in fx] == [Emit, CallModel]


@pytest.mark.spec("S-COLLAPSE-1")
def test_collapse_keeps_two_segments_and_lists_tools() -> None:
    """At most all but 2 segments fold; the stub lists the folded tools, sorted."""
    # far over the threshold; auto-compact then runs on the collapsed conversation
    cfg = small(history_snip=False)
    _d, fx = _rounds(cfg, 5, 45_000, names=["Read", "Bash", "Grep", "Glob", "Read"])
    sent = compacts(fx)[0].conversation
    assert _stub(sent).content == (
        TextBlock(
            text="[Context collapsed: 6 earlier messages folded; tools used: Bash, Grep, Read]"
        ),
    )
    assert set(result_texts(sent)) == {"t4", "t5"}


@pytest.mark.spec("S-COLLAPSE-1", "R-TOK-1", "T-BLOCKING-1")
def test_collapse_freed_tokens_lower_the_count_for_blocking() -> None:
    """Collapse runs before the blocking check, whose count drops by the freed estimate."""
    over = 38_000  # count 40,000 >= blocking 39,000 before collapse
    _, fx = _rounds(small(history_snip=False, auto_compact=False, context_collapse=False), 5, over)
    assert isinstance(fx[-1], Finish) and isinstance(fx[-1].terminal, BlockingLimit)
    d, fx = _rounds(small(history_snip=False, auto_compact=False), 5, over)
    assert isinstance(fx[-1], CallModel)
    assert 0 < d.state.tokens_freed <= 2 * SEG
    assert set(result_texts(fx[-1].conversation)) == {"t3", "t4", "t5"}


@pytest.mark.spec("S-COLLAPSE-1")
def test_collapse_below_threshold_or_gate_off() -> None:
    """Below 90% or with the gate off nothing folds."""
    cfg = small(history_snip=False, auto_compact=False)
    _, fx = _rounds(cfg, 5, 35_799)  # 37,799
    assert len(result_texts(calls(fx)[0].conversation)) == 5
    cfg = small(history_snip=False, auto_compact=False, context_collapse=False)
    _, fx = _rounds(cfg, 5, 36_500)
    assert len(result_texts(calls(fx)[0].conversation)) == 5


@pytest.mark.spec("S-COLLAPSE-2", "C-COLLAPSE-1")
def test_collapse_drain_folds_all_but_newest() -> None:
    """On a withheld prompt-too-long every segment but the newest folds; committed = count."""
    cfg = small(history_snip=False, auto_compact=False)
    d, _ = _rounds(cfg, 4, 1_000)
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="prompt_too_long", status=400))
    assert d.transition == CollapseDrainRetry(committed=3)
    assert [type(e) for e in fx] == [CallModel]  # nothing emitted, the error withheld
    assert isinstance(fx[0], CallModel)
    sent = fx[0].conversation
    assert _stub(sent).content == (
        TextBlock(text="[Context collapsed: 6 earlier messages folded; tools used: Read]"),
    )
    assert set(result_texts(sent)) == {"t4"}
    assert not any(isinstance(m, AssistantMessage) and m.api_error for m in sent.messages())


# --- R-TASK-1 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-TASK-1")
def test_task_budget_after_one_and_two_compactions() -> None:
    """remaining = (remaining or total) - (input + output of the last response) per compaction."""
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg, task_budget=100_000)
    assert d.of(CallModel)[0].task_budget == TaskBudget(total=100_000, remaining=None)
    fx = tool_round(
        d,
        "t1",
        use=Usage(input_tokens=30_000, output_tokens=500, cache_read_input_tokens=7_000),
    )
    assert calls(fx) == [] and compacts(fx)
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary one"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compacts(fx)[0].compact_id, messages=summary))
    assert calls(fx)[0].task_budget == TaskBudget(total=100_000, remaining=69_500)
    fx = tool_round(d, "t2", use=u(31_000, 1_000))
    summary2 = (UserMessage(id="c2", content=(TextBlock(text="summary two"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=compacts(fx)[0].compact_id, messages=summary2))
    assert calls(fx)[0].task_budget == TaskBudget(total=100_000, remaining=37_500)
    # remaining never goes below zero
    fx = tool_round(d, "t3", use=u(60_000, 0))
    fx = d.feed(CompactionFinished(compact_id=compacts(fx)[0].compact_id, messages=summary))
    assert calls(fx)[0].task_budget == TaskBudget(total=100_000, remaining=0)


@pytest.mark.spec("R-TASK-1", "C-REACTIVE-1")
def test_task_budget_after_reactive_compaction() -> None:
    """A reactive compaction carries the budget over too, from the last response's usage."""
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg, task_budget=100_000)
    tool_round(d, "t1", use=u(10_000, 500))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="prompt_too_long", status=400))
    (c,) = compacts(d.last)
    assert c.trigger == "reactive"
    summary = (UserMessage(id="c1", content=(TextBlock(text="summary"),), is_meta=True),)
    fx = d.feed(CompactionFinished(compact_id=c.compact_id, messages=summary))
    assert calls(fx)[0].task_budget == TaskBudget(total=100_000, remaining=89_500)


@pytest.mark.spec("R-TASK-1")
def test_task_budget_scope_is_the_user_turn() -> None:
    """No task budget: none sent; a new turn starts again from total with no remaining."""
    cfg = small(history_snip=False, context_collapse=False)
    d = Driver(cfg)
    assert d.of(CallModel)[0].task_budget is None
    d = Driver(cfg, task_budget=50_000)
    fx = tool_round(d, "t1", use=u(29_000))
    d.feed(CompactionFinished(compact_id=compacts(fx)[0].compact_id, messages=()))
    d.reply("done", u(10))
    d.hooks_pass()
    assert isinstance(d.finished(), Finish)
    _, fx = start(Request(prompt="next", task_budget=50_000), cfg, d.state.session())
    assert calls(fx)[0].task_budget == TaskBudget(total=50_000, remaining=None)


# --- R-COST-1 / R-COST-2 ----------------------------------------------------------------------

FIXED = (
    UserMessage(id="m1", content=(TextBlock(text="hello"),)),
    AssistantMessage(
        id="m2",
        response_id="r1",
        model=MODEL,
        content=(TextBlock(text="hi"),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=10, output_tokens=2),
    ),
)
FIXED_DIGEST = "1d537aa1e16d5151f46e0a12fc39f65c"


@pytest.mark.spec("R-COST-1")
def test_append_shares_structure() -> None:
    """append returns a new node pointing at the old value, which is unchanged."""
    c1 = Conversation.of(FIXED[:1])
    c2 = c1.append(FIXED[1])
    assert c2.prev is c1
    assert len(c1) == 1 and len(c2) == 2
    assert c1.messages() == FIXED[:1]
    assert c2.messages() == FIXED
    c3 = c1.append(FIXED[1])  # a branch shares the same prefix
    assert c3.prev is c1
    assert c3 == c2 and c3 is not c2


@pytest.mark.spec("R-COST-1")
def test_equality_by_length_and_digest() -> None:
    """Equal messages give equal conversations; any difference gives a different digest."""
    a = Conversation.of(FIXED)
    b = Conversation.empty().extend(FIXED)
    assert a == b and hash(a) == hash(b)
    other = Conversation.of([FIXED[0], UserMessage(id="m2", content=(TextBlock(text="hi"),))])
    assert a != other
    assert Conversation.of(FIXED[:1]) != a
    swapped = Conversation.of([FIXED[1], FIXED[0]])
    assert swapped != a
    # O(1): comparing two long conversations does not walk them
    long_a = Conversation.of(FIXED * 2_000)
    long_b = Conversation.of(FIXED * 2_000)
    calls_made: list[int] = []
    orig = Conversation.messages

    def spy(self: Conversation) -> Any:
        calls_made.append(1)
        return orig(self)

    Conversation.messages = spy  # type: ignore[method-assign]
    try:
        assert long_a == long_b
    finally:
        Conversation.messages = orig  # type: ignore[method-assign]
    assert not calls_made


@pytest.mark.spec("R-COST-1")
def test_digests_are_lazy_and_equal_to_eager_ones() -> None:
    """Digests are computed on first use, back to the last known one, and equal the digests
    read after every append; a branch reuses the shared prefix's digests."""
    msgs = [UserMessage(id=f"u{i}", content=(TextBlock(text=f"text {i}"),)) for i in range(300)]
    eager = Conversation.empty()
    eager_digests = []
    for m in msgs:
        eager = eager.append(m)
        eager_digests.append(eager.digest)
    lazy = Conversation.of(msgs)
    assert lazy._digest is None and lazy.prev is not None and lazy.prev._digest is None
    assert lazy.digest == eager_digests[-1]
    node: Conversation | None = lazy
    for d in reversed(eager_digests):  # every node on the way got its digest
        assert node is not None and node._digest == d
        node = node.prev
    branch = lazy.prev.append(msgs[0]) if lazy.prev is not None else lazy
    assert branch.digest != lazy.digest and branch._digest is not None
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        lazy.length = 3
    with pytest.raises(ValueError, match="needs prev and last"):
        Conversation(
            prev=None,
            last=None,
            length=1,
            digest=None,
            est_total=0,
            anchor_usage=None,
            est_at_anchor=0,
            run_response_id=None,
            est_after_run_first=0,
        )


@pytest.mark.spec("R-COST-1")
def test_step_never_computes_a_digest() -> None:
    """A live run pays nothing for digests: step() never asks for one, so after many rounds
    no message appended during the turn has its digest computed."""
    d = Driver(default())
    for i in range(20):
        tool_round(d, f"t{i}", content="ok")
    node: Conversation | None = d.state.conversation
    fresh = 0
    while node is not None and node.prev is not None:
        assert node._digest is None
        fresh += 1
        node = node.prev
    assert fresh >= 40  # tool_use and tool_result records of every round


@pytest.mark.spec("R-COST-1")
def test_call_model_carries_same_conversation_object() -> None:
    """CallModel carries the state's Conversation object itself, not a copy."""
    d = Driver(default())
    assert d.of(CallModel)[0].conversation is d.state.conversation
    fx = tool_round(d, "t1", content="ok")
    assert calls(fx)[0].conversation is d.state.conversation


@pytest.mark.spec("R-COST-2")
def test_digest_pinned() -> None:
    """The chained digest of a fixed conversation is a fixed BLAKE2b value."""
    assert Conversation.of(FIXED).digest.hex() == FIXED_DIGEST
    assert Conversation.of(list(FIXED)).digest.hex() == FIXED_DIGEST


@pytest.mark.spec("R-COST-2")
def test_digest_is_blake2b_over_canonical_json() -> None:
    """The digest chains BLAKE2b over sorted-key JSON with the tags included."""
    d = b"\x00" * 16
    for m in FIXED:
        data = _plain(m)
        text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        assert '"type":"' in text
        h = hashlib.blake2b(d, digest_size=16)
        h.update(text.encode())
        d = h.digest()
    assert d.hex() == FIXED_DIGEST


def _plain(v: Any) -> Any:
    if attrs.has(type(v)):
        out = {f.name: _plain(getattr(v, f.name)) for f in attrs.fields(type(v))}
        tag = getattr(type(v), "TAG", None)
        if tag is not None:
            out["type"] = tag
        return out
    if isinstance(v, tuple):
        return [_plain(x) for x in v]
    return v


@pytest.mark.spec("R-COST-2")
def test_digest_independent_of_dict_order() -> None:
    """Tool inputs with the same keys in another order give the same digest."""
    a = AssistantMessage(
        id="m1",
        response_id="r1",
        model=MODEL,
        content=(ToolUseBlock(id="t1", name="Bash", input={"a": 1, "b": [1, 2]}),),
    )
    b = AssistantMessage(
        id="m1",
        response_id="r1",
        model=MODEL,
        content=(ToolUseBlock(id="t1", name="Bash", input={"b": [1, 2], "a": 1}),),
    )
    assert Conversation.of([a]) == Conversation.of([b])
    assert Conversation.of([a]).digest == Conversation.of([b]).digest
