"""The README's code examples run as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"), re.S)


def test_sync_driver_example_runs() -> None:
    """The 'Driving step() from your own runtime' example completes a turn with its own handlers."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- example: sync-driver -->\n```python\n(.*?)```", text, re.S)
    assert m is not None
    namespace: dict[str, object] = {}
    exec(compile(m.group(1), "README.md:sync-driver", "exec"), namespace)
    assert namespace["terminal"].TAG == "completed"  # type: ignore[attr-defined]


def test_async_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The 'Running it from Python' example runs a turn through the interpreter."""
    monkeypatch.chdir(tmp_path)
    code = next(b for b in _blocks() if "anyio.run(main)" in b)
    exec(compile(code, "README.md:async", "exec"), {"__name__": "readme"})
    assert "Completed()" in capsys.readouterr().out


def test_hypothesis_kit_example_runs() -> None:
    """The README's Hypothesis-kit example defines a runnable state machine test."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"<!-- example: hypothesis-kit -->\n```python\n(.*?)```", text, re.S)
    assert m is not None
    from hypothesis import settings

    namespace: dict[str, object] = {}
    exec(compile(m.group(1), "README.md:hypothesis-kit", "exec"), namespace)
    case = namespace["TestOutputCapsHold"]
    case.settings = settings(case.settings, max_examples=10)  # type: ignore[attr-defined]
    case("runTest").runTest()  # type: ignore[operator]
