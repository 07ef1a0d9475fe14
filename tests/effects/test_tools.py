"""The tool layer: registry behaviour, the built-in tools and their workspace confinement."""

from __future__ import annotations

import os
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
def outside(tmp_path: Path) -> Path:
    """A directory next to the workspace, holding a secret file."""
    other = tmp_path / "outside"
    other.mkdir()
    (other / "secret.txt").write_text("top secret\n")
    return other.resolve()


@pytest.fixture
def registry(workspace: Path) -> ToolRegistry:
    return ToolRegistry(builtin_tools(workspace))


def ctx(workspace: Path, tool_use_id: str = "toolu_1") -> ToolContext:
    return ToolContext(workspace=workspace, tool_use_id=tool_use_id)


async def run(
    registry: ToolRegistry,
    workspace: Path,
    name: str,
    input: Mapping[str, Any],
    timeout_s: float = 30.0,
) -> ToolOutput:
    return await registry.run(name, input, ctx(workspace), timeout_s)


async def read_first(registry: ToolRegistry, workspace: Path, path: str) -> None:
    """Read ``path`` as the model would before changing it (E-STALE-1)."""
    assert not (await run(registry, workspace, "Read", {"file_path": path})).is_error


def assert_tool_error(output: ToolOutput, *fragments: str) -> None:
    assert output.is_error, output
    assert output.content.startswith("<tool_use_error>"), output.content
    assert output.content.endswith("</tool_use_error>"), output.content
    assert "Traceback" not in output.content
    for fragment in fragments:
        assert fragment in output.content, (fragment, output.content)


def assert_outside(output: ToolOutput) -> None:
    assert_tool_error(output, "outside the workspace")


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


# -- Read ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_read_numbers_lines(registry: ToolRegistry, workspace: Path) -> None:
    """Read returns each line as a right-aligned number, a tab and the text."""
    (workspace / "a.txt").write_text("alpha\nbeta\r\ngamma")
    output = await run(registry, workspace, "Read", {"file_path": "a.txt"})
    assert output == ToolOutput(content="     1\talpha\n     2\tbeta\n     3\tgamma")


@pytest.mark.anyio
async def test_read_offset_and_limit(registry: ToolRegistry, workspace: Path) -> None:
    """offset (1-based) and limit select a window of lines, numbered as in the file."""
    (workspace / "a.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    output = await run(registry, workspace, "Read", {"file_path": "a.txt", "offset": 4, "limit": 2})
    assert output.content == "     4\tline4\n     5\tline5"
    tail = await run(registry, workspace, "Read", {"file_path": "a.txt", "offset": 10})
    assert tail.content == "    10\tline10"
    past = await run(registry, workspace, "Read", {"file_path": "a.txt", "offset": 11})
    assert_tool_error(past, "past the end")


@pytest.mark.anyio
async def test_read_absolute_path_inside(registry: ToolRegistry, workspace: Path) -> None:
    """An absolute path inside the workspace is accepted."""
    (workspace / "sub").mkdir()
    (workspace / "sub" / "b.txt").write_text("hi\n")
    output = await run(registry, workspace, "Read", {"file_path": str(workspace / "sub/b.txt")})
    assert output.content == "     1\thi"


@pytest.mark.anyio
async def test_read_missing_empty_dir_binary(registry: ToolRegistry, workspace: Path) -> None:
    """Missing files, directories and non-UTF-8 files give clear errors; empty files say so."""
    assert_tool_error(
        await run(registry, workspace, "Read", {"file_path": "nope.txt"}), "does not exist"
    )
    (workspace / "d").mkdir()
    assert_tool_error(await run(registry, workspace, "Read", {"file_path": "d"}), "directory")
    (workspace / "bin").write_bytes(b"\xff\xfe\x00\x80")
    assert_tool_error(await run(registry, workspace, "Read", {"file_path": "bin"}), "UTF-8")
    (workspace / "empty").write_text("")
    empty = await run(registry, workspace, "Read", {"file_path": "empty"})
    assert not empty.is_error and "empty" in empty.content


@pytest.mark.anyio
async def test_read_fifo_refused(registry: ToolRegistry, workspace: Path) -> None:
    """Reading a FIFO is refused at once instead of blocking."""
    os.mkfifo(workspace / "pipe")
    with anyio.fail_after(5):
        output = await run(registry, workspace, "Read", {"file_path": "pipe"})
    assert_tool_error(output, "regular file")


@pytest.mark.anyio
async def test_write_fifo_refused(registry: ToolRegistry, workspace: Path) -> None:
    """Writing onto a FIFO is refused at once instead of blocking."""
    os.mkfifo(workspace / "pipe")
    with anyio.fail_after(5):
        output = await run(registry, workspace, "Write", {"file_path": "pipe", "content": "x"})
    assert_tool_error(output, "regular file")


@pytest.mark.anyio
async def test_read_size_cap(workspace: Path) -> None:
    """Read refuses a file over max_file_bytes, naming the size and the limit."""
    registry = ToolRegistry(builtin_tools(workspace, max_file_bytes=100))
    (workspace / "ok.txt").write_text("x" * 100)
    (workspace / "big.txt").write_text("x" * 101)
    assert not (await run(registry, workspace, "Read", {"file_path": "ok.txt"})).is_error
    output = await run(registry, workspace, "Read", {"file_path": "big.txt"})
    assert_tool_error(output, "too large", "101", "100")


def test_default_size_cap_is_two_mib(workspace: Path) -> None:
    """The default file size cap is 2 MiB."""
    assert Read(workspace=workspace).max_file_bytes == 2 * 1024 * 1024


# -- confinement -----------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("raw", ["../outside/secret.txt", "sub/../../outside/secret.txt"])
async def test_read_dotdot_escape(
    registry: ToolRegistry, workspace: Path, outside: Path, raw: str
) -> None:
    """A relative path climbing out of the workspace with '..' is refused."""
    (workspace / "sub").mkdir()
    output = await run(registry, workspace, "Read", {"file_path": raw})
    assert_outside(output)
    assert "top secret" not in output.content


@pytest.mark.anyio
async def test_dotdot_missing_outside_not_probed(registry: ToolRegistry, workspace: Path) -> None:
    """A missing path outside is reported as outside, not as missing (no probing outside)."""
    output = await run(registry, workspace, "Read", {"file_path": "nope/../../zzz.txt"})
    assert_outside(output)


@pytest.mark.anyio
async def test_dotdot_staying_inside_allowed(registry: ToolRegistry, workspace: Path) -> None:
    """A path with '..' that stays inside the workspace is fine."""
    (workspace / "sub").mkdir()
    (workspace / "a.txt").write_text("a\n")
    output = await run(registry, workspace, "Read", {"file_path": "sub/../a.txt"})
    assert output.content == "     1\ta"


@pytest.mark.anyio
async def test_absolute_path_outside(
    registry: ToolRegistry, workspace: Path, outside: Path
) -> None:
    """An absolute path elsewhere is refused by every file tool."""
    secret = str(outside / "secret.txt")
    assert_outside(await run(registry, workspace, "Read", {"file_path": secret}))
    assert_outside(await run(registry, workspace, "Read", {"file_path": "/etc/passwd"}))
    write = await run(registry, workspace, "Write", {"file_path": secret, "content": "pwned"})
    assert_outside(write)
    edit = {"file_path": secret, "old_string": "top", "new_string": "pwned"}
    assert_outside(await run(registry, workspace, "Edit", edit))
    new = str(outside / "new.txt")
    assert_outside(await run(registry, workspace, "Write", {"file_path": new, "content": "x"}))
    assert (outside / "secret.txt").read_text() == "top secret\n"
    assert not (outside / "new.txt").exists()


@pytest.mark.anyio
async def test_home_paths(
    registry: ToolRegistry,
    workspace: Path,
    outside: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """'~/...' means the home directory (outside here); '~name' is a plain file name."""
    monkeypatch.setenv("HOME", str(outside))
    assert_outside(await run(registry, workspace, "Read", {"file_path": "~/secret.txt"}))
    (workspace / "~root").write_text("tilde\n")
    output = await run(registry, workspace, "Read", {"file_path": "~root"})
    assert output.content == "     1\ttilde"


@pytest.mark.anyio
async def test_workspace_root_prefix_sibling_refused(
    registry: ToolRegistry, workspace: Path
) -> None:
    """A sibling whose name extends the workspace's (ws-evil next to ws) is outside."""
    sibling = workspace.parent / (workspace.name + "-evil")
    sibling.mkdir()
    (sibling / "f.txt").write_text("no\n")
    output = await run(registry, workspace, "Read", {"file_path": str(sibling / "f.txt")})
    assert_outside(output)


@pytest.mark.anyio
async def test_symlink_file_escape_read(
    registry: ToolRegistry, workspace: Path, outside: Path
) -> None:
    """A symlink inside pointing to a file outside cannot be read through."""
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    output = await run(registry, workspace, "Read", {"file_path": "link.txt"})
    assert_outside(output)
    assert "top secret" not in output.content


@pytest.mark.anyio
async def test_symlink_dir_escape_read(
    registry: ToolRegistry, workspace: Path, outside: Path
) -> None:
    """A symlinked directory pointing outside cannot be read through."""
    (workspace / "out").symlink_to(outside, target_is_directory=True)
    output = await run(registry, workspace, "Read", {"file_path": "out/secret.txt"})
    assert_outside(output)


@pytest.mark.anyio
async def test_symlink_escape_write_existing(
    registry: ToolRegistry, workspace: Path, outside: Path
) -> None:
    """Writing or editing through a symlink to an outside file is refused; it is unchanged."""
    (workspace / "link.txt").symlink_to(outside / "secret.txt")
    write = await run(registry, workspace, "Write", {"file_path": "link.txt", "content": "pwned"})
    assert_outside(write)
    edit = {"file_path": "link.txt", "old_string": "top", "new_string": "pwned"}
    assert_outside(await run(registry, workspace, "Edit", edit))
    assert (outside / "secret.txt").read_text() == "top secret\n"


@pytest.mark.anyio
async def test_symlink_escape_write_new_file(
    registry: ToolRegistry, workspace: Path, outside: Path
) -> None:
    """A new file under a symlinked outside directory, or via a dangling link, is refused."""
    (workspace / "out").symlink_to(outside, target_is_directory=True)
    output = await run(
        registry, workspace, "Write", {"file_path": "out/new.txt", "content": "pwned"}
    )
    assert_outside(output)
    deeper = await run(
        registry, workspace, "Write", {"file_path": "out/a/b/new.txt", "content": "pwned"}
    )
    assert_outside(deeper)
    (workspace / "dangling").symlink_to(outside / "created-by-link.txt")
    dangling = await run(
        registry, workspace, "Write", {"file_path": "dangling", "content": "pwned"}
    )
    assert_outside(dangling)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


@pytest.mark.anyio
async def test_symlink_inside_allowed(registry: ToolRegistry, workspace: Path) -> None:
    """Symlinks whose target stays inside the workspace work for reading and writing."""
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("one\n")
    (workspace / "alias").symlink_to(workspace / "real", target_is_directory=True)
    (workspace / "f-link.txt").symlink_to("real/f.txt")
    read = await run(registry, workspace, "Read", {"file_path": "alias/f.txt"})
    assert read.content == "     1\tone"
    read_link = await run(registry, workspace, "Read", {"file_path": "f-link.txt"})
    assert read_link.content == "     1\tone"
    write = await run(registry, workspace, "Write", {"file_path": "f-link.txt", "content": "2\n"})
    assert not write.is_error
    assert (workspace / "real" / "f.txt").read_text() == "2\n"
    assert (workspace / "f-link.txt").is_symlink()
    new = await run(registry, workspace, "Write", {"file_path": "alias/g.txt", "content": "g"})
    assert not new.is_error
    assert (workspace / "real" / "g.txt").read_text() == "g"


@pytest.mark.anyio
async def test_symlink_loop_is_an_error(registry: ToolRegistry, workspace: Path) -> None:
    """A symlink loop gives an error output, not an exception."""
    (workspace / "loop").symlink_to(workspace / "loop")
    output = await run(registry, workspace, "Read", {"file_path": "loop"})
    assert_tool_error(output)


@pytest.mark.anyio
async def test_glob_grep_confined(registry: ToolRegistry, workspace: Path, outside: Path) -> None:
    """Glob and Grep refuse outside directories and never list files behind outside links."""
    (workspace / "out").symlink_to(outside, target_is_directory=True)
    (workspace / "leak.txt").symlink_to(outside / "secret.txt")
    (workspace / "mine.txt").write_text("top secret too\n")
    assert_outside(await run(registry, workspace, "Glob", {"pattern": "*", "path": str(outside)}))
    assert_outside(await run(registry, workspace, "Glob", {"pattern": "*", "path": ".."}))
    assert_tool_error(await run(registry, workspace, "Glob", {"pattern": "../*"}), "..")
    assert_tool_error(await run(registry, workspace, "Glob", {"pattern": "/etc/*"}), "relative")
    listed = await run(registry, workspace, "Glob", {"pattern": "**/*"})
    assert listed.content == "mine.txt"
    listed_via_link = await run(registry, workspace, "Glob", {"pattern": "out/*"})
    assert listed_via_link.content == "No files found"
    assert_outside(await run(registry, workspace, "Grep", {"pattern": "secret", "path": "out"}))
    grep = await run(registry, workspace, "Grep", {"pattern": "secret"})
    assert grep.content == "mine.txt:1:top secret too"


# -- Write -----------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_write_creates_and_overwrites(registry: ToolRegistry, workspace: Path) -> None:
    """Write creates a file (and missing parent directories), then replaces it."""
    created = await run(
        registry, workspace, "Write", {"file_path": "a/b/c.txt", "content": "héllo\n"}
    )
    assert not created.is_error
    assert "Created a/b/c.txt" in created.content
    assert (workspace / "a/b/c.txt").read_text(encoding="utf-8") == "héllo\n"
    updated = await run(registry, workspace, "Write", {"file_path": "a/b/c.txt", "content": "bye"})
    assert "Updated" in updated.content
    assert (workspace / "a/b/c.txt").read_text() == "bye"


@pytest.mark.anyio
async def test_write_refuses_directory(registry: ToolRegistry, workspace: Path) -> None:
    """Writing onto an existing directory is an error."""
    (workspace / "d").mkdir()
    output = await run(registry, workspace, "Write", {"file_path": "d", "content": "x"})
    assert_tool_error(output, "directory")


@pytest.mark.anyio
async def test_write_size_cap(workspace: Path) -> None:
    """Write refuses content over max_file_bytes (counted in UTF-8 bytes) and writes nothing."""
    registry = ToolRegistry(builtin_tools(workspace, max_file_bytes=10))
    output = await run(registry, workspace, "Write", {"file_path": "f", "content": "é" * 6})
    assert_tool_error(output, "too large", "12", "10")
    assert not (workspace / "f").exists()
    ok = await run(registry, workspace, "Write", {"file_path": "f", "content": "é" * 5})
    assert not ok.is_error


# -- Edit ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_edit_replaces_unique_string(registry: ToolRegistry, workspace: Path) -> None:
    """Edit replaces a string that occurs exactly once."""
    (workspace / "f.py").write_text("x = 1\ny = 2\n")
    await read_first(registry, workspace, "f.py")
    output = await run(
        registry,
        workspace,
        "Edit",
        {"file_path": "f.py", "old_string": "y = 2", "new_string": "y = 3"},
    )
    assert output == ToolOutput(content="Replaced 1 occurrence in f.py")
    assert (workspace / "f.py").read_text() == "x = 1\ny = 3\n"


@pytest.mark.anyio
async def test_edit_not_found(registry: ToolRegistry, workspace: Path) -> None:
    """Edit reports a missing old_string and leaves the file alone."""
    (workspace / "f.py").write_text("x = 1\n")
    await read_first(registry, workspace, "f.py")
    output = await run(
        registry, workspace, "Edit", {"file_path": "f.py", "old_string": "z", "new_string": "w"}
    )
    assert_tool_error(output, "not found")
    assert (workspace / "f.py").read_text() == "x = 1\n"


@pytest.mark.anyio
async def test_edit_not_unique(registry: ToolRegistry, workspace: Path) -> None:
    """Edit refuses an ambiguous old_string unless replace_all is set."""
    (workspace / "f.py").write_text("a a a\n")
    await read_first(registry, workspace, "f.py")
    output = await run(
        registry, workspace, "Edit", {"file_path": "f.py", "old_string": "a", "new_string": "b"}
    )
    assert_tool_error(output, "Found 3 matches", "replace_all")
    assert (workspace / "f.py").read_text() == "a a a\n"


@pytest.mark.anyio
async def test_edit_replace_all(registry: ToolRegistry, workspace: Path) -> None:
    """replace_all replaces every occurrence and reports the count."""
    (workspace / "f.py").write_text("a a a\n")
    await read_first(registry, workspace, "f.py")
    output = await run(
        registry,
        workspace,
        "Edit",
        {"file_path": "f.py", "old_string": "a", "new_string": "bb", "replace_all": True},
    )
    assert output == ToolOutput(content="Replaced 3 occurrences in f.py")
    assert (workspace / "f.py").read_text() == "bb bb bb\n"


@pytest.mark.anyio
async def test_edit_degenerate_inputs(registry: ToolRegistry, workspace: Path) -> None:
    """Empty or unchanged old_string and a missing file are errors."""
    (workspace / "f.py").write_text("a\n")

    async def edit(**input: Any) -> ToolOutput:
        return await run(registry, workspace, "Edit", {"file_path": "f.py", **input})

    assert_tool_error(await edit(old_string="", new_string="b"), "empty")
    assert_tool_error(await edit(old_string="a", new_string="a"), "same")
    missing = {"file_path": "nope.py", "old_string": "a", "new_string": "b"}
    assert_tool_error(await run(registry, workspace, "Edit", missing), "does not exist")


@pytest.mark.anyio
async def test_edit_size_cap(workspace: Path) -> None:
    """Edit refuses files over the cap and edits that would grow a file past it."""
    registry = ToolRegistry(builtin_tools(workspace, max_file_bytes=10))
    (workspace / "big").write_text("x" * 11)
    big = {"file_path": "big", "old_string": "x", "new_string": "y", "replace_all": True}
    assert_tool_error(await run(registry, workspace, "Edit", big), "too large")
    (workspace / "small").write_text("abc")
    await read_first(registry, workspace, "small")
    grow = {"file_path": "small", "old_string": "b", "new_string": "b" * 20}
    assert_tool_error(await run(registry, workspace, "Edit", grow), "too large")
    assert (workspace / "small").read_text() == "abc"


# -- Glob ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_glob_sorted_relative_files(registry: ToolRegistry, workspace: Path) -> None:
    """Glob lists matching files (not directories) as sorted workspace-relative paths."""
    for rel in ["src/b.py", "src/a.py", "src/pkg/c.py", "README.md"]:
        (workspace / rel).parent.mkdir(parents=True, exist_ok=True)
        (workspace / rel).write_text("")
    (workspace / "dir.py").mkdir()
    output = await run(registry, workspace, "Glob", {"pattern": "**/*.py"})
    assert output.content == "src/a.py\nsrc/b.py\nsrc/pkg/c.py"
    in_dir = await run(registry, workspace, "Glob", {"pattern": "*.py", "path": "src"})
    assert in_dir.content == "src/a.py\nsrc/b.py"
    none = await run(registry, workspace, "Glob", {"pattern": "*.rs"})
    assert none.content == "No files found"


@pytest.mark.anyio
async def test_glob_caps_results(workspace: Path) -> None:
    """Glob shows at most max_results paths and says how many there were."""
    registry = ToolRegistry(builtin_tools(workspace, max_results=3))
    for i in range(5):
        (workspace / f"f{i}.txt").write_text("")
    output = await run(registry, workspace, "Glob", {"pattern": "*.txt"})
    lines = output.content.splitlines()
    assert lines[:3] == ["f0.txt", "f1.txt", "f2.txt"]
    assert lines[3] == "(results truncated: showing 3 of 5 files)"
    assert len(lines) == 4


@pytest.mark.anyio
async def test_glob_bad_pattern(registry: ToolRegistry, workspace: Path) -> None:
    """An invalid glob pattern is an error output."""
    output = await run(registry, workspace, "Glob", {"pattern": "a**b/*"})
    assert_tool_error(output)


# -- Grep ------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_grep_matches(registry: ToolRegistry, workspace: Path) -> None:
    """Grep prints 'path:line:text' for each matching line, files in sorted order."""
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("def foo():\n    return 1\ndef bar(): pass\n")
    (workspace / "b.txt").write_text("nothing\ndef in text\n")
    output = await run(registry, workspace, "Grep", {"pattern": r"^def \w+\("})
    assert output.content == "src/a.py:1:def foo():\nsrc/a.py:3:def bar(): pass"
    any_def = await run(registry, workspace, "Grep", {"pattern": "def"})
    assert any_def.content.splitlines()[0] == "b.txt:2:def in text"


@pytest.mark.anyio
async def test_grep_path_and_glob_filters(registry: ToolRegistry, workspace: Path) -> None:
    """path limits the search to a file or directory; glob filters file names."""
    (workspace / "src").mkdir()
    (workspace / "src" / "a.py").write_text("hit\n")
    (workspace / "src" / "a.md").write_text("hit\n")
    (workspace / "top.py").write_text("hit\n")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "x.py").write_text("hit\n")
    by_glob = await run(registry, workspace, "Grep", {"pattern": "hit", "glob": "*.py"})
    assert by_glob.content == "src/a.py:1:hit\ntop.py:1:hit"
    by_dir = await run(registry, workspace, "Grep", {"pattern": "hit", "path": "src"})
    assert by_dir.content == "src/a.md:1:hit\nsrc/a.py:1:hit"
    by_file = await run(registry, workspace, "Grep", {"pattern": "hit", "path": "top.py"})
    assert by_file.content == "top.py:1:hit"
    by_rel_glob = await run(registry, workspace, "Grep", {"pattern": "hit", "glob": "src/*"})
    assert by_rel_glob.content == "src/a.md:1:hit\nsrc/a.py:1:hit"


@pytest.mark.anyio
async def test_grep_no_match_and_bad_regex(registry: ToolRegistry, workspace: Path) -> None:
    """No match says so; an invalid regular expression is an error output."""
    (workspace / "a.txt").write_text("abc\n")
    none = await run(registry, workspace, "Grep", {"pattern": "zzz"})
    assert none == ToolOutput(content="No matches found")
    assert_tool_error(await run(registry, workspace, "Grep", {"pattern": "("}), "regular")


@pytest.mark.anyio
async def test_grep_caps_results(workspace: Path) -> None:
    """Grep shows at most max_results matches and says it truncated."""
    registry = ToolRegistry(builtin_tools(workspace, max_results=3))
    (workspace / "a.txt").write_text("x\n" * 10)
    output = await run(registry, workspace, "Grep", {"pattern": "x"})
    lines = output.content.splitlines()
    assert lines == ["a.txt:1:x", "a.txt:2:x", "a.txt:3:x", "(results truncated at 3 matches)"]


@pytest.mark.anyio
async def test_grep_skips_binary_and_oversized(workspace: Path) -> None:
    """Grep skips files that are not UTF-8 or are over the size cap."""
    registry = ToolRegistry(builtin_tools(workspace, max_file_bytes=20))
    (workspace / "bin").write_bytes(b"needle\xff\n")
    (workspace / "big.txt").write_text("needle\n" * 5)
    (workspace / "ok.txt").write_text("needle\n")
    output = await run(registry, workspace, "Grep", {"pattern": "needle"})
    assert output.content == "ok.txt:1:needle"


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
