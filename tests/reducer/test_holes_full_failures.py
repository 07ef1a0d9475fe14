"""Holes the full mutation run found (issue 12; scripts/mutation.py --full): behaviours the code
had right but no test pinned. Each test names the mutant it kills in a comment (the mutant's key
as the runner writes it, shortened); each was checked against its mutant (applied by hand, the
test fails, reverted). The survivors that change no behaviour are listed, with the reason, in
specs/mutation-equivalents.txt.

This file: the failures (overflow, retries and their texts, the give-up's category, the model
fallback, the backoff).
"""

from __future__ import annotations

from typing import Any

import pytest

from steploop.reducer import (
    Compat,
    Gates,
    IllegalEvent,
    RetryPolicy,
    Session,
    claude_code_2_1_88,
    default,
)
from steploop.reducer.effects import AskPermission, CallModel, Finish, Wait
from steploop.reducer.events import Interrupted, ModelCallFailed, ModelResponseEnded, WaitElapsed
from steploop.reducer.messages import (
    AssistantMessage,
    SystemMessage,
    TextBlock,
    Tombstone,
    ToolResultBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.transitions import Completed
from tests.reducer.driver import Driver
from tests.reducer.holes_full_kit import MODEL, emitted, of


def api_errors(items: Any) -> list[AssistantMessage]:
    return [m for m in items if isinstance(m, AssistantMessage) and m.api_error is not None]


# --- R-OVERFLOW-1 ----------------------------------------------------------------------------------


def _overflow(d: Driver, inp: int, limit: int) -> tuple[Any, ...]:
    return d.feed(
        ModelCallFailed(
            call_id=d.call_id,
            kind="context_overflow",
            message="input length and `max_tokens` exceed context limit",
            status=400,
            input_tokens=inp,
            context_limit=limit,
        )
    )


@pytest.mark.spec("R-OVERFLOW-1")
@pytest.mark.parametrize(("room", "cap"), [(0, None), (1, 1)], ids=["nothing-fits", "one-fits"])
def test_overflow_with_a_floor_of_one_token(room: int, cap: int | None) -> None:
    """With floor_output_tokens=1, no room left (available 0) is not retried; one token of room
    is (max_tokens 1)."""
    # kills: _overflow_cap | const | available = max(0, ...) | 0 -> 1
    d = Driver(default(floor_output_tokens=1))
    fx = _overflow(d, 199_000 - room, 200_000)  # available = 200,000 - input - 1,000
    assert [c.max_tokens for c in of(fx, CallModel)] == ([] if cap is None else [cap])
    if cap is None:
        (err,) = api_errors(emitted(fx))
        assert err.api_error is not None and err.api_error.kind == "invalid_request"
        assert isinstance(d.state.transition, Completed)


# --- failures: the texts [R-RETRY-1], [R-AUTH-1], [R-REFUSAL-1] ------------------------------------


@pytest.mark.spec("R-RETRY-1")
@pytest.mark.parametrize(("status", "shown"), [(None, "connection"), (503, "503")])
def test_the_retry_notice_names_the_kind_when_there_is_no_status(
    status: int | None, shown: str
) -> None:
    """A connection failure (no HTTP status) is retried with a notice naming its kind."""
    # kills: _retry | boolop | f"API error ({e.status or e.kind}); ..." | or: drop e.kind
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="connection", status=status))
    assert of(fx, Wait)
    (notice,) = [m for m in emitted(fx) if isinstance(m, SystemMessage)]
    assert notice.subtype == "api_error"
    assert notice.text == f"API error ({shown}); retrying in 500 ms (attempt 1 of 10)"


@pytest.mark.spec("R-AUTH-1", "R-OVERFLOW-1")
@pytest.mark.parametrize(
    ("kind", "text"),
    [("auth", "API Error: auth"), ("invalid_request", "API Error: invalid_request")],
)
def test_an_auth_or_invalid_request_failure_without_a_message_names_its_kind(
    kind: str, text: str
) -> None:
    """An auth or invalid-request failure with an empty message: the API-error text names the kind."""
    # kills: on_call_failed | boolop | f"API Error: {e.message or kind}" | or: drop kind
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, status=400))
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == kind
    assert err.content == (TextBlock(text=text),) and err.api_error.message == text


@pytest.mark.spec("R-OVERFLOW-1", "R-AUTH-1")
def test_an_overflow_that_stands_without_a_message_names_invalid_request() -> None:
    """A context overflow that cannot be retried and has no message: `API Error: invalid_request`."""
    # kills: on_call_failed | boolop | f"API Error: {e.message or kind}" | or: drop kind
    d = Driver(default())
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="context_overflow", status=400))
    (err,) = api_errors(emitted(fx))
    assert err.content == (TextBlock(text="API Error: invalid_request"),)


@pytest.mark.spec("R-REFUSAL-1")
def test_a_refusal_without_stop_details_keeps_empty_details() -> None:
    """A refusal whose response carried no stop_details stores details "" (a str), never None."""
    # kills: _refusal | boolop | details=e.stop_details or "" | or: drop ''
    d = Driver(default())
    d.text("I can't")
    fx = d.feed(
        ModelResponseEnded(
            call_id=d.call_id,
            model=MODEL,
            stop_reason="refusal",
            usage=Usage(input_tokens=10, output_tokens=2),
        )
    )
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.details == ""
    (stored,) = api_errors(d.state.conversation.messages())
    assert stored.api_error is not None and stored.api_error.details == ""


# --- the second list of the full run (issue 12) ---------------------------------------------------


@pytest.mark.spec("R-SESSION-1", "R-RETRY-2")
def test_a_fallback_model_stays_sticky_for_every_later_turn() -> None:
    """A turn started on the session's fallback model hands it on: the turn after it starts on
    the fallback model too, not on the configured one."""
    # kills: open_turn | kwarg | s = LoopState( | drop on_fallback=
    cfg = default(fallback_model="claude-fallback-1")
    d = Driver(cfg, session=Session(model="claude-fallback-1"))
    assert d.of(CallModel)[-1].model == "claude-fallback-1"
    d.reply("done")
    d.hooks_pass()
    assert isinstance(d.finished(), Finish)
    assert d.state.session().model == "claude-fallback-1"
    nxt = Driver(cfg, "again", session=d.state.session())
    assert nxt.of(CallModel)[-1].model == "claude-fallback-1"


@pytest.mark.spec("R-MODEL-1")
def test_records_all_on_another_model_take_the_served_one() -> None:
    """Every block of the response names the called model and the response ends naming another:
    the stored records name the one that served."""
    # kills: _served | cmp | if not served or all(b.model == served for b in r.blocks): | '==' -> '!='
    cfg = default()
    d = Driver(cfg)
    d.text("a")
    d.text("b")
    assert {m.model for m in emitted(d.effects) if isinstance(m, AssistantMessage)} == {cfg.model}
    d.feed(
        ModelResponseEnded(
            call_id=d.call_id, model="claude-x-20990101", stop_reason="end_turn", usage=Usage()
        )
    )
    d.hooks_pass()
    stored = [m for m in d.state.conversation.messages() if isinstance(m, AssistantMessage)]
    assert [m.model for m in stored] == ["claude-x-20990101"] * 2


# --- R-OVERFLOW-1, the numbers missing --------------------------------------------------------------


@pytest.mark.spec("R-OVERFLOW-1")
def test_an_overflow_naming_the_limit_but_not_the_input_stands() -> None:
    """A context overflow whose message gave the context limit but not the input tokens: no cap
    can be computed, so it is not retried; the error stands as invalid_request (no crash)."""
    # kills: _overflow_cap | boolop | if e.input_tokens is None or e.context_limit is None: | or: drop e.input_tokens is None
    d = Driver(default())
    fx = d.feed(
        ModelCallFailed(
            call_id=d.call_id,
            kind="context_overflow",
            message="input length and `max_tokens` exceed context limit",
            status=400,
            context_limit=200_000,
        )
    )
    assert of(fx, CallModel) == []
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == "invalid_request"
    assert isinstance(d.state.transition, Completed)


@pytest.mark.spec("R-OVERFLOW-1", "R-RETRY-1")
def test_an_overflow_retry_tombstones_the_blocks_the_failed_attempt_streamed() -> None:
    """A context overflow after the attempt streamed a block is retried (a retry of R-RETRY-1's
    count): the attempt is discarded, its emitted block tombstoned, and the request sent again
    without it."""
    # kills: _overflow_retry | bool | s = discard_attempt(s, fx, tombstone=True) | True -> False
    d = Driver(default())
    d.text("half an answer")
    (streamed,) = [m for m in d.emitted() if isinstance(m, AssistantMessage)]
    fx = _overflow(d, 150_000, 200_000)  # available 49,000: retried with that cap
    assert [c.max_tokens for c in of(fx, CallModel)] == [49_000]
    assert emitted(fx) == [Tombstone(message_id=streamed.id)]
    assert streamed not in of(fx, CallModel)[0].conversation.messages()


# --- the fallback's results [R-RETRY-2] ------------------------------------------------------------


@pytest.mark.spec("R-RETRY-2")
def test_the_fallback_results_are_tool_results() -> None:
    """The `Model fallback triggered` results emitted for the attempt's tool calls are tool
    results (origin "tool_result"), like every other result, not prompts."""
    # kills: _synthesize_results | kwarg | fx.append(Emit(item=UserMessage(id=mid, content=(sl.result,), origin="tool_result"))) | drop origin=
    d = Driver(default(fallback_model="claude-haiku-4-5"))
    for _ in range(2):
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.tool_use("t1")  # the third attempt asks for a tool, then fails: the fallback
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert [c.model for c in of(fx, CallModel)] == ["claude-haiku-4-5"]
    (result,) = [m for m in emitted(fx) if isinstance(m, UserMessage)]
    assert result.content == (
        ToolResultBlock(tool_use_id="t1", content="Model fallback triggered", is_error=True),
    )
    assert result.origin == "tool_result"


# --- wait ids [R-ID-1] ---------------------------------------------------------------------------


@pytest.mark.spec("R-ID-1", "R-RETRY-1", "I-1")
def test_every_retry_wait_takes_a_new_id_across_turns() -> None:
    """Wait ids come from their counter: two retries wait 1 then 2; a retry wait withdrawn by an
    interrupt is not reused by the next turn, whose late elapse is refused, not taken as the new
    wait's (which would resend before its backoff)."""
    # kills: _retry | kwarg | return evolve( | drop ids=
    d = Driver(default())
    d.feed(ModelCallFailed(call_id=d.call_id, kind="rate_limited", status=429))
    d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="rate_limited", status=429))
    assert [w.wait_id for w in d.of(Wait)] == [1, 2]
    d.feed(Interrupted(kind="hard"))
    assert d.finished() is not None
    nxt = Driver(default(), session=d.state.session())
    nxt.feed(ModelCallFailed(call_id=nxt.call_id, kind="rate_limited", status=429))
    assert [w.wait_id for w in nxt.of(Wait)] == [3]
    with pytest.raises(IllegalEvent):
        nxt.feed(WaitElapsed(wait_id=2))
    assert of(nxt.feed(WaitElapsed(wait_id=3)), CallModel)


# --- the backoff formula to its last doubling [R-RETRY-1] ---------------------------------------------


@pytest.mark.spec("R-RETRY-1")
def test_the_backoff_doubles_through_attempt_31_under_a_high_cap() -> None:
    """With a cap high enough, the delay is base * 2^(attempt-1) for every attempt up to 31
    (2^30 ms); from there the doubling stops (the shift is bounded), it never shrinks."""
    # kills: RetryPolicy.delay_ms | const | return min(self.base_delay_ms * (1 << min(attempt - 1, 30)), self.max_delay_ms) | 30 -> 29
    p = RetryPolicy(max_retries=40, base_delay_ms=1, max_delay_ms=2**34)  # under the limit of a year (P-CONFIG-3)
    assert [p.delay_ms(n, None) for n in range(1, 32)] == [2 ** (n - 1) for n in range(1, 32)]
    assert p.delay_ms(32, None) == p.delay_ms(40, None) == 2**30


# --- the give-up's category reads the API's words [R-CATEGORY-1], [R-RETRY-4] ---------------------------


@pytest.mark.spec("R-CATEGORY-1", "R-RETRY-4")
@pytest.mark.parametrize(
    ("message", "category"),
    [
        ("Your credit balance is too low to access the Anthropic API", "billing_error"),
        ("invalid x-api-key", "authentication_failed"),
        ("internal error", "unknown"),
    ],
    ids=["billing", "api-key", "other"],
)
def test_the_give_up_categorises_by_the_apis_own_words(message: str, category: str) -> None:
    """Retries exhausted on a server error: under Claude Code's texts the API-error message's
    category comes from the API's own message too (a credit balance too low is billing_error,
    an invalid x-api-key authentication_failed), not from the kind and status alone."""
    # kills: _give_up | kwarg | s, err = api_error( | drop raw=
    d = Driver(claude_code_2_1_88(retry=RetryPolicy(max_retries=0)))
    fx = d.feed(
        ModelCallFailed(call_id=d.call_id, kind="server_error", status=500, message=message)
    )
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.category == category
    assert err.content == (TextBlock(text=f"API Error: {message}"),)


@pytest.mark.spec("R-CATEGORY-1", "R-AUTH-1")
def test_an_invalid_request_categorises_by_the_apis_own_words() -> None:
    """A 400 invalid request saying the credit balance is too low is, under Claude Code's texts,
    a billing_error (the API's words decide), not the unknown its kind and status give."""
    # kills: on_call_failed | kwarg | s, err = api_error( | drop raw= #3
    d = Driver(claude_code_2_1_88())
    msg = "Your credit balance is too low to access the Anthropic API."
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="invalid_request", status=400, message=msg))
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.category == "billing_error"


@pytest.mark.spec("R-CATEGORY-1", "R-MEDIA-1")
def test_a_media_error_categorises_by_the_apis_own_words() -> None:
    """An image over the size limit (400, "image exceeds ... maximum") gets no category under
    Claude Code's texts (Claude Code sets none), read from the API's words, not `unknown`."""
    # kills: on_call_failed | kwarg | s, err = api_error( | drop raw= #2
    d = Driver(claude_code_2_1_88(gates=Gates(reactive_compact=False)))
    msg = "messages.0.content.1.image.source.base64: image exceeds 5 MB maximum"
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="media", status=400, message=msg))
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == "media"
    assert err.api_error.category == ""


@pytest.mark.spec("R-RETRY-2")
def test_with_the_fallback_gate_off_overloads_are_retried_not_switched() -> None:
    """fallback_on_overload off, a fallback model configured: three overloaded failures are
    three retries on the same model, no switch."""
    # kills: _retry | boolop | e.kind == "overloaded" | and: drop cfg.gates.fallback_on_overload
    d = Driver(default(fallback_model="claude-haiku-4-5", gates=Gates(fallback_on_overload=False)))
    for _ in range(3):
        fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        assert of(fx, Wait) and of(fx, CallModel) == []
        fx = d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
        assert [c.model for c in of(fx, CallModel)] == [d.cfg.model]
    assert d.state.model == d.cfg.model


@pytest.mark.spec("R-OVERFLOW-1")
def test_an_overflow_naming_the_input_but_not_the_limit_stands() -> None:
    """A context overflow that gave the input tokens but not the context limit: no cap can be
    computed, the error stands as invalid_request (no crash)."""
    # kills: _overflow_cap | boolop | if e.input_tokens is None or e.context_limit is None: | or: drop e.context_limit is None
    d = Driver(default())
    fx = d.feed(
        ModelCallFailed(
            call_id=d.call_id, kind="context_overflow", status=400, input_tokens=150_000
        )
    )
    assert of(fx, CallModel) == []
    (err,) = api_errors(emitted(fx))
    assert err.api_error is not None and err.api_error.kind == "invalid_request"


@pytest.mark.spec("R-RETRY-2")
def test_the_model_fallback_drops_the_attempt_without_tombstones() -> None:
    """The fallback drops the failed attempt from state without tombstoning what it streamed
    (the reference's behaviour): it emits the notice, no Tombstone."""
    # kills: _model_fallback | bool | s = discard_attempt(s, fx, tombstone=False) | False -> True
    d = Driver(default(fallback_model="claude-haiku-4-5"))
    for _ in range(2):
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    d.text("half an answer")
    fx = d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    assert [c.model for c in of(fx, CallModel)] == ["claude-haiku-4-5"]
    assert [type(m) for m in emitted(fx)] == [SystemMessage]


@pytest.mark.spec("Q-3", "R-ID-1", "R-RETRY-5")
def test_under_q3_the_first_block_after_a_stream_fallback_keeps_the_calls_generation() -> None:
    """Under Q-3 only a later block drops the blocks before it: the first block after the
    streaming fallback drops nothing, so its tool is asked in the call's own generation, the one
    drawn from the counter."""
    # kills: on_block | boolop | if r.sticky_fallback and cfg.compat.sticky_streaming_fallback and r.blocks: | and: drop r.blocks
    d = Driver(default(compat=Compat(sticky_streaming_fallback=True)))
    d.feed(ModelCallFailed(call_id=d.call_id, kind="stream_broken"))
    fx = d.tool_use("t1")
    assert [a.generation for a in of(fx, AskPermission)] == [d.state.ids.generation]
