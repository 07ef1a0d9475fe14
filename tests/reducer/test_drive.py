"""The driver loop (steploop/reducer/drive.py) and the conformance check of a world."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

import anyio
import pytest

from steploop.reducer import LoopConfig, Request, default
from steploop.reducer.drive import Loop, check_world, check_world_async, drive, drive_async
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    CancelTools,
    Effect,
    Emit,
    Finish,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
    WaitElapsed,
)
from steploop.reducer.explore import World, moves
from steploop.reducer.explore.observation import Observation
from steploop.reducer.machine import advance, begin
from steploop.reducer.messages import TextBlock, ToolUseBlock, Usage
from steploop.reducer.state import LoopState
from steploop.reducer.transitions import BlockingLimit, NextTurn, Transition

SAFE = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
BASH = ToolTraits(concurrency_safe=True, interrupt="cancel", cancels_siblings_on_error=True)
USAGE = Usage(input_tokens=50, output_tokens=5)


def _end(call: CallModel, reason: str, usage: Usage = USAGE) -> ModelResponseEnded:
    return ModelResponseEnded(
        call_id=call.call_id, model=call.model, stop_reason=reason, usage=usage
    )


class Toy:
    """The README's toy world: call 1 asks for a tool of each of ``tools``, call 2 answers."""

    def __init__(self, tools: tuple[tuple[str, ToolTraits], ...] = (("clock", SAFE),)) -> None:
        self.tools = tools
        self.log: list[str] = []
        self.transcript: list[Any] = []
        self.results: dict[str, tuple[str, bool]] = {}

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        self.log.append(f"perform {effect.TAG}")
        match effect:
            case Emit(item=item):
                self.transcript.append(item)
            case CallModel(call_id=1):
                blocks: list[Event] = [
                    ModelBlockReceived(
                        call_id=1, block=ToolUseBlock(id=f"t{k}", name=name, input={}), tool=tr
                    )
                    for k, (name, tr) in enumerate(self.tools, 1)
                ]
                return [*blocks, _end(effect, "tool_use")]
            case CallModel():
                text = ModelBlockReceived(call_id=effect.call_id, block=TextBlock(text="noon"))
                return [text, _end(effect, "end_turn")]
            case AskPermission(generation=g, tool_use_id=t):
                return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow")]
            case StartTool(generation=g, tool_use_id=t):
                content, err = self.results.get(t, ("12:00", False))
                return [ToolFinished(generation=g, tool_use_id=t, content=content, is_error=err)]
            case RunStopHooks(hooks_id=h):
                return [StopHooksFinished(hooks_id=h)]
        return None

    def next_event(self, state: LoopState) -> Event | None:
        return None

    def observe(
        self,
        event: Event | None,
        state: LoopState,
        fx: tuple[Effect, ...],
        passed: tuple[Transition, ...],
    ) -> None:
        name = "start" if event is None else type(event).__name__
        self.log.append(f"step {name} -> {' '.join(e.TAG for e in fx)}")


class AsyncToy(Toy):
    async def next_event(self, state: LoopState) -> Event | None:  # type: ignore[override]
        await anyio.lowlevel.checkpoint()
        return None


# --- W-DRIVE-1 --------------------------------------------------------------------------------


@pytest.mark.spec("W-DRIVE-1")
def test_every_effect_of_a_step_is_performed_before_the_next_event() -> None:
    world = Toy()
    out = drive(world, Request(prompt="What time is it?"), default(), observer=world.observe)
    assert out.status == "finished" and out.terminal is not None
    assert out.terminal.TAG == "completed" and len(world.transcript) == 4
    assert out.transitions == (NextTurn(), out.terminal)
    log = world.log
    steps = [i for i, line in enumerate(log) if line.startswith("step ")]
    for i in steps:
        fx = log[i].split(" -> ")[1].split()
        assert log[i + 1 : i + 1 + len(fx)] == [f"perform {tag}" for tag in fx], log[i:]
    assert log[-1] == "perform finish"


@pytest.mark.spec("W-DRIVE-1")
def test_the_loop_stops_at_max_events() -> None:
    world = Toy()
    out = drive(world, Request(prompt="go"), default(), max_events=3)
    assert (out.status, out.events, out.terminal) == ("stopped", 3, None)


# --- W-DRIVE-2 --------------------------------------------------------------------------------


@pytest.mark.spec("W-DRIVE-2", "W-PROTO-3", "R-TOOL-7")
def test_an_answer_queued_for_a_withdrawn_request_is_never_stepped() -> None:
    """t1 (sibling-cancelling) fails while t2's result is already queued: CancelTools
    withdraws t2, and its queued result is dropped."""
    world = Toy(tools=(("Bash", BASH), ("Read", SAFE)))
    world.results["t1"] = ("exit 2", True)
    out = drive(world, Request(prompt="go"), default(), observer=world.observe)
    assert out.status == "finished"
    stepped = [line.split()[1] for line in world.log if line.startswith("step ")]
    assert stepped.count("ToolFinished") == 1  # t2's result was queued and dropped
    assert "perform cancel_tools" in world.log
    assert check_world(
        Toy(tools=(("Bash", BASH), ("Read", SAFE))), Request(prompt="go"), default()
    ).ok


# --- W-DRIVE-3 --------------------------------------------------------------------------------


def _blocked() -> tuple[LoopConfig, LoopState, Event]:
    """A tool round over the blocking limit, auto-compact off: the tool result's step takes
    next_turn, and the next round ends at once in blocking_limit."""
    cfg = default().with_overrides({"gates.auto_compact": False})
    s, _, _ = begin(Request(prompt="go"), cfg)
    big = Usage(input_tokens=cfg.blocking_limit + 100, output_tokens=10)
    tool = ToolUseBlock(id="t1", name="Read", input={})
    for ev in (
        ModelBlockReceived(call_id=1, block=tool, tool=SAFE),
        ModelResponseEnded(call_id=1, model=s.model, stop_reason="tool_use", usage=big),
        PermissionAnswered(generation=s.round.generation, tool_use_id="t1", decision="allow"),
    ):
        s, _, _ = advance(s, ev, cfg)
    return cfg, s, ToolFinished(generation=s.round.generation, tool_use_id="t1", content="ok")


@pytest.mark.spec("W-DRIVE-3", "T-BLOCKING-1")
def test_a_continue_followed_by_blocking_limit_is_reported_in_order() -> None:
    cfg, s, ev = _blocked()
    nxt, fx, passed = advance(s, ev, cfg)
    assert passed == (NextTurn(), BlockingLimit())
    assert nxt.transition is passed[-1] and nxt.phase == "done"
    o = Observation(cfg, s, ev, fx, nxt, passed)
    assert o.continued == NextTurn() and o.round_began  # the explorer no longer loses it


@pytest.mark.spec("W-DRIVE-3")
def test_transitions_agree_with_the_state_on_random_walks() -> None:
    """The last transition reported is the new state's; no report, no new transition."""
    rng = random.Random(11)
    cfg = default()
    for _ in range(60):
        s, _, passed = begin(Request(prompt="go"), cfg)
        while s.phase != "done":
            for ev in rng.choice(moves(s, cfg, World())).events:
                nxt, fx, passed = advance(s, ev, cfg)
                if passed:
                    assert nxt.transition is passed[-1]
                else:
                    assert nxt.transition is s.transition
                ended = [e.terminal for e in fx if isinstance(e, Finish)]
                assert ended == ([passed[-1]] if nxt.phase == "done" else [])
                s = nxt


# --- W-DRIVE-4 --------------------------------------------------------------------------------


@pytest.mark.spec("W-DRIVE-4")
def test_pulled_sync_pulled_async_and_pushed_run_the_same_loop() -> None:
    sync = Toy(tools=(("Bash", BASH), ("Read", SAFE)))
    out = drive(sync, Request(prompt="go"), default(), observer=sync.observe)

    async_world = AsyncToy(tools=(("Bash", BASH), ("Read", SAFE)))

    async def main() -> Any:
        return await drive_async(
            async_world, Request(prompt="go"), default(), observer=async_world.observe
        )

    out_async = anyio.run(main)
    assert out_async == out and async_world.log == sync.log

    # pushed: the world keeps its answers and feeds them one by one from outside
    pushed = Toy(tools=(("Bash", BASH), ("Read", SAFE)))
    held: list[Event] = []

    def perform(effect: Effect, state: LoopState) -> None:
        held.extend(pushed.perform(effect, state) or ())

    loop = Loop(default(), perform, observe=pushed.observe)
    loop.begin(Request(prompt="go"))
    while held and not loop.done:
        loop.feed(held.pop(0))
    assert loop.terminal == out.terminal and loop.transitions == list(out.transitions)


# --- W-PROTO-5: the conformance check, and worlds it catches ------------------------------------


@pytest.mark.spec("W-PROTO-5")
def test_a_conformant_world_passes() -> None:
    report = check_world(Toy(), Request(prompt="What time is it?"), default())
    assert report.ok, report.problems
    assert report.outcome is not None and report.outcome.status == "finished"

    async def main() -> Any:
        return await check_world_async(AsyncToy(), Request(prompt="go"), default())

    assert anyio.run(main).ok


class Silent(Toy):
    """Never answers a permission request."""

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        if isinstance(effect, AskPermission):
            return None
        return super().perform(effect, state)


class Twice(Toy):
    """Answers every tool run twice."""

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        got = list(super().perform(effect, state) or ())
        return got * 2 if isinstance(effect, StartTool) else got


class Deaf(Toy):
    """Answers the tool run it is told to cancel: a sibling's error cancels t2, and the
    world answers t2 as it performs the cancel."""

    def __init__(self) -> None:
        super().__init__(tools=(("Bash", BASH), ("Read", SAFE)))
        self.results["t1"] = ("exit 2", True)
        self.kept: list[Event] = []

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        got = super().perform(effect, state)
        if isinstance(effect, StartTool) and effect.tool_use_id == "t2":
            self.kept = list(got or ())
            return None
        if isinstance(effect, CancelTools):
            return self.kept
        return got


class Eager(Toy):
    """Reports a wait that was never asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = False

    def perform(self, effect: Effect, state: LoopState) -> Iterable[Event] | None:
        got = list(super().perform(effect, state) or ())
        if isinstance(effect, StartTool) and not self.sent:
            self.sent = True
            return [WaitElapsed(wait_id=9), *got]
        return got


@pytest.mark.spec("W-PROTO-5")
@pytest.mark.parametrize(
    ("world", "found"),
    [
        (Silent, "ask_permission(1, 't1') is awaited and was never answered"),
        (Twice, "answers start_tool(1, 't1') again"),
        (Deaf, "answers start_tool(1, 't2'), which was withdrawn (a cancel not honoured)"),
        (Eager, "answers wait(9), which was never asked for"),
    ],
)
def test_a_broken_world_is_caught(world: type[Toy], found: str) -> None:
    report = check_world(world(), Request(prompt="What time is it?"), default())
    assert not report.ok
    assert any(found in p for p in report.problems), report.problems
