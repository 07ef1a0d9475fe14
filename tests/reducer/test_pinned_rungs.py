"""Behaviour the mutation sample found unpinned after main's version profiles (VER-1) and wrong
types (M-TYPE-1) merged: a refusal's streamed text committed once when the stop hooks run after
an API error, and the wording of step()'s refusal of a value that is not an event."""

from __future__ import annotations

import typing

import pytest

from steploop.reducer import Request, claude_code, default, start, step
from steploop.reducer.effects import Finish, RunStopHooks
from steploop.reducer.errors import WrongType
from steploop.reducer.events import Event
from steploop.reducer.messages import AssistantMessage, TextBlock
from tests.reducer.driver import Driver


@pytest.mark.spec("VER-1")
def test_a_refusal_under_stop_hooks_after_api_errors_commits_its_text_once() -> None:
    """2.1.56 runs the stop hooks after an API error: a refusal's streamed text and its error
    message join the conversation once, and the turn's end commits nothing of the round again."""
    d = Driver(claude_code("2.1.56"))
    d.text("I will not")
    d.end("refusal")
    assert d.of(RunStopHooks), "VER-1: the stop hooks run after the API error"
    d.hooks_pass()
    assert d.of(Finish)
    texts = [
        b.text
        for m in d.state.conversation
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, TextBlock)
    ]
    assert texts.count("I will not") == 1, texts
    assert len(texts) == 2, texts  # the text, then the refusal's API-error message


@pytest.mark.spec("M-TYPE-1")
def test_step_names_every_event_type_when_given_something_else() -> None:
    """A value that is not an event: one WrongType whose text says step()'s event must be an
    event, lists the event types by name (sorted), and shows what it got."""
    cfg = default()
    s0, _ = start(Request(prompt="go"), cfg)
    names = sorted(t.__name__ for t in typing.get_args(Event))
    with pytest.raises(WrongType) as err:
        step(s0, "hello", cfg)  # type: ignore[arg-type]
    assert str(err.value) == f"step(): event must be an event ({', '.join(names)}), got str 'hello'"
