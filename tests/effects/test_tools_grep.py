"""Grep: a linear-time engine that never holds the event loop (specs/ E-GREP-1), and the options
of Claude Code's Grep (ripgrep's -i, -n, -A/-B/-C, multiline, glob, type, output modes)."""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


async def grep(
    workspace: Path, input: Mapping[str, Any], timeout_s: float = 30.0, **options: Any
) -> ToolOutput:
    registry = ToolRegistry(builtin_tools(workspace, **options))
    ctx = ToolContext(workspace=workspace, tool_use_id="toolu_grep")
    return await registry.run("Grep", input, ctx, timeout_s)


async def grep_with_heartbeat(
    workspace: Path, input: Mapping[str, Any], timeout_s: float
) -> tuple[ToolOutput, float, float]:
    """The call's output, the process CPU time it took, and the most process CPU time spent
    between two ticks of a task that ticks every 10 ms meanwhile (CPU time, not the wall
    clock: a loop held by a computation shows up there whatever else the machine does)."""
    ticks: list[float] = []
    done = anyio.Event()

    async def heartbeat() -> None:
        while not done.is_set():
            ticks.append(time.process_time())
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as tg:
        tg.start_soon(heartbeat)
        await anyio.sleep(0)
        started = time.process_time()
        output = await grep(workspace, input, timeout_s)
        cpu = time.process_time() - started
        done.set()
    ticks.append(time.process_time())
    gap = max((b - a for a, b in itertools.pairwise(ticks)), default=0.0)
    return output, cpu, gap


# -- a linear-time engine --------------------------------------------------------------------


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_catastrophic_pattern_returns_at_once_and_never_holds_the_loop(
    workspace: Path,
) -> None:
    """The reported case, ``(a+)+$`` over ``a``s and a ``!`` with a 2 s timeout (24 ``a`` took
    17 s and the event loop stood still: Python's ``re`` backtracks holding the interpreter
    lock; 26 here, four times that work): the answer comes at once and a 10 ms heartbeat
    keeps ticking."""
    (workspace / "evil.txt").write_text("a" * 26 + "!\n")
    output, cpu, gap = await grep_with_heartbeat(workspace, {"pattern": "(a+)+$"}, 2.0)
    assert output == ToolOutput(content="No matches found")
    assert cpu < 1.0, cpu
    assert gap < 0.5, gap


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_catastrophic_patterns_over_long_input_take_linear_time(workspace: Path) -> None:
    """Patterns that backtrack exponentially, over 2,000 lines that almost match and a line of
    100,000 characters: a fraction of a second of CPU, the loop never held, the right
    answer."""
    (workspace / "many.txt").write_text(("a" * 40 + "!\n") * 2_000)
    (workspace / "long.txt").write_text("x" * 100_000 + "\n" + "a" * 40 + "b\n")
    for pattern, want in [
        ("(a+)+$", "No matches found"),
        ("(x+x+)+y", "No matches found"),
        ("(a|aa)+b$", f"long.txt:2:{'a' * 40}b"),
    ]:
        output, cpu, gap = await grep_with_heartbeat(workspace, {"pattern": pattern}, 5.0)
        assert output.content == want, (pattern, output)
        assert cpu < 2.0 and gap < 0.5, (pattern, cpu, gap)


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_patterns_the_engine_refuses_are_clear_tool_errors(
    workspace: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Backreferences and look-around (which need backtracking) are refused in ripgrep's
    words, as ripgrep refuses them without PCRE2; nothing is printed on stderr."""
    (workspace / "f.txt").write_text("aa foobar\n")
    cases = {
        r"(a)\1": "backreferences are not supported",
        r"(?P<x>a)(?P=x)": "backreferences are not supported",
        "foo(?=bar)": "look-around, including look-ahead and look-behind, is not supported",
        "(?<!x)foo": "look-around, including look-ahead and look-behind, is not supported",
        "(": "regex parse error: missing ): (",
    }
    for pattern, reason in cases.items():
        output = await grep(workspace, {"pattern": pattern})
        assert output.is_error, (pattern, output)
        assert output.content == (
            f"<tool_use_error>Invalid regular expression {pattern!r}: regex parse error: "
            f"{reason.removeprefix('regex parse error: ')} (Grep uses a linear-time engine, "
            "RE2, of ripgrep's dialect)</tool_use_error>"
        ), output.content
    assert capfd.readouterr().err == ""


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_a_line_break_needs_multiline(workspace: Path) -> None:
    """Outside multiline mode a match never spans lines: ``\\s`` and ``[^x]`` stop at the line
    end, a pattern naming ``\\n`` is refused and points to multiline; with multiline the
    match spans lines and every line it covers is shown."""
    (workspace / "f.txt").write_text("start\nmiddle\nend\n")
    assert (await grep(workspace, {"pattern": r"start\smiddle"})).content == "No matches found"
    assert (await grep(workspace, {"pattern": "t[^x]+e"})).content == "No matches found"
    refused = await grep(workspace, {"pattern": r"start\nmiddle"})
    assert refused.is_error and "multiline" in refused.content
    spanned = await grep(workspace, {"pattern": r"art\nmid.*\ne", "multiline": True})
    assert spanned.content == "f.txt:1:start\nf.txt:2:middle\nf.txt:3:end"
    dotall = await grep(workspace, {"pattern": "dle.end", "multiline": True})
    assert dotall.content == "f.txt:2:middle\nf.txt:3:end"


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_lines_are_found_in_one_pass(workspace: Path) -> None:
    """Anchors are line anchors, an empty match finds its line, the text after the last line
    break is no line, and a file without a final line break has its last line."""
    (workspace / "a.txt").write_text("one\n\nthree\n")
    (workspace / "b.txt").write_text("x\nlast")
    assert (await grep(workspace, {"pattern": "^$"})).content == "a.txt:2:"
    assert (await grep(workspace, {"pattern": "^t"})).content == "a.txt:3:three"
    assert (await grep(workspace, {"pattern": "t$"})).content == "b.txt:2:last"
    every = await grep(workspace, {"pattern": "", "path": "b.txt"})
    assert every.content == "b.txt:1:x\nb.txt:2:last"


# -- Claude Code's options -------------------------------------------------------------------


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_case_line_numbers_and_context(workspace: Path) -> None:
    """-i ignores case; -n false leaves out line numbers; -A/-B/-C (and context) add lines
    around each match as ripgrep prints them: ``path-N-text`` for context, ``--`` between
    groups that do not touch."""
    (workspace / "f.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)) + "LINE 11\n")
    loud = await grep(workspace, {"pattern": "line 11", "-i": True})
    assert loud.content == "f.txt:11:LINE 11"
    bare = await grep(workspace, {"pattern": "line 1$", "-n": False})
    assert bare.content == "f.txt:line 1"
    around = await grep(workspace, {"pattern": "line [27]$", "-C": 1})
    first = ["f.txt-1-line 1", "f.txt:2:line 2", "f.txt-3-line 3"]
    second = ["f.txt-6-line 6", "f.txt:7:line 7", "f.txt-8-line 8"]
    assert around.content == "\n".join([*first, "--", *second])
    assert (await grep(workspace, {"pattern": "line [27]$", "context": 1})) == around
    after = await grep(workspace, {"pattern": "line [34]$", "-A": 1, "-B": 0})
    assert after.content == "f.txt:3:line 3\nf.txt:4:line 4\nf.txt-5-line 5"
    before = await grep(workspace, {"pattern": "line 10", "-B": 2, "-n": False})
    assert before.content == "f.txt-line 8\nf.txt-line 9\nf.txt:line 10"


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_output_modes(workspace: Path) -> None:
    """files_with_matches lists the files (newest first, as Claude Code sorts them) and count
    the matching lines per file, in Claude Code's words; an unknown mode is an error."""
    (workspace / "old.txt").write_text("hit\nhit\n")
    (workspace / "new.txt").write_text("hit\n")
    (workspace / "none.txt").write_text("miss\n")
    os.utime(workspace / "old.txt", ns=(1_000_000_000, 1_000_000_000))
    files = await grep(workspace, {"pattern": "hit", "output_mode": "files_with_matches"})
    assert files.content == "Found 2 files\nnew.txt\nold.txt"
    counts = await grep(workspace, {"pattern": "hit", "output_mode": "count"})
    assert counts.content == ("new.txt:1\nold.txt:2\n\nFound 3 total occurrences across 2 files.")
    nothing = await grep(workspace, {"pattern": "zzz", "output_mode": "files_with_matches"})
    assert nothing.content == "No files found"
    no_count = await grep(workspace, {"pattern": "zzz", "output_mode": "count"})
    assert no_count.content == "No matches found\n\nFound 0 total occurrences across 0 files."
    bad = await grep(workspace, {"pattern": "hit", "output_mode": "lines"})
    assert bad.is_error and "content, files_with_matches, count" in bad.content


@pytest.mark.spec("E-GREP-1")
@pytest.mark.anyio
async def test_glob_and_type_filters(workspace: Path) -> None:
    """glob takes several globs (spaces, commas), ``{a,b}`` alternatives and ``!`` to exclude;
    type takes ripgrep's type names; an unknown type is an error naming it."""
    for name in ("a.ts", "b.tsx", "c.js", "d.py", "e.pyi", "skip.test.ts"):
        (workspace / name).write_text("hit\n")

    async def names(**input: Any) -> list[str]:
        output = await grep(workspace, {"pattern": "hit", "output_mode": "count", **input})
        return [line.split(":")[0] for line in output.content.split("\n\n")[0].splitlines()]

    assert await names(glob="*.{ts,tsx}") == ["a.ts", "b.tsx", "skip.test.ts"]
    assert await names(glob="*.ts,*.js") == ["a.ts", "c.js", "skip.test.ts"]
    assert await names(glob="*.ts !*.test.ts") == ["a.ts"]
    assert await names(glob="!*.ts") == ["b.tsx", "c.js", "d.py", "e.pyi"]
    assert await names(type="py") == ["d.py", "e.pyi"]
    assert await names(type="ts", glob="!skip*") == ["a.ts", "b.tsx"]
    unknown = await grep(workspace, {"pattern": "hit", "type": "cobolx"})
    assert unknown.is_error and "unrecognized file type: cobolx" in unknown.content
