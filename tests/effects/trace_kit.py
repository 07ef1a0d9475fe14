"""Helpers shared by the trace tests (test_trace.py, test_trace_replays.py)."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped, unused-ignore]
import pytest

from steploop.effects.trace import (
    Answer,
    record_sequence,
)
from steploop.effects.trace_cli import main as cli_main
from steploop.reducer import (
    LoopConfig,
    LoopState,
    Request,
    default,
)
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
from steploop.reducer.messages import (
    SystemMessage,
    TextBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "malformed_traces"
SCHEMA = json.loads((ROOT / "specs" / "trace.schema.json").read_text(encoding="utf-8"))
SAFE = ToolTraits(concurrency_safe=True)
FIXED = {"created_at": "2026-01-01T00:00:00Z", "client": "test"}
MODEL = "claude-sonnet-4-5"


# ---------------------------------------------------------------------------------------------
# Helpers


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_schema_valid(path: Path) -> None:
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for n, obj in enumerate(records(path), 1):
        errors = list(validator.iter_errors(obj))
        assert not errors, f"line {n}: {errors[0].message}"


def ended(call_id: int, stop: str = "end_turn", inp: int = 100, out: int = 10) -> Event:
    return ModelResponseEnded(
        call_id=call_id,
        model=MODEL,
        stop_reason=stop,
        usage=Usage(input_tokens=inp, output_tokens=out),
    )


def text(call_id: int, words: str) -> Event:
    return ModelBlockReceived(call_id=call_id, block=TextBlock(text=words))


def read_call(call_id: int, tid: str, path: str = "a.py") -> Event:
    block = ToolUseBlock(id=tid, name="Read", input={"file_path": path})
    return ModelBlockReceived(call_id=call_id, block=block, tool=SAFE)


def tool_round_events() -> list[Event]:
    """A Read round (text, tool_use, end, permission, result), then an answer and passing hooks."""
    return [
        text(1, "Let me read it."),
        read_call(1, "toolu_1"),
        ended(1, "tool_use"),
        PermissionAnswered(generation=1, tool_use_id="toolu_1", decision="allow"),
        ToolFinished(generation=1, tool_use_id="toolu_1", content="print('hi')"),
        text(2, "It prints hi."),
        ended(2),
        StopHooksFinished(hooks_id=1),
    ]


def record_tool_round(path: Path, config: LoopConfig | None = None) -> Path:
    record_sequence(
        path,
        config or default(),
        Request(prompt="What does a.py print?"),
        tool_round_events(),
        provenance=FIXED,
    )
    return path


def summary(c: int, text_: str = "The story so far.") -> tuple[SystemMessage, UserMessage]:
    return (
        SystemMessage(id=f"c{c}-boundary", subtype="compact_boundary", text="compacted"),
        UserMessage(
            id=f"c{c}-summary",
            content=(TextBlock(text=text_),),
            is_meta=True,
            origin="compact_summary",
        ),
    )


def scripted_world(usage_in: tuple[int, ...] = (1_000, 8_000, 9_000, 9_500)) -> Answer:
    """An ``answer`` for record_driver: model call n asks for Read until the last usage value,
    then answers in text; permissions allowed, tools answer, compactions summarise, hooks pass."""

    def answer(effect: Effect, state: LoopState) -> Iterable[Event]:
        match effect:
            case CallModel(call_id=c):
                n = c - 1
                if n < len(usage_in) - 1:
                    return [read_call(c, f"toolu_{c}"), ended(c, "tool_use", usage_in[n])]
                return [text(c, "All read."), ended(c, inp=usage_in[-1])]
            case AskPermission(generation=g, tool_use_id=t):
                return [PermissionAnswered(generation=g, tool_use_id=t, decision="allow")]
            case StartTool(generation=g, tool_use_id=t):
                return [ToolFinished(generation=g, tool_use_id=t, content="x = 1")]
            case Compact(compact_id=c):
                return [CompactionFinished(compact_id=c, messages=summary(c))]
            case RunStopHooks(hooks_id=h):
                return [StopHooksFinished(hooks_id=h)]
        return []

    return answer


def cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    out = io.StringIO()
    code = cli_main(argv, out)
    err = capsys.readouterr().err
    return code, out.getvalue(), err


def rewrite(path: Path, step_i: int, fn: Any) -> None:
    """Apply ``fn`` to the JSON of step ``step_i`` of the trace at ``path``, in place."""
    lines = path.read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        obj = json.loads(line)
        if obj["record"] == "step" and obj["i"] == step_i:
            fn(obj)
            lines[n] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
