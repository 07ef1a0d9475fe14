"""Helpers of the viewer's tests: traces with what the page must show, the page's request runs
rebuilt in Python, and a headless Chromium driven through Selenium (Debian's ``chromium`` and
``chromium-driver``; the browser tests skip and say why where one of them is missing)."""

from __future__ import annotations

import io
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from steploop.effects.cli import main
from steploop.effects.trace import StepRecord, TraceReader, record_driver
from steploop.effects.trace.replay import Walk
from steploop.reducer import LoopState, Request, default
from steploop.reducer.effects import (
    AskPermission,
    CallModel,
    Compact,
    Effect,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.events import (
    CompactionFinished,
    Event,
    ModelBlockReceived,
    ModelResponseEnded,
    PermissionAnswered,
    StopHooksFinished,
    ToolFinished,
    ToolTraits,
)
from steploop.reducer.messages import SystemMessage, TextBlock, ToolUseBlock, Usage, UserMessage

PAYLOAD = "<script>window.pwned=1</script><img src=x onerror=\"window.pwned=2\">&amp;</pre>"
NEEDLE = "needle-7f3a"

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
DRIVER = shutil.which("chromedriver") or ("/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None)


def browser_missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    if CHROMIUM is None:
        return "no chromium here (apt-get install chromium chromium-driver; CI installs them)"
    if DRIVER is None:
        return "no chromedriver here (apt-get install chromium-driver; CI installs it)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: $STEPLOOP_TEST_ARTIFACTS, else a pytest temporary directory."""
    where = os.environ.get("STEPLOOP_TEST_ARTIFACTS")
    if where:
        path = Path(where)
        path.mkdir(parents=True, exist_ok=True)
        return path
    return tmp_path_factory.mktemp("screenshots")


def scripted_trace(tmp: Path, rounds: int, name: str = "t", *, needle_in: int = 2, payload_in: int = 3) -> Path:
    """A real run (the CLI, a scripted model): ``rounds - 1`` rounds each reading one file, then
    an answer. File ``needle_in`` holds NEEDLE, file ``payload_in`` holds PAYLOAD."""
    ws = tmp / f"{name}-ws"
    ws.mkdir(exist_ok=True)
    entries: list[dict[str, Any]] = []
    for k in range(1, rounds):
        body = f"line {k}\n"
        if k == needle_in:
            body += f"the {NEEDLE} is here\n"
        if k == payload_in:
            body += PAYLOAD + "\n"
        (ws / f"f{k}.txt").write_text(body)
        entries.append({"type": "tool_call", "name": "Read", "input": {"file_path": f"f{k}.txt"}})
    entries.append({"type": "reply", "text": "done reading"})
    script = tmp / f"{name}-script.json"
    script.write_text(json.dumps(entries))
    trace = tmp / f"{name}.jsonl"
    argv = ["run", "read them", "--workspace", str(ws), "--scripted", str(script), "--trace", str(trace)]
    out = io.StringIO()
    assert main(argv, out=out) == 0, out.getvalue()
    return trace


SAFE = ToolTraits(concurrency_safe=True, max_result_chars=None)
BUDGETED = ToolTraits(concurrency_safe=True, max_result_chars=1_000)


def synthetic_trace(
    path: Path,
    rounds: int,
    *,
    gap_ms: int = 0,
    big_result_in: int | None = None,
    growing: bool = False,
    overrides: dict[str, Any] | None = None,
) -> Path:
    """A recorded session without the interpreter: ``rounds`` Read rounds, then an answer.
    Each round's events come ``gap_ms`` after the previous round's, its tool result at the
    next round's time (a long gap from the response to the result makes the time-based
    microcompact clear old results); round ``big_result_in`` returns a result over its tool's
    budget (the machine keeps a preview); ``growing``: call c reports 1,000·c input tokens, and
    a compaction is answered with a boundary and a short summary."""

    def usage(c: int) -> Usage:
        return Usage(input_tokens=1_000 * c if growing else 900, output_tokens=20)

    def at(call: int) -> int:
        return call * gap_ms

    def answer(effect: Effect, state: LoopState) -> Iterable[Event]:
        match effect:
            case CallModel(call_id=c) if c > rounds:
                return [
                    ModelBlockReceived(call_id=c, block=TextBlock(text="All read."), at_ms=at(c)),
                    ModelResponseEnded(call_id=c, model=effect.model, stop_reason="end_turn", usage=usage(c), at_ms=at(c)),
                ]
            case CallModel(call_id=c):
                traits = BUDGETED if c == big_result_in else SAFE
                use = ToolUseBlock(id=f"t{c}", name="Read", input={"file_path": f"f{c}.py"})
                return [
                    ModelBlockReceived(call_id=c, block=TextBlock(text=f"Reading file {c}."), at_ms=at(c)),
                    ModelBlockReceived(call_id=c, block=use, tool=traits, at_ms=at(c)),
                    ModelResponseEnded(call_id=c, model=effect.model, stop_reason="tool_use", usage=usage(c), at_ms=at(c)),
                ]
            case AskPermission(generation=g, tool_use_id=t):
                return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow", at_ms=at(g))]
            case StartTool(generation=g, tool_use_id=t):
                content = "y" * 5_000 if g == big_result_in else f"x = {g}\n" * 40
                return [ToolFinished(generation=g, tool_use_id=t, content=content, at_ms=at(g + 1))]
            case RunStopHooks(hooks_id=h):
                return [StopHooksFinished(hooks_id=h, at_ms=at(rounds + 1))]
            case Compact(compact_id=k):
                boundary = SystemMessage(id=f"c{k}-boundary", subtype="compact_boundary", text="Conversation compacted")
                summary = UserMessage(id=f"c{k}-summary", content=(TextBlock(text="Summary: files read."),), origin="compact_summary")
                return [CompactionFinished(compact_id=k, messages=(boundary, summary))]
        return []

    record_driver(
        path,
        default(**(overrides or {})),
        Request(prompt="Read every file."),
        answer,
        provenance={"created_at": "synthetic", "client": None},
    )
    return path


def materialize(reqs: Sequence[dict[str, Any]]) -> Iterator[list[int]]:
    """The page's request runs, rebuilt (as app's ``Trace.conv``): each request's messages."""
    prev: list[int] = []
    for q in reqs:
        cur: list[int] = []
        for run in q["runs"]:
            if run[0] == 0:
                cur.extend(prev[run[1] : run[2]])
            else:
                cur.extend(run[1:])
        yield cur
        prev = cur


def real_requests(path: Path) -> list[list[str]]:
    """The ids of the messages of every model request, as a replay computes them."""
    out: list[list[str]] = []
    walk = Walk(TraceReader(path))
    for rec in walk:
        if isinstance(rec, StepRecord):
            for e in walk.effects:
                if isinstance(e, CallModel):
                    out.append([m.id for m in e.conversation.messages()])
    return out
