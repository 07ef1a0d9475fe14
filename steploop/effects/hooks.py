"""Stop hooks: what runs when the model ends a turn without asking for a tool.

The reducer asks for them with :class:`~steploop.reducer.effects.RunStopHooks`; :class:`StopHooks` runs
every configured hook concurrently and answers with one
:class:`~steploop.reducer.events.StopHooksFinished` (queryloop-facts section 4.4).

Two kinds of hook are provided:

* :class:`PythonStopHook` wraps a sync or async callable;
* :class:`CommandStopHook` runs a command that speaks Claude Code's hook protocol: the JSON
  payload arrives on stdin; exit code 0 passes (stdout may hold a JSON decision), exit code 2
  blocks with stderr as the reason, any other exit code is a non-blocking error, and a hook
  that outlives its timeout is killed together with everything it started.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import subprocess
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Literal, Protocol, TypeAlias

import anyio
import anyio.abc
import anyio.to_thread
import attrs

from steploop.effects.procs import open_process_tree
from steploop.reducer.conversation import Conversation
from steploop.reducer.effects import RunStopHooks
from steploop.reducer.events import StopHooksFinished
from steploop.reducer.messages import AssistantMessage, TextBlock

__all__ = [
    "BLOCKED_WITHOUT_REASON",
    "DEFAULT_TIMEOUT_S",
    "MAX_CAPTURE_BYTES",
    "PASS",
    "PERMISSION_MODES",
    "CommandStopHook",
    "HookRun",
    "PermissionMode",
    "PythonStopHook",
    "StopEventName",
    "StopHook",
    "StopHookInput",
    "StopHookResult",
    "StopHooks",
    "fold_results",
    "last_assistant_text",
]

StopEventName: TypeAlias = Literal["Stop", "SubagentStop"]
PermissionMode: TypeAlias = Literal["default", "plan", "acceptEdits", "dontAsk", "bypassPermissions"]
#: The permission modes Claude Code tells its hooks about (``permission_mode`` on stdin).
PERMISSION_MODES: tuple[PermissionMode, ...] = (
    "default",
    "plan",
    "acceptEdits",
    "dontAsk",
    "bypassPermissions",
)

#: Claude Code's default timeout for a command hook (seconds).
DEFAULT_TIMEOUT_S = 600.0
#: Output beyond this many bytes per stream is read and dropped (a runaway hook cannot
#: exhaust memory).
MAX_CAPTURE_BYTES = 1 << 20
#: Reason used when a hook blocks through JSON without giving one.
BLOCKED_WITHOUT_REASON = "Blocked by stop hook"
#: What Claude Code feeds back for an exit code 2 without stderr output.
NO_STDERR = "No stderr output"
# An exit code 2 whose stderr's first line is the shell or an interpreter failing to find the
# hook's own script is a broken hook, not a block (Claude Code treats it the same way).
_MISSING_SCRIPT = re.compile(
    r"^(?:/bin/)?(?:ba|da)?sh: .*(?:can't cd to|can't open|No such file or directory)"
    r"|^\S*python[0-9.]*: can't open file",
    re.I,
)
_PLUGIN_ROOT_REF = re.compile(r"\$\{?CLAUDE_PLUGIN_ROOT\b")


@attrs.frozen(kw_only=True)
class StopHookInput:
    """What a stop hook is told (the JSON payload of Claude Code's Stop event)."""

    session_id: str
    transcript_path: str
    hook_event_name: StopEventName = "Stop"
    stop_hook_active: bool = False
    cwd: str = ""
    permission_mode: PermissionMode = "default"
    #: SubagentStop only: the sub-agent's id, type and own transcript (written when set).
    agent_id: str | None = None
    agent_type: str | None = None
    agent_transcript_path: str | None = None
    #: The text of the last assistant message (the response that is ending), so a hook need
    #: not read the transcript; None (not written) when there is none (HOOK-1).
    last_assistant_message: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The payload as Claude Code spells it on a hook's stdin (its field order)."""
        out: dict[str, Any] = {
            "session_id": self.session_id,
            "transcript_path": self.transcript_path,
            "cwd": self.cwd,
            "permission_mode": self.permission_mode,
            "hook_event_name": self.hook_event_name,
            "stop_hook_active": self.stop_hook_active,
        }
        if self.hook_event_name == "SubagentStop":
            for key in ("agent_id", "agent_type", "agent_transcript_path"):
                value = getattr(self, key)
                if value is not None:
                    out[key] = value
        if self.last_assistant_message is not None:
            out["last_assistant_message"] = self.last_assistant_message
        return out


def last_assistant_text(conversation: Conversation) -> str | None:
    """HOOK-1: the text of the conversation's last assistant message (its text blocks, joined
    by line breaks; a response is one message per block, as in Claude Code), None when it has
    no text or there is no assistant message. Walks back from the end: the cost is the
    messages after the last assistant one, not the conversation's length."""
    node = conversation
    while node.length:
        message = node.last
        if isinstance(message, AssistantMessage):
            text = "\n".join(b.text for b in message.content if isinstance(b, TextBlock))
            return text or None
        assert node.prev is not None
        node = node.prev
    return None


@attrs.frozen(kw_only=True)
class StopHookResult:
    """What one hook decided.

    ``blocking_error``: feedback for the model, the turn goes on. ``prevent``: stop the loop
    (``stop_reason`` says why). ``error``: the hook itself failed (reported, not blocking).
    ``system_message``: an optional notice for the user.
    """

    blocking_error: str | None = None
    prevent: bool = False
    stop_reason: str = ""
    error: str | None = None
    system_message: str | None = None


#: The result of a hook that lets the turn end.
PASS = StopHookResult()


class StopHook(Protocol):
    """Anything awaitable with a :class:`StopHookInput` that returns a :class:`StopHookResult`."""

    async def __call__(self, payload: StopHookInput) -> StopHookResult: ...


def _hook_label(hook: object) -> str:
    name = getattr(hook, "name", None)
    return name if isinstance(name, str) and name else type(hook).__name__


# ---------------------------------------------------------------------------------------------
# Python hooks


PythonHookFn: TypeAlias = Callable[
    [StopHookInput], "StopHookResult | Awaitable[StopHookResult | None] | None"
]


def _is_async_callable(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - looking for an async __call__
    )


class PythonStopHook:
    """A stop hook written in Python.

    ``fn`` takes a :class:`StopHookInput` and returns a :class:`StopHookResult` or ``None``
    (``None`` passes); it may be a coroutine function. Exceptions from ``fn`` propagate;
    :class:`StopHooks` turns them into an ``error``.

    A sync ``fn`` runs in a worker thread (``in_thread=True``, the default), so a hook that
    blocks (a subprocess, a network call, a lock) holds neither the event loop nor the run:
    interrupts, tool watchdogs and the other hooks go on, and at ``timeout_s`` (or an
    interrupt, or :class:`~steploop.effects.run.Timeouts` ``stop_hooks_s``) the run stops waiting for it.
    Python cannot stop a thread: an abandoned hook runs on until ``fn`` returns, and what it
    returns then is dropped. ``in_thread=False`` runs ``fn`` on the event loop (for a quick
    ``fn`` that touches objects bound to the loop); there nothing can stop it while it runs.
    An async ``fn`` always runs on the loop. Past ``timeout_s`` seconds the hook's result is an
    ``error`` (``Stop hook NAME timed out after N s``), as for :class:`CommandStopHook`.
    """

    __slots__ = ("_fn", "_in_thread", "name", "timeout_s")

    def __init__(
        self,
        fn: PythonHookFn,
        *,
        name: str | None = None,
        in_thread: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        _positive(None, None, timeout_s)
        self._fn = fn
        self._in_thread = in_thread
        self.timeout_s = timeout_s
        self.name = name or getattr(fn, "__qualname__", None) or repr(fn)

    def __repr__(self) -> str:
        return f"PythonStopHook({self.name!r})"

    async def __call__(self, payload: StopHookInput) -> StopHookResult:
        out: object = None
        done = False
        with anyio.move_on_after(self.timeout_s):
            if self._in_thread and not _is_async_callable(self._fn):
                # abandoned on cancel: the run stops waiting, the thread runs on
                out = await anyio.to_thread.run_sync(self._fn, payload, abandon_on_cancel=True)
            else:
                out = self._fn(payload)
            if inspect.isawaitable(out):
                out = await out
            done = True
        if not done:
            return StopHookResult(
                error=f"Stop hook {self.name} timed out after {self.timeout_s:g} s"
            )
        if out is None:
            return PASS
        if not isinstance(out, StopHookResult):
            return StopHookResult(
                error=f"Stop hook {self.name} returned {type(out).__name__}, "
                "expected StopHookResult or None"
            )
        return out


# ---------------------------------------------------------------------------------------------
# Command hooks


def _to_command(value: str | Sequence[str]) -> str | tuple[str, ...]:
    if isinstance(value, str):
        return value
    argv = tuple(value)
    if not argv:
        raise ValueError("empty command")
    return argv


def _positive(_inst: object, _attr: object, value: float) -> None:
    if not value > 0:
        raise ValueError(f"timeout_s must be positive, got {value!r}")


@attrs.frozen
class CommandStopHook:
    """A command speaking Claude Code's hook protocol.

    ``command`` is a shell command line (run by ``/bin/sh -c``) or an argv list. It runs in
    ``cwd`` (default: the session's cwd from the payload) with the whole inherited environment,
    ``ANTHROPIC_API_KEY`` included (Claude Code runs hooks "with Claude Code's environment";
    Bash commands do not get the key, rule E-ENV-1), plus ``CLAUDE_PROJECT_DIR`` (the session's
    cwd, as Claude Code sets it) and ``env`` (a plugin hook's ``CLAUDE_PLUGIN_ROOT``), as a
    :class:`steploop.effects.procs.ProcessTree`, so that a timeout or a cancellation kills it
    and everything it started. A command that uses ``${CLAUDE_PLUGIN_ROOT}`` while it is not
    set is not started: it is reported as a hook error (it would fail on a missing file).

    Exit code 2 blocks with ``[<command>]: <stderr>`` as the feedback (``No stderr output`` when
    there is none), as Claude Code words it; but an exit code 2 whose stderr says that the
    shell or the interpreter could not find the hook's script is a hook error, not a block.

    The hook is done when it has exited and closed its stdout and stderr; a background child
    that keeps them open counts as the hook still running (and is killed at the timeout).
    """

    command: str | tuple[str, ...] = attrs.field(converter=_to_command)
    timeout_s: float = attrs.field(default=DEFAULT_TIMEOUT_S, validator=_positive)
    cwd: str | None = None
    env: Mapping[str, str] | None = attrs.field(default=None, kw_only=True)

    @property
    def name(self) -> str:
        return self.command if isinstance(self.command, str) else shlex.join(self.command)

    async def __call__(self, payload: StopHookInput) -> StopHookResult:
        cwd = self.cwd or payload.cwd or None
        env = dict(os.environ)
        if payload.cwd:
            env["CLAUDE_PROJECT_DIR"] = payload.cwd
        if self.env:
            env.update(self.env)
        if _PLUGIN_ROOT_REF.search(self.name) and not env.get("CLAUDE_PLUGIN_ROOT"):
            return StopHookResult(
                error=f"Stop hook {self.name} uses ${{CLAUDE_PLUGIN_ROOT}}, which is not set "
                "(a plugin's hook: give the plugin's directory, e.g. steploop run --plugin DIR)"
            )
        data = json.dumps(payload.to_json()).encode("utf-8")
        try:
            # Shielded so that a cancellation cannot strike between the fork and the moment
            # we hold the process (the finally below is what cleans up).
            with anyio.CancelScope(shield=True):
                process = await open_process_tree(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=cwd,
                    env=env,
                )
        except OSError as exc:
            return StopHookResult(error=f"Stop hook {self.name} could not start: {exc}")

        stdout = bytearray()
        stderr = bytearray()
        returncode: int | None = None
        try:
            with anyio.move_on_after(self.timeout_s):
                returncode = await _communicate(process, data, stdout, stderr)
        finally:
            # Done, timed out, cancelled or failed: the hook and everything it started are
            # killed and reaped (steploop.effects.procs), so no background child outlives the hook.
            await process.aclose()

        if returncode is None:
            return StopHookResult(
                error=f"Stop hook {self.name} timed out after {self.timeout_s:g} s"
            )
        if process.lost is not None:  # it killed its parent, or the supervisor was killed
            return StopHookResult(error=f"Stop hook {self.name} failed: {process.outcome}")
        return _interpret(self.name, returncode, _decode(stdout), _decode(stderr))


async def _communicate(
    process: anyio.abc.Process, data: bytes, stdout: bytearray, stderr: bytearray
) -> int:
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(_feed, process.stdin, data)
        tg.start_soon(_drain, process.stdout, stdout)
        tg.start_soon(_drain, process.stderr, stderr)
    return await process.wait()


async def _feed(stream: anyio.abc.ByteSendStream, data: bytes) -> None:
    try:
        await stream.send(data)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass  # the hook did not read its stdin; that is its business
    finally:
        await stream.aclose()


async def _drain(stream: anyio.abc.ByteReceiveStream, sink: bytearray) -> None:
    try:
        async for chunk in stream:
            room = MAX_CAPTURE_BYTES - len(sink)
            if room > 0:
                sink += chunk[:room]
    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
        pass


def _decode(raw: bytearray) -> str:
    return bytes(raw).decode("utf-8", errors="replace")


def _interpret(name: str, returncode: int, stdout: str, stderr: str) -> StopHookResult:
    """Map a finished hook's exit code and output to a result (Claude Code's rules)."""
    if returncode == 2:
        first = stderr.strip().splitlines()[0] if stderr.strip() else ""
        if not stdout.strip() and _MISSING_SCRIPT.search(first):
            return StopHookResult(
                error=f"Stop hook {name} could not run its script (exit code 2): {first}"
            )
        return StopHookResult(blocking_error=f"[{name}]: {stderr.strip() or NO_STDERR}")
    if returncode != 0:
        detail = stderr.strip() or "no stderr output"
        return StopHookResult(
            error=f"Stop hook {name} failed with exit code {returncode}: {detail}"
        )
    decision = _parse_json_object(stdout)
    if decision is None:
        return PASS
    blocking: str | None = None
    if decision.get("decision") == "block":
        given = decision.get("reason")
        blocking = given if isinstance(given, str) and given else BLOCKED_WITHOUT_REASON
    prevent = decision.get("continue") is False
    stop_reason = decision.get("stopReason") if prevent else None
    system_message = decision.get("systemMessage")
    return StopHookResult(
        blocking_error=blocking,
        prevent=prevent,
        stop_reason=stop_reason if isinstance(stop_reason, str) else "",
        system_message=system_message if isinstance(system_message, str) else None,
    )


def _parse_json_object(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return None
    return value if isinstance(value, dict) else None


# ---------------------------------------------------------------------------------------------
# The runner


def fold_results(hooks_id: int, results: Sequence[StopHookResult]) -> StopHooksFinished:
    """Fold per-hook results (in hook order) into the one event the reducer expects."""
    prevents = [r for r in results if r.prevent]
    errors = [r.error for r in results if r.error is not None]
    return StopHooksFinished(
        hooks_id=hooks_id,
        blocking_errors=tuple(r.blocking_error for r in results if r.blocking_error is not None),
        prevent=bool(prevents),
        stop_reason=prevents[0].stop_reason if prevents else "",
        hook_count=len(results),
        error="; ".join(errors) if errors else None,
    )


@attrs.frozen(kw_only=True)
class HookRun:
    """One hook's part in one run of the stop hooks (for the transcript and the user)."""

    name: str
    result: StopHookResult
    duration_ms: int = 0


class StopHooks:
    """The configured stop hooks; :meth:`run` answers a :class:`RunStopHooks` effect.

    Args:
        hooks: the hooks, run concurrently, folded in this order.
        clock_ms: stamps ``at_ms`` on the event when given.
        permission_mode: what hooks are told as ``permission_mode`` (Claude Code's modes).
        agent_type, agent_id: told to ``SubagentStop`` hooks (a sub-agent's run).
        on_report: called with ``(hooks_id, runs)`` after each run, before the event is
            returned (the CLI shows each hook's ``systemMessage`` with it).

    :meth:`report` returns the last runs by ``hooks_id`` (the transcript writer's
    ``stop_hook_summary`` record reads the commands and durations from it).
    """

    _KEEP = 16  # reports kept (one run of the hooks per stop; a turn has few)

    def __init__(
        self,
        hooks: Sequence[StopHook] = (),
        *,
        clock_ms: Callable[[], int] | None = None,
        permission_mode: PermissionMode = "default",
        agent_type: str | None = None,
        agent_id: str | None = None,
        on_report: Callable[[int, tuple[HookRun, ...]], None] | None = None,
    ) -> None:
        if permission_mode not in PERMISSION_MODES:
            raise ValueError(
                f"permission_mode must be one of {', '.join(PERMISSION_MODES)}, got {permission_mode!r}"
            )
        self._hooks: tuple[StopHook, ...] = tuple(hooks)
        self._clock_ms = clock_ms
        self.permission_mode: PermissionMode = permission_mode
        self._agent_type = agent_type
        self._agent_id = agent_id
        self._on_report = on_report
        self._reports: dict[int, tuple[HookRun, ...]] = {}

    @property
    def hooks(self) -> tuple[StopHook, ...]:
        return self._hooks

    def __len__(self) -> int:
        return len(self._hooks)

    def report(self, hooks_id: int) -> tuple[HookRun, ...] | None:
        """The hooks' part in run ``hooks_id`` (None when unknown or long gone)."""
        return self._reports.get(hooks_id)

    async def run_all(self, payload: StopHookInput) -> tuple[StopHookResult, ...]:
        """Run every hook concurrently; results come back in hook order.

        A hook that raises an ``Exception`` yields a result with ``error`` set; cancellation
        propagates (and :class:`CommandStopHook` kills its process on the way out).
        """
        return tuple(r.result for r in await self._run_timed(payload))

    async def _run_timed(self, payload: StopHookInput) -> tuple[HookRun, ...]:
        runs: list[HookRun] = [HookRun(name=_hook_label(h), result=PASS) for h in self._hooks]

        async def one(index: int, hook: StopHook) -> None:
            t0 = anyio.current_time()
            try:
                result = await hook(payload)
            except Exception as exc:
                text = str(exc)
                detail = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
                result = StopHookResult(error=f"Stop hook {_hook_label(hook)} raised {detail}")
            if not isinstance(result, StopHookResult):
                result = StopHookResult(
                    error=f"Stop hook {_hook_label(hook)} returned {type(result).__name__}"
                )
            ms = int((anyio.current_time() - t0) * 1000)
            runs[index] = HookRun(name=_hook_label(hook), result=result, duration_ms=ms)

        if self._hooks:
            async with anyio.create_task_group() as tg:
                for index, hook in enumerate(self._hooks):
                    tg.start_soon(one, index, hook)
        return tuple(runs)

    async def run(
        self,
        effect: RunStopHooks,
        *,
        session_id: str,
        transcript_path: str,
        cwd: str,
        event_name: StopEventName = "Stop",
    ) -> StopHooksFinished:
        """Run the hooks for ``effect`` and fold their results into one event."""
        sub = event_name == "SubagentStop"
        payload = StopHookInput(
            session_id=session_id,
            transcript_path=transcript_path,
            hook_event_name=event_name,
            stop_hook_active=effect.stop_hook_active,
            cwd=cwd,
            permission_mode=self.permission_mode,
            agent_id=self._agent_id if sub else None,
            agent_type=self._agent_type if sub else None,
            last_assistant_message=last_assistant_text(effect.conversation),
        )
        runs = await self._run_timed(payload)
        self._reports[effect.hooks_id] = runs
        while len(self._reports) > self._KEEP:
            del self._reports[next(iter(self._reports))]
        if self._on_report is not None:
            self._on_report(effect.hooks_id, runs)
        finished = fold_results(effect.hooks_id, tuple(r.result for r in runs))
        if self._clock_ms is not None:
            finished = attrs.evolve(finished, at_ms=self._clock_ms())
        return finished
