"""The interpreter on asyncio and trio: the walk-through, backpressure, cleanup, interrupts."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects import PermissionPolicy, PermissionRequest, run, run_sync
from steploop.effects.cli import SAMPLE_PROJECT, demo_script
from steploop.effects.scripted import ScriptedModel, failure, reply, tool_call
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools
from steploop.reducer import LoopConfig, Request
from steploop.reducer.events import Event, InterruptBehavior
from steploop.reducer.messages import (
    AssistantMessage,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class SlowTool:
    """A safe tool that sleeps; records whether it was cancelled."""

    name = "Slow"
    description = "sleeps"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, seconds: float = 30.0) -> None:
        self.seconds = seconds
        self.started = anyio.Event()
        self.cancelled = False
        self.finished = False

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        self.started.set()
        try:
            await anyio.sleep(self.seconds)
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        self.finished = True
        return ToolOutput(content="slept")


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(SAMPLE_PROJECT, ws)
    return ws


def _tool_pairs_ok(messages: Any) -> bool:
    uses = [b.id for m in messages if isinstance(m, AssistantMessage) for b in m.content if isinstance(b, ToolUseBlock)]
    results = [b.tool_use_id for m in messages if isinstance(m, UserMessage) for b in m.content if isinstance(b, ToolResultBlock)]
    return sorted(uses) == sorted(results)


@pytest.mark.anyio
async def test_walkthrough_runs_live(tmp_path: Path) -> None:
    """The seed's walk-through through run(): Read, approved Edit, completed; the file is fixed."""
    ws = _workspace(tmp_path)
    tools = ToolRegistry(builtin_tools(ws))
    model = ScriptedModel.from_json(demo_script(), traits_for=tools.traits)
    asked: list[str] = []
    async with run(
        "Fix the null pointer bug in src/auth/validate.ts",
        model=model,
        tools=tools,
        workspace=ws,
        permissions=PermissionPolicy(allow=frozenset({"Read"})),
        transcript_path=tmp_path / "t.jsonl",
    ) as r:
        async for item in r:
            if isinstance(item, PermissionRequest):
                asked.append(item.name)
                item.allow()
    assert r.result is not None
    assert r.result.terminal.TAG == "completed"
    assert asked == ["Edit"]
    assert "if (!userId) return { error: 'unauthorized' }" in (ws / "src/auth/validate.ts").read_text()
    assert r.result.state.turn_count == 3
    assert r.result.usage.output_tokens == 150
    assert _tool_pairs_ok(r.result.state.conversation.messages())
    assert (tmp_path / "t.jsonl").read_text().count("\n") == len(r.result.state.conversation)


@pytest.mark.anyio
async def test_backpressure_nothing_advances_until_pulled(tmp_path: Path) -> None:
    """With the consumer not pulling, the driver stops at the next item it has to hand over."""
    steps: list[Event | None] = []
    model = ScriptedModel([reply("one"), reply("two")], traits_for=ToolRegistry([]).traits)
    async with run("hi", model=model, workspace=tmp_path, observer=lambda e, s, fx: steps.append(e)) as r:
        first = await r.__anext__()
        assert isinstance(first, UserMessage)
        await anyio.sleep(0.05)
        # start() ran; the model's first block reached the machine, whose Emit now waits for us
        assert len(steps) == 2 and r.state is not None and r.state.phase == "streaming"
        await anyio.sleep(0.05)
        assert len(steps) == 2
        rest = [item async for item in r]
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert len(rest) == 1


@pytest.mark.anyio
async def test_break_early_cancels_running_tool(tmp_path: Path) -> None:
    """Leaving the run while a tool runs cancels and awaits it: nothing is left behind."""
    slow = SlowTool()
    tools = ToolRegistry([slow])
    model = ScriptedModel([tool_call("Slow", {}), reply("done")], traits_for=tools.traits)
    async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=PermissionPolicy(default="allow")) as r:
        async for item in r:
            if isinstance(item, AssistantMessage) and isinstance(item.content[0], ToolUseBlock):
                await slow.started.wait()
                break
    assert slow.cancelled and not slow.finished
    assert r.result is None


@pytest.mark.anyio
async def test_external_cancellation_kills_subprocess(tmp_path: Path) -> None:
    """A cancelled consumer leaves no Bash subprocess behind."""
    tools = ToolRegistry(builtin_tools(tmp_path, enable_bash=True))
    marker = tmp_path / "pid"
    cmd = f"echo $$ > {marker}; exec sleep 30"
    model = ScriptedModel([tool_call("Bash", {"command": cmd}), reply("done")], traits_for=tools.traits)
    with anyio.move_on_after(1.0):
        async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=PermissionPolicy(default="allow")) as r:
            async for _item in r:
                pass
    assert r.result is None
    pid = int(marker.read_text().strip())
    await anyio.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by PID 1 in a container) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.anyio
async def test_hard_interrupt_during_tools(tmp_path: Path) -> None:
    """interrupt('hard') while a tool runs ends aborted_tools with a synthetic result."""
    slow = SlowTool()
    tools = ToolRegistry([slow])
    model = ScriptedModel([tool_call("Slow", {}), reply("done")], traits_for=tools.traits)
    async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=PermissionPolicy(default="allow")) as r:
        async for item in r:
            if isinstance(item, AssistantMessage) and isinstance(item.content[0], ToolUseBlock):
                await slow.started.wait()
                r.interrupt("hard")
    assert r.result is not None
    assert r.result.terminal.TAG in ("aborted_streaming", "aborted_tools")
    assert slow.cancelled
    assert _tool_pairs_ok(r.result.state.conversation.messages())


@pytest.mark.anyio
async def test_rejected_permission_aborts(tmp_path: Path) -> None:
    """A user's rejection of a tool call aborts the turn (aborted_tools)."""
    ws = _workspace(tmp_path)
    tools = ToolRegistry(builtin_tools(ws))
    model = ScriptedModel(
        [tool_call("Write", {"file_path": "x.txt", "content": "hi"}), reply("done")], traits_for=tools.traits
    )
    async with run("go", model=model, tools=tools, workspace=ws) as r:
        async for item in r:
            if isinstance(item, PermissionRequest):
                item.reject()
    assert r.result is not None and r.result.terminal.TAG == "aborted_tools"
    assert not (ws / "x.txt").exists()


@pytest.mark.anyio
async def test_retry_waits_then_succeeds(tmp_path: Path) -> None:
    """A rate limit is retried after the machine's Wait; the turn then completes."""
    model = ScriptedModel([failure("rate_limited", 429, 20), reply("ok")], traits_for=ToolRegistry([]).traits)
    notices = []
    async with run("hi", model=model, workspace=tmp_path) as r:
        async for item in r:
            notices.append(item)
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert any(getattr(i, "subtype", "") == "api_error" for i in notices)


@pytest.mark.anyio
async def test_multi_turn_session(tmp_path: Path) -> None:
    """The final state's session continues the conversation in the next user turn."""
    traits = ToolRegistry([]).traits
    async with run("first", model=ScriptedModel([reply("a")], traits_for=traits), workspace=tmp_path) as r1:
        _ = [i async for i in r1]
    assert r1.result is not None
    session = r1.result.state.session()
    async with run("second", model=ScriptedModel([reply("b")], traits_for=traits), workspace=tmp_path, session=session) as r2:
        _ = [i async for i in r2]
    assert r2.result is not None
    texts = [m.content[0].text for m in r2.result.state.conversation.messages()]  # type: ignore[union-attr]
    assert texts == ["first", "a", "second", "b"]


@pytest.mark.anyio
async def test_script_exhausted_is_a_model_error(tmp_path: Path) -> None:
    """A model client that raises becomes model_error, not a crash of the run."""
    model = ScriptedModel([tool_call("Read", {"file_path": "README.md"})], traits_for=ToolRegistry(builtin_tools(tmp_path)).traits)
    (tmp_path / "README.md").write_text("hello")
    async with run("go", model=model, tools=builtin_tools(tmp_path), workspace=tmp_path, permissions=PermissionPolicy(default="allow")) as r:
        _ = [i async for i in r]
    assert r.result is not None and r.result.terminal.TAG == "model_error"


def test_run_sync_wrapper(tmp_path: Path) -> None:
    """run_sync drives a turn from synchronous code and returns the result."""
    items: list[Any] = []
    res = run_sync(
        Request(prompt="hi"),
        model=ScriptedModel([reply("hello")], traits_for=ToolRegistry([]).traits),
        workspace=tmp_path,
        config=LoopConfig(),
        on_item=items.append,
    )
    assert res.terminal.TAG == "completed" and len(items) == 2


@pytest.mark.anyio
async def test_command_stop_hook_reads_transcript_and_blocks_once(tmp_path: Path) -> None:
    """A Claude Code style hook script reads the transcript, blocks once (exit 2), then passes."""
    from steploop.effects.hooks import CommandStopHook, StopHooks

    script = tmp_path / "hook.py"
    script.write_text(
        "import json, sys\n"
        "p = json.load(sys.stdin)\n"
        "records = [json.loads(l) for l in open(p['transcript_path'])]\n"
        "assistants = sum(1 for r in records if r['type'] == 'assistant')\n"
        "if not p['stop_hook_active']:\n"
        "    print(f'saw {assistants} assistant records; run the linter first', file=sys.stderr)\n"
        "    sys.exit(2)\n"
        "sys.exit(0)\n"
    )
    import sys as _sys

    hooks = StopHooks([CommandStopHook([_sys.executable, str(script)], timeout_s=10)])
    model = ScriptedModel([reply("done"), reply("linted, done")], traits_for=ToolRegistry([]).traits)
    items: list[Any] = []
    async with run("go", model=model, workspace=tmp_path, stop_hooks=hooks, transcript_path=tmp_path / "t.jsonl") as r:
        async for item in r:
            items.append(item)
    assert r.result is not None and r.result.terminal.TAG == "completed"
    feedback = [i for i in items if isinstance(i, UserMessage) and i.origin == "stop_hook_feedback"]
    assert len(feedback) == 1
    assert "saw 1 assistant records; run the linter first" in feedback[0].content[0].text  # type: ignore[union-attr]
    assert r.result.state.stop_hook_active


class GatedModel:
    """A fake stream: two safe tool calls, then it waits until both tools have started
    before it ends the response (so the tools must start mid-stream)."""

    def __init__(self, started: dict[str, anyio.Event]) -> None:
        self.started = started
        self.calls = 0
        self.order: list[str] = []

    async def stream(self, effect: Any) -> Any:
        from steploop.reducer.events import ModelBlockReceived, ModelResponseEnded, ToolTraits
        from steploop.reducer.messages import TextBlock

        self.calls += 1
        safe = ToolTraits(concurrency_safe=True, interrupt="cancel", max_result_chars=None)
        if self.calls == 1:
            for tid in ("a", "b"):
                yield ModelBlockReceived(call_id=effect.call_id, block=ToolUseBlock(id=tid, name="Probe", input={"id": tid}), tool=safe)
            with anyio.fail_after(5):
                for tid in ("a", "b"):
                    await self.started[tid].wait()
            self.order.append("both tools started; response ends now")
            yield ModelResponseEnded(call_id=effect.call_id, model=effect.model, stop_reason="tool_use", usage=Usage())
        else:
            yield ModelBlockReceived(call_id=effect.call_id, block=TextBlock(text="done"))
            yield ModelResponseEnded(call_id=effect.call_id, model=effect.model, stop_reason="end_turn", usage=Usage())


class Probe:
    """A safe tool that records its start and waits for its sibling: it only finishes if
    both run at the same time."""

    name = "Probe"
    description = "probe"
    input_schema: Mapping[str, Any] = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    max_result_chars = None
    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, started: dict[str, anyio.Event]) -> None:
        self.started = started

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        me = str(input["id"])
        self.started[me].set()
        other = "b" if me == "a" else "a"
        with anyio.fail_after(5):
            await self.started[other].wait()
        return ToolOutput(content=f"{me} ran beside {other}")


@pytest.mark.anyio
async def test_safe_tools_start_mid_stream_and_run_concurrently(tmp_path: Path) -> None:
    """Both safe tools start before the response ends, and each sees the other running."""
    from steploop.reducer.messages import Usage  # noqa: F401  (used by GatedModel)

    started = {"a": anyio.Event(), "b": anyio.Event()}
    model = GatedModel(started)
    tools = ToolRegistry([Probe(started)])
    events: list[str] = []

    def observe(e: Any, s: Any, fx: Any) -> None:
        events.extend(type(x).__name__ for x in fx if type(x).__name__ == "StartTool")
        if e is not None:
            events.append(type(e).__name__)

    async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=PermissionPolicy(default="allow"), observer=observe) as r:
        _ = [i async for i in r]
    assert r.result is not None and r.result.terminal.TAG == "completed"
    first_end = events.index("ModelResponseEnded")
    assert events[:first_end].count("StartTool") == 2  # both started while the model streamed
    results = [b.content for m in r.result.state.conversation.messages() if isinstance(m, UserMessage) for b in m.content if isinstance(b, ToolResultBlock)]
    assert results == ["a ran beside b", "b ran beside a"]  # tool_use order, whatever finished first


@pytest.mark.anyio
async def test_model_compactor_replaces_the_conversation(tmp_path: Path) -> None:
    """Auto-compaction through the model: a nested summary call, boundary + summary messages."""
    from steploop.effects.compaction import SUMMARY_PREAMBLE, ModelCompactor
    from steploop.effects.scripted import response, tool_use
    from steploop.reducer import default
    from steploop.reducer.messages import SystemMessage

    tools = ToolRegistry(builtin_tools(tmp_path))
    (tmp_path / "a.txt").write_text("x")
    cfg = default().with_overrides({"context_window": 50_000, "gates.history_snip": False, "gates.context_collapse": False})
    big = Usage(input_tokens=30_000, output_tokens=10)
    model = ScriptedModel([response(tool_use("Read", {"file_path": "a.txt"}), stop_reason="tool_use", usage=big), reply("done")], traits_for=tools.traits)
    summariser = ScriptedModel([reply("The user asked to read a.txt; it holds x.")], traits_for=tools.traits)
    async with run("go", model=model, tools=tools, workspace=tmp_path, config=cfg, compactor=ModelCompactor(summariser), permissions=PermissionPolicy(default="allow")) as r:
        items = [i async for i in r]
    assert r.result is not None and r.result.terminal.TAG == "completed"
    msgs = r.result.state.conversation.messages()
    assert isinstance(msgs[0], SystemMessage) and msgs[0].subtype == "compact_boundary"
    assert isinstance(msgs[1], UserMessage) and msgs[1].content[0].text.startswith(SUMMARY_PREAMBLE)  # type: ignore[union-attr]
    assert any(isinstance(i, SystemMessage) and i.subtype == "compact_boundary" for i in items)


@pytest.mark.anyio
async def test_text_deltas_for_live_display(tmp_path: Path) -> None:
    """With text_deltas=True the run yields the raw deltas a client reports, then the block."""
    from steploop.effects.run import TextDelta
    from steploop.reducer.events import ModelBlockReceived, ModelResponseEnded
    from steploop.reducer.messages import TextBlock

    class DeltaModel:
        def __init__(self) -> None:
            self.on_text_delta: Any = None

        async def stream(self, effect: Any) -> Any:
            for piece in ("Hel", "lo"):
                self.on_text_delta(0, piece)
                await anyio.sleep(0.01)
            yield ModelBlockReceived(call_id=effect.call_id, block=TextBlock(text="Hello"))
            yield ModelResponseEnded(call_id=effect.call_id, model=effect.model, stop_reason="end_turn", usage=Usage())

    async with run("hi", model=DeltaModel(), workspace=tmp_path, text_deltas=True) as r:
        items = [i async for i in r]
    deltas = [i.text for i in items if isinstance(i, TextDelta)]
    assert deltas == ["Hel", "lo"]
    texts = [i for i in items if isinstance(i, AssistantMessage)]
    assert items.index(texts[0]) > max(items.index(i) for i in items if isinstance(i, TextDelta))
    assert r.result is not None and r.result.terminal.TAG == "completed"


@pytest.mark.anyio
async def test_queued_command_is_attached_and_acknowledged(tmp_path: Path) -> None:
    """A command queued during the turn rides along the next tool round and is acknowledged."""
    acked: list[tuple[str, ...]] = []
    slow = SlowTool(seconds=0.05)
    tools = ToolRegistry([slow])
    model = ScriptedModel([tool_call("Slow", {}), reply("done")], traits_for=tools.traits)
    async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=PermissionPolicy(default="allow"), on_acknowledge=acked.append) as r:
        async for item in r:
            if isinstance(item, AssistantMessage) and isinstance(item.content[0], ToolUseBlock):
                r.queue_command("cmd-1", "also update the changelog")
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert acked == [("cmd-1",)]
    from steploop.reducer.messages import AttachmentMessage

    atts = [m for m in r.result.state.conversation.messages() if isinstance(m, AttachmentMessage)]
    assert [a.attachment_type for a in atts] == ["queued_command"]


@pytest.mark.anyio
async def test_every_event_is_stamped_with_the_run_clock(tmp_path: Path) -> None:
    """Model events are re-stamped with the run's clock, so time-based rules see one clock
    (a client that leaves at_ms at 0 once made microcompact fire on every round)."""
    seen: list[int] = []
    tools = ToolRegistry(builtin_tools(tmp_path))
    (tmp_path / "a.txt").write_text("x")
    model = ScriptedModel([tool_call("Read", {"file_path": "a.txt"}), reply("done")], traits_for=tools.traits)
    async with run("go", model=model, tools=tools, workspace=tmp_path, permissions=PermissionPolicy(default="allow"),
                   clock_ms=lambda: 5_000_000_000, observer=lambda e, s, fx: seen.append(e.at_ms) if e is not None else None) as r:
        _ = [i async for i in r]
    assert r.result is not None and r.result.terminal.TAG == "completed"
    assert seen and set(seen) == {5_000_000_000}
    assert r.result.state.last_assistant_at_ms == 5_000_000_000
