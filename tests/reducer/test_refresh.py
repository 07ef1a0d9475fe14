"""The tool list read at the end of each tool round (specs/ R-REFRESH-1) and an interrupt while
it is read (I-7)."""

from __future__ import annotations

import pytest

from steploop.reducer import IllegalEvent, claude_code_2_1_88, default, full
from steploop.reducer.effects import CallModel, CancelRefreshTools, Emit, Finish, RefreshTools
from steploop.reducer.events import CommandQueued, Interrupted, ToolsRefreshed
from steploop.reducer.messages import AttachmentMessage, TextBlock, UserMessage
from steploop.reducer.protocol import Ledger, awaiting
from steploop.reducer.transitions import AbortedTools, MaxTurns, NextTurn
from tests.reducer.driver import Driver


def _tool_round(d: Driver, tid: str = "t1") -> None:
    d.tool_use(tid, file_path="a.ts")
    d.allow(tid)
    d.end("tool_use")
    d.finish_tool(tid)


@pytest.mark.spec("R-REFRESH-1")
def test_the_gated_profiles_read_the_tool_list_after_the_queued_commands() -> None:
    """2.1.88: results, queued commands, then RefreshTools; the answer starts the next round."""
    d = Driver(claude_code_2_1_88(), auto_refresh=False)
    d.tool_use("t1", file_path="a.ts")
    d.allow("t1")
    d.end("tool_use")
    d.feed(CommandQueued(command_id="c1", text="also the docs"))
    fx = d.finish_tool("t1")
    assert [type(e).__name__ for e in fx] == ["Emit", "Emit", "RefreshTools"]
    assert isinstance(fx[1], Emit) and isinstance(fx[1].item, AttachmentMessage)
    assert fx[-1] == RefreshTools(call_id=1)
    assert d.phase == "refreshing_tools" and d.state.turn_count == 1
    assert awaiting(d.state) == (("refresh_tools", 1),)
    before = d.state
    fx = d.feed(ToolsRefreshed(call_id=1, tools=("Read", "mcp__s__new"), digest="ab12"))
    assert isinstance(fx[-1], CallModel) and fx[-1].call_id == 2
    assert d.transitions == [NextTurn()] and d.state.turn_count == 2
    # the machine keeps nothing of the answer but the step it took
    assert d.state.conversation == before.conversation
    assert full().gates.tool_refresh and claude_code_2_1_88().gates.tool_refresh


@pytest.mark.spec("R-REFRESH-1")
def test_without_the_gate_no_refresh() -> None:
    """The default machine goes from the results straight to the next round."""
    d = Driver(default(), auto_refresh=False)
    _tool_round(d)
    assert not d.of(RefreshTools) and d.phase == "streaming" and d.transitions == [NextTurn()]


@pytest.mark.spec("R-REFRESH-1", "T-MAXTURNS-1")
def test_max_turns_is_checked_after_the_refresh() -> None:
    """With max_turns reached, the list is still read first (the reference's order), then the turn ends."""
    d = Driver(claude_code_2_1_88(max_turns=1), auto_refresh=False)
    _tool_round(d)
    assert d.phase == "refreshing_tools" and d.finished() is None
    fx = d.feed(ToolsRefreshed(call_id=1))
    assert isinstance(fx[-1], Finish) and fx[-1].terminal == MaxTurns(turn_count=2)


@pytest.mark.spec("R-REFRESH-1", "M-2")
def test_an_answer_for_another_round_is_illegal() -> None:
    """ToolsRefreshed names the round's call; any other is refused."""
    d = Driver(claude_code_2_1_88(), auto_refresh=False)
    _tool_round(d)
    for call_id in (0, 2):
        with pytest.raises(IllegalEvent, match="no refresh of round"):
            d.feed(ToolsRefreshed(call_id=call_id))
    assert d.phase == "refreshing_tools"


@pytest.mark.spec("I-7", "W-PROTO-3", "T-ABORT-TOOLS-1")
@pytest.mark.parametrize("max_turns", [1, 2, None])
@pytest.mark.parametrize("kind", ["hard", "submit"])
def test_an_interrupt_withdraws_the_read_and_ends_aborted_tools(kind: str, max_turns: int | None) -> None:
    """The read is cancelled; hard adds the tool-use interruption message; the max_turns
    attachment (turnCount 2) follows only when the next turn would pass max_turns."""
    d = Driver(claude_code_2_1_88(max_turns=max_turns), auto_refresh=False)
    _tool_round(d)
    results_before = d.state.conversation.length
    fx = d.feed(Interrupted(kind=kind))  # type: ignore[arg-type]
    assert fx[0] == CancelRefreshTools(call_id=1)
    assert isinstance(fx[-1], Finish) and fx[-1].terminal == AbortedTools()
    emitted = [e.item for e in fx if isinstance(e, Emit)]
    texts = [
        b.text for m in emitted if isinstance(m, UserMessage) for b in m.content if isinstance(b, TextBlock)
    ]
    assert texts == (["[Request interrupted by user for tool use]"] if kind == "hard" else [])
    attachments = [dict(m.data) for m in emitted if isinstance(m, AttachmentMessage)]
    assert attachments == ([{"maxTurns": 1, "turnCount": 2}] if max_turns == 1 else [])
    # committed once: the round's messages are not appended again
    assert d.state.conversation.length == results_before + len(emitted)
    ledger = Ledger()
    ledger.issue(d.effects)
    assert "withdrawn" in (ledger.deliver(ToolsRefreshed(call_id=1)) or "")
