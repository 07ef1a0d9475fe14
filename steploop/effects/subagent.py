"""Sub-agents: the Agent tool, a nested loop run as a tool call (specs/ E-AGENT-1 ... E-AGENT-5).

Claude Code's Agent (formerly Task) tool runs a nested ``query()`` with the sub-agent's own
prompt, tools and model, and answers the call with the sub-agent's final text. Here the call
runs a nested :func:`steploop.effects.run.run` under the sub-agent configuration: the parent's
config with ``agent_id`` set and ``query_source`` ``agent:...``, so the machine's sub-agent rules
hold (``LoopConfig.is_subagent``: no token-budget continuation, C-BUDGET-1; no tool-use
summaries, R-SUM-1; stop hooks run as ``SubagentStop``, HOOK-1).

- **Concurrency**: the tool is concurrency-safe by declaration (Claude Code's AgentTool), so the
  calls of one response run their sub-agents side by side (R-TOOL-1).
- **Records**: the child's trace is written beside the parent's, as
  ``<parent trace without .jsonl>/subagents/agent-<id>.jsonl`` (when the parent is recorded by a
  :class:`~steploop.effects.trace.TraceRecorder`); its provenance names the parent
  (``parent_trace``, ``parent_tool_use_id``, ``agent_id``, ``agent_type``), and the parent's
  result names the child (``agentId: <id>``): :func:`subagent_traces` maps each Agent call of a
  parent trace to its child's. Both replay exactly. The child's transcript goes where Claude
  Code writes a sidechain: ``<parent transcript without .jsonl>/subagents/agent-<id>.jsonl``
  (``isSidechain: true``, ``agentId``, the parent's ``sessionId``).
- **Interrupts**: the tool is ``interrupt="cancel"``; when the parent withdraws the call (an
  interrupt, a sibling's error) the child is interrupted (hard) and allowed ``interrupt_grace_s``
  to end, so its trace ends with its own ``aborted_*`` Terminal; then it is cancelled.
- **Budgets**: the child has no deadline of its own (its tools keep the parent's
  ``tool_timeout_s``), ``max_turns`` from its definition, and the parent's API task budget
  (what remains of it) as its own.
- **Permissions**: the parent's policy, where "ask" becomes "deny" (a sub-agent has nobody to
  ask: the call gets the policy's denial and the sub-agent goes on), unless the definition
  gives a policy of its own.
- **Failure**: a sub-agent that ends in anything but ``completed`` without an API error, or
  that cannot start, is the tool's error result, naming how it ended.
- **Finding the children** (E-AGENT-6): :func:`child_traces` finds the child traces of a parent
  trace in both layouts: a live run's ``subagents/`` folder, and an import's sidechain traces
  beside the parent's (provenance ``parent_session`` and ``parent_tool_use_id``, IMP-23). A
  child file that cannot be read is skipped with a warning; so is a live call whose child trace
  is missing. ``steploop show`` and the viewer link each Agent/Task call to its child with it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import attrs

from steploop.effects.answer import PermissionPolicy
from steploop.effects.hooks import StopHook, StopHooks
from steploop.effects.protocols import ModelClient
from steploop.effects.run_types import Caller, PermissionRequest
from steploop.effects.tools.base import Tool, ToolContext, ToolOutput, ToolRegistry, tool_use_error
from steploop.reducer import LoopConfig, Request
from steploop.reducer.events import InterruptBehavior
from steploop.reducer.messages import AssistantMessage, TextBlock, ToolUseBlock

__all__ = [
    "AGENT_TOOL_NAMES",
    "AgentCall",
    "AgentDefinition",
    "AgentTool",
    "ChildTrace",
    "SubagentLinks",
    "child_traces",
    "subagent_path",
    "subagent_traces",
]

#: The sub-agent tool's names: Claude Code's Agent, called Task before 2.1.
AGENT_TOOL_NAMES = frozenset({"Agent", "Task"})

_GENERAL = "general-purpose"


@attrs.frozen(kw_only=True)
class AgentCall:
    """One sub-agent about to run: what its definition's factories are given."""

    agent_id: str
    agent_type: str
    description: str
    prompt: str
    model: str  # the model it runs on
    tool_use_id: str
    caller: Caller


@attrs.frozen(kw_only=True)
class AgentDefinition:
    """A kind of sub-agent (Claude Code's ``subagent_type``).

    ``model`` makes the child's model client (a :class:`ModelClient`, shared, or a factory given
    the :class:`AgentCall`: a live client made with the child's tools and system prompt, a
    scripted model per call); ``tools`` are the child's tools (a registry, tools, or a factory);
    ``model_name`` the model it runs on (None: the parent's); ``max_turns`` its limit;
    ``stop_hooks`` its ``SubagentStop`` hooks; ``permissions`` its policy (None: the parent's,
    "ask" made "deny")."""

    name: str = _GENERAL
    description: str = "A general-purpose agent for multi-step tasks."
    model: ModelClient | Callable[[AgentCall], ModelClient]
    tools: ToolRegistry | Sequence[Tool] | Callable[[AgentCall], ToolRegistry | Iterable[Tool]] = ()
    model_name: str | None = None
    max_turns: int | None = None
    stop_hooks: Sequence[StopHook] = ()
    permissions: PermissionPolicy | None = None


def subagent_path(parent: str | Path, agent_id: str) -> Path:
    """Where a sub-agent's file goes beside its parent's (a trace or a transcript):
    ``<parent without .jsonl>/subagents/agent-<id>.jsonl``, Claude Code's sidechain layout."""
    p = Path(parent)
    return p.with_suffix("") / "subagents" / f"agent-{agent_id}.jsonl"


def subagent_traces(parent_trace: str | Path) -> dict[str, Path]:
    """The child traces of a parent trace, by the tool_use id of the Agent call that ran each
    (read from each child's provenance)."""
    from steploop.effects.trace import TraceError, TraceReader

    found: dict[str, Path] = {}
    folder = Path(parent_trace).with_suffix("") / "subagents"
    if not folder.is_dir():
        return found
    for path in sorted(folder.glob("agent-*.jsonl")):
        records = iter(TraceReader(path, tolerate_truncated_tail=True))
        try:
            header = next(records)
        except (TraceError, StopIteration):
            continue
        finally:
            records.close()  # type: ignore[attr-defined]
        tid = getattr(header, "provenance", {}).get("parent_tool_use_id")
        if isinstance(tid, str):
            found[tid] = path
    return found


@attrs.frozen(kw_only=True)
class ChildTrace:
    """A child trace of a parent's Agent/Task call, read whole (its steps and terminal)."""

    tool_use_id: str  # the parent's call that ran it
    path: Path
    agent_id: str | None  # None: an imported sidechain whose transcript named no agent id
    agent_type: str | None
    steps: int
    terminal: str | None  # its Terminal's tag; None: no end record (cut off)
    imported: bool  # an import's sidechain trace (IMP-23), else a live run's (E-AGENT-3)


@attrs.frozen(kw_only=True)
class SubagentLinks:
    """A parent trace's Agent/Task calls and the child traces found for them."""

    calls: tuple[tuple[str, str], ...]  # (tool_use id, tool name), in the order they started
    children: Mapping[str, tuple[ChildTrace, ...]]  # by tool_use id; only calls with a child
    warnings: tuple[str, ...]  # one line each: a child that cannot be read, or is missing


_AGENT_ID_IN_RESULT = re.compile(r"\bagentId: ([A-Za-z0-9_-]+)")
_SIDECHAIN_THREAD = re.compile(r"^sidechain ([A-Za-z0-9_-]+)$")


def _parent_calls(
    parent: Path,
) -> tuple[dict[str, Any], list[tuple[str, str]], dict[str, str]]:
    """The parent's provenance, its Agent/Task calls, and the agent id each finished call's
    result names (``agentId: ID``, E-AGENT-1)."""
    from steploop.effects.trace import StepRecord, TraceReader
    from steploop.reducer.effects import StartTool
    from steploop.reducer.events import ToolFinished

    reader = TraceReader(parent, tolerate_truncated_tail=True)
    calls: list[tuple[str, str]] = []
    started: set[str] = set()
    named: dict[str, str] = {}
    for rec in reader:
        if not isinstance(rec, StepRecord):
            continue
        ev = rec.event
        if isinstance(ev, ToolFinished) and ev.tool_use_id in started:
            m = _AGENT_ID_IN_RESULT.search(ev.content)
            if m is not None:
                named[ev.tool_use_id] = m.group(1)
        for e in rec.effects:
            if isinstance(e, StartTool) and e.name in AGENT_TOOL_NAMES:
                if e.tool_use_id not in started:
                    started.add(e.tool_use_id)
                    calls.append((e.tool_use_id, e.name))
    header = reader.header
    prov = dict(header.provenance) if header is not None else {}
    return prov, calls, named


def _read_child(path: Path, tool_use_id: str, imported: bool) -> ChildTrace | str:
    """The child trace at ``path`` read whole, or why it cannot be read (one line)."""
    from steploop.effects.trace import StepRecord, TraceError, TraceReader

    reader = TraceReader(path, tolerate_truncated_tail=True)
    steps = 0
    try:
        for rec in reader:
            if isinstance(rec, StepRecord):
                steps += 1
    except TraceError as e:
        return str(e)
    header = reader.header
    if header is None:
        return f"{path}: empty, not a trace"
    prov = header.provenance
    agent_id = prov.get("agent_id")
    if not isinstance(agent_id, str):
        m = _SIDECHAIN_THREAD.match(str(prov.get("thread", "")))
        agent_id = m.group(1) if m is not None else None
    agent_type = prov.get("agent_type")
    return ChildTrace(
        tool_use_id=tool_use_id,
        path=path,
        agent_id=agent_id,
        agent_type=agent_type if isinstance(agent_type, str) else None,
        steps=steps,
        terminal=reader.end.terminal.TAG if reader.end is not None else None,
        imported=imported,
    )


def _first_line(path: Path) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.readline()
    except OSError:
        return None


def child_traces(parent_trace: str | Path) -> SubagentLinks:
    """The child traces of a parent trace's Agent/Task calls, in both layouts (E-AGENT-6):

    - a live run's: ``<parent without .jsonl>/subagents/agent-<id>.jsonl`` whose provenance's
      ``parent_tool_use_id`` names the call (E-AGENT-3);
    - an import's: the traces in the parent's folder whose provenance names the parent's session
      (``parent_session`` is the parent's ``session_id``) and one of its calls
      (``parent_tool_use_id``), IMP-23.

    Each child is read whole: one that cannot be read is skipped with a warning, never raised;
    so is a live call whose result names an agent whose trace is not there.

    Raises:
        TraceError: the parent itself cannot be read.
    """
    parent = Path(parent_trace)
    prov, calls, named = _parent_calls(parent)
    if not calls:
        return SubagentLinks(calls=(), children={}, warnings=())
    ids = {t for t, _ in calls}
    found: dict[str, list[ChildTrace]] = {}
    warnings: list[str] = []

    def take(path: Path, tid: str, imported: bool) -> None:
        got = _read_child(path, tid, imported)
        if isinstance(got, str):
            warnings.append(f"the sub-agent trace of call {tid} cannot be read, skipped: {got}")
        else:
            found.setdefault(tid, []).append(got)

    folder = parent.with_suffix("") / "subagents"
    if folder.is_dir():
        for path in sorted(p for p in folder.glob("agent-*.jsonl") if p.is_file()):
            line = _first_line(path)
            try:
                child_prov = json.loads(line or b"").get("provenance") or {}
                tid = child_prov.get("parent_tool_use_id")
            except (ValueError, AttributeError, RecursionError):
                warnings.append(f"{path}: not a trace (its header cannot be read), skipped")
                continue
            if isinstance(tid, str) and tid in ids:
                take(path, tid, imported=False)
    session = prov.get("session_id")
    if isinstance(session, str) and session:
        _imported_children(parent, session, ids, take, warnings)
    if "importer" not in prov:  # a live parent: each finished call names its child
        for tid, agent_id in named.items():
            path = subagent_path(parent, agent_id)
            if tid not in found and not path.exists():
                rel = os.path.relpath(path, parent.parent)
                warnings.append(f"the sub-agent trace of call {tid} ({rel}) is missing")
    children = {t: tuple(found[t]) for t, _ in calls if t in found}
    return SubagentLinks(calls=tuple(calls), children=children, warnings=tuple(warnings))


def _imported_children(
    parent: Path,
    session: str,
    ids: set[str],
    take: Callable[[Path, str, bool], None],
    warnings: list[str],
) -> None:
    """An import's sidechain traces beside ``parent`` that name its session and calls."""
    marker = json.dumps(session).encode()
    try:
        here = parent.resolve()
        paths = sorted(
            p for p in parent.parent.glob("*.jsonl") if p.is_file() and p.resolve() != here
        )  # regular files: a pipe there would wait for ever for a writer
    except OSError:
        return
    for path in paths:
        line = _first_line(path)
        if line is None or b'"parent_tool_use_id"' not in line or marker not in line:
            continue  # not a sidechain of this session: read no further
        try:
            child_prov = json.loads(line).get("provenance") or {}
            tid = child_prov.get("parent_tool_use_id")
            same = child_prov.get("parent_session") == session
        except (ValueError, AttributeError, RecursionError):
            warnings.append(f"{path}: not a trace (its header cannot be read), skipped")
            continue
        if same and isinstance(tid, str) and tid in ids:
            take(path, tid, True)


def _agent_id(session_id: str, tool_use_id: str) -> str:
    """``a`` and 16 hex digits (Claude Code's shape), from the session and the call: the same
    call gets the same id (its files' names), a replayed or resumed run included."""
    digest = hashlib.blake2b(f"{session_id}/{tool_use_id}".encode(), digest_size=8).hexdigest()
    return "a" + digest


class AgentTool:
    """The Agent tool: ``{"description", "prompt", "subagent_type"?, "model"?}``.

    Args:
        agents: the sub-agent kinds it can run (the first is the default ``subagent_type``).
        name: the tool's name (``"Agent"``; Claude Code before 2.1 called it ``"Task"``).
        interrupt_grace_s: how long an interrupted child may take to end on its own.
    """

    interrupt: InterruptBehavior = "cancel"
    cancels_siblings_on_error = False
    max_result_chars: int | None = 100_000
    timeout_s = math.inf  # a sub-agent has no deadline of its own; its tools have theirs

    def __init__(
        self,
        agents: Sequence[AgentDefinition],
        *,
        name: str = "Agent",
        interrupt_grace_s: float = 10.0,
    ) -> None:
        if not agents:
            raise ValueError("AgentTool needs at least one AgentDefinition")
        self.name = name
        self._agents = {a.name: a for a in agents}
        self.interrupt_grace_s = interrupt_grace_s
        kinds = "\n".join(f"- {a.name}: {a.description}" for a in agents)
        self.description = (
            "Launch a sub-agent to handle a multi-step task on its own, with its own context. "
            f"Available agent types:\n{kinds}"
        )
        self.input_schema: Mapping[str, Any] = {
            "type": "object",
            "properties": {
                "description": {
                    "type": "string",
                    "description": "A short (3-5 word) description of the task",
                },
                "prompt": {"type": "string", "description": "The task for the agent to perform"},
                "subagent_type": {
                    "type": "string",
                    "description": f"The type of agent: {', '.join(self._agents)}",
                },
                "model": {"type": "string", "description": "The model to run the agent on"},
            },
            "required": ["description", "prompt"],
            "additionalProperties": False,
        }

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return True  # Claude Code's AgentTool: safe by declaration

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        caller = ctx.caller
        if not isinstance(caller, Caller):
            return tool_use_error(f"{self.name} runs only inside a run (no caller)")
        kind = str(input.get("subagent_type") or next(iter(self._agents)))
        definition = self._agents.get(kind)
        if definition is None:
            return tool_use_error(
                f"Agent type '{kind}' not found. Available agents: {', '.join(self._agents)}"
            )
        parent: LoopConfig = caller.config
        model_name = str(input.get("model") or definition.model_name or parent.model)
        call = AgentCall(
            agent_id=_agent_id(caller.session_id, ctx.tool_use_id),
            agent_type=kind,
            description=str(input["description"]),
            prompt=str(input["prompt"]),
            model=model_name,
            tool_use_id=ctx.tool_use_id,
            caller=caller,
        )
        try:
            return await self._run_child(definition, call)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # a child that cannot start or breaks is the call's error
            return tool_use_error(f"{self.name} {kind} failed: {type(exc).__name__}: {exc}"[:2000])

    # -- the nested run ----------------------------------------------------------------------

    def _config(self, definition: AgentDefinition, call: AgentCall) -> LoopConfig:
        parent: LoopConfig = call.caller.config
        source = "agent:builtin:general-purpose" if call.agent_type == _GENERAL else "agent:custom"
        fallback = parent.fallback_model if parent.fallback_model != call.model else None
        return attrs.evolve(
            parent,
            agent_id=call.agent_id,
            query_source=source,
            model=call.model,
            fallback_model=fallback,
            max_turns=definition.max_turns,
        )

    def _request(self, call: AgentCall) -> Request:
        state = call.caller.state()
        budget = None
        if state is not None:
            remaining = state.task_budget_remaining
            budget = remaining if remaining is not None else state.task_budget_total
        return Request(prompt=call.prompt, task_budget=budget, at_ms=int(time.time() * 1000))

    async def _run_child(self, definition: AgentDefinition, call: AgentCall) -> ToolOutput:
        from steploop.effects.run import run
        from steploop.effects.trace import TraceRecorder, make_provenance

        caller = call.caller
        factory = definition.model
        model = factory if hasattr(factory, "stream") else factory(call)
        tools = definition.tools(call) if callable(definition.tools) else definition.tools
        registry = tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)
        policy = definition.permissions
        if policy is None:
            base: PermissionPolicy = caller.permissions
            policy = attrs.evolve(base, default="deny") if base.default == "ask" else base
        hooks = (
            StopHooks(definition.stop_hooks, agent_type=call.agent_type, agent_id=call.agent_id)
            if definition.stop_hooks
            else None
        )
        transcript = (
            subagent_path(caller.transcript_path, call.agent_id)
            if caller.transcript_path is not None
            else None
        )
        recorder: Any = None
        if caller.trace_path is not None:
            path = subagent_path(caller.trace_path, call.agent_id)
            path.parent.mkdir(parents=True, exist_ok=True)
            recorder = TraceRecorder(
                path,
                provenance=make_provenance(
                    model=model,
                    workspace=caller.workspace,
                    parent_trace=Path(caller.trace_path).name,
                    parent_tool_use_id=call.tool_use_id,
                    agent_id=call.agent_id,
                    agent_type=call.agent_type,
                ),
            )
        spans = caller.spans
        started = time.monotonic()
        try:
            r = run(
                self._request(call),
                model=model,
                tools=registry,
                config=self._config(definition, call),
                workspace=caller.workspace,
                permissions=policy,
                stop_hooks=hooks,
                session_id=caller.session_id,
                transcript_path=transcript,
                tool_timeout_s=caller.tool_timeout_s,
                observer=recorder,
                telemetry=None if spans is None else spans.telemetry,
            )
            if recorder is not None:
                recorder.attach(r)
            token = None if spans is None else spans.enter_tool(call.tool_use_id)
            try:
                await self._drive(r)
            finally:
                if spans is not None:
                    spans.leave_tool(token)
        finally:
            if recorder is not None:
                recorder.close()
        return _result(r, call, time.monotonic() - started)

    async def _drive(self, r: Any) -> None:
        """Run the child to its end; when the parent withdraws the call, interrupt the child and
        give it ``interrupt_grace_s`` to end on its own (its trace then ends with its Terminal)."""
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            shield = anyio.CancelScope(shield=True)

            async def watch() -> None:
                try:
                    await done.wait()
                except anyio.get_cancelled_exc_class():
                    r.interrupt("hard")
                    shield.deadline = anyio.current_time() + self.interrupt_grace_s
                    raise

            tg.start_soon(watch)
            with shield:
                async with r:
                    async for item in r:
                        if isinstance(item, PermissionRequest):  # nobody to ask (policy: deny)
                            item.reject()
            done.set()


def _final_text(r: Any) -> str:
    """The text of the child's last response."""
    messages = r.result.state.conversation.messages()
    last: list[str] = []
    response: str | None = None
    for m in reversed(messages):
        if not isinstance(m, AssistantMessage):
            if response is not None:
                break
            continue
        if response is not None and m.response_id != response:
            break
        response = m.response_id
        last.extend(b.text for b in reversed(m.content) if isinstance(b, TextBlock))
    return "\n".join(reversed(last))


def _result(r: Any, call: AgentCall, seconds: float) -> ToolOutput:
    res = r.result
    if res is None:
        return tool_use_error(f"Agent {call.agent_type} ({call.agent_id}) ended without a result")
    state = res.state
    text = _final_text(r)
    last = state.conversation.messages()[-1] if state.conversation.length else None
    api_error = isinstance(last, AssistantMessage) and last.api_error is not None
    uses = sum(
        1
        for m in state.conversation.messages()
        if isinstance(m, AssistantMessage)
        for b in m.content
        if isinstance(b, ToolUseBlock)
    )
    u = state.last_usage
    total = (
        0
        if u is None
        else (
            u.input_tokens
            + u.output_tokens
            + u.cache_creation_input_tokens
            + u.cache_read_input_tokens
        )
    )
    note = (
        f"agentId: {call.agent_id} (for resuming to continue this agent's work if needed)\n"
        f"<usage>total_tokens: {total}\ntool_uses: {uses}\nduration_ms: {int(seconds * 1000)}</usage>"
    )
    if res.terminal.TAG != "completed" or api_error:
        how = res.terminal.TAG + (" on an API error" if api_error else "")
        body = f"Agent {call.agent_type} ended {how}" + (f": {text}" if text else "")
        return ToolOutput(content=f"{body}\n\n{note}", is_error=True)
    return ToolOutput(content=f"{text}\n\n{note}" if text else note)
