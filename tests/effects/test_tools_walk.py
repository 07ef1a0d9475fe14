"""The confined walk's bounds and skips (specs/ E-CONFINE-5, steploop/effects/tools/confine.py):
missing directories made at any depth, each component's bounded re-look, a directory that
vanishes or turns into a link during a tree walk skipped, ``..`` inside the path allowed."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import steploop.effects.tools.confine as confine
import steploop.effects.tools.search as search
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools
from steploop.effects.tools.confine import Refused, Walker


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


async def call(workspace: Path, name: str, input: Mapping[str, Any]) -> ToolOutput:
    registry = ToolRegistry(builtin_tools(workspace))
    ctx = ToolContext(workspace=workspace, tool_use_id="toolu_walk")
    return await registry.run(name, input, ctx, 30.0)


def tree_of(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# -- directories made on the way -------------------------------------------------------------


@pytest.mark.spec("E-CONFINE-5")
@pytest.mark.anyio
async def test_write_makes_any_number_of_missing_directories(workspace: Path) -> None:
    """Write of a/b/c/d/e/f/file makes the six directories (one retry counter served the
    whole walk: the fourth failed with "Path changed while in use" and left three behind)."""
    output = await call(workspace, "Write", {"file_path": "a/b/c/d/e/f/file", "content": "x"})
    assert output == ToolOutput(content="Created a/b/c/d/e/f/file (1 bytes)")
    assert (workspace / "a/b/c/d/e/f/file").read_text() == "x"
    deep = "/".join(f"d{i}" for i in range(30)) + "/file"
    assert not (await call(workspace, "Write", {"file_path": deep, "content": "y"})).is_error


class _Os(ModuleType):
    """os as confine.py sees it, with some calls replaced; counts calls by name."""

    def __init__(self, **replace: Any) -> None:
        super().__init__("os")
        self._replace = replace
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        if name in self._replace:
            self.calls[name] = self.calls.get(name, 0) + 1
            if self.calls[name] > 50:
                raise RuntimeError(f"unbounded: {name} called 50 times")
            return self._replace[name]
        return getattr(os, name)


@pytest.mark.spec("E-CONFINE-5")
def test_a_component_that_keeps_vanishing_gives_up_after_its_bound(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory made for a path that another process keeps removing is made three times,
    then the walk gives up with "Path changed while in use", for any component."""
    (workspace / "a").mkdir()
    fake = _Os(mkdir=lambda *args, **kwargs: None)  # made, and at once removed again
    monkeypatch.setattr(confine, "os", fake)
    with Walker(workspace, "a/gone/f.txt") as walker, pytest.raises(Refused) as refused:
        walker.walk(["a", "gone", "f.txt"], create=True)
    assert str(refused.value) == "Path changed while in use: a/gone/f.txt"
    assert fake.calls["mkdir"] == confine.RETRIES == 3


@pytest.mark.spec("E-CONFINE-5")
def test_the_relook_at_a_former_symlink_stops_after_its_bound(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A component that opens as a link but looks like a directory (it was a symlink a moment
    ago) is looked at again three times, then refused as "Not a directory"."""
    (workspace / "d").mkdir()
    real_open = os.open
    opened: list[str] = []

    def flapping_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == "d" and flags & os.O_DIRECTORY:
            opened.append(path)
            raise OSError(errno.ELOOP, "Too many levels of symbolic links")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(confine, "os", _Os(open=flapping_open))
    with Walker(workspace, "d/f.txt") as walker, pytest.raises(Refused) as refused:
        walker.walk(["d", "f.txt"])
    assert str(refused.value) == "Not a directory: d/f.txt"
    assert len(opened) == 1 + confine.RETRIES


# -- tree walks ------------------------------------------------------------------------------


def _layout(root: Path) -> None:
    for rel in ("a/1.txt", "b/2.txt", "b/sub/3.txt", "c/4.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("hit\n")


def _relayout(root: Path) -> None:
    if (root / "b").is_symlink():
        (root / "b").unlink()
    shutil.rmtree(root / "b", ignore_errors=True)
    _layout(root)


def _vanish(root: Path) -> None:
    shutil.rmtree(root / "b")


def _to_link(root: Path) -> None:
    shutil.rmtree(root / "b")
    (root / "b").symlink_to("a", target_is_directory=True)


@pytest.mark.spec("E-CONFINE-5")
@pytest.mark.parametrize("change", [_vanish, _to_link])
def test_a_directory_changed_during_a_tree_walk_is_skipped(workspace: Path, change: Any) -> None:
    """A directory removed, or swapped for a symlink, between being listed and being entered
    is not entered, and the walk goes on with the entries after it."""
    _layout(workspace)

    def visit(state: bool, name: str, is_dir: bool) -> tuple[bool | None, bool]:
        if is_dir and name == "b":
            change(workspace)
        return (True if is_dir else None), not is_dir

    with Walker(workspace) as walker:
        found = [walker.display(name) for name, _ in walker.tree(True, visit)]
    assert found == ["a/1.txt", "c/4.txt"]


@pytest.mark.spec("E-CONFINE-5")
@pytest.mark.parametrize("change", [_vanish, _to_link])
@pytest.mark.anyio
async def test_glob_and_grep_go_on_past_a_changed_directory(
    workspace: Path, change: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Glob and Grep list what comes after a directory that vanished or became a link while
    they walked (a walk that ended there would truncate their results silently)."""
    _layout(workspace)
    real_visit = search.GlobPattern.visit

    def visit(self: search.GlobPattern, state: Any, name: str, is_dir: bool) -> Any:
        if is_dir and name == "b" and (workspace / "b").is_dir():
            change(workspace)
        return real_visit(self, state, name, is_dir)

    monkeypatch.setattr(search.GlobPattern, "visit", visit)
    listed = await call(workspace, "Glob", {"pattern": "**/*.txt"})
    assert listed.content == "a/1.txt\nc/4.txt"

    _relayout(workspace)
    real_grep_visit = search.grep_visit

    def grep_visit(state: bool, name: str, is_dir: bool) -> Any:
        if is_dir and name == "b" and (workspace / "b").is_dir():
            change(workspace)
        return real_grep_visit(state, name, is_dir)

    monkeypatch.setattr(search, "grep_visit", grep_visit)
    found = await call(workspace, "Grep", {"pattern": "hit"})
    assert found.content == "a/1.txt:1:hit\nc/4.txt:1:hit"


# -- ".." inside ------------------------------------------------------------------------------


@pytest.mark.spec("E-CONFINE-5")
@pytest.mark.anyio
async def test_dot_dot_inside_the_workspace_is_allowed(workspace: Path) -> None:
    """``sub/../f.txt`` names f.txt: Read, Write and Edit take it; ``new/../g.txt`` creates
    g.txt without making ``new``; ``sub/../../x`` is outside."""
    (workspace / "sub").mkdir()
    (workspace / "f.txt").write_text("one\n")
    assert (await call(workspace, "Read", {"file_path": "sub/../f.txt"})).content == "     1\tone"
    registry = ToolRegistry(builtin_tools(workspace))
    ctx = ToolContext(workspace=workspace, tool_use_id="toolu_walk")
    await registry.run("Read", {"file_path": "f.txt"}, ctx, 30.0)
    edit = {"file_path": "sub/./../f.txt", "old_string": "one", "new_string": "two"}
    assert (await registry.run("Edit", edit, ctx, 30.0)).content == "Replaced 1 occurrence in f.txt"
    write = {"file_path": "new/../g.txt", "content": "g\n"}
    assert (await registry.run("Write", write, ctx, 30.0)).content == "Created g.txt (2 bytes)"
    assert tree_of(workspace) == ["f.txt", "g.txt", "sub"]
    outside = await call(workspace, "Read", {"file_path": "sub/../../x"})
    assert outside.is_error and "outside the workspace" in outside.content
