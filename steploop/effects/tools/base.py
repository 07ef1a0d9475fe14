"""The tool contract and the registry the shell runs tool calls through.

A tool is anything shaped like :class:`Tool`: a name, a JSON Schema for its input, a few traits
the reducer needs for scheduling (reported as :class:`steploop.reducer.events.ToolTraits`), and an async
``call``. The :class:`ToolRegistry` owns the tools of one session: it answers the reducer's
questions about a call (``traits``), checks inputs against the schemas (``validate``) and runs a
call so that whatever goes wrong in the tool comes back as an error result, never as an
exception (``run``). Only cancellation passes through ``run``: the shell cancels tool tasks on
an interrupt and must see them stop.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, Final, Protocol, runtime_checkable

import anyio
import attrs

# jsonschema ships no type information; types-jsonschema may or may not be installed.
from jsonschema import Draft202012Validator  # type: ignore[import-untyped, unused-ignore]
from jsonschema.exceptions import (  # type: ignore[import-untyped, unused-ignore]
    SchemaError,
    best_match,
)

from steploop.effects.tools.schema import InputValidator
from steploop.effects.tools.watchdog import Guarded, StepOverrun, fired, run_isolated, watch
from steploop.reducer.events import HookEvent, InterruptBehavior, ToolTraits

__all__ = [
    "Isolated",
    "Tool",
    "ToolContext",
    "ToolOutput",
    "ToolRegistry",
    "timed_out",
    "tool_use_error",
]

_MAX_MESSAGE_CHARS = 500


@attrs.frozen(kw_only=True)
class ToolContext:
    """What a running call may know of its surroundings.

    ``workspace`` is the session's root directory, already resolved (absolute, no symlinks).
    ``timeout_s`` is the call's deadline, from its start; the registry uses it to end a call
    whose steps hold the event loop past it (see :mod:`steploop.effects.tools.watchdog`).
    ``idempotency_key`` names the call across retries where a world may run it again (the
    Temporal world: workflow id, generation and tool_use_id); a tool whose side effect must
    not happen twice can key it on this. None where the world runs each call once.
    """

    workspace: Path
    tool_use_id: str
    timeout_s: float | None = None
    idempotency_key: str | None = None
    caller: Any = None
    """The run making the call (:class:`steploop.effects.run_types.Caller`: its session, config,
    trace, telemetry), for a tool that runs a loop of its own (a sub-agent); None outside a
    run."""


@attrs.frozen(kw_only=True)
class ToolOutput:
    """The result of one call, as it goes into the tool_result block.

    ``hook_stopped`` is set when a tool hook asked the loop to stop after this call;
    ``hook_event`` says which (``"PreToolUse"``, a hook that let the call run, or
    ``"PostToolUse"``) and ``hook_stop_reason`` why, in the hook's own words ("": the
    reference's default text). Both reach the ``hook_stopped_continuation`` attachment
    (specs/ T-HOOK-1, E-HOOK-1); they are ignored when ``hook_stopped`` is False.
    """

    content: str
    is_error: bool = False
    hook_stopped: bool = False
    hook_event: HookEvent = "PostToolUse"
    hook_stop_reason: str = ""


def tool_use_error(message: str) -> ToolOutput:
    """An error result in the usual form: ``<tool_use_error>...</tool_use_error>``."""
    return ToolOutput(content=f"<tool_use_error>{message}</tool_use_error>", is_error=True)


def timed_out(name: str, timeout_s: float) -> ToolOutput:
    """The error result of a call that outlived its deadline."""
    return ToolOutput(content=f"Tool {name} timed out after {timeout_s:g} s", is_error=True)


@runtime_checkable
class Tool(Protocol):
    """What the registry needs of a tool.

    The data members are read-only properties here, so plain attributes, class attributes and
    properties all satisfy the protocol. ``max_result_chars`` of None means the tool's results
    are never budgeted. ``interrupt`` says what a user interrupt does to a running call:
    "cancel" stops it, "block" lets it finish. ``cancels_siblings_on_error`` makes an error of
    this tool cancel the other calls of the same batch (like Bash).

    Optionally, ``isolation = "thread"`` (not part of the protocol, read with getattr) runs
    the tool's calls on an event loop of their own in a worker thread, so that a call that
    blocks in ways cancellation cannot reach (a thread that cannot be abandoned, a shielded
    wait, synchronous work) is left behind at its timeout; see :class:`Isolated`.
    ``timeout_s`` (also read with getattr) is the tool's own deadline for a call, in place of
    the run's ``tool_timeout_s`` (``math.inf``: none; a sub-agent, an MCP server's tool).
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> Mapping[str, Any]: ...

    @property
    def max_result_chars(self) -> int | None: ...

    @property
    def interrupt(self) -> InterruptBehavior: ...

    @property
    def cancels_siblings_on_error(self) -> bool: ...

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        """True when this call (for this input) may run alongside other safe calls."""
        ...

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """Run the call; ``input`` has already passed the schema."""
        ...


def _one_line(text: str) -> str:
    flat = " ".join(text.split())
    if len(flat) > _MAX_MESSAGE_CHARS:
        return flat[: _MAX_MESSAGE_CHARS - 3] + "..."
    return flat


def _plain(value: Any) -> Any:
    """A JSON-like copy of ``value``: every Mapping a dict, every list or tuple a list."""
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    return value


def _format_path(path: Iterable[Any]) -> str:
    out = "input"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class ToolRegistry:
    """The tools of a session, by name, in registration order.

    One Draft 2020-12 validator is built per tool when the registry is built, so a tool with a
    broken schema is refused up front (ValueError), as is a second tool with a taken name.

    The tools given here are fixed; named *groups* of tools may be set and replaced while the
    session runs (:meth:`set_group`: the tools of MCP servers, whose lists change), after the
    fixed ones in the order the groups were first set. :attr:`version` counts the changes and
    :meth:`digest` names the list as the model sees it.
    """

    def __init__(self, tools: Iterable[Tool]) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Any] = {}
        self._groups: dict[str, tuple[str, ...]] = {}  # group -> its tools' names, in order
        self.version = 0
        """How many times :meth:`set_group` changed the tools."""
        for tool in tools:
            problem = self._add(tool)
            if problem is not None:
                raise problem

    def _add(self, tool: object) -> Exception | None:
        """Register ``tool`` after the others; the error that refuses it, if any."""
        if not isinstance(tool, Tool):
            return TypeError(f"{tool!r} does not implement the Tool protocol")
        name = tool.name
        if name in self._tools:
            return ValueError(f"duplicate tool name {name!r}")
        schema = _plain(tool.input_schema)
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            return ValueError(
                f"tool {name!r} has an invalid input_schema: {_one_line(str(exc.message))}"
            )
        self._tools[name] = tool
        self._validators[name] = InputValidator(schema)
        return None

    def set_group(self, group: str, tools: Iterable[Tool]) -> tuple[str, ...]:
        """Replace the tools of ``group`` (empty: remove them) and return one line per tool
        refused (a taken name, an invalid schema, not a tool), which is left out. Nothing is
        awaited: a call sees the list before or after, never half of it. A call already
        running keeps the tool it started with."""
        old = self._groups.get(group, ())
        before = [(n, self._tools[n]) for n in old]
        for name in old:
            del self._tools[name], self._validators[name]
        refused: list[str] = []
        names: list[str] = []
        for tool in tools:
            problem = self._add(tool)
            if problem is None:
                names.append(tool.name)
            else:
                refused.append(f"{group}: {problem}")
        self._groups[group] = tuple(names)  # a group keeps its place once set
        grouped = {n for members in self._groups.values() for n in members}
        order = [n for n in self._tools if n not in grouped]
        for members in self._groups.values():
            order.extend(members)
        self._tools = {n: self._tools[n] for n in order}
        if [(n, id(t)) for n, t in before] != [(n, id(self._tools[n])) for n in names]:
            self.version += 1
        return tuple(refused)

    def digest(self) -> str:
        """16 hex digits naming the tool list as the model sees it (:meth:`definitions`)."""
        text = json.dumps(self.definitions(), sort_keys=True, separators=(",", ":"))
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    @property
    def names(self) -> tuple[str, ...]:
        """Tool names in registration order."""
        return tuple(self._tools)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def validate(self, name: str, input: Mapping[str, Any]) -> str | None:
        """None if ``input`` fits the tool's schema, else a one-line message naming the field.

        The message has the form ``input.field: <what is wrong>`` (``input: ...`` for problems
        with the object itself, such as a missing required property).
        """
        validator = self._validators.get(name)
        if validator is None:
            return f"No such tool available: {name}"
        if validator.is_valid(input):  # the common case: no error to rank
            return None
        error = best_match(validator.iter_errors(input))
        if error is None:
            return None
        return f"{_format_path(error.absolute_path)}: {_one_line(str(error.message))}"

    def traits(self, name: str, input: Mapping[str, Any]) -> ToolTraits:
        """What the reducer needs to schedule this call.

        An unknown tool is reported ``known=False``; a call whose input fails the schema, or
        whose tool raises while judging it, is never concurrency-safe.
        """
        tool = self._tools.get(name)
        if tool is None:
            return ToolTraits(known=False, concurrency_safe=False)
        safe = False
        try:
            if self.validate(name, input) is None:
                safe = bool(tool.is_concurrency_safe(input))
        except Exception:
            safe = False
        return ToolTraits(
            known=True,
            concurrency_safe=safe,
            interrupt=tool.interrupt,
            cancels_siblings_on_error=tool.cancels_siblings_on_error,
            max_result_chars=tool.max_result_chars,
        )

    async def run(
        self, name: str, input: Mapping[str, Any], ctx: ToolContext, timeout_s: float
    ) -> ToolOutput:
        """Run one call; every failure of the tool comes back as an ``is_error`` output.

        Unknown tool, invalid input, an exception from the tool and a call that outlives
        ``timeout_s`` seconds all give error outputs. Cancellation from outside propagates.
        """
        if ctx.timeout_s is None:
            ctx = attrs.evolve(ctx, timeout_s=timeout_s)
        with anyio.move_on_after(timeout_s):
            return await self.call(name, input, ctx)
        # Only reached when our own deadline cancelled the call.
        return timed_out(name, timeout_s)

    async def call(self, name: str, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        """:meth:`run` without a deadline, for a caller that bounds the call itself (the
        interpreter puts the deadline on the cancel scope it has for every call, and reports
        :func:`timed_out` when it passes).

        With ``ctx.timeout_s`` set, each step of the tool's coroutine is watched: one that
        holds the event loop past the deadline is interrupted and the call gives the timeout
        result (:mod:`steploop.effects.tools.watchdog`). A tool with ``isolation = "thread"`` runs in a
        worker thread on a loop of its own, and is left behind when the caller's deadline
        (its cancel scope) passes."""
        tool = self._tools.get(name)
        if tool is None:
            return tool_use_error(f"Error: No such tool available: {name}")
        try:
            problem = self.validate(name, input)
        except Exception as exc:
            problem = f"input: could not be validated ({type(exc).__name__}: {_one_line(str(exc))})"
        if problem is not None:
            return tool_use_error(f"InputValidationError: {problem}")
        try:
            if getattr(tool, "isolation", "inline") == "thread":
                output = await run_isolated(partial(tool.call, input, ctx))
            elif ctx.timeout_s is not None:
                # The first step runs here, watched; a call that then waits goes on under
                # Guarded. A call that finishes in its first step (most do) costs a token.
                coro = tool.call(input, ctx)
                token, slot, outer = watch(ctx.timeout_s)
                waiting = False
                try:
                    first = coro.send(None)
                    waiting = True
                except StopIteration as done:
                    output = done.value
                except StepOverrun:
                    if not fired(token):
                        raise
                    return timed_out(name, ctx.timeout_s)
                finally:
                    slot.token = outer  # between steps, no step of this call runs
                if waiting:
                    guarded = await Guarded(coro, first, token, slot, outer)
                    if guarded is None:
                        return timed_out(name, ctx.timeout_s)
                    output = guarded
                elif fired(token):
                    return timed_out(name, ctx.timeout_s)
            else:
                output = await tool.call(input, ctx)
        except Exception as exc:
            return tool_use_error(f"Error calling tool {name}: {type(exc).__name__}: {exc}")
        if not isinstance(output, ToolOutput):
            return tool_use_error(
                f"Error calling tool {name}: it returned {type(output).__name__}, not a ToolOutput"
            )
        return output

    def definitions(self) -> list[dict[str, Any]]:
        """The tools as the Anthropic API wants them, in registration order."""
        return [
            {
                "name": tool.name,
                "description": tool.description,
                "input_schema": _plain(tool.input_schema),
            }
            for tool in self._tools.values()
        ]


class Isolated:
    """``tool``, run with ``isolation = "thread"``: each call on an event loop of its own in a
    worker thread, left behind at its deadline if it does not stop (its result is dropped).

    For a third-party tool that blocks where cancellation cannot reach it. Its call must not
    touch objects bound to the caller's event loop."""

    isolation: Final = "thread"

    def __init__(self, tool: Tool) -> None:
        self._tool = tool

    def __repr__(self) -> str:
        return f"Isolated({self._tool!r})"

    @property
    def name(self) -> str:
        return self._tool.name

    @property
    def description(self) -> str:
        return self._tool.description

    @property
    def input_schema(self) -> Mapping[str, Any]:
        return self._tool.input_schema

    @property
    def max_result_chars(self) -> int | None:
        return self._tool.max_result_chars

    @property
    def interrupt(self) -> InterruptBehavior:
        return self._tool.interrupt

    @property
    def cancels_siblings_on_error(self) -> bool:
        return self._tool.cancels_siblings_on_error

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return self._tool.is_concurrency_safe(input)

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await self._tool.call(input, ctx)
