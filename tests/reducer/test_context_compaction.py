"""Context management: auto-compact, snip, collapse and the task budget (specs/rules.md, "Context
management": R-CTX-4, S-SNIP-1, S-COLLAPSE-1/2, R-TASK-1)."""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import Conversation, LoopConfig, Request, default, full, start
from steploop.reducer.config import Gates
from steploop.reducer.effects import CallModel, Emit, Finish, TaskBudget
from steploop.reducer.events import CompactionFailed, CompactionFinished, ModelCallFailed
from steploop.reducer.messages import AssistantMessage, SystemMessage, TextBlock, Usage, UserMessage
from steploop.reducer.transitions import BlockingLimit, CollapseDrainRetry
from tests.reducer.context_kit import calls, compacts, result_texts, small, tool_round, u
from tests.reducer.driver import Driver

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
