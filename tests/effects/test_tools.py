"""The tool layer: registry behaviour and Bash. The file tools (Read, Write, Edit, Glob, Grep) and
their confinement are in test_tools_files.py."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import anyio
import attrs
import pytest

from steploop.effects.tools import (
    Bash,
    Edit,
    Glob,
    Grep,
    Read,
    Tool,
    ToolContext,
    ToolOutput,
    ToolRegistry,
    Write,
    builtin_tools,
    is_read_only_command,
)
from steploop.reducer.events import InterruptBehavior, ToolTraits
from tests.effects.tools_kit import ctx, run

# -- fixtures and helpers --------------------------------------------------------------------


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def registry(workspace: Path) -> ToolRegistry:
    return ToolRegistry(builtin_tools(workspace))


def process_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    state = stat.rsplit(")", 1)[1].split()[0]
    return state not in ("Z", "X")


@attrs.frozen(kw_only=True)
class FakeTool:
    """A tool for registry tests: it sleeps, then raises or answers."""

    name: str = "Fake"
    description: ClassVar[str] = "A fake tool"
    input_schema: ClassVar[Mapping[str, Any]] = {
        "type": "object",
        "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items": {}}},
        "required": ["n"],
        "additionalProperties": False,
    }
    max_result_chars: int | None = 1234
    interrupt: InterruptBehavior = "block"
    cancels_siblings_on_error: bool = False
    sleep_s: float = 0.0
    error: Exception | None = None
    safe: bool | None = True  # None: is_concurrency_safe raises

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        if self.safe is None:
            raise RuntimeError("cannot judge")
        return self.safe

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        if self.sleep_s:
            await anyio.sleep(self.sleep_s)
        if self.error is not None:
            raise self.error
        return ToolOutput(content=f"n={input['n']} id={ctx.tool_use_id}")


# -- registry --------------------------------------------------------------------------------


def test_fake_and_builtin_tools_satisfy_protocol(workspace: Path) -> None:
    """Every built-in tool and the test tool pass the runtime Tool protocol check."""
    for tool in [*builtin_tools(workspace, enable_bash=True), FakeTool()]:
        assert isinstance(tool, Tool)


def test_duplicate_names_rejected() -> None:
    """Registering two tools with one name raises ValueError."""
    with pytest.raises(ValueError, match="duplicate"):
        ToolRegistry([FakeTool(), FakeTool()])


def test_invalid_schema_rejected() -> None:
    """A tool whose input_schema is not valid JSON Schema is refused when registered."""

    @attrs.frozen(kw_only=True)
    class Broken(FakeTool):
        input_schema: ClassVar[Mapping[str, Any]] = {"type": "no-such-type"}

    with pytest.raises(ValueError, match="invalid input_schema"):
        ToolRegistry([Broken()])


def test_definitions_in_registration_order(workspace: Path) -> None:
    """definitions() lists name, description and input_schema in registration order."""
    registry = ToolRegistry([FakeTool(name="Zed"), *builtin_tools(workspace), FakeTool()])
    definitions = registry.definitions()
    assert [d["name"] for d in definitions] == [
        "Zed",
        "Read",
        "Write",
        "Edit",
        "Glob",
        "Grep",
        "Fake",
    ]
    for d in definitions:
        assert set(d) == {"name", "description", "input_schema"}
        assert d["description"]
        assert isinstance(d["input_schema"], dict)
        assert d["input_schema"]["type"] == "object"
        assert d["input_schema"]["additionalProperties"] is False
    assert registry.get("Read") is not None
    assert registry.get("Nope") is None


def test_definitions_are_copies(workspace: Path) -> None:
    """Mutating a returned definition does not change the tool's schema."""
    registry = ToolRegistry(builtin_tools(workspace))
    registry.definitions()[0]["input_schema"]["properties"].clear()
    assert "file_path" in registry.definitions()[0]["input_schema"]["properties"]


def test_traits_unknown_tool(registry: ToolRegistry) -> None:
    """An unknown tool is reported known=False and not concurrency-safe."""
    traits = registry.traits("Nope", {})
    assert traits.known is False
    assert traits.concurrency_safe is False


def test_traits_copy_tool_attributes() -> None:
    """traits() takes interrupt, sibling cancellation and the result budget from the tool."""
    tool = FakeTool(interrupt="cancel", cancels_siblings_on_error=True, max_result_chars=None)
    traits = ToolRegistry([tool]).traits("Fake", {"n": 1})
    assert traits == ToolTraits(
        known=True,
        concurrency_safe=True,
        interrupt="cancel",
        cancels_siblings_on_error=True,
        max_result_chars=None,
    )


def test_traits_invalid_input_or_raising_judgement_is_unsafe() -> None:
    """A call with schema-invalid input, or whose tool raises judging it, is not safe."""
    registry = ToolRegistry([FakeTool(), FakeTool(name="Raises", safe=None)])
    assert registry.traits("Fake", {"n": "x"}).concurrency_safe is False
    assert registry.traits("Fake", {"n": "x"}).known is True
    assert registry.traits("Raises", {"n": 1}).concurrency_safe is False


def test_traits_builtin_tools(registry: ToolRegistry) -> None:
    """Read/Glob/Grep are safe, Write/Edit are not; Read's results are never budgeted."""
    assert registry.traits("Read", {"file_path": "a"}).concurrency_safe is True
    assert registry.traits("Read", {"file_path": "a"}).max_result_chars is None
    assert registry.traits("Glob", {"pattern": "*"}).concurrency_safe is True
    assert registry.traits("Grep", {"pattern": "x"}).concurrency_safe is True
    assert registry.traits("Write", {"file_path": "a", "content": ""}).concurrency_safe is False
    edit = {"file_path": "a", "old_string": "x", "new_string": "y"}
    assert registry.traits("Edit", edit).concurrency_safe is False


def test_validate_names_bad_field(registry: ToolRegistry) -> None:
    """validate() gives a one-line message naming the path of the bad field."""
    assert registry.validate("Read", {"file_path": "a.txt"}) is None
    assert registry.validate("Read", {"file_path": 3}) == (
        "input.file_path: 3 is not of type 'string'"
    )
    missing = registry.validate("Read", {})
    assert missing is not None and missing.startswith("input: ")
    assert "'file_path' is a required property" in missing
    extra = registry.validate("Read", {"file_path": "a", "bogus": 1})
    assert extra is not None and "bogus" in extra


def test_validate_nested_path() -> None:
    """Array items are named with an index in the field path."""

    @attrs.frozen(kw_only=True)
    class Tagged(FakeTool):
        input_schema: ClassVar[Mapping[str, Any]] = {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "tags": {"items": {"type": "string"}}},
        }

    registry = ToolRegistry([Tagged()])
    message = registry.validate("Fake", {"n": 1, "tags": ["a", 5]})
    assert message == "input.tags[1]: 5 is not of type 'string'"


@pytest.mark.anyio
async def test_run_unknown_tool(registry: ToolRegistry, workspace: Path) -> None:
    """Running an unknown tool gives the 'No such tool available' error output."""
    output = await run(registry, workspace, "Nope", {})
    assert output == ToolOutput(
        content="<tool_use_error>Error: No such tool available: Nope</tool_use_error>",
        is_error=True,
    )


@pytest.mark.anyio
async def test_run_invalid_input(registry: ToolRegistry, workspace: Path) -> None:
    """Invalid input gives an InputValidationError output naming the field."""
    output = await run(registry, workspace, "Read", {"file_path": 3})
    assert output == ToolOutput(
        content="<tool_use_error>InputValidationError: "
        "input.file_path: 3 is not of type 'string'</tool_use_error>",
        is_error=True,
    )


@pytest.mark.anyio
async def test_run_passes_context(workspace: Path) -> None:
    """A successful call returns the tool's own output; the context reaches the tool."""
    registry = ToolRegistry([FakeTool()])
    output = await registry.run("Fake", {"n": 7}, ctx(workspace, "toolu_42"), 5)
    assert output == ToolOutput(content="n=7 id=toolu_42")


@pytest.mark.anyio
async def test_run_raising_tool(workspace: Path) -> None:
    """An exception from a tool becomes an error output with its type and message."""
    registry = ToolRegistry([FakeTool(error=ValueError("boom went the tool"))])
    output = await registry.run("Fake", {"n": 1}, ctx(workspace), 5)
    assert output.is_error
    assert "ValueError" in output.content
    assert "boom went the tool" in output.content
    assert "Traceback" not in output.content


@pytest.mark.anyio
async def test_run_timeout(workspace: Path) -> None:
    """A call outliving timeout_s is cut off with a 'timed out' error output."""
    registry = ToolRegistry([FakeTool(sleep_s=10)])
    started = time.monotonic()
    output = await registry.run("Fake", {"n": 1}, ctx(workspace), 0.05)
    assert time.monotonic() - started < 2
    assert output == ToolOutput(content="Tool Fake timed out after 0.05 s", is_error=True)


@pytest.mark.anyio
async def test_run_propagates_cancellation(workspace: Path) -> None:
    """Cancellation from outside passes through run() instead of becoming an output."""
    registry = ToolRegistry([FakeTool(sleep_s=10)])
    returned = False
    started = time.monotonic()
    with anyio.move_on_after(0.05) as scope:
        await registry.run("Fake", {"n": 1}, ctx(workspace), 30)
        returned = True
    assert scope.cancelled_caught
    assert not returned
    assert time.monotonic() - started < 2


@pytest.mark.anyio
async def test_run_propagates_cancellation_from_raising_tool(workspace: Path) -> None:
    """A tool catching Exception does not hide cancellation: run() still gets cancelled."""

    @attrs.frozen(kw_only=True)
    class Stubborn(FakeTool):
        async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
            try:
                await anyio.sleep(10)
            except Exception:  # cancellation is a BaseException: not caught here
                return ToolOutput(content="swallowed")
            return ToolOutput(content="finished")

    registry = ToolRegistry([Stubborn()])
    with anyio.move_on_after(0.05) as scope:
        await registry.run("Fake", {"n": 1}, ctx(workspace), 30)
        pytest.fail("run() returned despite cancellation")
    assert scope.cancelled_caught


# -- Bash ------------------------------------------------------------------------------------


def test_bash_disabled_by_default(workspace: Path) -> None:
    """builtin_tools leaves Bash out unless enable_bash=True."""
    assert "Bash" not in {t.name for t in builtin_tools(workspace)}
    enabled = builtin_tools(workspace, enable_bash=True)
    assert [t.name for t in enabled] == ["Read", "Write", "Edit", "Glob", "Grep", "Bash"]
    assert "Bash" not in ToolRegistry(builtin_tools(workspace))


@pytest.mark.parametrize(
    "command",
    ["ls", "ls -la src", "cat 'a file.txt'", "grep -rn foo .", "echo hello", "pwd", "wc -l x"],
)
def test_bash_read_only_commands_safe(workspace: Path, command: str) -> None:
    """Simple commands on the read-only list are concurrency-safe."""
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=True))
    assert is_read_only_command(command)
    assert registry.traits("Bash", {"command": command}).concurrency_safe is True


@pytest.mark.parametrize(
    "command",
    [
        "rm -rf x",
        "ls; rm x",
        "cat a | sh",
        "echo hi > f",
        "cat < f",
        "ls && rm x",
        "ls & rm x",
        "echo `rm x`",
        "echo $(rm x)",
        "echo $HOME",
        "ls\nrm x",
        "/bin/ls",
        "FOO=1 ls",
        "find . -delete",
        "echo 'unbalanced",
        "",
        "   ",
    ],
)
def test_bash_other_commands_unsafe(workspace: Path, command: str) -> None:
    """Anything else (other programs, chaining, pipes, redirects, substitution) is unsafe."""
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=True))
    assert not is_read_only_command(command)
    assert registry.traits("Bash", {"command": command}).concurrency_safe is False


def test_bash_traits(workspace: Path) -> None:
    """Bash cancels on interrupt and cancels its siblings when it fails."""
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=True))
    traits = registry.traits("Bash", {"command": "ls"})
    assert traits.interrupt == "cancel"
    assert traits.cancels_siblings_on_error is True
    assert traits.max_result_chars == 30_000


@pytest.mark.anyio
async def test_bash_runs_in_workspace(workspace: Path) -> None:
    """Bash runs the command with the workspace as cwd and returns stdout and stderr."""
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=True))
    output = await run(registry, workspace, "Bash", {"command": "pwd; echo err >&2"})
    assert output == ToolOutput(content=f"{workspace}\nerr\n")


@pytest.mark.anyio
async def test_bash_nonzero_exit_is_error(workspace: Path) -> None:
    """A non-zero exit status makes the output an error and names the code."""
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=True))
    output = await run(registry, workspace, "Bash", {"command": "echo out; exit 3"})
    assert output == ToolOutput(content="out\n\n(exit code 3)", is_error=True)


@pytest.mark.anyio
async def test_bash_output_capped(workspace: Path) -> None:
    """Output past max_output_chars is cut and the cut is announced."""
    bash = Bash(workspace=workspace, max_output_chars=100)
    output = await bash.call({"command": "head -c 100000 /dev/zero | tr '\\0' a"}, ctx(workspace))
    assert output.content.startswith("a" * 100 + "\n(output truncated")
    assert not output.is_error


@pytest.mark.anyio
async def test_bash_own_timeout(workspace: Path) -> None:
    """A command outliving the Bash timeout is killed and reported as timed out."""
    bash = Bash(workspace=workspace, timeout_s=0.3)
    started = time.monotonic()
    output = await bash.call({"command": "echo started; sleep 30"}, ctx(workspace))
    assert time.monotonic() - started < 5
    assert output.is_error
    assert output.content.startswith("started\n")
    assert "timed out after 0.3 s" in output.content


@pytest.mark.anyio
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
async def test_bash_killed_on_cancellation(workspace: Path) -> None:
    """Cancelling a Bash call returns promptly and kills the command's whole process group."""
    bash = Bash(workspace=workspace)
    pid_file = workspace / "child.pid"
    command = "sleep 30 & echo $! > child.pid; wait"
    started = time.monotonic()
    async with anyio.create_task_group() as tg:

        async def call() -> None:
            await bash.call({"command": command}, ctx(workspace))
            pytest.fail("Bash returned instead of being cancelled")

        tg.start_soon(call)
        with anyio.fail_after(10):
            while not (pid_file.exists() and pid_file.read_text().strip()):
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    assert time.monotonic() - started < 10
    child = int(pid_file.read_text())
    with anyio.fail_after(5):
        while process_alive(child):
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_bash_cancelled_via_registry_deadline(workspace: Path) -> None:
    """Under ToolRegistry.run, a cancel scope's deadline stops `sleep 30` promptly."""
    registry = ToolRegistry(builtin_tools(workspace, enable_bash=True))
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        await run(registry, workspace, "Bash", {"command": "sleep 30"}, timeout_s=60)
    assert scope.cancelled_caught
    assert time.monotonic() - started < 5


def test_workspace_must_exist(tmp_path: Path) -> None:
    """Building tools on a missing or non-directory workspace fails at once."""
    with pytest.raises(FileNotFoundError):
        builtin_tools(tmp_path / "missing")
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        builtin_tools(tmp_path / "file")


def test_tools_bound_to_resolved_workspace(tmp_path: Path) -> None:
    """A tool keeps the resolved form of the workspace it was built with."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    for tool in (Read, Write, Edit, Glob, Grep, Bash):
        assert tool(workspace=tmp_path / "alias").workspace == real.resolve()
