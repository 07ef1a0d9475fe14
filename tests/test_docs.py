"""Every fenced code block of README.md and docs/ runs as written, or says why it cannot.

Each page runs in a scratch directory of its own, prepared once per session (the sample
project, examples/replies.json, a recorded trace and a killed one, the golden scenarios, a real
Claude Code session under ``~/.claude/projects``), its blocks in order:

- ``python``: executed, the page's blocks in one namespace; a Hypothesis ``TestCase`` a page
  defines is then run (10 examples);
- ``sh``: each line a ``steploop`` command, run in this process (``steploop.effects.cli.main``);
  it must exit 0, or N when its comment ends ``(exit N)``;
- ``console``: ``$ `` lines are commands as in ``sh``; the lines after one are its expected
  output, where a line ``...`` stands for any lines and ``...`` in a line for any text;
- ``json``: parsed; ``mermaid``: the machine's diagram, equal to specs/machine.mmd (which
  tests/reducer/test_graph.py holds equal to what the code draws);
- a block right after ``<!-- file: PATH -->`` is written to PATH (a ``python``, ``json`` or
  ``console`` one is then also run or checked as above; a file's ``sh`` text is a script, not
  commands to run here);
- a block right after ``<!-- not run: REASON -->`` is skipped; any other block fails the test.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import unittest
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 300

# The real Claude Code session the pages import (tests/data/cc-transcripts/README.md says where
# it comes from): ~/.claude/projects/-home-me-myproject/ holds it in every page's home.
SESSIONS = ("ccviewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",)
PROJECT = Path(".claude/projects/-home-me-myproject")

_FENCE = re.compile(r"^(```+)([\w-]*)\s*$")
_MARKER = re.compile(r"^<!--\s*(not run|file):\s*(.*?)\s*-->$")
_EXIT = re.compile(r"#.*\(exit (\d+)\)\s*$")
_RUNS = {"python", "sh", "console", "json", "mermaid"}


@attrs.frozen
class Block:
    """One fenced block: where it starts, its language, its text and the marker before it."""

    page: Path
    line: int
    lang: str
    code: str
    marker: tuple[str, str] | None

    @property
    def where(self) -> str:
        return f"{_name(self.page)}:{self.line}"


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order (fences at the start of a line)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j] == m.group(1)), None)
        assert end is not None, f"{_name(page)}:{i + 1}: a fence that is never closed"
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mk = _MARKER.match(before)
        marker = (mk.group(1), mk.group(2)) if mk else None
        code = "\n".join(lines[i + 1 : end]) + "\n"
        found.append(Block(page, i + 1, m.group(2), code, marker))
        i = end + 1
    return found


# --- the scratch directories ------------------------------------------------------------------


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """``steploop ARGV`` in this process: exit status, stdout, stderr."""
    from steploop.effects.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv, out=out)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every page starts from: ``work/`` (its working directory) and ``home/`` (its HOME)."""
    from steploop.effects.cli import SAMPLE_PROJECT

    root = tmp_path_factory.mktemp("docs-template")
    work, home = root / "work", root / "home"
    shutil.copytree(SAMPLE_PROJECT, work)
    (work / "examples").mkdir()
    shutil.copy2(ROOT / "examples" / "replies.json", work / "examples")
    shutil.copytree(
        ROOT / "specs" / "scenarios",
        work / "traces",
        ignore=shutil.ignore_patterns("*.py", "*.expected"),
    )
    (home / PROJECT).mkdir(parents=True)
    for name in SESSIONS:
        shutil.copy2(ROOT / "tests" / "data" / "cc-transcripts" / name, home / PROJECT)
    with _chdir(work):
        argv = ["run", "Where is userId read?", "--scripted", "examples/replies.json", "--yes"]
        code, out, _ = _cli([*argv, "--trace", "run.jsonl"])
        assert code == 0, out
        code, out, _ = _cli([*argv, "--trace", "b.jsonl", "--profile", "claude_code_2_1_88"])
        assert code == 0, out
    shutil.copy2(work / "run.jsonl", work / "a.jsonl")
    # a run killed in its second round: the lines a killed recorder leaves (one flushed write per step)
    recorded = (work / "run.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (work / "killed.jsonl").write_text("".join(recorded[:12]), encoding="utf-8")
    return root


@contextlib.contextmanager
def _chdir(path: Path) -> Iterator[None]:
    old = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


# --- running a block --------------------------------------------------------------------------


def _command(line: str, where: str) -> tuple[list[str], int] | None:
    """A shell line as ``steploop`` arguments and the exit status it must give (None: blank)."""
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    words = list(lexer)
    ops = [w for w in words if w and set(w) <= set("&|;<>()")]
    assert not ops and words and Path(words[0]).name == "steploop", (
        f"{where}: only steploop commands run here; mark a block that cannot run: {line.strip()}"
    )
    exit_m = _EXIT.search(line)
    return [os.path.expanduser(w) for w in words[1:]], int(exit_m.group(1)) if exit_m else 0


def _run(argv: list[str], expected: int, where: str) -> str:
    code, out, err = _cli(argv)
    assert code == expected, (
        f"{where}: steploop {shlex.join(argv)} exited {code}, expected {expected}\n"
        f"--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
    )
    return out


def _matches(expected: list[str], actual: str) -> bool:
    """``actual`` is ``expected``, a line ``...`` matching any lines and ``...`` any text."""
    pattern = "".join(
        r"(?:.*\n)*?"
        if e.strip() == "..."
        else ".*?".join(map(re.escape, e.rstrip().split("..."))) + r"[ \t]*\n"
        for e in expected
    )
    lines = [a.rstrip() for a in actual.rstrip("\n").split("\n")]
    return re.fullmatch(pattern, "\n".join(lines) + "\n") is not None


def run_sh(block: Block) -> None:
    for k, line in enumerate(block.code.splitlines()):
        cmd = _command(line, f"{block.where}+{k + 1}")
        if cmd is not None:
            _run(*cmd, f"{block.where}+{k + 1}")


def run_console(block: Block) -> None:
    steps: list[tuple[int, str, list[str]]] = []
    for k, line in enumerate(block.code.splitlines()):
        if line.startswith("$ "):
            steps.append((k + 1, line[2:], []))
        else:
            assert steps, f"{block.where}: a console block starts with a '$ ' command"
            steps[-1][2].append(line)
    for k, line, expected in steps:
        where = f"{block.where}+{k}"
        cmd = _command(line, where)
        assert cmd is not None, f"{where}: an empty command"
        out = _run(*cmd, where)
        while expected and not expected[-1].strip():
            expected.pop()
        if expected:
            assert _matches(expected, out), (
                f"{where}: the output differs\n--- shown\n"
                + "\n".join(expected)
                + f"\n--- printed\n{out}"
            )


def run_python(block: Block, namespace: dict[str, object]) -> None:
    exec(compile(block.code, block.where, "exec"), namespace)


def run_test_cases(namespace: dict[str, object]) -> int:
    """Run the Hypothesis state-machine test cases the page defined (10 examples each)."""
    from hypothesis import settings

    ran = 0
    for value in list(namespace.values()):
        if (
            isinstance(value, type)
            and issubclass(value, unittest.TestCase)
            and hasattr(value, "runTest")
        ):
            value.settings = settings(getattr(value, "settings", None), max_examples=10)  # type: ignore[attr-defined]
            value("runTest").runTest()  # type: ignore[attr-defined]
            ran += 1
    return ran


def check_block(block: Block, namespace: dict[str, object]) -> bool:
    """Run or check one block; False when it was skipped by its marker."""
    if block.marker is not None and block.marker[0] == "not run":
        assert block.marker[1], f"{block.where}: a 'not run' marker gives its reason"
        return False
    if block.marker is not None:  # file: PATH
        path = Path(os.path.expanduser(block.marker[1]))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.code, encoding="utf-8")
        if block.code.startswith("#!"):
            path.chmod(0o755)
        if block.lang == "sh" or block.lang not in _RUNS:
            return True
    match block.lang:
        case "python":
            run_python(block, namespace)
        case "sh":
            run_sh(block)
        case "console":
            run_console(block)
        case "json":
            json.loads(block.code)
        case "mermaid":
            diagram = (ROOT / "specs" / "machine.mmd").read_text(encoding="utf-8")
            assert block.code == diagram, (
                f"{block.where}: not the diagram of specs/machine.mmd (`steploop graph`)"
            )
        case _:
            pytest.fail(
                f"{block.where}: a ```{block.lang or '(no language)'} block that is not run; "
                "mark it <!-- not run: why --> or make it run"
            )
    return True


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_blocks_run(
    page: Path, template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every block of the page runs (in order, in a scratch directory) or carries its reason."""
    shutil.copytree(template, tmp_path, dirs_exist_ok=True)
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    found = blocks(page)
    for block in found:
        check_block(block, namespace)
    defines_cases = any(
        b.lang == "python" and ".TestCase" in b.code and b.marker is None for b in found
    )
    assert run_test_cases(namespace) >= defines_cases, f"{_name(page)}: its TestCase did not run"


def test_every_page_is_collected() -> None:
    """The pages checked are README.md and every Markdown file under docs/."""
    names = {str(p.relative_to(ROOT)) for p in PAGES}
    assert "README.md" in names and "docs/index.md" in names and "docs/cli.md" in names


def test_readme_is_short() -> None:
    """The README is a five-minute read: at most 300 lines (the reference lives in docs/)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, lines


def test_readme_links_resolve() -> None:
    """Every relative link of the README names a file of the repository (an anchor its heading)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    anchors = {
        re.sub(r"[^\w\- ]", "", h.lower()).strip().replace(" ", "-")
        for h in re.findall(r"^#+ (.*)$", text, re.M)
    }
    for target in re.findall(r"\]\(([^)]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        if target.startswith("#"):
            assert target[1:] in anchors, target
        else:
            assert (ROOT / target.split("#")[0]).is_file(), target


def test_unmarked_blocks_that_cannot_run_fail(tmp_path: Path) -> None:
    """The checker refuses an unmarked block it cannot run, a non-steploop shell line, and a
    console block whose output differs; it skips a marked one."""
    page = tmp_path / "page.md"
    page.write_text(
        "```sql\nSELECT 1;\n```\n\n<!-- not run: needs DuckDB -->\n```sql\nSELECT 1;\n```\n\n"
        "```sh\nls /\n```\n\n```console\n$ steploop --version\nsteploop 0.0.0-not-this\n```\n",
        encoding="utf-8",
    )
    sql, marked, shell, console = blocks(page)
    with pytest.raises(pytest.fail.Exception, match="not run"):
        check_block(sql, {})
    assert check_block(marked, {}) is False
    with pytest.raises(AssertionError, match="only steploop commands"):
        check_block(shell, {})
    with pytest.raises(AssertionError, match="output differs"):
        check_block(console, {})


def test_output_matching() -> None:
    """``...`` alone on a line matches any lines, inside a line any text; the rest is literal."""
    assert _matches(["a", "...", "d"], "a\nb\nc\nd\n")
    assert _matches(["a", "...", "b"], "a\nb\n")
    assert _matches(["at ... here"], "at /tmp/x here\n")
    assert not _matches(["a", "d"], "a\nb\nd\n")
    assert not _matches(["a.b"], "axb\n")
