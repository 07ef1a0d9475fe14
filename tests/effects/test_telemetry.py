"""OpenTelemetry spans (steploop/effects/telemetry.py, specs/ E-OTEL-*), checked with the SDK's
in-memory exporter: names, parent/child links, gen_ai.usage.*, one span per tool call, the
spans of a replay equal to the live run's, a sub-agent's turn under its call, nothing when off."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from steploop.effects import PermissionPolicy, run
from steploop.effects.scripted import ScriptedModel, failure, reply, response, tool_call, tool_use
from steploop.effects.subagent import AgentDefinition, AgentTool
from steploop.effects.telemetry import Telemetry, TelemetryError, spans_of_trace
from steploop.effects.tools import ToolRegistry, builtin_tools
from steploop.effects.trace import TraceRecorder, make_provenance
from steploop.reducer.messages import Usage


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, Telemetry]]:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    yield memory, Telemetry(provider)
    provider.shutdown()


U1 = Usage(input_tokens=120, output_tokens=30, cache_read_input_tokens=7, cache_creation_input_tokens=3)
U2 = Usage(input_tokens=200, output_tokens=12)


def _script() -> list[Any]:
    return [
        response(
            tool_use("Read", {"file_path": "a.txt"}, id="t1"),
            tool_use("Glob", {"pattern": "*.txt"}, id="t2"),
            stop_reason="tool_use",
            usage=U1,
        ),
        reply("two files", usage=U2),
    ]


async def _turn(ws: Path, telemetry: Telemetry | None, trace: Path | None = None, script: list[Any] | None = None) -> Any:
    (ws / "a.txt").write_text("hello\n")
    tools = ToolRegistry(builtin_tools(ws))
    model = ScriptedModel(script or _script(), traits_for=tools.traits)
    rec = TraceRecorder(trace, provenance=make_provenance(model=model)) if trace is not None else None
    clock = iter(range(1_000, 100_000, 10))
    r = run(
        "look",
        model=model,
        tools=tools,
        workspace=ws,
        permissions=PermissionPolicy(default="allow"),
        telemetry=telemetry,
        observer=rec,
        session_id="s-1",
        clock_ms=lambda: next(clock),
    )
    if rec is not None:
        rec.attach(r)
    async with r:
        async for _ in r:
            pass
    if rec is not None:
        rec.close()
    return r.result


def _by_name(spans: Any) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


@pytest.mark.spec("E-OTEL-1")
@pytest.mark.anyio
async def test_spans_of_a_turn_follow_the_genai_conventions(tmp_path: Path, exporter: Any) -> None:
    """A turn span, a chat span per model call with gen_ai.* and usage, one execute_tool span
    per call, all children of the turn; transitions are events of the turn."""
    memory, telemetry = exporter
    res = await _turn(tmp_path, telemetry)
    assert res.terminal.TAG == "completed"
    spans = memory.get_finished_spans()
    names = _by_name(spans)
    assert sorted(names) == [
        "chat claude-sonnet-4-5",
        "execute_tool Glob",
        "execute_tool Read",
        "invoke_agent steploop",
        "steploop.stop_hooks",
    ]
    (turn,) = names["invoke_agent steploop"]
    assert turn.parent is None and turn.kind == SpanKind.INTERNAL
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.conversation.id"] == "s-1"
    assert turn.attributes["steploop.terminal"] == "completed"
    assert [e.attributes["steploop.transition"] for e in turn.events] == ["next_turn", "completed"]
    chats = names["chat claude-sonnet-4-5"]
    assert len(chats) == 2 and all(c.kind == SpanKind.CLIENT for c in chats)
    first, second = sorted(chats, key=lambda s: s.attributes["steploop.call_id"])
    assert first.attributes["gen_ai.usage.input_tokens"] == 120
    assert first.attributes["gen_ai.usage.output_tokens"] == 30
    assert first.attributes["gen_ai.usage.cache_read.input_tokens"] == 7
    assert first.attributes["gen_ai.usage.cache_creation.input_tokens"] == 3
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert second.attributes["gen_ai.usage.input_tokens"] == 200
    assert first.attributes["gen_ai.request.model"] == "claude-sonnet-4-5"
    assert first.attributes["gen_ai.provider.name"] == "anthropic"
    tools = names["execute_tool Read"] + names["execute_tool Glob"]
    assert len(tools) == 2
    assert {t.attributes["gen_ai.tool.call.id"] for t in tools} == {"t1", "t2"}
    (hooks,) = names["steploop.stop_hooks"]
    assert hooks.attributes["steploop.hook.event"] == "Stop"
    for span in [*chats, *tools, hooks]:
        assert span.parent is not None and span.parent.span_id == turn.context.span_id
        assert span.context.trace_id == turn.context.trace_id
        assert turn.start_time <= span.start_time <= span.end_time <= turn.end_time
    assert all(t.status.status_code == StatusCode.UNSET for t in tools)


@pytest.mark.spec("E-OTEL-1")
@pytest.mark.anyio
async def test_failures_set_the_error_status(tmp_path: Path, exporter: Any) -> None:
    """A tool error and a model error end their spans in ERROR with error.type; the turn too."""
    memory, telemetry = exporter
    script = [tool_call("Read", {"file_path": "missing.txt"}, id="t1"), failure("unknown", message="boom")]
    res = await _turn(tmp_path, telemetry, script=script)
    assert res.terminal.TAG == "model_error"
    names = _by_name(memory.get_finished_spans())
    (tool,) = names["execute_tool Read"]
    assert tool.status.status_code == StatusCode.ERROR and tool.attributes["error.type"] == "tool_error"
    failed = [c for c in names["chat claude-sonnet-4-5"] if c.status.status_code == StatusCode.ERROR]
    assert len(failed) == 1 and failed[0].attributes["error.type"] == "unknown"
    (turn,) = names["invoke_agent steploop"]
    assert turn.status.status_code == StatusCode.ERROR and turn.attributes["error.type"] == "model_error"


@pytest.mark.spec("E-OTEL-2")
@pytest.mark.anyio
async def test_nothing_when_telemetry_is_off(tmp_path: Path, exporter: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without telemetry= no span is made, even with a global provider set; from_env is off by default."""
    from opentelemetry import trace

    memory, telemetry = exporter
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: telemetry.provider)
    await _turn(tmp_path, None)
    assert memory.get_finished_spans() == ()
    for env in ({}, {"OTEL_TRACES_EXPORTER": "none"}, {"OTEL_TRACES_EXPORTER": "console", "OTEL_SDK_DISABLED": "true"}):
        assert Telemetry.from_env(env) is None
    console = Telemetry.from_env({"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "svc"})
    assert console is not None and console.provider.resource.attributes["service.name"] == "svc"
    console.shutdown()
    with pytest.raises(TelemetryError, match="unknown exporter 'zipkin'"):
        Telemetry.from_env({"OTEL_TRACES_EXPORTER": "zipkin"})


@pytest.mark.spec("E-OTEL-2")
def test_otlp_exporter_when_installed() -> None:
    """OTEL_TRACES_EXPORTER=otlp builds the OTLP exporter, or says how to install it."""
    import importlib.util

    exporter = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
    try:
        found = importlib.util.find_spec(exporter)
    except ModuleNotFoundError:
        found = None
    if found is None:
        with pytest.raises(TelemetryError, match="opentelemetry-exporter-otlp"):
            Telemetry.from_env({"OTEL_TRACES_EXPORTER": "otlp"})
        return
    made = Telemetry.from_env({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"})
    assert made is not None
    made.shutdown()


def _shape(spans: Any) -> list[tuple[Any, ...]]:
    """Spans without their random ids: name, kind, times, attributes, events, parent's name."""
    by_id = {s.context.span_id: s.name for s in spans}
    return sorted(
        (
            s.name,
            s.kind,
            s.start_time,
            s.end_time,
            tuple(sorted((k, str(v)) for k, v in s.attributes.items() if k != "gen_ai.conversation.id")),
            tuple((e.name, tuple(sorted(e.attributes.items()))) for e in s.events),
            by_id.get(s.parent.span_id) if s.parent is not None else None,
        )
        for s in spans
    )


@pytest.mark.spec("E-OTEL-3")
@pytest.mark.anyio
async def test_a_replay_gives_the_live_runs_spans(tmp_path: Path, exporter: Any) -> None:
    """The spans read off a recorded trace equal those of the live run (times are the events')."""
    memory, telemetry = exporter
    trace = tmp_path / "t.jsonl"
    await _turn(tmp_path, telemetry, trace)
    live = _shape(memory.get_finished_spans())
    memory.clear()
    assert spans_of_trace(trace, telemetry) > 0
    assert _shape(memory.get_finished_spans()) == live


@pytest.mark.spec("E-OTEL-1", "E-AGENT-3")
@pytest.mark.anyio
async def test_a_subagents_turn_is_a_child_of_its_agent_call(tmp_path: Path, exporter: Any) -> None:
    """The child's invoke_agent span is under the parent's execute_tool Agent span, same trace."""
    memory, telemetry = exporter
    agents = AgentTool(
        [AgentDefinition(model=lambda call: ScriptedModel([reply("sub done")], traits_for=ToolRegistry([]).traits))]
    )
    tools = ToolRegistry([agents])
    model = ScriptedModel(
        [tool_call("Agent", {"description": "d", "prompt": "p"}, id="ag"), reply("ok")], traits_for=tools.traits
    )
    r = run("go", model=model, tools=tools, workspace=tmp_path, telemetry=telemetry,
            permissions=PermissionPolicy(default="allow"))
    async with r:
        async for _ in r:
            pass
    spans = memory.get_finished_spans()
    turns = [s for s in spans if s.name == "invoke_agent steploop"]
    (agent_call,) = [s for s in spans if s.name == "execute_tool Agent"]
    (child,) = [t for t in turns if "gen_ai.agent.id" in t.attributes]
    (parent,) = [t for t in turns if "gen_ai.agent.id" not in t.attributes]
    assert child.parent is not None and child.parent.span_id == agent_call.context.span_id
    assert agent_call.parent is not None and agent_call.parent.span_id == parent.context.span_id
    assert child.context.trace_id == parent.context.trace_id
    assert child.attributes["steploop.query_source"] == "agent:builtin:general-purpose"


@pytest.mark.spec("E-OTEL-1")
def test_compaction_and_cancelled_spans(exporter: Any) -> None:
    """A compaction is a steploop.compact span; a cancelled call ends its span as cancelled."""
    from steploop.reducer import default
    from steploop.reducer.conversation import Conversation
    from steploop.reducer.effects import CallModel, CancelModelCall, Compact, Finish
    from steploop.reducer.events import CompactionFinished, Interrupted
    from steploop.reducer.transitions import AbortedStreaming

    memory, telemetry = exporter
    spans = telemetry.turn(session_id="s", config=default(), start_ms=5)
    conv = Conversation.empty()
    spans.step(None, (Compact(compact_id=1, conversation=conv, trigger="auto", pre_tokens=170_000),), ())
    spans.step(
        CompactionFinished(compact_id=1, messages=(), at_ms=9),
        (CallModel(call_id=1, model="m", conversation=conv, max_tokens=100),),
        (),
    )
    spans.step(Interrupted(at_ms=12), (CancelModelCall(call_id=1), Finish(terminal=AbortedStreaming())), (AbortedStreaming(),))
    names = _by_name(memory.get_finished_spans())
    (compact,) = names["steploop.compact"]
    assert compact.attributes["steploop.compact.trigger"] == "auto" and compact.status.status_code == StatusCode.UNSET
    assert (compact.start_time, compact.end_time) == (5_000_000, 9_000_000)
    (chat,) = names["chat m"]
    assert chat.attributes["error.type"] == "cancelled" and chat.end_time == 12_000_000
    (turn,) = names["invoke_agent steploop"]
    assert turn.attributes["steploop.terminal"] == "aborted_streaming"
