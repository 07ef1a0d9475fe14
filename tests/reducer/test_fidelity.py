"""Fidelity to the reference and to the real API (issue 15): server blocks in the machine, the
served model, and the rules and defects below, each pinned to its rule id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from steploop.reducer import LoopConfig, claude_code_2_1_88, default, full
from steploop.reducer.effects import (
    CallModel,
    Compact,
    Emit,
    Finish,
    RunStopHooks,
    TaskBudget,
    Wait,
)
from steploop.reducer.events import (
    CompactionFinished,
    Interrupted,
    ModelBlockReceived,
    ModelCallFailed,
    ModelResponseEnded,
    PermissionAnswered,
    WaitElapsed,
)
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    OpaqueBlock,
    SystemMessage,
    TextBlock,
    ToolResultBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.serialize import structure, unstructure
from steploop.reducer.state import LoopState
from steploop.reducer.texts import INTERRUPTED_TOOL_RESULT, REJECTED_RESULT, error_category
from steploop.reducer.transitions import Completed
from tests.reducer.driver import UNSAFE, Driver, usage

SEARCH_USE = '{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"q":"x"}}'
SEARCH_RESULT = (
    '{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1",'
    '"content":[{"type":"web_search_result","url":"https://e.x","encrypted_content":"Eq"}]}'
)
CITATIONS = '[{"type":"web_search_result_location","url":"https://e.x","cited_text":"c"}]'


def opaque(raw: str) -> OpaqueBlock:
    return OpaqueBlock(block_type=json.loads(raw)["type"], raw=raw)


def records(d: Driver) -> list[AssistantMessage]:
    return [m for m in d.state.conversation if isinstance(m, AssistantMessage)]


# --- server blocks in the machine ------------------------------------------------------------


@pytest.mark.spec("R-BLOCK-1", "R-BLOCK-2")
@pytest.mark.parametrize("make", [default, claude_code_2_1_88])
def test_opaque_blocks_are_emitted_stored_and_sent(make: Any) -> None:
    """A server tool call, its result and a cited text are emitted and stored as they came,
    and the next request's conversation holds them."""
    d = Driver(make())
    blocks = [
        TextBlock(text="Searching."),
        opaque(SEARCH_USE),
        opaque(SEARCH_RESULT),
        TextBlock(text="Found it.", citations=CITATIONS),
    ]
    for b in blocks:
        d.block(b)
    d.end()
    d.hooks_pass()
    assert [m.content[0] for m in records(d)] == blocks
    assert [m.content[0] for m in d.emitted() if isinstance(m, AssistantMessage)] == blocks
    fin = d.finished()
    assert fin is not None and fin.terminal.TAG == "completed"
    # the next user turn's first request carries them
    nxt = Driver(make(), "and then?", session=d.state.session())
    call = nxt.of(CallModel)[-1]
    sent = [b for m in call.conversation if isinstance(m, AssistantMessage) for b in m.content]
    assert sent == blocks


@pytest.mark.spec("R-BLOCK-1", "R-SER-1")
def test_opaque_and_cited_blocks_round_trip_through_serialization() -> None:
    """State holding an opaque block and a cited text round-trips unchanged (the trace's
    message records use the same converter)."""
    d = Driver(default())
    d.block(opaque(SEARCH_RESULT))
    d.block(TextBlock(text="t", citations=CITATIONS))
    d.end()
    again = structure(unstructure(d.state), LoopState)
    assert again == d.state
    assert [m.content[0] for m in again.round.blocks] == [
        opaque(SEARCH_RESULT),
        TextBlock(text="t", citations=CITATIONS),
    ]


@pytest.mark.spec("R-TOOL-4", "R-BLOCK-1")
def test_cut_off_server_tool_call_is_never_stored() -> None:
    """An opaque block reported with input_complete=False is neither emitted nor stored."""
    d = Driver(default())
    d.text("Let me search.")
    emitted_before = len(d.emitted())
    d.block(opaque(SEARCH_USE), complete=False)
    assert len(d.emitted()) == emitted_before
    d.end("max_tokens")
    assert all(not isinstance(b, OpaqueBlock) for m in records(d) for b in m.content)


@pytest.mark.spec("R-TOK-1")
def test_opaque_blocks_count_toward_the_context() -> None:
    """After the last usage, an opaque block adds the estimate of its JSON text."""
    d = Driver(default())
    d.reply("first", usage(1_000, 10))
    d.hooks_pass()
    before = d.state.conversation.token_count()
    big = '{"type":"web_fetch_tool_result","content":"' + "x" * 4_000 + '"}'
    conv = d.state.conversation.append(
        AssistantMessage(id="z", response_id="rz", model="m", content=(opaque(big),))
    )
    assert conv.token_count() - before == (len(big) + 2) // 4


# --- the served model ----------------------------------------------------------------------


@pytest.mark.spec("R-MODEL-1")
def test_stored_records_name_the_model_that_served() -> None:
    """Blocks name the serving model when the event says it; the stored records take the one
    ModelResponseEnded reports; the next request still asks for the configured model."""
    cfg = default()
    d = Driver(cfg)
    d.feed(ModelBlockReceived(call_id=1, block=TextBlock(text="a"), model="claude-x-20990101"))
    d.feed(ModelBlockReceived(call_id=1, block=TextBlock(text="b")))
    emitted = [m for m in d.emitted() if isinstance(m, AssistantMessage)]
    assert [m.model for m in emitted] == ["claude-x-20990101", cfg.model]
    d.feed(
        ModelResponseEnded(
            call_id=1, model="claude-x-20990101", stop_reason="end_turn", usage=Usage()
        )
    )
    d.hooks_pass()
    assert {m.model for m in records(d)} == {"claude-x-20990101"}
    nxt = Driver(cfg, "again", session=d.state.session())
    assert nxt.of(CallModel)[-1].model == cfg.model
    assert isinstance(d.finished(), Finish)


# --- R-OVERFLOW-1: the context-overflow retry ------------------------------------------------

OVERFLOW = "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"


def overflow(d: Driver, inp: int = 188_059, limit: int = 200_000) -> tuple[Any, ...]:
    return d.feed(
        ModelCallFailed(
            call_id=d.call_id,
            kind="context_overflow",
            message=OVERFLOW,
            status=400,
            input_tokens=inp,
            context_limit=limit,
        )
    )


@pytest.mark.spec("R-OVERFLOW-1")
@pytest.mark.parametrize("make", [default, claude_code_2_1_88])
def test_overflow_is_retried_at_once_with_the_cap_that_fits(make: Any) -> None:
    """188,059 + max_tokens > 200,000: resent at once with 200,000 - 188,059 - 1,000 = 10,941,
    no wait and no notice; the retry counts; the answer then ends the turn as usual."""
    d = Driver(make())
    fx = overflow(d)
    calls = [e for e in fx if isinstance(e, CallModel)]
    assert len(calls) == 1 and calls[0].max_tokens == 10_941
    assert not [e for e in fx if isinstance(e, (Wait, Emit))]
    assert d.state.round.retry_attempt == 1
    d.reply("fits now")
    d.hooks_pass()
    fin = d.finished()
    assert fin is not None and fin.terminal == Completed()


@pytest.mark.spec("R-OVERFLOW-1")
def test_overflow_cap_has_a_floor_and_covers_the_thinking_budget() -> None:
    """max(3,000, available, thinking budget + 1): a thinking budget above what is available
    wins; so does the floor (when exactly the floor is available)."""
    d = Driver(default(thinking_budget=16_000))
    calls = [e for e in overflow(d) if isinstance(e, CallModel)]
    assert calls[0].max_tokens == 16_001
    d = Driver(default())
    calls = [e for e in overflow(d, inp=196_000) if isinstance(e, CallModel)]
    assert calls[0].max_tokens == 3_000


@pytest.mark.spec("R-OVERFLOW-1", "R-AUTH-1")
def test_overflow_with_too_little_room_stands_as_an_invalid_request() -> None:
    """Under 3,000 tokens left: no retry; the error is an emitted invalid_request API error and
    the turn ends completed without stop hooks (G1)."""
    d = Driver(default())
    fx = overflow(d, inp=196_001)
    assert not [e for e in fx if isinstance(e, CallModel)]
    errors = [m for m in d.emitted() if isinstance(m, AssistantMessage) and m.api_error]
    assert len(errors) == 1 and errors[0].api_error is not None
    assert errors[0].api_error.kind == "invalid_request" and OVERFLOW in errors[0].api_error.message
    fin = d.finished()
    assert fin is not None and fin.terminal == Completed()
    assert not d.of(RunStopHooks)


@pytest.mark.spec("R-OVERFLOW-1")
def test_overflow_without_numbers_or_retries_left_stands() -> None:
    """A context_overflow whose numbers are missing, or with no retry left, is not retried."""
    d = Driver(default())
    d.feed(ModelCallFailed(call_id=1, kind="context_overflow", message="?", status=400))
    assert d.finished() is not None and not d.of(Wait)
    d = Driver(default().with_overrides({"retry.max_retries": 0}))
    fx = overflow(d)
    assert not [e for e in fx if isinstance(e, CallModel)]
    assert d.finished() is not None


@pytest.mark.spec("R-OVERFLOW-1", "R-RETRY-1", "R-RETRY-2")
def test_the_lowered_cap_holds_for_the_round_until_a_model_fallback() -> None:
    """After an overflow retry a 529 retry keeps the lowered cap; the fallback model's first
    call is sent with its own cap again."""
    cfg = default(fallback_model="claude-haiku-4-5")
    d = Driver(cfg)
    overflow(d)
    d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
    d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    assert d.of(CallModel)[-1].max_tokens == 10_941
    for _ in range(2):
        d.feed(ModelCallFailed(call_id=d.call_id, kind="overloaded", status=529))
        if d.phase == "waiting_retry":
            d.feed(WaitElapsed(wait_id=d.state.round.pending_id))
    last = d.of(CallModel)[-1]
    assert last.model == "claude-haiku-4-5" and last.max_tokens == cfg.default_max_tokens


# --- R-CATEGORY-1: Claude Code's category names ------------------------------------------------


@pytest.mark.spec("R-CATEGORY-1")
@pytest.mark.parametrize(
    ("kind", "status", "message", "category"),
    [
        ("rate_limited", 429, "Number of requests exceeded", "rate_limit"),
        ("overloaded", 529, "Overloaded", "unknown"),
        ("server_error", 500, "Internal server error", "unknown"),
        ("server_error", 408, "Request timeout", "unknown"),
        ("auth", 401, "invalid x-api-key", "authentication_failed"),
        ("auth", 403, "OAuth token has been revoked", "authentication_failed"),
        (
            "invalid_request",
            400,
            "Your credit balance is too low to access the API",
            "billing_error",
        ),
        ("invalid_request", 400, "`tool_use` ids must be unique", "invalid_request"),
        ("invalid_request", 404, "model: claude-nope", "invalid_request"),
        ("invalid_request", 400, "max_tokens: must be positive", "unknown"),
        ("media", 413, "Request too large", "invalid_request"),
        ("media", 400, "image exceeds 5 MB maximum: 5316852 bytes > 5242880 bytes", ""),
        ("media", 400, "A maximum of 100 PDF pages may be provided.", "invalid_request"),
        (
            "prompt_too_long",
            400,
            "prompt is too long: 210000 tokens > 200000 maximum",
            "invalid_request",
        ),
        ("blocking_limit", None, "Prompt is too long", "invalid_request"),
        (
            "max_output_tokens",
            None,
            "API Error: Claude's response exceeded ...",
            "max_output_tokens",
        ),
        ("refusal", None, "", "invalid_request"),
        ("image_client", None, "Image could not be resized", ""),
        ("connection", None, "ConnectError: refused", "unknown"),
        ("stream_broken", None, "ReadTimeout", "unknown"),
        ("unknown", None, "socket hang up", "unknown"),
    ],
)
def test_error_category_is_claude_codes(
    kind: str, status: int | None, message: str, category: str
) -> None:
    """The ``error`` field Claude Code 2.1.88 gives each failure's API-error message."""
    assert error_category(kind, status, message) == category


def _exhaust(d: Driver, kind: str, status: int, message: str) -> None:
    while d.finished() is None:
        d.feed(ModelCallFailed(call_id=d.call_id, kind=kind, status=status, message=message))
        if d.phase == "waiting_retry":
            d.feed(WaitElapsed(wait_id=d.state.round.pending_id))


@pytest.mark.spec("R-CATEGORY-1", "R-RETRY-4", "R-AUTH-1")
@pytest.mark.parametrize(
    ("kind", "status", "category"),
    [
        ("rate_limited", 429, "rate_limit"),
        ("auth", 401, "authentication_failed"),
        ("server_error", 503, "unknown"),
    ],
)
def test_api_error_messages_carry_the_category_under_claude_codes_texts(
    kind: str, status: int, category: str
) -> None:
    """Under claude_code_2_1_88() the emitted and stored API error carries Claude Code's
    category; the default profile leaves it unset (its kind says it)."""
    for make, expected in ((claude_code_2_1_88, category), (default, None)):
        d = Driver(make())
        _exhaust(d, kind, status, "nope")
        errors = [
            m for m in d.state.conversation if isinstance(m, AssistantMessage) and m.api_error
        ]
        assert len(errors) == 1 and errors[0].api_error is not None
        assert errors[0].api_error.kind == kind
        assert errors[0].api_error.category == expected
        assert errors[0] in d.emitted()


@pytest.mark.spec("R-CATEGORY-1", "R-PTL-1")
def test_prompt_too_long_keeps_the_apis_words_as_details() -> None:
    """The message says "Prompt is too long"; the API's own text (with the token counts) is
    kept in ``details``, as Claude Code keeps it in errorDetails."""
    d = Driver(claude_code_2_1_88())
    raw = "prompt is too long: 210000 tokens > 200000 maximum"
    d.feed(ModelCallFailed(call_id=1, kind="prompt_too_long", status=400, message=raw))
    err = next(m for m in d.emitted() if isinstance(m, AssistantMessage) and m.api_error)
    assert err.api_error is not None
    assert (err.api_error.message, err.api_error.details) == ("Prompt is too long", raw)
    assert err.api_error.category == "invalid_request"


# --- R-REFUSAL-1: stop_reason "refusal" ---------------------------------------------------------

DETAILS = '{"type":"refusal","category":"cyber","explanation":"This could enable malware."}'


def refuse(d: Driver, details: str | None = DETAILS) -> None:
    d.feed(
        ModelResponseEnded(
            call_id=d.call_id,
            model=d.state.model,
            stop_reason="refusal",
            usage=usage(),
            stop_details=details,
        )
    )


def api_error_messages(items: Any) -> list[AssistantMessage]:
    return [m for m in items if isinstance(m, AssistantMessage) and m.api_error is not None]


@pytest.mark.spec("R-REFUSAL-1", "G1")
def test_refusal_ends_the_turn_as_an_api_error_with_its_explanation() -> None:
    """Default texts: the partial answer is kept, an API error naming the policy category and
    the API's explanation is emitted and stored (stop_details kept in details), and the turn
    ends completed without stop hooks."""
    d = Driver(default())
    d.text("I can help with")
    refuse(d)
    errors = api_error_messages(d.emitted())
    assert len(errors) == 1
    err = errors[0]
    assert err.api_error is not None and err.api_error.kind == "refusal"
    assert err.content == (
        TextBlock(
            text="API Error: The model refused to respond to this request. Policy category: "
            "cyber. This could enable malware."
        ),
    )
    assert err.api_error.details == DETAILS and err.api_error.category is None
    fin = d.finished()
    assert fin is not None and fin.terminal == Completed()
    assert not d.of(RunStopHooks)
    stored = list(d.state.conversation)
    assert stored[-1] == err
    assert isinstance(stored[-2], AssistantMessage) and stored[-2].stop_reason == "refusal"


@pytest.mark.spec("R-REFUSAL-1", "R-TEXTS-1", "R-CATEGORY-1")
@pytest.mark.parametrize(
    ("overrides", "tail"),
    [
        (
            {},
            " Please double press esc to edit your last message or start a new session for "
            "Claude Code to assist with a different task. If you are seeing this refusal "
            "repeatedly, try running /model claude-sonnet-4-20250514 to switch models.",
        ),
        (
            {"non_interactive": True},
            " Try rephrasing the request or attempting a different approach. If you are seeing "
            "this refusal repeatedly, try running /model claude-sonnet-4-20250514 to switch "
            "models.",
        ),
        (
            {"non_interactive": True, "model": "claude-sonnet-4-20250514"},
            " Try rephrasing the request or attempting a different approach.",
        ),
    ],
)
def test_refusal_under_claude_codes_texts(overrides: dict[str, Any], tail: str) -> None:
    """claude_code_2_1_88(): Claude Code's usage-policy text (interactive or not, with the
    model suggestion unless on claude-sonnet-4-20250514), category invalid_request."""
    d = Driver(claude_code_2_1_88(**overrides))
    refuse(d, None)
    err = api_error_messages(d.emitted())[0]
    assert err.content == (
        TextBlock(
            text="API Error: Claude Code is unable to respond to this request, which appears to "
            "violate our Usage Policy (https://www.anthropic.com/legal/aup)." + tail
        ),
    )
    assert err.api_error is not None and err.api_error.category == "invalid_request"
    assert d.finished() is not None and not d.of(RunStopHooks)


@pytest.mark.spec("R-REFUSAL-1", "G13")
def test_refusal_with_a_tool_call_runs_the_tool_and_keeps_the_error() -> None:
    """A refusal after a complete tool call: the call runs (its result answers it), the error
    is emitted at the end of the response and stored after the round's results."""
    d = Driver(default())
    d.tool_use("t1")
    refuse(d)
    d.allow("t1")
    d.finish_tool("t1", "file text")
    err = api_error_messages(d.emitted())[0]
    stored = list(d.state.conversation)
    assert err in stored
    assert d.transition is not None and d.transition.TAG == "next_turn"


# --- S-PAUSE-1: pause_turn ------------------------------------------------------------------------


def pause(d: Driver, *blocks: Any) -> None:
    for b in blocks:
        d.block(b)
    d.end("pause_turn")


@pytest.mark.spec("S-PAUSE-1")
def test_default_resumes_a_paused_turn_with_the_paused_response() -> None:
    """A paused server-tool loop is resumed: the paused blocks are stored and the very next
    request ends with them (no user message, no stop hooks); the answer then ends the turn."""
    d = Driver(default())
    pause(d, TextBlock(text="Searching."), opaque(SEARCH_USE))
    calls = d.of(CallModel)
    assert len(calls) == 2 and not d.of(RunStopHooks)
    last = calls[-1].conversation.messages()[-1]
    assert isinstance(last, AssistantMessage) and last.content == (opaque(SEARCH_USE),)
    assert last.stop_reason == "pause_turn"
    assert d.state.pause_resumes == 1 and d.transition is None  # not a transition
    d.block(opaque(SEARCH_RESULT))
    d.reply("Found it.")
    assert d.state.pause_resumes == 0
    d.hooks_pass()
    fin = d.finished()
    assert fin is not None and fin.terminal == Completed()


@pytest.mark.spec("S-PAUSE-1")
def test_pause_resumes_are_capped_even_for_empty_pauses() -> None:
    """At most pause_turn_resumes (5) in a row; the next pause emits the cap notice and ends
    the turn as end_turn does (stop hooks). Empty paused responses count too."""
    d = Driver(default())
    for _ in range(5):
        pause(d)
    assert len(d.of(CallModel)) == 6 and not d.of(RunStopHooks)
    pause(d)
    notices = [m for m in d.emitted() if getattr(m, "subtype", "") == "pause_turn_cap"]
    assert len(notices) == 1
    assert notices[0].text == (  # type: ignore[union-attr]
        "The model paused its turn 6 times in a row; the cap of 5 resumes is reached, so this "
        "pause ends the turn"
    )
    assert d.phase == "stop_hooks" and len(d.of(CallModel)) == 6


@pytest.mark.spec("S-PAUSE-1", "P-CC-1")
def test_claude_code_treats_pause_turn_as_end_turn() -> None:
    """claude_code_2_1_88(): no resume; the paused response goes to the stop hooks."""
    d = Driver(claude_code_2_1_88())
    pause(d, opaque(SEARCH_USE))
    assert d.phase == "stop_hooks" and len(d.of(CallModel)) == 1
    assert not [m for m in d.emitted() if getattr(m, "subtype", "") == "pause_turn_cap"]


# --- R-TEXTS-1 and defect 3: the texts of interrupted and rejected calls ------------------------

CC_REJECT = (
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it "
    "was a file edit, the new_string was NOT written to the file). STOP what you are doing and "
    "wait for the user to tell you how to proceed."
)


def tool_results(d: Driver) -> dict[str, str]:
    out: dict[str, str] = {}
    for m in d.state.conversation:
        for b in getattr(m, "content", ()):
            if isinstance(b, ToolResultBlock):
                out[b.tool_use_id] = b.content
    return out


def interrupted_round(cfg: LoopConfig, kind: str = "hard", *, after_stream: bool) -> Driver:
    """t1 running, t2 waiting for permission (or queued), then an interrupt."""
    d = Driver(cfg)
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.tool_use("t2", name="Write", traits=UNSAFE)
    if after_stream:
        d.end("tool_use")
        d.allow("t1")
    d.feed(Interrupted(kind=kind))  # type: ignore[arg-type]
    return d


@pytest.mark.spec("I-2", "I-3", "R-TEXTS-1")
@pytest.mark.parametrize("after_stream", [False, True])
@pytest.mark.parametrize(
    ("make", "executor", "text"),
    [
        (default, True, INTERRUPTED_TOOL_RESULT),
        (default, False, "Interrupted by user"),
        (claude_code_2_1_88, True, CC_REJECT),
        (claude_code_2_1_88, False, "Interrupted by user"),
    ],
)
def test_interrupted_calls_get_the_text_of_their_path(
    make: Any, executor: bool, text: str, after_stream: bool
) -> None:
    """With the streaming executor (every profile's default) an interrupted call gets the
    rejection text (Claude Code's REJECT_MESSAGE, or steploop's own, which does not claim that
    nothing ran); without it, the reference's 'Interrupted by user'. The turn's interruption
    messages are the same in both styles."""
    cfg = make().with_overrides({"gates.streaming_tool_execution": executor})
    d = interrupted_round(cfg, after_stream=after_stream)
    assert tool_results(d) == {"t1": text, "t2": text}
    note = (
        "[Request interrupted by user for tool use]"
        if after_stream
        else "[Request interrupted by user]"
    )
    last = d.state.conversation.messages()[-1]
    assert isinstance(last, UserMessage) and last.content == (TextBlock(text=note),)


@pytest.mark.spec("R-PERM-3", "R-TEXTS-1")
@pytest.mark.parametrize(
    ("make", "reason", "text"),
    [
        (default, "", REJECTED_RESULT),
        (default, "use git mv", REJECTED_RESULT),
        (claude_code_2_1_88, "", CC_REJECT),
        (
            claude_code_2_1_88,
            "use git mv",
            "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. "
            "if it was a file edit, the new_string was NOT written to the file). To tell you how "
            "to proceed, the user said:\nuse git mv",
        ),
    ],
)
def test_a_rejected_call_gets_the_rejection_text_of_the_style(
    make: Any, reason: str, text: str
) -> None:
    """The call the user rejected: steploop's text, or Claude Code's (with the user's words)."""
    d = Driver(make())
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.end("tool_use")
    d.feed(
        PermissionAnswered(
            generation=d.generation, tool_use_id="t1", decision="rejected_by_user", reason=reason
        )
    )
    assert tool_results(d) == {"t1": text}


# --- defect 1: the task budget after a compaction in a turn's first round ---------------------


def _compacted(cid: int) -> CompactionFinished:
    return CompactionFinished(
        compact_id=cid,
        messages=(
            SystemMessage(
                id=f"c{cid}.b", subtype="compact_boundary", text="Conversation compacted"
            ),
            UserMessage(
                id=f"c{cid}.s",
                content=(TextBlock(text="Summary."),),
                is_meta=True,
                origin="summary",
            ),
        ),
    )


def _turn_one(cfg: LoopConfig) -> Driver:
    d = Driver(cfg, "first")
    d.reply("long answer", Usage(input_tokens=170_000, output_tokens=1_000))
    d.hooks_pass()
    assert d.finished() is not None
    return d


@pytest.mark.spec("R-TASK-1", "R-CTX-4")
def test_auto_compact_in_a_turns_first_round_subtracts_the_previous_turns_usage() -> None:
    """The issue's repro (2.1.88 profile): turn 1 ends at 170,000 in / 1,000 out; turn 2 with
    task_budget=5000 auto-compacts before its first call, and that call's remaining budget is
    max(0, 5000 - 171,000) = 0 (it was sent as 5000: nothing had been subtracted)."""
    cfg = claude_code_2_1_88()
    one = _turn_one(cfg)
    two = Driver(cfg, "second", session=one.state.session(), task_budget=5_000)
    compacts = two.of(Compact)
    assert len(compacts) == 1 and compacts[0].trigger == "auto"
    two.feed(_compacted(compacts[0].compact_id))
    call = two.of(CallModel)[-1]
    assert call.task_budget == TaskBudget(total=5_000, remaining=0)


@pytest.mark.spec("R-TASK-1", "C-REACTIVE-1")
def test_reactive_compact_after_a_first_call_prompt_too_long_subtracts_it_too() -> None:
    """full(): the first call of turn 2 fails prompt-too-long; the reactive compaction
    subtracts turn 1's last usage (input 1,000 + output 500) from 10,000."""
    cfg = full()
    one = Driver(cfg, "first")
    one.reply("answer", Usage(input_tokens=1_000, output_tokens=500))
    one.hooks_pass()
    two = Driver(cfg, "second", session=one.state.session(), task_budget=10_000)
    two.feed(ModelCallFailed(call_id=two.call_id, kind="prompt_too_long", status=400))
    (compact,) = two.of(Compact)
    assert compact.trigger == "reactive"
    two.feed(_compacted(compact.compact_id))
    assert two.of(CallModel)[-1].task_budget == TaskBudget(total=10_000, remaining=8_500)


# --- defect 2: which hook stopped the turn ------------------------------------------------------


def attachments(d: Driver) -> list[AttachmentMessage]:
    return [m for m in d.emitted() if isinstance(m, AttachmentMessage)]


@pytest.mark.spec("T-HOOK-1")
@pytest.mark.parametrize(
    ("event", "reason", "message"),
    [
        ("PreToolUse", "protected file", "protected file"),
        ("PreToolUse", "", "Execution stopped by hook"),
        ("PostToolUse", "", "Execution stopped by PostToolUse hook"),
        ("PostToolUse", "lint failed", "lint failed"),
    ],
)
def test_the_hook_stop_attachment_names_the_hook_its_reason_and_the_call(
    event: str, reason: str, message: str
) -> None:
    """The attachment is the reference's: the stop reason (or the hook's default text), the
    hook's name (event:tool), the tool_use_id and the event; it was always PostToolUse."""
    d = Driver(default())
    d.tool_use("t1", name="Edit", traits=UNSAFE)
    d.end("tool_use")
    d.allow("t1")
    d.finish_tool("t1", "edited", hook_stopped=True, hook_event=event, hook_stop_reason=reason)
    (att,) = attachments(d)
    assert att.attachment_type == "hook_stopped_continuation"
    assert att.data == (
        ("message", message),
        ("hookName", f"{event}:Edit"),
        ("toolUseID", "t1"),
        ("hookEvent", event),
    )
    fin = d.finished()
    assert fin is not None and fin.terminal.TAG == "hook_stopped"
    assert d.state.conversation.messages()[-1] == att


@pytest.mark.spec("T-HOOK-1", "Q-2")
@pytest.mark.parametrize(("make", "count"), [(default, 2), (claude_code_2_1_88, 1)])
def test_every_stopping_hook_gets_its_attachment_in_tool_use_order(make: Any, count: int) -> None:
    """Two calls stopped by hooks: one attachment each, in tool_use order. Under Q-2 (2.1.88)
    the safe call that finished mid-stream is ignored, as the reference ignores it."""
    d = Driver(make())
    d.tool_use("t1", name="Read")
    d.allow("t1")
    d.finish_tool("t1", "text", hook_stopped=True, hook_event="PreToolUse")  # mid-stream
    d.tool_use("t2", name="Edit", traits=UNSAFE)
    d.end("tool_use")
    d.allow("t2")
    d.finish_tool("t2", "edited", hook_stopped=True, hook_stop_reason="stop now")
    got = [dict(a.data)["toolUseID"] for a in attachments(d)]
    assert got == ["t1", "t2"][-count:]
