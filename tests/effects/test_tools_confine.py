"""Workspace confinement of the file tools, case by case (steploop/effects/tools/confine.py): hard links,
links followed by the confined walk, atomic writes, calls that can always be given up. The
concurrent attacks are in test_tools_races.py."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest

import steploop.effects.tools.confine as confine_module
import steploop.effects.tools.fileio as fileio_module
import steploop.effects.tools.files as files_module
import steploop.effects.tools.search as search_module
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools


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
    other = tmp_path / "outside"
    other.mkdir()
    (other / "secret.txt").write_text("top secret\n")
    return other.resolve()


async def call(
    registry: ToolRegistry, name: str, input: Mapping[str, Any], timeout_s: float = 30.0
) -> ToolOutput:
    ctx = ToolContext(workspace=Path("/"), tool_use_id="toolu_1")  # never consulted
    return await registry.run(name, input, ctx, timeout_s)


def assert_error(output: ToolOutput, *fragments: str) -> None:
    assert output.is_error, output
    for fragment in fragments:
        assert fragment in output.content, (fragment, output.content)


# -- hard links ------------------------------------------------------------------------------


@pytest.mark.spec("E-CONFINE-2")
@pytest.mark.anyio
async def test_hard_link_to_outside_file_refused(workspace: Path, outside: Path) -> None:
    """A hard link inside to a file outside is not read, edited, overwritten or grepped."""
    os.link(outside / "secret.txt", workspace / "h.txt")
    (workspace / "mine.txt").write_text("secret of mine\n")
    registry = ToolRegistry(builtin_tools(workspace))
    read = await call(registry, "Read", {"file_path": "h.txt"})
    assert_error(read, "2 hard links", "allow_hard_links=True", "h.txt")
    assert "top secret" not in read.content
    edit = {"file_path": "h.txt", "old_string": "top", "new_string": "pwned"}
    assert_error(await call(registry, "Edit", edit), "2 hard links")
    write = {"file_path": "h.txt", "content": "pwned\n"}
    assert_error(await call(registry, "Write", write), "2 hard links")
    assert_error(await call(registry, "Grep", {"pattern": "secret", "path": "h.txt"}), "hard links")
    walked = await call(registry, "Grep", {"pattern": "secret"})
    assert walked.content == "mine.txt:1:secret of mine"  # the hard link is skipped
    listed = await call(registry, "Glob", {"pattern": "*"})
    assert listed.content == "h.txt\nmine.txt"  # a name is listed; its content is not used
    assert (outside / "secret.txt").read_text() == "top secret\n"


@pytest.mark.spec("E-CONFINE-2")
@pytest.mark.anyio
async def test_hard_links_allowed_when_asked(workspace: Path) -> None:
    """allow_hard_links=True lets the tools use them; a Write replaces the name it is given
    (the other links keep the old content)."""
    (workspace / "a.txt").write_text("one\n")
    os.link(workspace / "a.txt", workspace / "b.txt")
    registry = ToolRegistry(builtin_tools(workspace, allow_hard_links=True))
    assert (await call(registry, "Read", {"file_path": "b.txt"})).content == "     1\tone"
    grep = await call(registry, "Grep", {"pattern": "one"})
    assert grep.content == "a.txt:1:one\nb.txt:1:one"
    write = await call(registry, "Write", {"file_path": "b.txt", "content": "two\n"})
    assert write.content == "Updated b.txt (4 bytes)"
    assert (workspace / "b.txt").read_text() == "two\n"
    assert (workspace / "a.txt").read_text() == "one\n"


# -- links followed by the walk ----------------------------------------------------------------


@pytest.mark.spec("E-CONFINE-1")
@pytest.mark.anyio
async def test_links_followed_inside_only(workspace: Path, outside: Path) -> None:
    """Links inside are followed with POSIX meaning (``..`` after a link is the parent of
    its target) but never above the workspace, and never more than 40 deep."""
    (workspace / "real" / "sub").mkdir(parents=True)
    (workspace / "real" / "f.txt").write_text("real f\n")
    (workspace / "alias").symlink_to("real/sub")
    (workspace / "abs").symlink_to(workspace / "real" / "f.txt")
    (workspace / "real" / "up").symlink_to("../..")  # the workspace's parent
    registry = ToolRegistry(builtin_tools(workspace))
    via_dotdot = await call(registry, "Read", {"file_path": "alias/../f.txt"})
    assert via_dotdot.content == "     1\treal f"
    assert (await call(registry, "Read", {"file_path": "abs"})).content == "     1\treal f"
    escape = await call(registry, "Read", {"file_path": "real/up/outside/secret.txt"})
    assert_error(escape, "outside the workspace")
    escape_write = {"file_path": "real/up/outside/new.txt", "content": "x"}
    assert_error(await call(registry, "Write", escape_write), "outside the workspace")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    for i in range(41):
        (workspace / f"l{i}").symlink_to(f"l{i + 1}")
    (workspace / "l41").write_text("end\n")
    assert (await call(registry, "Read", {"file_path": "l1"})).content == "     1\tend"  # 40
    assert_error(await call(registry, "Read", {"file_path": "l0"}), "Too many levels")


@pytest.mark.spec("E-CONFINE-1")
@pytest.mark.anyio
async def test_tree_walks_do_not_enter_links(workspace: Path) -> None:
    """Glob and Grep walks list a symlink to a file inside under its own name, and never
    enter a symlinked directory, even one inside."""
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("hit\n")
    (workspace / "alias").symlink_to("real", target_is_directory=True)
    (workspace / "f-link.txt").symlink_to("real/f.txt")
    registry = ToolRegistry(builtin_tools(workspace))
    listed = await call(registry, "Glob", {"pattern": "**/*.txt"})
    assert listed.content == "f-link.txt\nreal/f.txt"
    grep = await call(registry, "Grep", {"pattern": "hit"})
    assert grep.content == "f-link.txt:1:hit\nreal/f.txt:1:hit"
    named = await call(registry, "Glob", {"pattern": "*.txt", "path": "alias"})
    assert named.content == "real/f.txt"  # a link named as the path is followed, shown real


@pytest.mark.spec("E-CONFINE-1")
@pytest.mark.anyio
async def test_workspace_named_through_a_link(tmp_path: Path) -> None:
    """An absolute path that names the workspace through a link outside it (a symlinked
    home, /tmp on macOS) is inside."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "f.txt").write_text("x\n")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    registry = ToolRegistry(builtin_tools(real))
    output = await call(registry, "Read", {"file_path": str(tmp_path / "alias" / "f.txt")})
    assert output.content == "     1\tx"


# -- atomic writes ---------------------------------------------------------------------------


@pytest.mark.spec("E-CONFINE-3")
@pytest.mark.anyio
async def test_write_and_edit_replace_atomically(workspace: Path) -> None:
    """Write and Edit put a new file in place by rename (a new inode), keep the old file's
    permission bits and leave no temporary file behind."""
    target = workspace / "f.txt"
    target.write_text("a\n")
    target.chmod(0o640)
    before = target.stat().st_ino
    registry = ToolRegistry(builtin_tools(workspace))
    assert not (await call(registry, "Read", {"file_path": "f.txt"})).is_error
    assert not (await call(registry, "Write", {"file_path": "f.txt", "content": "b\n"})).is_error
    assert target.stat().st_ino != before
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    edit = {"file_path": "f.txt", "old_string": "b", "new_string": "c"}
    assert not (await call(registry, "Edit", edit)).is_error
    assert target.read_text() == "c\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(os.listdir(workspace)) == ["f.txt"]


class _SlowOs(ModuleType):
    """The os module, with every open taking ``delay`` seconds (a hung file system)."""

    def __init__(self, delay: float) -> None:
        super().__init__("os")
        self._delay = delay

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, *args: Any, **kwargs: Any) -> int:
        time.sleep(self._delay)
        return os.open(*args, **kwargs)


_FILE_MODULES = (confine_module, fileio_module, files_module, search_module)


def _slow_file_system(monkeypatch: pytest.MonkeyPatch, delay: float) -> None:
    for module in _FILE_MODULES:
        monkeypatch.setattr(module, "os", _SlowOs(delay))


GIVE_UP_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("Read", {"file_path": "f.txt"}),
    ("Grep", {"pattern": "x"}),
    ("Glob", {"pattern": "**/*"}),
    ("Write", {"file_path": "new/g.txt", "content": "late\n"}),
    ("Edit", {"file_path": "f.txt", "old_string": "x", "new_string": "late"}),
]


@pytest.mark.spec("E-CONFINE-3")
@pytest.mark.anyio
async def test_file_tools_give_up_at_their_timeout(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a file system that hangs (every open takes 0.4 s), each file tool's call ends at
    its 0.15 s timeout, before any open returned, and a Write or Edit given up never lands
    afterwards."""
    (workspace / "f.txt").write_text("x\n")
    registry = ToolRegistry(builtin_tools(workspace))
    _slow_file_system(monkeypatch, 0.4)
    outputs: dict[str, ToolOutput] = {}
    elapsed: dict[str, float] = {}

    async def one(name: str, input: dict[str, Any]) -> None:
        started = time.monotonic()
        outputs[name] = await call(registry, name, input, timeout_s=0.15)
        elapsed[name] = time.monotonic() - started

    async with anyio.create_task_group() as tg:
        for name, input in GIVE_UP_CALLS:
            tg.start_soon(one, name, input)
    for name, output in outputs.items():
        assert output.is_error and "timed out after 0.15 s" in output.content, (name, output)
    assert max(elapsed.values()) < 0.38, elapsed
    await anyio.sleep(2.0)  # the abandoned workers wake up (at most 3 opens) and must stop
    monkeypatch.undo()
    assert (workspace / "f.txt").read_text() == "x\n"
    assert not (workspace / "new").exists()
    assert sorted(os.listdir(workspace)) == ["f.txt"]


def test_file_modules_use_os_through_their_global() -> None:
    """The slow file system above reaches the tools through these module globals."""
    for module in _FILE_MODULES:
        assert vars(module)["os"] is os, module


@pytest.mark.anyio
async def test_platform_without_dir_fd_refuses_clearly(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where openat-style calls are missing, every file tool answers with one clear error
    instead of crashing or falling back to path checks that races defeat."""
    import steploop.effects.tools.confine as confine

    reason = confine._unsupported_reason() or "confined file access is not available here"
    monkeypatch.setattr(confine, "UNSUPPORTED_REASON", reason)
    registry = ToolRegistry(builtin_tools(workspace))
    for name, input in GIVE_UP_CALLS:
        assert_error(await call(registry, name, input), "confined file access is not available")


# -- names that are not UTF-8 ------------------------------------------------------------------


def _make(root: Path, rel: bytes, content: bytes | None = None) -> None:
    path = os.fsencode(root) + b"/" + rel
    if content is None:
        os.mkdir(path)
        return
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, content)
    os.close(fd)


@pytest.mark.spec("E-CONFINE-4")
@pytest.mark.anyio
async def test_a_non_utf8_name_round_trips_through_every_tool(workspace: Path) -> None:
    """``bad\\xff.txt`` in a directory ``d\\xe9`` (Latin-1 bytes): Glob and Grep showed the
    bytes as U+FFFD, a name that opened nothing. Now they show ``\\xHH`` and Read, Edit, Write,
    Grep and Glob take that name back; a file literally named with a backslash is used as
    named when it exists."""
    _make(workspace, b"d\xe9")
    _make(workspace, b"d\xe9/bad\xff.txt", b"needle one\n")
    registry = ToolRegistry(builtin_tools(workspace))
    shown = r"d\xe9/bad\xff.txt"
    listed = await call(registry, "Glob", {"pattern": "**/*.txt"})
    assert listed.content == shown
    assert (await call(registry, "Glob", {"pattern": r"*/bad\xff*"})).content == shown
    assert (await call(registry, "Grep", {"pattern": "needle"})).content == f"{shown}:1:needle one"
    read = await call(registry, "Read", {"file_path": listed.content})
    assert read.content == "     1\tneedle one", read
    edit = {"file_path": shown, "old_string": "one", "new_string": "two"}
    assert (await call(registry, "Edit", edit)).content == f"Replaced 1 occurrence in {shown}"
    write = await call(registry, "Write", {"file_path": shown, "content": "three\n"})
    assert write.content == f"Updated {shown} (6 bytes)"
    grep = await call(registry, "Grep", {"pattern": "three", "path": r"d\xe9", "glob": r"*\xff*"})
    assert grep.content == f"{shown}:1:three"
    assert os.listdir(os.fsencode(workspace) + b"/d\xe9") == [b"bad\xff.txt"]
    absolute = await call(registry, "Read", {"file_path": f"{workspace}/{shown}"})
    assert absolute.content == "     1\tthree"
    # a literal name wins where both exist; a new name is created as written
    _make(workspace, b"d\xe9/lit\\xff", b"literal\n")
    _make(workspace, b"d\xe9/lit\xff", b"bytes\n")
    assert (await call(registry, "Read", {"file_path": r"d\xe9/lit\xff"})).content.endswith(
        "literal"
    )
    await call(registry, "Write", {"file_path": r"new\xff", "content": "x"})
    assert (workspace / "new\\xff").read_text() == "x"


@pytest.mark.spec("E-CONFINE-4")
def test_show_name_and_unescape_name_are_inverse() -> None:
    from steploop.effects.tools.confine import show_name, unescape_name

    for raw in (b"plain.txt", b"bad\xff.txt", b"\x80\xfe/\xc3", "é.txt".encode()):
        name = os.fsdecode(raw)
        shown = show_name(name)
        shown.encode("utf-8")  # always sendable
        assert unescape_name(shown) == name
        assert os.fsencode(unescape_name(shown)) == raw
    assert show_name("é.txt") == "é.txt"
    assert unescape_name(r"a\x41\x7f") == r"a\x41\x7f"  # only bytes 80..ff are escapes
