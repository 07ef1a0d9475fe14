"""Model-call failures: retries, fallback, broken streams and the API-error ladders (R-*)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from steploop.reducer import LoopConfig, RetryPolicy, claude_code_2_1_88, default
from steploop.reducer.effects import (
    CallModel,
    CancelTools,
    Compact,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
    Wait,
)
from steploop.reducer.events import (
    ModelBlockReceived,
    ModelCallFailed,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    RedactedThinkingBlock,
    SystemMessage,
    TextBlock,
    ThinkingBlock,
    Tombstone,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)
from steploop.reducer.transitions import Completed, MaxOutputTokensEscalate, NextTurn
from tests.reducer.driver import SAFE, UNSAFE, Driver

MODEL = "claude-sonnet-4-5"
FALLBACK = "claude-haiku-4-5"


# --- helpers ---------------------------------------------------------------------------------


def fail(d: Driver, kind: str, **kw: Any) -> tuple[Any, ...]:
    return d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, **kw))


def elapse(d: Driver) -> tuple[Any, ...]:
    return d.feed(WaitElapsed(wait_id=d.state.round.pending_id))


def of(fx: tuple[Any, ...] | list[Any], kind: type) -> list[Any]:
    return [e for e in fx if isinstance(e, kind)]


def emitted_in(fx: tuple[Any, ...]) -> list[Any]:
    return [e.item for e in fx if isinstance(e, Emit)]


def api_errors(items: Any, kind: str | None = None) -> list[AssistantMessage]:
    return [
        m
        for m in items
        if isinstance(m, AssistantMessage)
        and m.api_error is not None
        and (kind is None or m.api_error.kind == kind)
    ]


def error_text(m: AssistantMessage) -> str:
    """The text of an API-error message, which is its first block and a text block."""
    block = m.content[0]
    assert isinstance(block, TextBlock)
    return block.text


def assert_completed_without_hooks(d: Driver) -> None:
    assert isinstance(d.last[-1], Finish) and d.last[-1].terminal == Completed()
    assert d.phase == "done"
    assert not d.of(RunStopHooks)


def with_retries(cfg: LoopConfig, n: int) -> LoopConfig:
    return attrs.evolve(cfg, retry=attrs.evolve(cfg.retry, max_retries=n))


def tool_ids(messages: Any) -> tuple[list[str], list[str]]:
    """(tool_use ids, tool_result ids) stored in ``messages``."""
    uses = [
        b.id
        for m in messages
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    results = [
        b.tool_use_id
        for m in messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    return uses, results


def tool_round(d: Driver, tid: str) -> None:
    d.tool_use(tid, "Edit", traits=UNSAFE, file_path="a.py")
    d.end("tool_use")
    d.allow(tid)
    d.finish_tool(tid)


# --- R-RETRY-1 -------------------------------------------------------------------------------


@pytest.mark.spec("R-RETRY-1")
def test_retry_backoff_sequence_is_deterministic() -> None:
    """server_error backoff: 500, 1000, 2000, ... capped at 32000, one Wait per retry."""
    d = Driver(default())
    waits = []
    for _ in range(10):
        fx = fail(d, "server_error", status=500)
        (w,) = of(fx, Wait)
        waits.append(w.ms)
        elapse(d)
    assert waits == [500, 1000, 2000, 4000, 8000, 16000, 32000, 32000, 32000, 32000]


@pytest.mark.spec("R-RETRY-1")
def test_retry_policy_delay_formula() -> None:
    """RetryPolicy.delay_ms: 500 * 2^(n-1) capped at 32000; retry-after wins."""
    p = RetryPolicy()
    assert [p.delay_ms(n, None) for n in range(1, 9)] == [
        500,
        1000,
        2000,
        4000,
        8000,
        16000,
        32000,
        32000,
    ]
    assert p.delay_ms(3, 7_000) == 7_000
    assert p.delay_ms(1, 60_000) == 60_000


@pytest.mark.spec("R-RETRY-1")
def test_retry_after_wins() -> None:
    """A retry-after on the failure is the Wait's ms; without it the backoff resumes."""
    d = Driver(default())
    fx = fail(d, "rate_limited", status=429, retry_after_ms=7_000)
    assert [w.ms for w in of(fx, Wait)] == [7_000]
    elapse(d)
    fx = fail(d, "rate_limited", status=429)
    assert [w.ms for w in of(fx, Wait)] == [1_000]


@pytest.mark.spec("R-RETRY-1")
@pytest.mark.parametrize("kind", ["rate_limited", "overloaded", "server_error", "connection"])
def test_retry_resends_same_request(kind: str) -> None:
    """Notice, Wait, WaitElapsed, then a CallModel with a new call_id and the same conversation."""
    d = Driver(default())
    (first,) = d.of(CallModel)
    d.text("partial answer")
    partial_id = d.state.round.blocks[0].id
    fx = fail(d, kind, status=503)
    assert d.phase == "waiting_retry"
    items = emitted_in(fx)
    assert Tombstone(message_id=partial_id) in items  # the attempt is discarded
    notices = [m for m in items if isinstance(m, SystemMessage)]
    assert [n.subtype for n in notices] == ["api_error"]
    assert not api_errors(items)
    (w,) = of(fx, Wait)
    assert w.ms == 500
    assert not of(fx, CallModel)
    fx = elapse(d)
    (again,) = of(fx, CallModel)
    assert again.call_id > first.call_id
    assert again.conversation == first.conversation
    assert (again.model, again.max_tokens, again.streaming) == (
        first.model,
        first.max_tokens,
        first.streaming,
    )
    assert d.phase == "streaming"


@pytest.mark.spec("R-RETRY-1")
def test_retry_discards_the_attempt_and_cancels_its_tools() -> None:
    """A retried attempt's running tools are cancelled and its blocks never reach the conversation."""
    d = Driver(default())
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.py")
    fx = d.allow("r1")
    gen = of(fx, StartTool)[0].generation
    fx = fail(d, "connection")
    assert of(fx, CancelTools) == [
        CancelTools(generation=gen, tool_use_ids=("r1",), reason="discarded")
    ]
    elapse(d)
    old_call = d.call_id - 1
    assert d.feed(ModelBlockReceived(call_id=old_call, block=TextBlock(text="late"))) == ()
    d.reply("fine")
    d.hooks_pass()
    msgs = d.state.conversation.messages()
    assert not [
        m
        for m in msgs
        if isinstance(m, AssistantMessage) and m.content[0] != TextBlock(text="fine")
    ]


@pytest.mark.spec("R-RETRY-1")
def test_retry_counter_is_per_round() -> None:
    """The backoff restarts at 500 ms in the next round."""
    d = Driver(default())
    fail(d, "server_error")
    elapse(d)
    fx = fail(d, "server_error")
    assert [w.ms for w in of(fx, Wait)] == [1_000]
    elapse(d)
    tool_round(d, "u1")
    assert d.transition == NextTurn()
    fx = fail(d, "server_error")
    assert [w.ms for w in of(fx, Wait)] == [500]


# --- R-RETRY-2 -------------------------------------------------------------------------------


def _thinking_round(d: Driver) -> None:
    d.block(ThinkingBlock(thinking="hmm", signature="sig"))
    d.block(RedactedThinkingBlock(data="xx"))
    d.text("let me look")
    tool_round(d, "u0")


def _overload_to_fallback(d: Driver) -> tuple[Any, ...]:
    for _ in range(2):
        fx = fail(d, "overloaded", status=529)
        assert of(fx, Wait)
        elapse(d)
    d.text("streamed before the 529")
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.py")
    d.allow("r1")
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="b.py")
    return fail(d, "overloaded", status=529)


@pytest.mark.spec("R-RETRY-2")
def test_fallback_after_three_overloaded() -> None:
    """3rd consecutive 529: fallback results, switch notice, stripped thinking, call on fallback."""
    d = Driver(default(fallback_model=FALLBACK))
    _thinking_round(d)
    fx = _overload_to_fallback(d)
    items = emitted_in(fx)
    results = [
        b
        for m in items
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [(b.tool_use_id, b.content, b.is_error) for b in results] == [
        ("r1", "Model fallback triggered", True),
        ("u1", "Model fallback triggered", True),
    ]
    notices = [m.text for m in items if isinstance(m, SystemMessage)]
    assert notices == [f"Switched to {FALLBACK} due to high demand for {MODEL}"]
    assert not of(fx, Wait)  # retried at once
    (call,) = of(fx, CallModel)
    assert call.model == FALLBACK
    sent = call.conversation.messages()
    blocks = [b for m in sent if isinstance(m, AssistantMessage) for b in m.content]
    assert not [b for b in blocks if isinstance(b, (ThinkingBlock, RedactedThinkingBlock))]
    assert TextBlock(text="let me look") in blocks
    # the attempt is dropped from state: neither its tool_uses nor its results are stored
    assert tool_ids(sent) == (["u0"], ["u0"])
    assert d.state.model == FALLBACK


@pytest.mark.spec("R-RETRY-2")
def test_fallback_resets_retry_counters() -> None:
    """After the switch the retry counters are fresh: the next failure waits 500 ms."""
    d = Driver(default(fallback_model=FALLBACK))
    _overload_to_fallback(d)
    fx = fail(d, "overloaded", status=529)
    assert [w.ms for w in of(fx, Wait)] == [500]
    assert d.state.round.retry_attempt == 1


@pytest.mark.spec("R-RETRY-2")
def test_fallback_keeps_thinking_without_stripping() -> None:
    """With strip_signatures_on_fallback off the thinking blocks stay in the conversation."""
    d = Driver(default(fallback_model=FALLBACK, strip_signatures_on_fallback=False))
    _thinking_round(d)
    fx = _overload_to_fallback(d)
    (call,) = of(fx, CallModel)
    blocks = [
        b
        for m in call.conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
    ]
    assert ThinkingBlock(thinking="hmm", signature="sig") in blocks
    assert RedactedThinkingBlock(data="xx") in blocks


@pytest.mark.spec("R-RETRY-2")
def test_fallback_model_is_sticky_for_the_session() -> None:
    """The next user turn started from the session still calls the fallback model."""
    cfg = default(fallback_model=FALLBACK)
    d = Driver(cfg)
    _overload_to_fallback(d)
    d.reply()
    d.hooks_pass()
    assert d.state.session().model == FALLBACK
    nxt = Driver(cfg, "next question", session=d.state.session())
    assert [c.model for c in nxt.of(CallModel)] == [FALLBACK]


@pytest.mark.spec("R-RETRY-2")
def test_fallback_needs_consecutive_overloads() -> None:
    """A different failure between 529s resets the consecutive count: no fallback yet."""
    d = Driver(default(fallback_model=FALLBACK))
    for kind in ("overloaded", "overloaded", "server_error", "overloaded"):
        fx = fail(d, kind, status=529)
        assert of(fx, Wait), kind
        elapse(d)
    assert d.state.model == MODEL
    assert not [
        m for m in d.emitted() if isinstance(m, SystemMessage) and m.subtype == "model_fallback"
    ]


# --- R-RETRY-3 -------------------------------------------------------------------------------


@pytest.mark.spec("R-RETRY-3")
def test_no_fallback_model_gives_up_at_the_limit() -> None:
    """Without a fallback model the 3rd consecutive 529 gives up at once: completed, no hooks."""
    d = Driver(default())
    for _ in range(2):
        fail(d, "overloaded", status=529)
        elapse(d)
    fx = fail(d, "overloaded", status=529, message="Overloaded")
    assert not of(fx, Wait)
    assert_completed_without_hooks(d)
    assert [error_text(m) for m in api_errors(emitted_in(fx), "overloaded")] == [
        "API Error: Overloaded"
    ]


@pytest.mark.spec("R-RETRY-3")
def test_already_on_fallback_gives_up_at_the_limit() -> None:
    """Once on the fallback model, three more 529s give up instead of switching again."""
    d = Driver(default(fallback_model=FALLBACK))
    _overload_to_fallback(d)
    for _ in range(2):
        fail(d, "overloaded", status=529)
        elapse(d)
    fx = fail(d, "overloaded", status=529)
    assert not of(fx, Wait) and not of(fx, CallModel)
    assert_completed_without_hooks(d)
    assert d.state.model == FALLBACK


# --- R-RETRY-4 -------------------------------------------------------------------------------


@pytest.mark.spec("R-RETRY-4")
def test_retries_exhausted_end_completed_without_hooks() -> None:
    """After max_retries the failure is an emitted, stored API error; completed without hooks."""
    d = Driver(with_retries(default(), 2))
    for _ in range(2):
        fail(d, "connection")
        elapse(d)
    fx = fail(d, "connection", message="ECONNRESET")
    assert len(d.of(Wait)) == 2
    assert not of(fx, Wait)
    assert_completed_without_hooks(d)
    (err,) = api_errors(emitted_in(fx))
    assert err.api_error is not None and err.api_error.kind == "connection"
    assert err.content == (TextBlock(text="API Error: ECONNRESET"),)
    assert d.state.conversation.messages()[-1] == err


@pytest.mark.spec("R-RETRY-4")
def test_default_ten_retries_then_give_up() -> None:
    """The default policy retries 10 times; the 11th failure ends the turn."""
    d = Driver(default())
    for _ in range(10):
        fail(d, "server_error")
        elapse(d)
    fail(d, "server_error")
    assert len(d.of(Wait)) == 10
    assert_completed_without_hooks(d)


@pytest.mark.spec("R-RETRY-4")
def test_zero_retries_gives_up_at_once() -> None:
    """max_retries=0: the first retryable failure ends the turn."""
    d = Driver(with_retries(default(), 0))
    fail(d, "rate_limited", status=429)
    assert not d.of(Wait)
    assert_completed_without_hooks(d)


# --- R-RETRY-5 -------------------------------------------------------------------------------


@pytest.mark.spec("R-RETRY-5")
def test_stream_broken_falls_back_to_non_streaming() -> None:
    """stream_broken: tombstones for each emitted block, then CallModel(streaming=False) at once."""
    d = Driver(default())
    d.text("one")
    d.text("two")
    ids = [b.id for b in d.state.round.blocks]
    first = d.of(CallModel)[0]
    fx = fail(d, "stream_broken")
    tombs = [i for i in emitted_in(fx) if isinstance(i, Tombstone)]
    assert tombs == [Tombstone(message_id=i) for i in ids]
    assert not of(fx, Wait)
    (call,) = of(fx, CallModel)
    assert call.streaming is False
    assert call.call_id > first.call_id
    assert call.conversation == first.conversation


@pytest.mark.spec("R-RETRY-5")
def test_stream_broken_of_non_streaming_call_waits_like_connection() -> None:
    """A second stream_broken (non-streaming call) waits and retries, still non-streaming."""
    d = Driver(default())
    fail(d, "stream_broken")
    fx = fail(d, "stream_broken")
    assert [w.ms for w in of(fx, Wait)] == [500]
    assert [m.subtype for m in emitted_in(fx) if isinstance(m, SystemMessage)] == ["api_error"]
    assert not of(fx, CallModel)
    fx = elapse(d)
    assert [c.streaming for c in of(fx, CallModel)] == [False]


@pytest.mark.spec("R-RETRY-5")
def test_non_streaming_lasts_only_for_the_round() -> None:
    """The next round streams again."""
    d = Driver(default())
    fail(d, "stream_broken")
    tool_round(d, "u1")
    assert d.transition == NextTurn()
    assert of(d.last, CallModel)[-1].streaming is True


# --- R-PTL-1 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-PTL-1")
def test_prompt_too_long_withheld_in_default() -> None:
    """Default: the PTL error is withheld and reactive compaction starts."""
    d = Driver(default())
    fx = fail(d, "prompt_too_long", status=400)
    assert not api_errors(emitted_in(fx))
    assert [c.trigger for c in of(fx, Compact)] == ["reactive"]
    assert d.state.round.withheld is not None
    assert d.state.round.withheld.content == (TextBlock(text="Prompt is too long"),)


@pytest.mark.spec("R-PTL-1")
def test_prompt_too_long_emitted_in_claude_code() -> None:
    """claude_code_2_1_88: the PTL error is emitted at once and the turn ends completed."""
    d = Driver(claude_code_2_1_88())
    fx = fail(d, "prompt_too_long", status=400)
    (err,) = api_errors(emitted_in(fx), "prompt_too_long")
    assert err.content == (TextBlock(text="Prompt is too long"),)
    assert not of(fx, Compact)
    assert_completed_without_hooks(d)
    assert d.state.conversation.messages()[-1] == err


# --- R-MEDIA-1 -------------------------------------------------------------------------------


@pytest.mark.spec("R-MEDIA-1")
def test_media_error_withheld_in_default() -> None:
    """Default: a media error is withheld and reactive compaction starts."""
    d = Driver(default())
    fx = fail(d, "media", status=413, message="Image was too large")
    assert not api_errors(emitted_in(fx))
    assert [c.trigger for c in of(fx, Compact)] == ["reactive"]


@pytest.mark.spec("R-MEDIA-1")
def test_media_error_emitted_without_media_recovery() -> None:
    """claude_code_2_1_88: the media error is emitted at once; completed."""
    d = Driver(claude_code_2_1_88())
    fx = fail(d, "media", status=413, message="Image was too large")
    (err,) = api_errors(emitted_in(fx), "media")
    assert "Image was too large" in error_text(err)
    assert not of(fx, Compact)
    assert_completed_without_hooks(d)


# --- R-MOT-1 ---------------------------------------------------------------------------------


@pytest.mark.spec("R-MOT-1")
def test_max_tokens_with_complete_tool_use_takes_tool_path() -> None:
    """max_tokens with a complete tool_use runs the tool and continues; the error never shows."""
    d = Driver(default())
    d.text("I will edit")
    d.tool_use("u1", "Edit", traits=UNSAFE, file_path="a.py")
    d.end("max_tokens")
    assert d.phase == "running_tools"
    d.allow("u1")
    d.finish_tool("u1")
    assert d.transition == NextTurn()
    (call,) = of(d.last, CallModel)
    assert call.max_tokens == 8_000  # no escalation
    uses = [
        b
        for m in call.conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    assert [u.id for u in uses] == ["u1"]
    d.reply()
    d.hooks_pass()
    assert not api_errors(d.emitted())
    assert not api_errors(d.state.conversation.messages())


@pytest.mark.spec("R-MOT-1")
def test_max_tokens_with_truncated_tool_use_takes_mot_ladder() -> None:
    """A tool_use cut off by max_tokens is not a tool call: the MOT ladder runs (escalate)."""
    d = Driver(default())
    d.block(ToolUseBlock(id="u1", name="Edit", input={}), tool=UNSAFE, complete=False)
    d.end("max_tokens")
    assert d.transition == MaxOutputTokensEscalate()
    assert of(d.last, CallModel)[-1].max_tokens == 64_000


@pytest.mark.spec("R-MOT-1")
def test_max_tokens_error_wording_names_the_call_max_tokens() -> None:
    """The surfaced MOT error quotes the reference wording with the call's max_tokens."""
    d = Driver(claude_code_2_1_88())  # no escalation: 3 nudges then the error
    for _ in range(4):
        d.text("partial")
        d.end("max_tokens")
    (err,) = api_errors(d.emitted(), "max_output_tokens")
    assert error_text(err) == (
        "API Error: Claude's response exceeded the 32000 output token maximum. "
        "To configure this behavior, set the CLAUDE_CODE_MAX_OUTPUT_TOKENS environment variable."
    )
    assert isinstance(d.last[-1], Finish) and d.last[-1].terminal == Completed()


@pytest.mark.spec("R-MOT-1")
def test_context_window_exceeded_is_a_mot_error() -> None:
    """model_context_window_exceeded goes through the same ladder with its own wording."""
    d = Driver(claude_code_2_1_88())
    for _ in range(4):
        d.text("partial")
        d.end("model_context_window_exceeded")
    (err,) = api_errors(d.emitted(), "max_output_tokens")
    assert error_text(err) == "API Error: The model has reached its context window limit."


# --- R-AUTH-1 --------------------------------------------------------------------------------


@pytest.mark.spec("R-AUTH-1")
@pytest.mark.parametrize(("kind", "status"), [("auth", 401), ("invalid_request", 400)])
def test_auth_and_invalid_request_end_at_once(kind: str, status: int) -> None:
    """auth / invalid_request: an API error emitted at once, no retry, completed without hooks."""
    d = Driver(default())
    fx = fail(d, kind, status=status, message="nope")
    (err,) = api_errors(emitted_in(fx), kind)
    assert err.content == (TextBlock(text="API Error: nope"),)
    assert err.api_error is not None and err.api_error.status == status
    assert not of(fx, Wait) and not of(fx, Compact)
    assert_completed_without_hooks(d)
    assert d.state.conversation.messages()[-1] == err
