"""Outside data at the interpreter boundary (specs/ B-TEXT-1, B-MODEL-1, B-TOOL-1; issue #17):
duplicate tool_use ids, non-string tool content, lone surrogates and tool input beyond the
limits each end the run in a Terminal with every tool_use answered, recorded and replayable."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest

from steploop.effects import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, reply, response, tool_use
from steploop.effects.tools import ToolContext, ToolOutput, ToolRegistry, builtin_tools
from steploop.effects.trace import TraceRecorder, make_provenance, replay_exact
from steploop.reducer import Request
from steploop.reducer.effects import Compact
from steploop.reducer.events import CompactionFinished, ToolTraits
from steploop.reducer.messages import (
    AssistantMessage,
    Block,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserMessage,
)

SAFE = ToolTraits(concurrency_safe=True)


class Odd:
    """A tool returning whatever it was given, as content or as the whole output."""

    name = "Odd"
    description = "returns odd output"
    input_schema: Mapping[str, Any] = {"type": "object"}
    max_result_chars = None
    interrupt = "cancel"
    cancels_siblings_on_error = False

    def __init__(self, content: Any = "ok", **flags: Any) -> None:
        self.content = content
        self.flags = flags

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return ToolOutput(content=self.content, **self.flags)


def _pairs(messages: tuple[Message, ...]) -> tuple[list[str], list[str]]:
    uses = [
        b.id
        for m in messages
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    ]
    results = [
        b.tool_use_id
        for m in messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]
    return uses, results


def _results(messages: tuple[Message, ...]) -> list[ToolResultBlock]:
    return [
        b
        for m in messages
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, ToolResultBlock)
    ]


async def _run(
    tmp_path: Path,
    script: list[Any],
    tools: list[Any],
    prompt: str = "go",
    **kwargs: Any,
) -> Any:
    """Run with a trace and a transcript; check the invariants every case shares."""
    registry = ToolRegistry(tools)
    model = ScriptedModel(script, traits_for=lambda _n, _i: SAFE)
    trace = tmp_path / "run.jsonl"
    transcript = tmp_path / "transcript.jsonl"
    with TraceRecorder(trace, provenance=make_provenance(model=model)) as rec:
        r = rec.attach(
            run(
                prompt,
                model=model,
                tools=registry,
                workspace=tmp_path,
                observer=rec,
                permissions=PermissionPolicy(default="allow"),
                transcript_path=transcript,
                **kwargs,
            )
        )
        with anyio.fail_after(10):
            async with r:
                async for _ in r:
                    pass
    res = r.result
    assert res is not None
    uses, results = _pairs(res.state.conversation.messages())
    assert sorted(uses) == sorted(results), "every tool_use answered, once"
    assert replay_exact(trace).ok
    for line in transcript.read_bytes().splitlines():
        json.loads(line.decode("utf-8"))  # valid UTF-8 JSON, every line
    return res


# --- B-MODEL-1: duplicate ids, input beyond the limits ----------------------------------------


def _deep(n: int) -> dict[str, Any]:
    v: dict[str, Any] = {}
    for _ in range(n - 1):
        v = {"a": v}
    return v


@pytest.mark.anyio
@pytest.mark.spec("B-MODEL-1", "T-MODEL-1")
async def test_duplicate_tool_use_ids_end_in_model_error(tmp_path: Path) -> None:
    """Two tool_use blocks with one id: the run raised IllegalEvent and died without Finish."""
    script = [
        response(
            tool_use("Odd", {}, "toolu_1"), tool_use("Odd", {}, "toolu_1"), stop_reason="tool_use"
        ),
        reply("unused"),
    ]
    res = await _run(tmp_path, script, [Odd()])
    assert res.terminal.TAG == "model_error"
    assert "tool_use id 'toolu_1' appears twice in one response" in res.terminal.error.message


_REUSED = "tool_use id 'toolu_1' is already used by an earlier message of the conversation"


@pytest.mark.anyio
@pytest.mark.spec("B-MODEL-2", "T-MODEL-1")
async def test_a_tool_use_id_of_an_earlier_round_ends_in_model_error(tmp_path: Path) -> None:
    """The second round reuses the first round's id: the run completed with the id twice in
    the conversation (a conversation the API refuses: tool_result pairing is by id)."""
    script = [
        response(tool_use("Odd", {}, "toolu_1"), stop_reason="tool_use"),
        response(TextBlock(text="again"), tool_use("Odd", {}, "toolu_1"), stop_reason="tool_use"),
        reply("unused"),
    ]
    res = await _run(tmp_path, script, [Odd()])
    assert res.terminal.TAG == "model_error"
    assert _REUSED in res.terminal.error.message
    uses, _ = _pairs(res.state.conversation.messages())
    assert uses == ["toolu_1"]


@pytest.mark.anyio
@pytest.mark.spec("B-MODEL-2")
async def test_a_tool_use_id_of_an_earlier_turn_ends_in_model_error(tmp_path: Path) -> None:
    """The next turn of a session sends the whole conversation: an id of the first turn is as
    taken as one of this turn. Control: a fresh id in the same place runs."""
    for sub in ("a", "toolu_1", "toolu_2"):
        (tmp_path / sub).mkdir()
    first = await _run(
        tmp_path / "a",
        [response(tool_use("Odd", {}, "toolu_1"), stop_reason="tool_use"), reply("one")],
        [Odd()],
    )
    assert first.terminal.TAG == "completed"
    session = first.state.session()
    for tid, terminal in (("toolu_1", "model_error"), ("toolu_2", "completed")):
        script = [response(tool_use("Odd", {}, tid), stop_reason="tool_use"), reply("two")]
        res = await _run(tmp_path / tid, script, [Odd()], prompt="again", session=session)
        assert res.terminal.TAG == terminal, tid
        if terminal == "model_error":
            assert _REUSED in res.terminal.error.message


@pytest.mark.spec("B-MODEL-2")
def test_the_id_index_reads_only_new_messages_and_restarts_on_a_new_history() -> None:
    """Unit: appended messages extend the index; a conversation that does not extend the last
    one read (after a compaction) is read whole, so a dropped id is free again."""
    from steploop.effects.boundary import ToolUseIds
    from steploop.reducer.conversation import Conversation

    def said(*ids: str) -> AssistantMessage:
        blocks = tuple(tool_use("Odd", {}, i) for i in ids)
        return AssistantMessage(id="m", response_id="r", model="m", content=blocks)

    index = ToolUseIds()
    c1 = Conversation.of([UserMessage(id="u", content=(TextBlock(text="go"),)), said("a", "b")])
    assert index.of(c1) == {"a", "b"}
    c2 = c1.append(said("c"))
    assert index.of(c2) == {"a", "b", "c"}
    compacted = Conversation.of([UserMessage(id="s", content=(TextBlock(text="summary"),))])
    assert index.of(compacted.append(said("d"))) == {"d"}
    assert index.response(c1).earlier() == {"a", "b"}


@pytest.mark.anyio
@pytest.mark.spec("B-MODEL-1")
@pytest.mark.parametrize(
    ("tool_input", "why"),
    [
        pytest.param(_deep(101), "nested deeper than 100 levels", id="depth-101"),
        pytest.param(_deep(500), "nested deeper than 100 levels", id="depth-500"),
        pytest.param(_deep(990), "nested deeper than 100 levels", id="depth-990"),
        pytest.param({"n": 10**5_000}, "more than 100 digits", id="huge-int"),
        pytest.param({"x": math.nan}, "nan, which JSON cannot carry", id="nan"),
        pytest.param({"x": [math.inf]}, "inf, which JSON cannot carry", id="inf"),
        pytest.param({"x": {1: "a"}}, "key that is not a string", id="int-key"),
        pytest.param({"x": {1, 2}}, "a set, which is not JSON data", id="set"),
        pytest.param({"x": b"raw"}, "a bytes, which is not JSON data", id="bytes"),
    ],
)
async def test_tool_input_beyond_the_limits_ends_in_model_error(
    tmp_path: Path, tool_input: dict[str, Any], why: str
) -> None:
    """Input nested 500-990 levels broke the state digest (RecursionError), a 5,000-digit
    integer or NaN the trace; now the call fails as malformed (T-MODEL-1)."""
    script = [response(tool_use("Odd", tool_input, "toolu_1"), stop_reason="tool_use")]
    res = await _run(tmp_path, script, [Odd()])
    assert res.terminal.TAG == "model_error"
    assert why in res.terminal.error.message


@pytest.mark.anyio
@pytest.mark.spec("B-MODEL-1")
async def test_input_at_the_limits_runs(tmp_path: Path) -> None:
    """Control: 100 levels and a 100-digit integer are within the limits."""
    script = [
        response(
            tool_use("Odd", {"d": _deep(99), "n": 10**100 - 1, "f": 1.5}, "toolu_1"),
            stop_reason="tool_use",
        ),
        reply("done"),
    ]
    res = await _run(tmp_path, script, [Odd()])
    assert res.terminal.TAG == "completed"


# --- B-TOOL-1: tool output that is not text -------------------------------------------------


@pytest.mark.anyio
@pytest.mark.spec("B-TOOL-1", "G13")
@pytest.mark.parametrize(
    ("content", "flags", "why"),
    [
        pytest.param(None, {}, "content is NoneType None, not a str", id="none"),
        pytest.param(42, {}, "content is int 42, not a str", id="int"),
        pytest.param(b"abc", {}, "content is bytes b'abc', not a str", id="bytes"),
        pytest.param(["a"], {}, "content is list ['a'], not a str", id="list"),
        pytest.param("x", {"is_error": "yes"}, "must be bools, got 'yes'", id="is-error-str"),
        pytest.param("x", {"hook_stopped": 1}, "must be bools, got False and 1", id="hook-int"),
    ],
)
async def test_non_text_tool_output_is_an_error_result(
    tmp_path: Path, content: Any, flags: dict[str, Any], why: str
) -> None:
    """None, an int or bytes as content crashed step() and left the tool_use unanswered."""
    script = [response(tool_use("Odd", {}, "toolu_1"), stop_reason="tool_use"), reply("done")]
    res = await _run(tmp_path, script, [Odd(content, **flags)])
    assert res.terminal.TAG == "completed"
    (result,) = _results(res.state.conversation.messages())
    assert result.is_error and why in result.content, result.content


# --- B-TEXT-1: lone surrogates -------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.spec("B-TEXT-1")
async def test_undecodable_file_name_from_glob(tmp_path: Path) -> None:
    """A file named ``bad\\xff.txt`` found by Glob crashed the recorder and the transcript."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(os.fsencode(ws) + b"/bad\xff.txt", os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
    script = [
        response(tool_use("Glob", {"pattern": "*"}, "toolu_1"), stop_reason="tool_use"),
        reply("done"),
    ]
    tools = [t for t in builtin_tools(ws) if t.name == "Glob"]
    res = await _run(tmp_path, script, tools)
    assert res.terminal.TAG == "completed"
    (result,) = _results(res.state.conversation.messages())
    assert result.content == "bad\\xff.txt" and not result.is_error  # E-CONFINE-4


@pytest.mark.anyio
@pytest.mark.spec("B-TEXT-1")
async def test_surrogates_in_model_output_tool_result_and_prompt(tmp_path: Path) -> None:
    """Model text, thinking, tool input (keys and values), a tool result and the prompt."""
    blocks: list[Block] = [
        ThinkingBlock(thinking="hmm \udcff", signature="sig"),
        TextBlock(text="look \ud800 here"),
        tool_use("Odd", {"p\udfff": ["v\ud801", {"k": "\udc00"}]}, "toolu_1"),
    ]
    script = [response(*blocks, stop_reason="tool_use"), reply("done \udbff")]
    res = await _run(tmp_path, script, [Odd("out \udcfe")], prompt="go \udcff")
    assert res.terminal.TAG == "completed"
    text = json.dumps([repr(m) for m in res.state.conversation.messages()], ensure_ascii=False)
    assert "\ufffd" in text
    for m in res.state.conversation.messages():
        repr(m).encode("utf-8")  # no surrogate left anywhere in the conversation
    use = next(
        b
        for m in res.state.conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    )
    assert use.input == {"p\ufffd": ["v\ufffd", {"k": "\ufffd"}]}


class SurrogateCompactor:
    """Returns a summary holding a lone surrogate (or a tool input beyond the limits)."""

    def __init__(self, deep: bool = False) -> None:
        self.deep = deep

    async def compact(self, effect: Compact) -> CompactionFinished:
        content: tuple[Any, ...] = (TextBlock(text="summary \udcff"),)
        msgs: tuple[Message, ...] = (UserMessage(id="c1", content=content, is_meta=True),)
        if self.deep:
            use = ToolUseBlock(id="x", name="Odd", input=_deep(2_000))
            msgs = (*msgs, AssistantMessage(id="c2", response_id="r", model="m", content=(use,)))
        return CompactionFinished(compact_id=effect.compact_id, messages=msgs)


@pytest.mark.anyio
@pytest.mark.spec("B-TEXT-1", "B-MODEL-1")
@pytest.mark.parametrize("deep", [False, True], ids=["surrogate", "deep-input"])
async def test_compaction_result_is_cleaned_or_refused(tmp_path: Path, deep: bool) -> None:
    """A compactor's summary with a surrogate is cleaned; one with an over-deep tool input is a
    failed compaction (the breaker counts it), never a crash."""
    from steploop.reducer import default

    cfg = default().with_overrides(
        {"context_window": 50_000, "gates.history_snip": False, "gates.context_collapse": False}
    )
    big = Usage(input_tokens=30_000, output_tokens=10)
    script = [
        response(tool_use("Odd", {}, "toolu_1"), stop_reason="tool_use", usage=big),
        reply("done"),
    ]
    res = await _run(tmp_path, script, [Odd()], config=cfg, compactor=SurrogateCompactor(deep))
    assert res.terminal.TAG == "completed"
    texts = [
        b.text
        for m in res.state.conversation.messages()
        if isinstance(m, UserMessage)
        for b in m.content
        if isinstance(b, TextBlock)
    ]
    if deep:
        assert res.state.tracking.consecutive_failures == 1
    else:
        assert "summary \ufffd" in texts


@pytest.mark.spec("B-TEXT-1")
def test_writers_take_a_surrogate_that_bypassed_the_boundary(tmp_path: Path) -> None:
    """A pure driver can feed a surrogate straight to step(): the trace recorder and the
    transcript writer write it as an escape (valid UTF-8 JSON), and the trace replays exactly."""
    from steploop.effects.trace import record_sequence
    from steploop.effects.transcript import TranscriptWriter
    from steploop.reducer import default
    from steploop.reducer.events import (
        Event,
        ModelBlockReceived,
        ModelResponseEnded,
        PermissionAnswered,
        ToolFinished,
    )

    cfg = default()
    events: list[Event] = [
        ModelBlockReceived(call_id=1, block=TextBlock(text="a\ud800"), tool=None),
        ModelBlockReceived(
            call_id=1, block=ToolUseBlock(id="t1", name="Odd", input={"k\udcff": 1}), tool=SAFE
        ),
        PermissionAnswered(generation=1, tool_use_id="t1", decision="allow"),
        ModelResponseEnded(call_id=1, model=cfg.model, stop_reason="tool_use", usage=Usage()),
        ToolFinished(generation=1, tool_use_id="t1", content="bad\udcff.txt"),
    ]
    trace = tmp_path / "pure.jsonl"
    state, _ = record_sequence(trace, cfg, Request(prompt="go\udcff"), events)
    assert replay_exact(trace).ok
    trace.read_bytes().decode("utf-8")
    writer = TranscriptWriter(tmp_path / "t.jsonl", session_id="s", cwd="/", version="x")
    for m in state.conversation.messages():
        writer.append(m)
    writer.close()
    lines = (tmp_path / "t.jsonl").read_bytes().decode("utf-8").splitlines()
    assert len(lines) == len(state.conversation.messages())
    assert "bad\\udcff.txt" in lines[-1]
    assert "bad\udcff.txt" in json.dumps(json.loads(lines[-1]), ensure_ascii=False)
