"""OpenTelemetry spans of runs, after the GenAI semantic conventions (specs/ E-OTEL-1 ... 3).

Off unless asked for: ``run(..., telemetry=Telemetry(...))`` in Python, or, for the command
line (and :meth:`Telemetry.from_env`), the standard ``OTEL_TRACES_EXPORTER`` set to ``otlp``
or ``console`` (``OTEL_SDK_DISABLED=true`` turns it off again). It needs the
``opentelemetry-sdk`` (``pip install 'steploop[otel]'``); OTLP export needs
``opentelemetry-exporter-otlp`` and reads the standard ``OTEL_EXPORTER_OTLP_*`` variables,
``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES``.

The spans are read off the steps (the same observer place a trace recorder has), so they say
what the machine did, in its own times (``at_ms`` of the events): a live run and the replay of
its trace (:func:`spans_of_trace`) give the same spans.

=========================================  ==========  =========================================
span                                        kind        from ... to
=========================================  ==========  =========================================
``invoke_agent steploop`` (the turn)        INTERNAL    ``start()`` ... ``Finish``
``chat <model>`` (a model call)             CLIENT      ``CallModel`` ... its end, failure or cancel
``execute_tool <name>`` (one per call)      INTERNAL    ``StartTool`` ... ``ToolFinished`` or cancel
``steploop.compact``                        INTERNAL    ``Compact`` ... its result or cancel
``steploop.stop_hooks``                     INTERNAL    ``RunStopHooks`` ... its result or cancel
=========================================  ==========  =========================================

Every span but the turn is the turn's child; the turn is the child of the context current when
the run was entered (a sub-agent's turn: of the parent's ``execute_tool Agent`` span). A model
call carries ``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.request.max_tokens``, ``gen_ai.response.model``, ``gen_ai.response.finish_reasons``
and ``gen_ai.usage.*``; a tool call ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` and
``gen_ai.tool.type``; the turn ``gen_ai.agent.name``, ``gen_ai.conversation.id`` and, at its
end, ``steploop.terminal``. Each Continue and Terminal is an event ``steploop.transition`` of
the turn span. A failure sets the span's status to ERROR with ``error.type``. Message content
is never recorded.

Nothing here is imported by ``steploop/reducer``.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from steploop.effects.trace.provenance import steploop_version
from steploop.reducer import LoopConfig
from steploop.reducer.effects import (
    CallModel,
    CancelCompaction,
    CancelModelCall,
    CancelStopHooks,
    CancelTools,
    Compact,
    Effect,
    Finish,
    RunStopHooks,
    StartTool,
)
from steploop.reducer.errors import SteploopError
from steploop.reducer.events import (
    CompactionFailed,
    CompactionFinished,
    Event,
    ModelCallFailed,
    ModelResponseEnded,
    StopHooksFinished,
    ToolFinished,
)
from steploop.reducer.transitions import Transition

__all__ = ["Telemetry", "TelemetryError", "TurnSpans", "spans_of_trace"]

_PROVIDER = "anthropic"
_ERROR_TERMINALS = frozenset({"model_error"})


class TelemetryError(SteploopError):
    """Telemetry was asked for and cannot be set up (the SDK or an exporter is missing)."""


def _ns(at_ms: int) -> int:
    return at_ms * 1_000_000


class Telemetry:
    """Where spans go: a tracer provider (the SDK's, or any OpenTelemetry provider).

    Args:
        tracer_provider: the provider (None: the global one, ``trace.get_tracer_provider()``).
        agent_name: ``gen_ai.agent.name`` of the turn spans.
    """

    def __init__(self, tracer_provider: Any = None, *, agent_name: str = "steploop") -> None:
        try:
            from opentelemetry import trace
        except ImportError:  # pragma: no cover - the API comes with the SDK extra
            raise TelemetryError("telemetry needs opentelemetry: pip install 'steploop[otel]'") from None
        provider: Any = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self.provider = provider
        self.tracer = provider.get_tracer("steploop", steploop_version())
        self.agent_name = agent_name
        self._owned = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Telemetry | None:
        """Telemetry as the standard variables ask for it, or None (the default: off).

        ``OTEL_TRACES_EXPORTER``: ``otlp`` (OTLP over ``OTEL_EXPORTER_OTLP_PROTOCOL``,
        ``http/protobuf`` by default, or ``grpc``) or ``console`` (JSON on stderr); unset or
        ``none``: off. ``OTEL_SDK_DISABLED=true``: off.

        Raises:
            TelemetryError: the SDK or the exporter asked for is not installed, or the exporter
                is not one of these.
        """
        env = os.environ if environ is None else environ
        if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()]
        names = [n for n in names if n != "none"]
        if not names:
            return None
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
        except ImportError:
            raise TelemetryError(
                "OTEL_TRACES_EXPORTER is set but the OpenTelemetry SDK is not installed: "
                "pip install 'steploop[otel]'"
            ) from None
        service = env.get("OTEL_SERVICE_NAME") or "steploop"
        provider = TracerProvider(resource=Resource.create({"service.name": service}))
        for name in names:
            if name == "console":
                exporter: Any = ConsoleSpanExporter(out=sys.stderr)
            elif name == "otlp":
                exporter = _otlp_exporter(env)
            else:
                raise TelemetryError(
                    f"OTEL_TRACES_EXPORTER: unknown exporter {name!r}; steploop knows otlp, "
                    "console and none"
                )
            provider.add_span_processor(BatchSpanProcessor(exporter))
        telemetry = cls(provider)
        telemetry._owned = True
        return telemetry

    def shutdown(self) -> None:
        """Flush and stop a provider :meth:`from_env` made (a given one is the caller's)."""
        if self._owned:
            self.provider.shutdown()

    def turn(
        self,
        *,
        session_id: str,
        config: LoopConfig,
        start_ms: int,
        parent: Any = None,
    ) -> TurnSpans:
        """The spans of one user turn; ``parent``: an OpenTelemetry ``Context`` (None: the
        current one)."""
        return TurnSpans(self, session_id=session_id, config=config, start_ms=start_ms, parent=parent)


def _otlp_exporter(env: Mapping[str, str]) -> Any:
    protocol = (
        env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or env.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    )
    kind = "grpc" if protocol == "grpc" else "http"
    try:
        module = importlib.import_module(f"opentelemetry.exporter.otlp.proto.{kind}.trace_exporter")
    except ImportError:
        raise TelemetryError(
            "OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: pip install "
            "opentelemetry-exporter-otlp"
        ) from None
    return module.OTLPSpanExporter()


class TurnSpans:
    """The spans of one user turn, opened and closed as its steps are observed."""

    def __init__(
        self,
        telemetry: Telemetry,
        *,
        session_id: str,
        config: LoopConfig,
        start_ms: int,
        parent: Any = None,
    ) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import SpanKind, Status, StatusCode

        self.telemetry = telemetry
        self._trace = trace
        self._kind = SpanKind
        self._status = Status
        self._code = StatusCode
        self._tracer = telemetry.tracer
        self._config = config
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": _PROVIDER,
            "gen_ai.agent.name": telemetry.agent_name,
            "gen_ai.conversation.id": session_id,
            "gen_ai.request.model": config.model,
            "steploop.profile": config.profile_name,
            "steploop.query_source": config.query_source,
        }
        if config.agent_id is not None:
            attributes["gen_ai.agent.id"] = config.agent_id
        self.turn = self._tracer.start_span(
            f"invoke_agent {telemetry.agent_name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(start_ms),
        )
        self._context = trace.set_span_in_context(self.turn)
        self._open: dict[tuple[Any, ...], Any] = {}  # the open spans, by request
        self._at_ms = start_ms

    def context_for(self, tool_use_id: str) -> Any:
        """The context of the running tool call ``tool_use_id`` (a sub-agent's parent)."""
        for key, span in self._open.items():
            if key[0] == "tool" and key[2] == tool_use_id:
                return self._trace.set_span_in_context(span)
        return self._context

    def enter_tool(self, tool_use_id: str) -> object:
        """Make the span of tool call ``tool_use_id`` the current context (what a sub-agent's
        turn span is opened under); give the token back to :meth:`leave_tool`."""
        from opentelemetry import context

        return context.attach(self.context_for(tool_use_id))

    def leave_tool(self, token: object) -> None:
        from opentelemetry import context

        if token is not None:
            context.detach(token)  # type: ignore[arg-type]

    # -- observing -------------------------------------------------------------------------

    def observe(
        self,
        event: Event | None,
        state: object,
        effects: tuple[Effect, ...],
        transitions: tuple[Transition, ...] = (),
    ) -> None:
        """A step observer (``run(observer=...)``'s shape, with the transitions)."""
        self.step(event, effects, transitions)

    def step(
        self, event: Event | None, effects: Sequence[Effect], transitions: Iterable[Transition]
    ) -> None:
        """One step: the event that ends a span, the effects that open or cancel spans, the
        transitions as events of the turn span."""
        if event is not None:
            self._at_ms = max(self._at_ms, event.at_ms)
            self._answered(event)
        for t in transitions:
            self.turn.add_event(
                "steploop.transition",
                {"steploop.transition": t.TAG, "steploop.kind": _kind_of(t)},
                timestamp=_ns(self._at_ms),
            )
        for effect in effects:
            self._effect(effect)

    def _start(self, key: tuple[Any, ...], name: str, kind: Any, attributes: dict[str, Any]) -> None:
        self._open[key] = self._tracer.start_span(
            name,
            context=self._context,
            kind=kind,
            attributes=attributes,
            start_time=_ns(self._at_ms),
        )

    def _end(
        self,
        key: tuple[Any, ...],
        error: str | None = None,
        attributes: dict[str, Any] | None = None,
    ) -> None:
        span = self._open.pop(key, None)
        if span is None:
            return
        for name, value in (attributes or {}).items():
            if value is not None:
                span.set_attribute(name, value)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(self._status(self._code.ERROR, error))
        span.end(end_time=_ns(self._at_ms))

    def _effect(self, effect: Effect) -> None:
        k = self._kind
        match effect:
            case CallModel():
                self._start(
                    ("call", effect.call_id),
                    f"chat {effect.model}",
                    k.CLIENT,
                    {
                        "gen_ai.operation.name": "chat",
                        "gen_ai.provider.name": _PROVIDER,
                        "gen_ai.request.model": effect.model,
                        "gen_ai.request.max_tokens": effect.max_tokens,
                        "steploop.call_id": effect.call_id,
                        "steploop.query_source": effect.query_source,
                    },
                )
            case StartTool():
                self._start(
                    ("tool", effect.generation, effect.tool_use_id),
                    f"execute_tool {effect.name}",
                    k.INTERNAL,
                    {
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": effect.name,
                        "gen_ai.tool.call.id": effect.tool_use_id,
                        "gen_ai.tool.type": "function",
                    },
                )
            case Compact():
                self._start(
                    ("compact", effect.compact_id),
                    "steploop.compact",
                    k.INTERNAL,
                    {"steploop.compact.trigger": effect.trigger, "steploop.compact.pre_tokens": effect.pre_tokens},
                )
            case RunStopHooks():
                self._start(
                    ("hooks", effect.hooks_id),
                    "steploop.stop_hooks",
                    k.INTERNAL,
                    {
                        "steploop.hook.event": "SubagentStop" if self._config.is_subagent else "Stop",
                        "steploop.stop_hook_active": effect.stop_hook_active,
                    },
                )
            case CancelModelCall():
                self._end(("call", effect.call_id), "cancelled")
            case CancelTools():
                for tid in effect.tool_use_ids:
                    self._end(("tool", effect.generation, tid), "cancelled")
            case CancelCompaction():
                self._end(("compact", effect.compact_id), "cancelled")
            case CancelStopHooks():
                self._end(("hooks", effect.hooks_id), "cancelled")
            case Finish(terminal=terminal):
                for key in list(self._open):
                    self._end(key, "turn_ended")
                self.turn.set_attribute("steploop.terminal", terminal.TAG)
                if terminal.TAG in _ERROR_TERMINALS:
                    self.turn.set_attribute("error.type", terminal.TAG)
                    self.turn.set_status(self._status(self._code.ERROR, terminal.TAG))
                self.turn.end(end_time=_ns(self._at_ms))
            case _:
                pass

    def _answered(self, event: Event) -> None:
        match event:
            case ModelResponseEnded(usage=u):
                self._end(
                    ("call", event.call_id),
                    None,
                    {
                        "gen_ai.response.model": event.model,
                        "gen_ai.response.finish_reasons": (event.stop_reason or "",),
                        "gen_ai.usage.input_tokens": u.input_tokens,
                        "gen_ai.usage.output_tokens": u.output_tokens,
                        "gen_ai.usage.cache_read.input_tokens": u.cache_read_input_tokens,
                        "gen_ai.usage.cache_creation.input_tokens": u.cache_creation_input_tokens,
                    },
                )
            case ModelCallFailed():
                self._end(("call", event.call_id), event.kind, {"steploop.failure": event.message[:200]})
            case ToolFinished():
                self._end(
                    ("tool", event.generation, event.tool_use_id),
                    "tool_error" if event.is_error else None,
                )
            case CompactionFinished():
                self._end(("compact", event.compact_id))
            case CompactionFailed():
                self._end(("compact", event.compact_id), "compaction_failed")
            case StopHooksFinished():
                self._end(
                    ("hooks", event.hooks_id),
                    "hook_error" if event.error is not None else None,
                    {
                        "steploop.hook.count": event.hook_count,
                        "steploop.hook.blocking": len(event.blocking_errors),
                        "steploop.hook.prevent": event.prevent,
                    },
                )
            case _:
                pass


def _kind_of(t: Transition) -> str:
    from steploop.reducer.transitions import CONTINUE_TYPES

    return "continue" if isinstance(t, CONTINUE_TYPES) else "terminal"


def spans_of_trace(path: str | os.PathLike[str], telemetry: Telemetry, *, session_id: str = "") -> int:
    """The spans of a recorded turn, from its trace (exactly replayed as it is read): the
    spans its live run gave. Returns the number of steps read.

    Raises:
        steploop.effects.trace.TraceError: the trace does not replay exactly.
    """
    from steploop.effects.trace import TraceError, TraceReader, replay_exact

    records = iter(TraceReader(Path(path)))
    header = next(records)
    records.close()  # type: ignore[attr-defined]
    config = getattr(header, "config", None)
    request = getattr(header, "request", None)
    if not isinstance(config, LoopConfig) or request is None:  # pragma: no cover - reader checks
        raise TraceError(os.fspath(path), None, "no header")
    spans = telemetry.turn(
        session_id=session_id or str(path), config=config, start_ms=request.at_ms
    )
    report = replay_exact(
        path,
        on_step=lambda rec: spans.step(
            rec.event, rec.effects, () if rec.transition is None else (rec.transition,)
        ),
    )
    if not report.ok:
        raise TraceError(os.fspath(path), None, report.describe())
    return report.steps


