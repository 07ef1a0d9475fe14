"""drive_async (steploop/reducer/drive.py, W-DRIVE-1): the pulled async loop stops when the world
has no further event, and once the turn is done, whatever the world would still send. An
outside mutation run found nothing pinned there (issue 27): a loop that went on would hang.
The worlds here count the loop's awaits and fail the test past a bound, so a broken loop ends
in a failure, never a hang."""

from __future__ import annotations

from collections.abc import Iterable

import anyio
import pytest

from steploop.reducer import Request, default
from steploop.reducer.drive import Outcome, check_world, drive, drive_async
from steploop.reducer.effects import CallModel, Effect, RunStopHooks
from steploop.reducer.events import (
    CommandQueued,
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    StopHooksFinished,
)
from steploop.reducer.messages import TextBlock, Usage
from steploop.reducer.state import LoopState

BOUND = 50  # next_event calls a correct loop never comes near


class TooManyAwaits(AssertionError):
    """The loop asked the world for another event past ``BOUND``: it would never stop."""


class Answering:
    """Answers the first model call in text and the stop hooks; holds every answer back until
    the loop asks (``next_event``), one at a time. ``after_done``: what it sends once it has
    nothing left (a command, forever), or None (nothing more)."""

    def __init__(self, after_done: Event | None) -> None:
        self.queue: list[Event] = []
        self.after_done = after_done
        self.asked = 0

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        match effect:
            case CallModel(call_id=c, model=m):
                usage = Usage(input_tokens=10, output_tokens=2)
                self.queue += [
                    ModelBlockReceived(call_id=c, block=TextBlock(text="done")),
                    ModelResponseEnded(call_id=c, model=m, stop_reason="end_turn", usage=usage),
                ]
            case RunStopHooks(hooks_id=h):
                self.queue.append(StopHooksFinished(hooks_id=h))
        return None

    def next(self) -> Event | None:
        self.asked += 1
        if self.asked > BOUND:
            raise TooManyAwaits(f"next_event asked {self.asked} times")
        if self.queue:
            return self.queue.pop(0)
        return self.after_done


class AsyncAnswering(Answering):
    async def next_event(self, state: LoopState) -> Event | None:
        await anyio.lowlevel.checkpoint()
        return self.next()


class SyncAnswering(Answering):
    def next_event(self, state: LoopState) -> Event | None:
        return self.next()


@pytest.mark.spec("W-DRIVE-1")
def test_drive_async_stops_after_the_turn_is_done() -> None:
    """A world that would send a queued command forever after the turn ended: drive_async
    returns finished once Finish is performed, having asked for exactly the 3 answers."""
    world = AsyncAnswering(after_done=CommandQueued(command_id="q1", text="more"))

    async def main() -> Outcome:
        return await drive_async(world, Request(prompt="go"), default())

    out = anyio.run(main)
    assert out.status == "finished" and out.terminal is not None
    assert out.terminal.TAG == "completed"
    assert (world.asked, out.events) == (3, 3)


@pytest.mark.spec("W-DRIVE-1")
def test_drive_async_stops_when_the_world_has_no_further_event() -> None:
    """A world with nothing more while the turn still waits (the stop hooks never answer):
    drive_async returns stalled after the one next_event that said None."""
    world = AsyncAnswering(after_done=None)
    world.perform = lambda effect, state: (  # type: ignore[method-assign]
        Answering.perform(world, effect, state) if not isinstance(effect, RunStopHooks) else None
    )

    async def main() -> Outcome:
        return await drive_async(world, Request(prompt="go"), default())

    out = anyio.run(main)
    assert out.status == "stalled" and out.terminal is None
    assert out.awaiting == (("run_stop_hooks", 1),)
    assert (world.asked, out.events) == (3, 2)


@pytest.mark.spec("W-DRIVE-1")
def test_drive_stops_the_same_ways() -> None:
    """The synchronous driver stops at the same places: after Finish, and at the first None."""
    done = SyncAnswering(after_done=CommandQueued(command_id="q1", text="more"))
    out = drive(done, Request(prompt="go"), default())
    assert (out.status, done.asked, out.events) == ("finished", 3, 3)
    quiet = SyncAnswering(after_done=None)
    quiet.queue.clear()
    quiet.perform = lambda effect, state: None  # type: ignore[method-assign]
    out = drive(quiet, Request(prompt="go"), default())
    assert (out.status, quiet.asked, out.events) == ("stalled", 1, 0)


@pytest.mark.spec("W-PROTO-5")
def test_the_conformance_checks_problems_are_worded_exactly() -> None:
    """Each problem check_world finds is one line as the user reads it: where (the step),
    the event, the request and what is wrong; an event the machine refuses, with its reason."""
    from tests.reducer.test_drive import Deaf, Eager, Silent, Twice

    want = {
        Silent: ("after step 2: ask_permission(1, 't1') is awaited and was never answered",),
        Twice: (
            "step 5: ToolFinished answers start_tool(1, 't1') again (it was already answered)",
        ),
        Deaf: (
            "step 7: ToolFinished answers start_tool(1, 't2'), which was withdrawn (a cancel not "
            "honoured)",
        ),
        Eager: (
            "step 4: WaitElapsed answers wait(9), which was never asked for",
            "step 4: the machine refuses the event: WaitElapsed is illegal in phase "
            "'running_tools'; it accepts CommandQueued, Interrupted, ModelBlockReceived, "
            "ModelCallFailed, ModelResponseEnded, PermissionAnswered, ToolFinished, "
            "ToolUseSummaryReady",
        ),
    }
    for world, problems in want.items():
        report = check_world(world(), Request(prompt="What time is it?"), default())
        assert report.problems == problems, world.__name__
