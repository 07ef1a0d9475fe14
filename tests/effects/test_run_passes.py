"""What a turn costs the interpreter, and the semantics its fast paths must keep.

Events are stepped by whoever brings them when nothing else is being stepped (a runner, the
consumer), effects that need no waiting are executed there and then, runner tasks are reused,
and items reach the consumer through a zero-buffer hand-over (``steploop.effects.concurrency.Handoff``)."""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from steploop.effects import PermissionPolicy, PermissionRequest, run
from steploop.effects.concurrency import Handoff
from steploop.effects.run import Run
from steploop.effects.scripted import ScriptedModel, reply, tool_call
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry
from steploop.reducer.effects import CallModel
from steploop.reducer.events import (
    Event,
    InterruptBehavior,
    ModelBlockReceived,
    ModelResponseEnded,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import (
    AssistantMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Noop:
    """A safe tool without parameters that answers at once."""

    name = "noop"
    description = "does nothing"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    max_result_chars = None
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content="ok")


class Hang:
    """A tool that never finishes by itself."""

    name = "hang"
    description = "sleeps for ever"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


class Counter:
    """A model answering from a counter: a ``noop`` call on calls 1..n-1, a text on call n."""

    def __init__(self, n: int, tool: str = "noop") -> None:
        self.n = n
        self.tool = tool
        self.calls = 0
        self.safe = ToolTraits(concurrency_safe=True, max_result_chars=None)

    async def stream(self, effect: CallModel) -> AsyncIterator[Event]:
        self.calls += 1
        cid = effect.call_id
        if self.calls < self.n:
            block = ToolUseBlock(id=f"t{self.calls}", name=self.tool, input={})
            yield ModelBlockReceived(call_id=cid, block=block, tool=self.safe)
            reason = "tool_use"
        else:
            yield ModelBlockReceived(call_id=cid, block=TextBlock(text="done"))
            reason = "end_turn"
        yield ModelResponseEnded(call_id=cid, model=effect.model, stop_reason=reason, usage=Usage())


async def _ticks_during(turns: int, workspace: Path) -> tuple[int, Run]:
    """Run ``turns`` tool turns with a task beside it that counts the passes of the event
    loop (one checkpoint per pass) until the run ends."""
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            await anyio.lowlevel.checkpoint()
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(ticker)
        await anyio.lowlevel.checkpoint()
        start = ticks
        async with run(
            "go",
            model=Counter(turns + 1),
            tools=[Noop()],
            workspace=workspace,
            permissions=PermissionPolicy(default="allow"),
        ) as r:
            async for _item in r:
                pass
        done = True
    return ticks - start, r


@pytest.mark.anyio
async def test_a_tool_turn_takes_two_passes_of_the_event_loop(tmp_path: Path) -> None:
    """The model's pass steps its events and starts the tool; the tool's pass steps its result
    and starts the next call. Nothing else waits for a turn of the loop (it took four when the
    driver task stepped every event and each effect was a new task)."""
    turns = 60
    ticks, r = await _ticks_during(turns, tmp_path)
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert r.result.state.turn_count == turns + 1
    assert ticks <= 2 * turns + 10, f"{ticks / turns:.2f} passes per tool turn"


@pytest.mark.anyio
async def test_runner_tasks_are_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sixty model calls and sixty tools are run by a couple of runner tasks, not 120 tasks."""
    runners = 0
    serve = Run._serve

    async def counting(self: Run, runner: Any) -> None:
        nonlocal runners
        runners += 1
        await serve(self, runner)

    monkeypatch.setattr(Run, "_serve", counting)
    _, r = await _ticks_during(60, tmp_path)
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert 1 <= runners <= 3


@pytest.mark.anyio
async def test_a_policy_permission_is_answered_at_once(tmp_path: Path, anyio_backend: str) -> None:
    """A call the policy allows is answered as soon as the machine asks, without a task or
    the consumer: no PermissionRequest reaches the consumer and, with the consumer waiting
    for the block's item (asyncio runs ready tasks in order), the answer is stepped right
    after the block, before the response ends. (On trio the model's runner may come before
    the consumer: the block's item is then held until the consumer takes it, and the answer
    follows the end of the response that arrived meanwhile.)"""
    seen: list[str] = []
    items: list[Any] = []
    async with run(
        "go",
        model=Counter(3),
        tools=[Noop()],
        workspace=tmp_path,
        permissions=PermissionPolicy(default="allow"),
        observer=lambda e, s, fx: seen.append(type(e).__name__) if e else None,
    ) as r:
        async for item in r:
            items.append(item)
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert not any(isinstance(i, PermissionRequest) for i in items)
    assert seen.count("PermissionAnswered") == 2
    if anyio_backend == "asyncio":
        one_turn = [
            "ModelBlockReceived",
            "PermissionAnswered",
            "ModelResponseEnded",
            "ToolFinished",
        ]
        assert seen[:8] == one_turn * 2


@pytest.mark.anyio
@pytest.mark.parametrize("failing", ["ModelBlockReceived", "ToolFinished", "PermissionAnswered"])
async def test_a_failure_stepping_an_event_ends_the_run_with_it(
    tmp_path: Path, failing: str
) -> None:
    """step() or the observer failing on an event stepped in a runner (or in the consumer's
    permission answer) fails the run with that error: it is not mistaken for the handler's
    own failure (a broken model stream, a failing tool)."""

    def observer(e: Any, s: Any, fx: Any) -> None:
        if type(e).__name__ == failing:
            raise RuntimeError(f"observer broke on {failing}")

    with pytest.RaisesGroup(
        pytest.RaisesExc(RuntimeError, match=f"observer broke on {failing}"), flatten_subgroups=True
    ):
        async with run(
            "go", model=Counter(3), tools=[Noop()], workspace=tmp_path, observer=observer
        ) as r:
            async for item in r:
                if isinstance(item, PermissionRequest):
                    item.allow()  # stepped right here, in the consumer's task
    assert r.result is None


@pytest.mark.anyio
async def test_a_tool_past_its_deadline_reports_a_timeout(tmp_path: Path) -> None:
    """The tool's deadline is its runner's cancel scope: past it the call is cancelled and
    its result says so; the turn goes on."""
    tools = ToolRegistry([Hang()])
    model = ScriptedModel([tool_call("hang", {}), reply("done")], traits_for=tools.traits)
    with anyio.fail_after(5):
        async with run(
            "go",
            model=model,
            tools=tools,
            workspace=tmp_path,
            tool_timeout_s=0.05,
            permissions=PermissionPolicy(default="allow"),
        ) as r:
            _ = [i async for i in r]
    assert r.result is not None and r.result.terminal.TAG == "completed"
    results = [
        b
        for m in r.result.state.conversation.messages()
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    assert [(b.content, b.is_error) for b in results] == [
        ("Tool hang timed out after 0.05 s", True)
    ]


@pytest.mark.anyio
async def test_an_interrupted_tool_is_not_reported_as_timed_out(tmp_path: Path) -> None:
    """A call the machine cancels (an interrupt) reports nothing of its own: the machine's
    synthetic result stands."""
    tools = ToolRegistry([Hang()])
    model = ScriptedModel([tool_call("hang", {}), reply("done")], traits_for=tools.traits)
    finished: list[ToolFinished] = []
    with anyio.fail_after(5):
        async with run(
            "go",
            model=model,
            tools=tools,
            workspace=tmp_path,
            tool_timeout_s=30,
            permissions=PermissionPolicy(default="allow"),
            observer=lambda e, s, fx: finished.append(e) if isinstance(e, ToolFinished) else None,
        ) as r:
            async for item in r:
                if isinstance(item, AssistantMessage) and isinstance(item.content[0], ToolUseBlock):
                    await anyio.sleep(0.05)
                    r.interrupt("hard")
    assert r.result is not None and r.result.terminal.TAG == "aborted_tools"
    assert finished == []
    await anyio.sleep(0.05)
    assert not r._scopes


# -- the hand-over ----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_handoff_send_waits_for_a_receiver() -> None:
    """Zero buffer: a send returns only once a receiver took the item, in order."""
    h: Handoff[int] = Handoff()
    sent: list[int] = []

    async def sender() -> None:
        for i in range(3):
            await h.send(i)
            sent.append(i)
        h.close_sending()

    async with anyio.create_task_group() as tg:
        tg.start_soon(sender)
        await anyio.sleep(0.02)
        assert sent == []
        got = [await h.receive()]
        await anyio.sleep(0.02)
        assert sent == [0]
        got += [await h.receive(), await h.receive()]
        with pytest.raises(anyio.EndOfStream):
            await h.receive()
    assert got == [0, 1, 2] and sent == [0, 1, 2]


@pytest.mark.anyio
async def test_handoff_offer_only_to_a_waiting_receiver() -> None:
    h: Handoff[str] = Handoff()
    assert not h.offer("nobody waits")
    got: list[str] = []

    async def receiver() -> None:
        got.append(await h.receive())

    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver)
        await anyio.sleep(0.01)
        assert h.offer("taken")
        assert not h.offer("the receiver has not come back yet")
    assert got == ["taken"]


@pytest.mark.anyio
async def test_handoff_item_of_a_cancelled_receiver_is_not_lost() -> None:
    """A receiver cancelled after it was handed an item gives it back: the next receive
    returns it, before anything sent later."""
    h: Handoff[str] = Handoff()
    outcome: list[str] = []

    async def receiver(scope: anyio.CancelScope) -> None:
        with scope:
            outcome.append(await h.receive())
        outcome.append("cancelled" if scope.cancelled_caught else "received")

    scope = anyio.CancelScope()
    async with anyio.create_task_group() as tg:
        tg.start_soon(receiver, scope)
        await anyio.sleep(0.01)
        assert h.offer("first")  # handed over, the receiver not yet resumed ...
        scope.cancel()  # ... and cancelled before it resumes
    if outcome == ["first", "received"]:  # the backend resumed it with the item first
        return
    assert outcome == ["cancelled"]
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.send, "second")
        assert await h.receive() == "first"
        assert await h.receive() == "second"


@pytest.mark.anyio
async def test_handoff_close() -> None:
    """Closing the receiving side breaks a waiting sender; closing the sending side ends the
    stream for a waiting receiver and refuses later sends."""
    h: Handoff[int] = Handoff()
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:

            async def send() -> None:
                with pytest.raises(anyio.BrokenResourceError):
                    await h.send(1)

            tg.start_soon(send)
            await anyio.sleep(0.01)
            h.close_receiving()
    h2: Handoff[int] = Handoff()
    with anyio.fail_after(2):
        async with anyio.create_task_group() as tg:

            async def receive() -> None:
                with pytest.raises(anyio.EndOfStream):
                    await h2.receive()

            tg.start_soon(receive)
            await anyio.sleep(0.01)
            h2.close_sending()
    with pytest.raises(anyio.ClosedResourceError):
        await h2.send(2)


@pytest.mark.anyio
async def test_permission_answered_by_the_consumer_is_stepped_at_once(tmp_path: Path) -> None:
    """The consumer's allow() steps the answer in its own task: the tool has started by the
    time allow() returns (no trip through the driver)."""
    started = anyio.Event()

    class Flag(Noop):
        async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            started.set()
            return ToolOutput(content="ok")

    seen: list[str] = []
    async with run(
        "go",
        model=Counter(2),
        tools=[Flag()],
        workspace=tmp_path,
        observer=lambda e, s, fx: seen.extend(type(f).__name__ for f in fx),
    ) as r:
        async for item in r:
            if isinstance(item, PermissionRequest):
                item.allow()
                assert seen[-1] == "StartTool"
    assert started.is_set()
    assert r.result is not None and r.result.terminal.TAG == "completed"


CONTEXT_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("steploop_test", default="unset")


@pytest.mark.anyio
async def test_handlers_do_not_see_what_an_earlier_handler_set(tmp_path: Path) -> None:
    """Runner tasks are reused, but each handler starts from the context the run was entered
    in, as a task of its own would: a context variable a tool leaves set is not seen by the
    next tool."""
    seen: list[str] = []

    class Leaky(Noop):
        name = "leaky"

        async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            seen.append(CONTEXT_VAR.get())
            CONTEXT_VAR.set(f"left by {ctx.tool_use_id}")
            return ToolOutput(content="ok")

    token = CONTEXT_VAR.set("the consumer's")
    try:
        async with run(
            "go",
            model=Counter(4, tool="leaky"),
            tools=[Leaky()],
            workspace=tmp_path,
            permissions=PermissionPolicy(default="allow"),
        ) as r:
            async for _item in r:
                CONTEXT_VAR.set("changed after the run started")
    finally:
        CONTEXT_VAR.reset(token)
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert seen == ["the consumer's"] * 3
