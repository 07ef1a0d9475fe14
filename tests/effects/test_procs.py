"""No process outlives its call: the Bash tool's and command stop hooks' descendants die with
the call however they detach, and with steploop when it is killed (steploop/effects/procs.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from steploop.effects.hooks import PASS, CommandStopHook, StopHookInput
from steploop.effects.procs import MECHANISM, open_process_tree
from steploop.effects.tools import Bash, ToolContext, ToolOutput

pytestmark = pytest.mark.skipif(
    MECHANISM != "subreaper", reason="needs Linux (/proc, prctl, pidfd) for the subreaper"
)


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The pids still alive after ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def read_pids(directory: Path, names: list[str], within_s: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while True:
        texts = [
            (directory / n).read_text().strip() if (directory / n).exists() else "" for n in names
        ]
        if all(texts):
            return [int(t) for t in texts]
        if time.monotonic() > deadline:
            raise AssertionError(f"pid files never all written: {names} -> {texts}")
        time.sleep(0.02)


@pytest.fixture
def reap_survivors() -> Iterator[list[int]]:
    """Pids a test started; any still running afterwards (the code under test failed) are
    killed so that a failing run leaves nothing behind."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            if "sleep" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


#: Three children, each detached another way, that do not hold the output: a plain
#: background job, one in a new session (setsid), one in its own process group (job
#: control in a subshell that exits, so the child is orphaned too); each writes its pid.
DETACHED = (
    "sleep 60 >/dev/null 2>&1 & echo $! > a.pid; "
    "setsid sleep 60 >/dev/null 2>&1 & echo $! > b.pid; "
    "(set -m; sleep 60 >/dev/null 2>&1 & echo $! > c.pid); "
)
PIDS = ["a.pid", "b.pid", "c.pid"]


#: A daemon made the classic way (fork, setsid, fork again, parent exits); it writes d.pid.
DAEMON_PY = textwrap.dedent(
    """\
    import os
    middle = os.fork()
    if middle == 0:
        os.setsid()
        daemon = os.fork()
        if daemon == 0:
            os.execvp("sleep", ["sleep", "60"])
        with open("d.pid", "w") as f:  # written before the middle exits, so never racing the kill
            f.write(str(daemon))
        os._exit(0)
    os.waitpid(middle, 0)
    """
)


def ctx(ws: Path) -> ToolContext:
    return ToolContext(workspace=ws, tool_use_id="toolu_1")


@pytest.mark.spec("E-PROC-1")
@pytest.mark.anyio
async def test_bash_children_die_with_the_call(tmp_path: Path, reap_survivors: list[int]) -> None:
    """When a Bash call ends, its children are killed even when they left the process group
    or the session: a group kill alone misses the setsid and job-control ones."""
    bash = Bash(workspace=tmp_path)
    out = await bash.call({"command": DETACHED + "echo done"}, ctx(tmp_path))
    assert out.content == "done\n"
    pids = read_pids(tmp_path, PIDS)
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


@pytest.mark.spec("E-PROC-1")
@pytest.mark.anyio
async def test_bash_double_fork_daemon_dies_with_the_call(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """A daemon made the classic way (fork, setsid, fork again, parent exits) dies too."""
    (tmp_path / "daemon.py").write_text(DAEMON_PY)
    bash = Bash(workspace=tmp_path)
    out = await bash.call(
        {"command": f"{sys.executable} daemon.py </dev/null >/dev/null 2>&1; echo started"},
        ctx(tmp_path),
    )
    assert out.content == "started\n"
    pids = read_pids(tmp_path, ["d.pid"])
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


@pytest.mark.spec("E-PROC-1")
@pytest.mark.anyio
async def test_bash_timeout_kills_detached_children(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """A Bash call that times out takes its detached children down with it."""
    bash = Bash(workspace=tmp_path, timeout_s=1.0)
    started = time.monotonic()
    out = await bash.call({"command": DETACHED + "sleep 60"}, ctx(tmp_path))
    assert time.monotonic() - started < 10
    assert out.is_error and "timed out after 1 s" in out.content
    pids = read_pids(tmp_path, PIDS)
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


@pytest.mark.anyio
async def test_tree_reports_exit_and_signal_status(tmp_path: Path) -> None:
    """The command's own status comes through the supervisor: an exit code, or minus the
    signal that ended it, as anyio reports a plain process's."""
    for command, code in (("exit 3", 3), ("kill -TERM $$", -signal.SIGTERM), ("true", 0)):
        process = await open_process_tree(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=tmp_path
        )
        try:
            assert await process.wait() == code
        finally:
            await process.aclose()
        assert process.returncode == code
    with pytest.raises(
        FileNotFoundError, match=r"\[Errno 2\] No such file or directory: '/no/such'"
    ):
        await open_process_tree(["/no/such"])


@pytest.mark.spec("E-PROC-1")
@pytest.mark.anyio
async def test_stop_hook_background_child_dies_with_the_hook(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """A command stop hook that exits 0 after starting a background child (that does not
    hold its output) leaves nothing running."""
    hook = CommandStopHook(
        "sleep 60 >/dev/null 2>&1 & echo $! > a.pid; "
        "setsid sleep 60 >/dev/null 2>&1 & echo $! > b.pid; exit 0",
        timeout_s=10,
        cwd=str(tmp_path),
    )
    result = await hook(StopHookInput(session_id="s", transcript_path="t.jsonl"))
    assert result == PASS
    pids = read_pids(tmp_path, ["a.pid", "b.pid"])
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


@pytest.mark.spec("E-PROC-1")
@pytest.mark.anyio
async def test_stop_hook_timeout_kills_setsid_child(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """A hook that outlives its timeout is killed with a child that left its session."""
    hook = CommandStopHook(
        "setsid sleep 60 >/dev/null 2>&1 & echo $! > b.pid; sleep 60",
        timeout_s=0.5,
        cwd=str(tmp_path),
    )
    result = await hook(StopHookInput(session_id="s", transcript_path="t.jsonl"))
    assert result.error is not None and "timed out" in result.error
    pids = read_pids(tmp_path, ["b.pid"])
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


#: A stand-in for steploop: it runs one Bash call that starts detached children and waits.
KILLED_HOST = textwrap.dedent(
    """\
    import sys
    from pathlib import Path
    import anyio
    from steploop.effects.tools import Bash, ToolContext

    ws = Path(sys.argv[1])

    async def main() -> None:
        bash = Bash(workspace=ws, timeout_s=600)
        await bash.call({"command": sys.argv[2]}, ToolContext(workspace=ws, tool_use_id="t"))

    anyio.run(main)
    """
)


@pytest.mark.spec("E-PROC-2")
def test_kill_9_of_steploop_kills_bash_children(tmp_path: Path, reap_survivors: list[int]) -> None:
    """After a kill -9 of the process running a Bash call, the command and its children,
    detached or not, stop within seconds instead of running on."""
    (tmp_path / "host.py").write_text(KILLED_HOST)
    command = DETACHED + "echo $$ > bash.pid; wait"
    host = subprocess.Popen(
        [sys.executable, str(tmp_path / "host.py"), str(tmp_path), command],
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        pids = read_pids(tmp_path, [*PIDS, "bash.pid"], within_s=30)
        reap_survivors.extend(pids)
        assert all(alive(p) for p in pids)
        os.kill(host.pid, signal.SIGKILL)
        host.wait(timeout=10)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait()
    assert wait_gone(pids) == []


@pytest.mark.anyio
async def test_process_group_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reap_survivors: list[int]
) -> None:
    """Where the supervisor cannot run, the command runs in a new session and its process
    group is killed at the end: a plain background child dies (a setsid one would not)."""
    import steploop.effects.procs

    monkeypatch.setattr(steploop.effects.procs, "MECHANISM", "process-group")
    bash = Bash(workspace=tmp_path)
    out = await bash.call(
        {"command": "sleep 60 >/dev/null 2>&1 & echo $! > a.pid; exit 4"}, ctx(tmp_path)
    )
    assert out == ToolOutput(content="(exit code 4)", is_error=True)
    pids = read_pids(tmp_path, ["a.pid"])
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


# -- what a command does to its parent (E-PROC-3) ---------------------------------------------

#: Started before the command turns on its parent: a plain background child, one in a new
#: session, a double-fork daemon; then the command's own pid, its parent's (the shim) and its
#: session's (the supervisor) are written.
BEFORE_KILL = (
    "sleep 60 >/dev/null 2>&1 & echo $! > a.pid; "
    "setsid sleep 60 >/dev/null 2>&1 & echo $! > b.pid; "
    f"{sys.executable} daemon.py </dev/null >/dev/null 2>&1; "
    "echo $$ > sh.pid; echo $PPID > shim.pid; cut -d ' ' -f 6 /proc/$$/stat > sup.pid; "
)
TREE = ["a.pid", "b.pid", "d.pid", "sh.pid", "shim.pid", "sup.pid"]


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_bash_command_that_kills_its_parent_leaves_no_survivor(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """``kill -9 $PPID`` from a Bash command used to kill the supervisor, leaving its detached
    children under init and the result saying only "(exit code -9)"; now the parent is a shim,
    the supervisor kills the whole tree, and the result says what happened."""
    (tmp_path / "daemon.py").write_text(DAEMON_PY)
    bash = Bash(workspace=tmp_path, timeout_s=60)
    out = await bash.call({"command": BEFORE_KILL + "kill -9 $PPID; echo after"}, ctx(tmp_path))
    pids = read_pids(tmp_path, TREE)
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []
    shim = pids[TREE.index("shim.pid")]
    # the shell may still echo and exit (0) before its parent's death signal reaches it
    assert out.is_error
    assert re.search(
        "(?:^|\n)"
        + re.escape("(exit code ")
        + "(-9|0)"
        + re.escape(
            f"; the command's parent process, pid {shim} (steploop's shim), was killed by "
            "SIGKILL (signal 9), most likely by the command itself (kill $PPID): the call was "
            "ended, and every process the command had started was killed)"
        )
        + "$",
        out.content,
    ), out.content


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_stop_hook_that_kills_its_parent_leaves_no_survivor(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """The same from a command stop hook: nothing it started survives, and the hook's error
    says its parent was killed."""
    (tmp_path / "daemon.py").write_text(DAEMON_PY)
    hook = CommandStopHook(BEFORE_KILL + "kill -9 $PPID; exit 0", timeout_s=60, cwd=str(tmp_path))
    result = await hook(StopHookInput(session_id="s", transcript_path="t.jsonl"))
    pids = read_pids(tmp_path, TREE)
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []
    assert result.error is not None
    assert re.match(
        re.escape(f"Stop hook {hook.name} failed: exit code ")
        + "(-9|0)"
        + re.escape("; the command's parent process, pid "),
        result.error,
    ), result.error
    assert "most likely by the command itself (kill $PPID): the call was ended" in result.error


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_a_killed_supervisor_is_reported_and_its_session_killed(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """A command that finds its supervisor (its session leader) and kills it: steploop says
    so, and kills what is still in the supervisor's session or the command's group."""
    bash = Bash(workspace=tmp_path, timeout_s=60)
    command = (
        "sleep 60 >/dev/null 2>&1 & echo $! > a.pid; (sleep 60 >/dev/null 2>&1 &) ; "
        "echo $$ > sh.pid; cut -d ' ' -f 6 /proc/$$/stat > sup.pid; "
        "kill -9 $(cat sup.pid); echo after"
    )
    out = await bash.call({"command": command}, ctx(tmp_path))
    pids = read_pids(tmp_path, ["a.pid", "sh.pid", "sup.pid"])
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []
    assert out.is_error
    assert (
        f"(exit code -9; steploop's process supervisor, pid {pids[2]}, was killed by SIGKILL "
        "(signal 9); the command died with it" in out.content
    )


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_closing_a_running_tree_is_not_reported_as_a_loss(tmp_path: Path) -> None:
    """Closing kills the shim too; that is no lost supervision: ``lost`` stays None and the
    command's status is minus SIGKILL."""
    tree = await open_process_tree(
        "sleep 60 & sleep 60", stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, cwd=tmp_path
    )
    pid = tree.pid
    await tree.aclose()
    assert tree.lost is None and tree.returncode == -signal.SIGKILL
    assert tree.outcome == "exit code -9"
    assert wait_gone([pid]) == []


@pytest.mark.anyio
async def test_commands_get_the_signals_python_ignores_back(tmp_path: Path) -> None:
    """Python ignores SIGPIPE, and an ignored signal stays ignored through exec: ``yes | head``
    ended ``yes`` with "Broken pipe" (status 1) instead of the signal (141), unlike a shell."""
    bash = Bash(workspace=tmp_path)
    out = await bash.call(
        {"command": "yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}"}, ctx(tmp_path)
    )
    assert out == ToolOutput(content="141\n")


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_a_stopped_supervisor_is_woken_to_kill_its_tree(
    tmp_path: Path, reap_survivors: list[int]
) -> None:
    """A command that stops its supervisor (SIGSTOP) delays the end to the call's timeout;
    closing wakes it (SIGCONT), so even a child in a new session is killed (killing a stopped
    supervisor from outside would leave that child to init)."""
    bash = Bash(workspace=tmp_path, timeout_s=1.0)
    command = (
        "setsid sleep 60 >/dev/null 2>&1 & echo $! > b.pid; "
        "kill -STOP $(cut -d ' ' -f 6 /proc/$$/stat); sleep 60"
    )
    out = await bash.call({"command": command}, ctx(tmp_path))
    assert out.is_error and "timed out after 1 s" in out.content
    pids = read_pids(tmp_path, ["b.pid"])
    reap_survivors.extend(pids)
    assert wait_gone(pids) == []


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_a_supervisor_stopped_before_it_says_the_pid_is_woken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command can stop its supervisor before the supervisor has said the command's pid
    (a race a loaded machine loses: CI saw it): the start wakes it instead of waiting out
    its whole start timeout. Here the supervisor is stopped as soon as it exists, before
    its Python has started, so the race is lost every time."""
    import anyio

    from steploop.effects import procs

    real_open = anyio.open_process

    async def open_then_stop(*args: object, **kwargs: object) -> object:
        process = await real_open(*args, **kwargs)  # type: ignore[arg-type]
        os.kill(process.pid, signal.SIGSTOP)
        return process

    monkeypatch.setattr(anyio, "open_process", open_then_stop)
    monkeypatch.setattr(procs, "_START_TIMEOUT_S", 10.0)  # the failure, without the fix
    tree = await open_process_tree(["/bin/sh", "-c", "echo $$ > c.pid"], cwd=tmp_path)
    try:
        assert tree.pid == read_pids(tmp_path, ["c.pid"])[0]
        assert await tree.wait() == 0
    finally:
        await tree.aclose()


@pytest.mark.spec("E-PROC-3")
@pytest.mark.anyio
async def test_a_command_that_stops_its_supervisor_and_ends_is_not_a_timeout(
    tmp_path: Path,
) -> None:
    """A stopped supervisor cannot say the command's status: the call waited for its timeout
    and reported one, though the command had ended at once. It is woken, and the call ends
    with the command."""
    bash = Bash(workspace=tmp_path, timeout_s=10.0)
    command = "kill -STOP $(cut -d ' ' -f 6 /proc/$$/stat); echo done"
    out = await bash.call({"command": command}, ctx(tmp_path))
    assert out == ToolOutput(content="done\n")
