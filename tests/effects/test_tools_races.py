"""Workspace confinement under attack: another process swaps directories and files for
symlinks to an outside location, and files for hard links to outside files, while the file
tools run. Every call is checked for an escape: outside content in the output, or any change
to the outside tree (a file written, edited, created; a directory made).

CI runs 5,000 calls per tool (Read, Write, Edit, Glob, Grep); ``--slow`` runs 50,000, and
``STEPLOOP_RACE_ATTEMPTS=N`` any number. ``STEPLOOP_RACE_REPORT=FILE`` writes the counts (per
tool and target: calls, escapes, error results, swaps seen) as JSON.

Only the public tool API is used, so the same file measures any version of the tools.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects.tools import ToolContext, ToolRegistry, builtin_tools

MARK = "OUTSIDE"

#: The swapper: each of three names flips between its inside entry and an outside one, one
#: atomic exchange (``renameat2(RENAME_EXCHANGE)``) at a time, round robin, so every state
#: holds for a few microseconds and no name is ever missing: ``d`` a real directory <-> a
#: symlink to an outside directory, ``f.txt`` a regular file <-> a symlink to an outside
#: file, ``h.txt`` a regular file <-> a hard link to an outside file. Where the kernel or libc
#: lacks the exchange it falls back to rename sequences (with short gaps).
SWAPPER = r"""
import ctypes, os, sys
ws, outside, stop = sys.argv[1:4]
os.chdir(ws)
os.symlink(outside + "/d", "d.alt")
os.symlink(outside + "/secret.txt", "f.alt")
os.link(outside + "/hard.txt", "h.alt")
libc = ctypes.CDLL(None, use_errno=True)
renameat2 = getattr(libc, "renameat2", None)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
def exchange(a, b):
    if renameat2 is not None and renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0:
        return
    try:  # the fallback: a, b -> tmp, b -> a, tmp -> b
        os.rename(a, b"x.tmp")
        os.rename(b, a)
        os.rename(b"x.tmp", b)
    except OSError:
        pass
names = [(b"d", b"d.alt"), (b"f.txt", b"f.alt"), (b"h.txt", b"h.alt")]
print("ready", flush=True)
n = 0
while True:
    for a, b in names:
        exchange(a, b)
    n += 1
    if n % 256 == 0 and os.path.exists(stop):
        break
print(n, flush=True)
"""

#: Calls in flight at once (each in its worker thread, as the interpreter runs them).
CALLERS = 4

READ = ["d/f.txt", "d/s/g.txt", "f.txt", "h.txt"]
GREP: list[dict[str, Any]] = [
    {"pattern": "alpha|beta"},
    {"pattern": "alpha|beta", "path": "d"},
    {"pattern": "alpha|beta", "path": "d/s"},
    {"pattern": "alpha|beta", "path": "f.txt"},
    {"pattern": "alpha|beta", "path": "h.txt"},
]
GLOB: list[dict[str, Any]] = [
    {"pattern": "**/*"},
    {"pattern": "*", "path": "d"},
    {"pattern": "d/*"},
    {"pattern": "**/*.txt", "path": "d/s"},
]


def _write_input(i: int) -> tuple[str, dict[str, Any]]:
    targets = [f"d/new{i % 16}.txt", f"d/n{i % 16}/x.txt", "d/f.txt", "f.txt", "h.txt"]
    target = targets[i % len(targets)]
    return target, {"file_path": target, "content": "alpha written\n"}


def _edit_input(i: int) -> tuple[str, dict[str, Any]]:
    target = READ[i % len(READ)]
    old, new = ("alpha", "beta") if (i // len(READ)) % 2 == 0 else ("beta", "alpha")
    return target, {"file_path": target, "old_string": old, "new_string": new, "replace_all": True}


def _key(input: Mapping[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(input.items()) if k != "content")


INPUTS: dict[str, Callable[[int], tuple[str, dict[str, Any]]]] = {
    "Read": lambda i: (READ[i % 4], {"file_path": READ[i % 4]}),
    "Grep": lambda i: (_key(GREP[i % 5]), GREP[i % 5]),
    "Glob": lambda i: (_key(GLOB[i % 4]), GLOB[i % 4]),
    "Write": _write_input,
    "Edit": _edit_input,
}


def _attempts(config: pytest.Config) -> int:
    env = os.environ.get("STEPLOOP_RACE_ATTEMPTS")
    if env:
        return int(env)
    return 50_000 if config.getoption("--slow") else 5_000


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry under ``root``: a file's bytes, None for a directory or other entry."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            path = os.path.join(dirpath, f)
            out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    ws = tmp_path / "ws"
    outside = tmp_path / "outside"
    for base, text in ((ws, "alpha inside\n"), (outside / "d", f"alpha beta {MARK}\n")):
        (base / "d" if base == ws else base).mkdir(parents=True)
        d = base / "d" if base == ws else base
        (d / "s").mkdir()
        (d / "f.txt").write_text(text)
        (d / "s" / "g.txt").write_text(text)
    (outside / "d" / f"{MARK}-only.txt").write_text(f"alpha {MARK}\n")
    (outside / "secret.txt").write_text(f"alpha beta {MARK}\n")
    (outside / "hard.txt").write_text(f"alpha beta {MARK}\n")
    (ws / "f.txt").write_text("alpha inside\n")
    (ws / "h.txt").write_text("alpha inside\n")
    return ws.resolve(), outside.resolve()


def _signature(outside: Path) -> list[tuple[int, int, int]]:
    """A cheap fingerprint of the outside tree: each directory's and file's inode, size and
    modification time. An entry created, removed or renamed changes its directory's time; a
    file written changes its own. (Not the change time: the swapper's renames of the hard
    link change it without touching the file.)"""
    out = []
    for rel in _OUTSIDE_ENTRIES:
        try:
            st = os.stat(outside / rel, follow_symlinks=False)
        except FileNotFoundError:
            out.append((0, 0, 0))
            continue
        out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return out


_OUTSIDE_ENTRIES = (
    ".",
    "d",
    "d/s",
    "d/f.txt",
    "d/s/g.txt",
    f"d/{MARK}-only.txt",
    "secret.txt",
    "hard.txt",
)


def _restore(outside: Path, want: dict[str, bytes | None]) -> None:
    """Put the outside tree back as it was (after an escape changed it)."""
    now = _snapshot(outside)
    for rel in sorted(set(now) - set(want), reverse=True):
        path = outside / rel
        if path.is_dir() and not path.is_symlink():
            path.rmdir()
        else:
            path.unlink()
    for rel, data in want.items():
        if data is not None and now.get(rel) != data:
            (outside / rel).write_bytes(data)


async def _hammer(tool: str, ws: Path, outside: Path, attempts: int) -> dict[str, dict[str, int]]:
    # Without the read-before-write rule, so that every Write and Edit reaches its write.
    registry = ToolRegistry(builtin_tools(ws, require_read_before_write=False))
    ctx = ToolContext(workspace=ws, tool_use_id="toolu_race")
    clean = _snapshot(outside)
    fingerprint = _signature(outside)
    counts: dict[str, dict[str, int]] = {}
    make = INPUTS[tool]
    todo = iter(range(attempts))

    async def caller() -> None:
        nonlocal fingerprint
        for i in todo:
            target, input = make(i)
            out = await registry.run(tool, input, ctx, 30.0)
            row = counts.setdefault(target, {"calls": 0, "escapes": 0, "errors": 0})
            row["calls"] += 1
            row["errors"] += out.is_error
            # Checked and restored with no await in between: another caller never sees (and
            # counts) the same change. With calls overlapping, an escape may be put down to
            # the target of the call that finished first.
            changed = _signature(outside) != fingerprint
            if MARK in out.content or changed:
                row["escapes"] += 1
                if changed:
                    _restore(outside, clean)
                    fingerprint = _signature(outside)

    async with anyio.create_task_group() as tg:
        for _ in range(CALLERS):
            tg.start_soon(caller)
    return counts


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """A scratch directory in memory (/dev/shm) where there is one, else ``tmp_path``: on
    ext4 each rename over a file flushes the new file's data (auto_da_alloc), which makes
    Write and Edit several times slower without changing what is tested."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="steploop-race-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("tool", ["Read", "Write", "Edit", "Glob", "Grep"])
def test_no_escape_under_concurrent_swaps(
    tool: str, scratch: Path, request: pytest.FixtureRequest
) -> None:
    """With another process swapping a directory and a file for symlinks to outside and a
    file for a hard link to an outside file, no call of the tool reads, lists, writes,
    edits or creates anything outside the workspace."""
    tmp_path = scratch
    ws, outside = _layout(tmp_path)
    attempts = _attempts(request.config)
    stop = tmp_path / "stop"
    swapper = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(ws), str(outside), str(stop)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert swapper.stdout is not None
        assert swapper.stdout.readline().strip() == "ready"
        started = time.monotonic()
        counts = anyio.run(_hammer, tool, ws, outside, attempts, backend="asyncio")
        elapsed = time.monotonic() - started
    finally:
        stop.touch()
        try:
            out, _ = swapper.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            swapper.kill()
            out, _ = swapper.communicate()
    cycles = int(out.split()[-1]) if out.split() else 0
    escapes = sum(row["escapes"] for row in counts.values())
    report = {
        "tool": tool,
        "attempts": attempts,
        "seconds": round(elapsed, 2),
        "swap_cycles": cycles,
        "escapes": escapes,
        "targets": counts,
    }
    path = os.environ.get("STEPLOOP_RACE_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(report) + "\n")
    assert cycles > 0, "the swapper never swapped"
    assert escapes == 0, report
