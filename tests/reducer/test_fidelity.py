"""Fidelity to the reference and to the real API (issue 15): server blocks in the machine, the
served model, and the rules and defects below, each pinned to its rule id."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reducer import claude_code_2_1_88, default
from reducer.effects import CallModel, Finish
from reducer.events import ModelBlockReceived, ModelResponseEnded
from reducer.messages import AssistantMessage, OpaqueBlock, TextBlock, Usage
from reducer.serialize import structure, unstructure
from reducer.state import LoopState
from tests.reducer.driver import Driver, usage

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
