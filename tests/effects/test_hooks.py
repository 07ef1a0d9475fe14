"""Stop hooks: Python hooks, real command hooks (Claude Code's protocol) and the runner."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects.hooks import (
    BLOCKED_WITHOUT_REASON,
    PASS,
    CommandStopHook,
    PythonStopHook,
    StopHookInput,
    StopHookResult,
    StopHooks,
    fold_results,
    last_assistant_text,
)
from steploop.effects.transcript import TranscriptWriter
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import RunStopHooks
from steploop.reducer.events import StopHooksFinished
from steploop.reducer.messages import (
    AssistantMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
)

SESSION = "sess-1234"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _effect(hooks_id: int = 7, *, active: bool = False) -> RunStopHooks:
    return RunStopHooks(
        hooks_id=hooks_id, conversation=Conversation.empty(), stop_hook_active=active
    )


async def _run(hooks: list[Any], tmp_path: Path, *, active: bool = False) -> StopHooksFinished:
    return await StopHooks(hooks).run(
        _effect(active=active),
        session_id=SESSION,
        transcript_path=str(tmp_path / "t.jsonl"),
        cwd=str(tmp_path),
    )


# A hook script in the style people write for Claude Code: it reads the payload from stdin,
# reads the transcript at transcript_path, and answers according to its first argument.
HOOK_SCRIPT = """\
#!{python}
import json, os, sys

payload = json.load(sys.stdin)
with open(os.path.join(os.path.dirname(sys.argv[0]), "payload.json"), "w") as f:
    json.dump({{"payload": payload, "cwd": os.getcwd(),
               "project_dir": os.environ.get("CLAUDE_PROJECT_DIR")}}, f)
assistants = tool_uses = 0
with open(payload["transcript_path"]) as f:
    for line in f:
        rec = json.loads(line)
        if rec["type"] == "assistant":
            assistants += 1
            tool_uses += sum(b["type"] == "tool_use" for b in rec["message"]["content"])
summary = f"{{assistants}} assistant records, {{tool_uses}} tool uses"
mode = sys.argv[1]
if mode == "exit2":
    print("stderr says: " + summary, file=sys.stderr)
    sys.exit(2)
if mode == "exit2-silent":
    sys.exit(2)
if mode == "block":
    print(json.dumps({{"decision": "block", "reason": "json says: " + summary}}))
elif mode == "block-no-reason":
    print(json.dumps({{"decision": "block"}}))
elif mode == "prevent":
    print(json.dumps({{"continue": False, "stopReason": "enough: " + summary,
                      "systemMessage": "hook stopped the session"}}))
elif mode == "garbage":
    print("this is not json {{")
elif mode == "fail":
    print("something broke", file=sys.stderr)
    sys.exit(1)
elif mode == "active":
    if payload["stop_hook_active"]:
        sys.exit(0)
    print("keep going", file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture
def hook_script(tmp_path: Path) -> Path:
    """A real executable hook script plus a transcript with 2 assistant records for it."""
    script = tmp_path / "stop_hook.py"
    script.write_text(HOOK_SCRIPT.format(python=sys.executable))
    script.chmod(0o755)
    with TranscriptWriter(
        tmp_path / "t.jsonl", session_id=SESSION, cwd=str(tmp_path), version="0.1.0"
    ) as w:
        w.append(UserMessage(id="u1", content=(TextBlock(text="do it"),)))
        w.append(
            AssistantMessage(
                id="a1",
                response_id="m1",
                model="claude-x",
                content=(ToolUseBlock(id="t1", name="Bash", input={"command": "ls"}),),
            )
        )
        w.append(
            AssistantMessage(
                id="a2", response_id="m2", model="claude-x", content=(TextBlock(text="done"),)
            )
        )
    return script


def _pid_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs (absent, or a zombie nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    except OSError:  # pragma: no cover - not Linux
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


async def _wait_gone(*pids: int) -> bool:
    with anyio.move_on_after(3):
        while not all(_pid_gone(p) for p in pids):
            await anyio.sleep(0.02)
    return all(_pid_gone(p) for p in pids)


def _spawner_script(tmp_path: Path) -> Path:
    """A shell hook that starts a background child, records both pids, then waits forever."""
    script = tmp_path / "slow_hook.sh"
    script.write_text(
        textwrap.dedent(
            f"""\
            #!/bin/sh
            sleep 30 &
            echo $! > "{tmp_path}/child.pid"
            echo $$ > "{tmp_path}/self.pid"
            wait
            """
        )
    )
    script.chmod(0o755)
    return script


# -- command hooks against a real script ---------------------------------------------------


@pytest.mark.spec("HOOK-2")
@pytest.mark.anyio
async def test_command_exit_2_blocks_with_stderr(tmp_path: Path, hook_script: Path) -> None:
    """Exit code 2 is a blocking error: ``[<command>]: <stderr>``, as Claude Code words the
    feedback (the script read the transcript)."""
    hook = CommandStopHook([str(hook_script), "exit2"], 10)
    finished = await _run([hook], tmp_path)
    assert finished == StopHooksFinished(
        hooks_id=7,
        blocking_errors=(f"[{hook.name}]: stderr says: 2 assistant records, 1 tool uses",),
        hook_count=1,
    )


@pytest.mark.anyio
async def test_command_exit_2_without_stderr_has_a_placeholder(
    tmp_path: Path, hook_script: Path
) -> None:
    """Exit code 2 with empty stderr still blocks, with Claude Code's placeholder."""
    hook = CommandStopHook([str(hook_script), "exit2-silent"], 10)
    result = await hook(StopHookInput(session_id=SESSION, transcript_path=str(tmp_path / "t.jsonl")))
    assert result.blocking_error == f"[{hook.name}]: No stderr output"
    assert result.error is None


@pytest.mark.anyio
async def test_command_json_decision_block(tmp_path: Path, hook_script: Path) -> None:
    """Exit 0 with {"decision": "block"} blocks with the JSON reason (shell-string command)."""
    finished = await _run([CommandStopHook(f"'{hook_script}' block", 10)], tmp_path)
    assert finished.blocking_errors == ("json says: 2 assistant records, 1 tool uses",)
    assert not finished.prevent
    assert finished.error is None


@pytest.mark.anyio
async def test_command_json_block_without_reason(tmp_path: Path, hook_script: Path) -> None:
    """A JSON block decision without a reason uses the default reason."""
    finished = await _run([CommandStopHook([str(hook_script), "block-no-reason"], 10)], tmp_path)
    assert finished.blocking_errors == (BLOCKED_WITHOUT_REASON,)


@pytest.mark.anyio
async def test_command_json_continue_false_prevents(tmp_path: Path, hook_script: Path) -> None:
    """Exit 0 with {"continue": false} prevents continuation with stopReason."""
    hook = CommandStopHook([str(hook_script), "prevent"], 10)
    result = await hook(
        StopHookInput(session_id=SESSION, transcript_path=str(tmp_path / "t.jsonl"))
    )
    assert result == StopHookResult(
        prevent=True,
        stop_reason="enough: 2 assistant records, 1 tool uses",
        system_message="hook stopped the session",
    )
    finished = await _run([hook], tmp_path)
    assert finished.prevent
    assert finished.stop_reason == "enough: 2 assistant records, 1 tool uses"
    assert finished.blocking_errors == ()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["pass", "garbage"])
async def test_command_exit_0_passes(tmp_path: Path, hook_script: Path, mode: str) -> None:
    """Exit 0 with no output or non-JSON output passes."""
    finished = await _run([CommandStopHook([str(hook_script), mode], 10)], tmp_path)
    assert finished == StopHooksFinished(hooks_id=7, hook_count=1)


@pytest.mark.anyio
async def test_command_other_exit_code_is_a_non_blocking_error(
    tmp_path: Path, hook_script: Path
) -> None:
    """Exit code 1 reports an error (with stderr) but neither blocks nor prevents."""
    finished = await _run([CommandStopHook([str(hook_script), "fail"], 10)], tmp_path)
    assert finished.blocking_errors == ()
    assert not finished.prevent
    assert finished.error is not None
    assert "exit code 1" in finished.error
    assert "something broke" in finished.error


@pytest.mark.anyio
@pytest.mark.parametrize("active", [False, True])
async def test_payload_and_stop_hook_active_pass_through(
    tmp_path: Path, hook_script: Path, active: bool
) -> None:
    """The stdin payload has Claude Code's keys; stop_hook_active reaches the script."""
    hook = CommandStopHook([str(hook_script), "active"], 10)
    finished = await _run([hook], tmp_path, active=active)
    seen = json.loads((tmp_path / "payload.json").read_text())
    assert seen["payload"] == {
        "session_id": SESSION,
        "transcript_path": str(tmp_path / "t.jsonl"),
        "cwd": str(tmp_path),
        "permission_mode": "default",
        "hook_event_name": "Stop",
        "stop_hook_active": active,
    }
    assert seen["cwd"] == str(tmp_path)
    assert seen["project_dir"] == str(tmp_path)
    assert finished.blocking_errors == (() if active else (f"[{hook.name}]: keep going",))


@pytest.mark.spec("HOOK-1")
@pytest.mark.anyio
async def test_the_payload_carries_the_last_assistant_message(
    tmp_path: Path, hook_script: Path
) -> None:
    """Claude Code's hooks reference: Stop and SubagentStop hooks get the text of the response
    that is ending (``last_assistant_message``), so they need not read the transcript. A
    response is one message per block: the last one's text counts."""
    conversation = Conversation.of(
        [
            UserMessage(id="u1", content=(TextBlock(text="fix it"),)),
            AssistantMessage(id="a1", response_id="r1", model="m", content=(TextBlock(text="Looking."),)),
            AssistantMessage(
                id="a2", response_id="r1", model="m",
                content=(ToolUseBlock(id="t1", name="Read", input={}),),
            ),
            UserMessage(id="u2", content=(ToolResultBlock(tool_use_id="t1", content="x"),)),
            AssistantMessage(id="a3", response_id="r2", model="m", content=(TextBlock(text="Done.\nAll green."),)),
        ]
    )  # fmt: skip
    effect = RunStopHooks(hooks_id=7, conversation=conversation, stop_hook_active=False)
    for event in ("Stop", "SubagentStop"):
        await StopHooks([CommandStopHook([str(hook_script), "pass"], 10)]).run(
            effect,
            session_id=SESSION,
            transcript_path=str(tmp_path / "t.jsonl"),
            cwd=str(tmp_path),
            event_name=event,
        )
        seen = json.loads((tmp_path / "payload.json").read_text())["payload"]
        assert seen["last_assistant_message"] == "Done.\nAll green."
        assert list(seen)[-1] == "last_assistant_message"
    tool_last = Conversation.of(list(conversation.messages())[:3])
    assert last_assistant_text(tool_last) is None  # a tool_use block has no text
    assert last_assistant_text(Conversation.of(list(conversation.messages())[:2])) == "Looking."


@pytest.mark.anyio
async def test_subagent_event_name_and_hook_cwd(tmp_path: Path, hook_script: Path) -> None:
    """event_name reaches the payload; the hook's own cwd overrides the session cwd."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    await StopHooks([CommandStopHook([str(hook_script), "pass"], 10, str(elsewhere))]).run(
        _effect(),
        session_id=SESSION,
        transcript_path=str(tmp_path / "t.jsonl"),
        cwd=str(tmp_path),
        event_name="SubagentStop",
    )
    seen = json.loads((tmp_path / "payload.json").read_text())
    assert seen["payload"]["hook_event_name"] == "SubagentStop"
    assert seen["cwd"] == str(elsewhere)


@pytest.mark.anyio
async def test_command_timeout_kills_the_process_group(tmp_path: Path) -> None:
    """A hook past its timeout is killed with its children and reported as an error."""
    hook = CommandStopHook([str(_spawner_script(tmp_path))], 0.4)
    started = time.monotonic()
    finished = await _run([hook], tmp_path)
    assert time.monotonic() - started < 5
    assert finished.error is not None
    assert finished.error.endswith("timed out after 0.4 s")
    assert finished.blocking_errors == ()
    assert not finished.prevent
    child = int((tmp_path / "child.pid").read_text())
    leader = int((tmp_path / "self.pid").read_text())
    assert await _wait_gone(leader, child)


@pytest.mark.anyio
async def test_cancellation_kills_the_process_and_propagates(tmp_path: Path) -> None:
    """Cancelling the runner kills the hook's process group and the cancellation propagates."""
    hook = CommandStopHook([str(_spawner_script(tmp_path))], 30)
    returned: list[StopHooksFinished] = []

    async def runner() -> None:
        returned.append(await _run([hook], tmp_path))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner)
            while not (tmp_path / "self.pid").exists() or not (tmp_path / "child.pid").exists():
                await anyio.sleep(0.02)
            await anyio.sleep(0.05)  # let the pid files be written completely
            tg.cancel_scope.cancel()
    assert returned == []
    child = int((tmp_path / "child.pid").read_text())
    leader = int((tmp_path / "self.pid").read_text())
    assert await _wait_gone(leader, child)


@pytest.mark.anyio
async def test_missing_executable_is_an_error(tmp_path: Path) -> None:
    """A command that cannot start is reported as an error, not raised."""
    finished = await _run([CommandStopHook([str(tmp_path / "nope")], 5)], tmp_path)
    assert finished.error is not None
    assert "could not start" in finished.error
    assert finished.hook_count == 1


def test_command_hook_validates_its_arguments() -> None:
    """An empty argv or a non-positive timeout is refused; the name is the command line."""
    with pytest.raises(ValueError):
        CommandStopHook([], 1)
    with pytest.raises(ValueError):
        CommandStopHook("true", 0)
    assert CommandStopHook(["echo", "a b"], 1).name == "echo 'a b'"
    assert CommandStopHook("echo hi", 1).command == "echo hi"


# -- Python hooks -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_python_hooks_sync_and_async(tmp_path: Path) -> None:
    """Sync and async callables work; None passes; the payload is the StopHookInput."""
    seen: list[StopHookInput] = []

    def sync_hook(p: StopHookInput) -> StopHookResult:
        seen.append(p)
        return StopHookResult(blocking_error="sync says no")

    async def async_hook(p: StopHookInput) -> StopHookResult:
        await anyio.sleep(0)
        return StopHookResult(prevent=True, stop_reason="async stop")

    def passing(p: StopHookInput) -> None:
        return None

    threaded = PythonStopHook(lambda p: StopHookResult(blocking_error="thread"), in_thread=True)
    finished = await _run(
        [PythonStopHook(sync_hook), PythonStopHook(async_hook), PythonStopHook(passing), threaded],
        tmp_path,
        active=True,
    )
    assert finished == StopHooksFinished(
        hooks_id=7,
        blocking_errors=("sync says no", "thread"),
        prevent=True,
        stop_reason="async stop",
        hook_count=4,
    )
    assert seen == [
        StopHookInput(
            session_id=SESSION,
            transcript_path=str(tmp_path / "t.jsonl"),
            hook_event_name="Stop",
            stop_hook_active=True,
            cwd=str(tmp_path),
        )
    ]


@pytest.mark.anyio
async def test_python_hook_async_callable_object(tmp_path: Path) -> None:
    """An object with an async __call__ is awaited, even with in_thread=True."""

    class Hook:
        async def __call__(self, p: StopHookInput) -> StopHookResult:
            return StopHookResult(blocking_error="object")

    result = await PythonStopHook(Hook(), in_thread=True)(
        StopHookInput(session_id=SESSION, transcript_path="")
    )
    assert result.blocking_error == "object"


@pytest.mark.anyio
async def test_python_hook_wrong_return_type_is_an_error(tmp_path: Path) -> None:
    """A Python hook returning something else than StopHookResult/None is an error."""

    def bad(p: StopHookInput) -> Any:
        return "block please"

    finished = await _run([PythonStopHook(bad, name="bad-hook")], tmp_path)
    assert finished.error is not None
    assert "bad-hook" in finished.error
    assert finished.blocking_errors == ()


# -- the runner -------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_raising_hook_becomes_an_error(tmp_path: Path) -> None:
    """An exception from one hook becomes `error`; the other hooks' results still count."""

    def boom(p: StopHookInput) -> None:
        raise RuntimeError("kaput")

    async def also_boom(p: StopHookInput) -> None:
        raise KeyError("k")

    finished = await _run(
        [
            PythonStopHook(boom),
            PythonStopHook(lambda p: StopHookResult(blocking_error="still here")),
            PythonStopHook(also_boom),
        ],
        tmp_path,
    )
    assert finished.blocking_errors == ("still here",)
    assert finished.hook_count == 3
    assert finished.error is not None
    first, second = finished.error.split("; ")
    assert "boom" in first and "RuntimeError: kaput" in first
    assert "also_boom" in second and "KeyError" in second


@pytest.mark.anyio
async def test_hooks_run_concurrently_and_fold_in_hook_order(tmp_path: Path) -> None:
    """Hooks overlap in time; blocking errors keep hook order, the first prevent wins."""

    def slow(delay: float, **result: Any) -> PythonStopHook:
        async def hook(p: StopHookInput) -> StopHookResult:
            await anyio.sleep(delay)
            return StopHookResult(**result)

        return PythonStopHook(hook)

    hooks = [
        slow(0.3, blocking_error="first", prevent=True, stop_reason="reason one"),
        slow(0.0, blocking_error="second", prevent=True, stop_reason="reason two"),
        slow(0.15, error="e3"),
        slow(0.3, blocking_error="fourth"),
    ]
    started = time.monotonic()
    finished = await _run(hooks, tmp_path)
    assert time.monotonic() - started < 0.6
    assert finished == StopHooksFinished(
        hooks_id=7,
        blocking_errors=("first", "second", "fourth"),
        prevent=True,
        stop_reason="reason one",
        hook_count=4,
        error="e3",
    )


@pytest.mark.anyio
async def test_python_hook_cancellation_propagates(tmp_path: Path) -> None:
    """Cancellation is not turned into a hook error: it propagates out of run()."""
    entered = anyio.Event()

    async def forever(p: StopHookInput) -> None:
        entered.set()
        await anyio.sleep_forever()

    returned: list[StopHooksFinished] = []

    async def runner() -> None:
        returned.append(await _run([PythonStopHook(forever)], tmp_path))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner)
            await entered.wait()
            tg.cancel_scope.cancel()
    assert returned == []


@pytest.mark.anyio
async def test_no_hooks_and_the_clock(tmp_path: Path) -> None:
    """With no hooks the event reports hook_count 0; clock_ms stamps at_ms."""
    assert await _run([], tmp_path) == StopHooksFinished(hooks_id=7)
    finished = await StopHooks([PythonStopHook(lambda p: None)], clock_ms=lambda: 1234).run(
        _effect(3), session_id=SESSION, transcript_path="", cwd=""
    )
    assert finished == StopHooksFinished(hooks_id=3, hook_count=1, at_ms=1234)


def test_fold_results_directly() -> None:
    """fold_results joins errors with '; ' and leaves error None when there are none."""
    assert fold_results(1, [PASS, PASS]) == StopHooksFinished(hooks_id=1, hook_count=2)
    folded = fold_results(
        1, [StopHookResult(error="a"), StopHookResult(prevent=True), StopHookResult(error="b")]
    )
    assert folded.error == "a; b"
    assert folded.prevent and folded.stop_reason == ""


# -- Claude Code's protocol, field by field -------------------------------------------------


@pytest.mark.spec("HOOK-1")
@pytest.mark.anyio
async def test_permission_mode_and_subagent_fields_reach_the_hook(
    tmp_path: Path, hook_script: Path
) -> None:
    """``permission_mode`` is on every payload (a plan-mode hook can engage); SubagentStop
    payloads carry the agent's type and id."""
    hooks = StopHooks(
        [CommandStopHook([str(hook_script), "pass"], 10)],
        permission_mode="plan",
        agent_type="Explore",
        agent_id="a1",
    )
    await hooks.run(_effect(), session_id=SESSION, transcript_path="t", cwd=str(tmp_path))
    seen = json.loads((tmp_path / "payload.json").read_text())["payload"]
    assert seen["permission_mode"] == "plan" and "agent_type" not in seen
    await hooks.run(
        _effect(), session_id=SESSION, transcript_path="t", cwd=str(tmp_path), event_name="SubagentStop"
    )
    seen = json.loads((tmp_path / "payload.json").read_text())["payload"]
    assert (seen["hook_event_name"], seen["agent_type"], seen["agent_id"]) == ("SubagentStop", "Explore", "a1")
    with pytest.raises(ValueError, match="permission_mode"):
        StopHooks([], permission_mode="yolo")  # type: ignore[arg-type]


@pytest.mark.spec("HOOK-1")
@pytest.mark.anyio
async def test_plugin_root_is_set_or_the_hook_is_not_started(tmp_path: Path) -> None:
    """A plugin hook gets CLAUDE_PLUGIN_ROOT; without it, a command that uses it is a hook
    error (not an exit-2 block on a missing file)."""
    (tmp_path / "plugin" / "hooks").mkdir(parents=True)
    script = tmp_path / "plugin" / "hooks" / "stop.sh"
    script.write_text('#!/bin/sh\necho "root=$CLAUDE_PLUGIN_ROOT" >&2\nexit 2\n')
    script.chmod(0o755)
    command = "${CLAUDE_PLUGIN_ROOT}/hooks/stop.sh"
    env = {k: v for k, v in os.environ.items() if k != "CLAUDE_PLUGIN_ROOT"}
    payload = StopHookInput(session_id=SESSION, transcript_path="t", cwd=str(tmp_path))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "environ", env)
        unset = await CommandStopHook(command, 10)(payload)
    assert unset.blocking_error is None and unset.error is not None
    assert "CLAUDE_PLUGIN_ROOT" in unset.error and "--plugin" in unset.error
    hook = CommandStopHook(command, 10, env={"CLAUDE_PLUGIN_ROOT": str(tmp_path / "plugin")})
    result = await hook(payload)
    assert result.blocking_error == f"[{command}]: root={tmp_path / 'plugin'}"


@pytest.mark.spec("HOOK-2")
@pytest.mark.anyio
async def test_exit_2_from_a_missing_script_is_an_error_not_a_block(tmp_path: Path) -> None:
    """The shell or python failing to find the hook's script (exit 2) is a broken hook."""
    payload = StopHookInput(session_id=SESSION, transcript_path="t", cwd=str(tmp_path))
    for command in (f"cd {tmp_path}/nope && ./x.sh", f"{sys.executable} {tmp_path}/nope.py"):
        result = await CommandStopHook(command, 10)(payload)
        assert result.blocking_error is None, command
        assert result.error is not None and "could not run its script" in result.error


@pytest.mark.anyio
async def test_runner_reports_each_hook_with_its_duration(tmp_path: Path, hook_script: Path) -> None:
    """The report of a run names each hook, its result (systemMessage included) and duration,
    for the transcript's stop_hook_summary and for the user."""
    seen: list[tuple[int, Any]] = []
    hooks = StopHooks(
        [CommandStopHook([str(hook_script), "prevent"], 10), PythonStopHook(lambda p: None, name="py")],
        on_report=lambda hid, runs: seen.append((hid, runs)),
    )
    await hooks.run(_effect(3), session_id=SESSION, transcript_path=str(tmp_path / "t.jsonl"), cwd=str(tmp_path))
    runs = hooks.report(3)
    assert runs is not None and seen == [(3, runs)]
    assert [r.name for r in runs] == [hooks.hooks[0].name, "py"]  # type: ignore[attr-defined]
    assert runs[0].result.system_message == "hook stopped the session"
    assert all(r.duration_ms >= 0 for r in runs) and hooks.report(4) is None


# -- a blocking sync hook (E-TIMEOUT-2) ----------------------------------------------------------


class Blocker:
    """A sync hook that blocks its thread until released (at most 10 s)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.returned = threading.Event()

    def __call__(self, payload: StopHookInput) -> StopHookResult:
        self.started.set()
        self.release.wait(10)
        self.returned.set()
        return StopHookResult(blocking_error="late")


@pytest.mark.anyio
@pytest.mark.spec("E-TIMEOUT-2")
async def test_a_blocking_sync_hook_times_out_and_leaves_the_loop_free(tmp_path: Path) -> None:
    """It ran on the event loop: the loop stood still for as long as it blocked, and no
    timeout could end it. Now the loop ticks, the other hook finishes, and the hook's timeout
    gives an error at once; the thread's late answer is dropped."""
    blocker = Blocker()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async def quick(p: StopHookInput) -> StopHookResult:
        await anyio.sleep(0.05)
        return StopHookResult(blocking_error="quick")

    hooks = [PythonStopHook(blocker, name="blocker", timeout_s=0.3), PythonStopHook(quick)]
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker)
            t0 = time.monotonic()
            with anyio.fail_after(5):
                finished = await _run(hooks, tmp_path)
            took = time.monotonic() - t0
            tg.cancel_scope.cancel()
    finally:
        blocker.release.set()
    assert blocker.started.is_set()
    assert finished.error == "Stop hook blocker timed out after 0.3 s"
    assert finished.blocking_errors == ("quick",)
    assert 0.25 < took < 2.0, took
    assert ticks >= 5, ticks  # the loop ran while the hook blocked
    assert blocker.returned.wait(5)  # the thread ends when released; its answer went nowhere


@pytest.mark.anyio
@pytest.mark.spec("E-TIMEOUT-2", "I-6")
@pytest.mark.parametrize("how", ["interrupt", "run-timeout"])
async def test_a_blocking_sync_hook_yields_to_an_interrupt_and_the_run_timeout(
    tmp_path: Path, how: str
) -> None:
    """The whole run: an interrupt during a blocking hook ends the turn at once
    (stop_hook_prevented), and Timeouts.stop_hooks_s ends the hooks with a warning."""
    from steploop.effects import run
    from steploop.effects.run import Timeouts
    from steploop.effects.scripted import ScriptedModel, reply
    from steploop.effects.tools import ToolRegistry

    blocker = Blocker()
    tools = ToolRegistry([])
    model = ScriptedModel([reply("done")], traits_for=tools.traits)
    hooks = StopHooks([PythonStopHook(blocker, name="blocker")])  # the default 600 s timeout
    timeouts = Timeouts(stop_hooks_s=0.3 if how == "run-timeout" else None)
    t0 = time.monotonic()
    try:
        with anyio.fail_after(5):
            async with run(
                "go",
                model=model,
                tools=tools,
                workspace=tmp_path,
                stop_hooks=hooks,
                timeouts=timeouts,
            ) as r:
                async with anyio.create_task_group() as tg:

                    async def interrupt_when_blocked() -> None:
                        while not blocker.started.is_set():
                            await anyio.sleep(0.01)
                        r.interrupt("hard")

                    if how == "interrupt":
                        tg.start_soon(interrupt_when_blocked)
                    async for _ in r:
                        pass
    finally:
        blocker.release.set()
    took = time.monotonic() - t0
    assert r.result is not None and blocker.started.is_set()
    assert took < 2.0, took
    if how == "interrupt":
        assert r.result.terminal.TAG == "stop_hook_prevented"
    else:
        assert r.result.terminal.TAG == "completed"
    assert blocker.returned.wait(5)


@pytest.mark.anyio
@pytest.mark.spec("E-TIMEOUT-2")
async def test_in_thread_false_runs_on_the_loop(tmp_path: Path) -> None:
    """The opt-out: the hook runs in the loop's own thread."""
    seen: list[int] = []
    hook = PythonStopHook(lambda p: seen.append(threading.get_ident()), in_thread=False)
    await _run([hook, PythonStopHook(lambda p: seen.append(threading.get_ident()))], tmp_path)
    assert seen[0] == threading.get_ident() != seen[1]
    with pytest.raises(ValueError, match="timeout_s must be positive"):
        PythonStopHook(lambda p: None, timeout_s=0)
