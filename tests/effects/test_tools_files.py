"""The tool layer: the file tools (Read, Write, Edit, Glob, Grep) and their confinement to the
workspace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects.tools import Read, ToolOutput, ToolRegistry, builtin_tools
from tests.effects.tools_kit import run

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
