"""R-INSERT-1: messages the shell inserts into a turn without a model call."""

from __future__ import annotations

import pytest

from steploop.reducer import IllegalEvent, claude_code_2_1_88, default, step
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import CallModel, CancelModelCall, Compact, Emit
from steploop.reducer.events import MessagesInserted
from steploop.reducer.messages import (
    AssistantMessage,
    AttachmentMessage,
    TextBlock,
    Usage,
    UserMessage,
)
from steploop.reducer.state import Session
from tests.reducer.driver import SAFE, Driver


def expansion(text: str = "Analyse the codebase and write CLAUDE.md.") -> UserMessage:
    return UserMessage(id="x1", content=(TextBlock(text=text),), is_meta=True, origin="inserted")


@pytest.mark.spec("R-INSERT-1")
@pytest.mark.parametrize("cfg", [default(), claude_code_2_1_88()], ids=["default", "2.1.88"])
def test_inserted_before_the_first_answer_reissues_the_call(cfg: object) -> None:
    """A slash command's expansion after the prompt: the call is withdrawn and made again with
    the expansion as the conversation's last message; the round's counters start over."""
    d = Driver(cfg, prompt="/init")  # type: ignore[arg-type]
    first = d.of(CallModel)[-1]
    fx = d.feed(MessagesInserted(messages=(expansion(),)))
    assert isinstance(fx[0], CancelModelCall) and fx[0].call_id == first.call_id
    assert [e.item for e in fx if isinstance(e, Emit)] == [expansion()]
    call = [e for e in fx if isinstance(e, CallModel)]
    assert len(call) == 1 and call[0].call_id == first.call_id + 1
    msgs = call[0].conversation.messages()
    assert [m.id for m in msgs] == ["m1", "x1"]
    assert d.phase == "streaming" and d.state.round.retry_attempt == 0
    d.reply("Written.")
    d.hooks_pass()
    assert d.finished() is not None
    assert [m.id for m in d.state.conversation.messages()][:2] == ["m1", "x1"]


@pytest.mark.spec("R-INSERT-1")
def test_inserted_between_rounds_follows_the_tool_results() -> None:
    """After a tool round the next call is outstanding: inserted messages come after the
    round's results, before the next call."""
    d = Driver(default())
    d.tool_use("r1", "Read", traits=SAFE, file_path="a.py")
    d.allow("r1")
    d.finish_tool("r1", "contents")
    d.end("tool_use")
    att = AttachmentMessage(id="a1", attachment_type="edited_text_file", data=(("filename", "a.py"),))
    fx = d.feed(MessagesInserted(messages=(att,)))
    conv = next(e for e in fx if isinstance(e, CallModel)).conversation.messages()
    assert [type(m).__name__ for m in conv][-3:] == ["AssistantMessage", "UserMessage", "AttachmentMessage"]


@pytest.mark.spec("R-INSERT-1")
def test_inserted_runs_the_round_pipeline_again() -> None:
    """The messages count: when they push the context over the threshold, the round
    auto-compacts before calling (R-ORDER-1)."""
    cfg = default().with_overrides({"gates.history_snip": False, "gates.context_collapse": False})
    big = AssistantMessage(
        id="h1", response_id="r0", model="m", content=(TextBlock(text="x"),),
        usage=Usage(input_tokens=cfg.autocompact_threshold - 2_000, output_tokens=1),
    )
    d = Driver(cfg, session=Session(conversation=Conversation.of([big])))
    assert d.phase == "streaming"
    fx = d.feed(MessagesInserted(messages=(expansion("y" * 12_000),)))
    assert any(isinstance(e, Compact) for e in fx) and d.phase == "compacting"


@pytest.mark.spec("R-INSERT-1")
def test_inserted_after_an_answer_began_is_illegal() -> None:
    d = Driver(default())
    d.text("Let me look.")
    with pytest.raises(IllegalEvent, match="already answered"):
        step(d.state, MessagesInserted(messages=(expansion(),)), d.cfg)
    d.end("end_turn")
    assert d.phase == "stop_hooks"
    with pytest.raises(IllegalEvent):
        step(d.state, MessagesInserted(messages=(expansion(),)), d.cfg)
