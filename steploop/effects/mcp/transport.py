"""The stdio transport of an MCP server, supervised like a Bash command (specs/ E-MCP-4).

The SDK's own stdio transport starts the server with ``anyio.open_process``; this one starts it
with :func:`steploop.effects.procs.open_process_tree`, so the server and everything it starts
are killed when the connection closes, and within seconds of a ``kill -9`` of steploop (the
supervisor's rules E-PROC-1, E-PROC-2). It also bounds what the server may send: a line of
more than ``max_message_bytes`` ends the connection (every call waiting gets an error at
once), and a line that is not JSON-RPC is kept as the server's last problem and skipped.

The server's stderr is kept (its last 4 KiB) to say why a server ended.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import attrs

from steploop.effects.mcp.config import McpServerConfig
from steploop.effects.procs import ProcessTree, open_process_tree, tool_environment

__all__ = ["ServerHealth", "stdio_transport"]

#: How long a server may take to exit after its stdin closes, before it is killed.
EXIT_GRACE_S = 0.5
_STDERR_KEPT = 4096


@attrs.define
class ServerHealth:
    """What the transport learnt about its server: why the connection ended, if it did, and
    the last thing the server wrote that was not JSON-RPC."""

    ended: str | None = None
    junk: str | None = None
    stderr: bytes = b""
    exited: anyio.Event = attrs.field(factory=anyio.Event)
    exit_code: int | None = None

    def end(self, why: str) -> None:
        if self.ended is None:
            self.ended = why

    def add_stderr(self, data: bytes) -> None:
        self.stderr = (self.stderr + data)[-_STDERR_KEPT:]

    def stderr_tail(self) -> str:
        text = self.stderr.decode("utf-8", "replace").strip()
        last = text.splitlines()[-1] if text else ""
        return last[-300:]


def _session_message(line: bytes) -> Any:
    """The SDK message of one line, or the exception that says why it is not one."""
    import mcp_types
    from mcp.shared.message import SessionMessage

    try:
        return SessionMessage(mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False))
    except Exception as exc:  # pydantic's ValidationError, a decode error
        return exc


@asynccontextmanager
async def stdio_transport(
    cfg: McpServerConfig, *, workspace: Path, health: ServerHealth, max_message_bytes: int
) -> AsyncIterator[tuple[Any, Any]]:
    """Start ``cfg``'s server and yield the SDK's (read, write) streams to it. Leaving the
    block closes the server's stdin, waits :data:`EXIT_GRACE_S` for it to exit, then kills
    its whole process tree; it always runs to the end, even when cancelled."""
    env = tool_environment()  # without the API's credentials (E-ENV-1) unless the config sets them
    env.update(dict(cfg.env))
    cwd = workspace if cfg.cwd is None else (workspace / cfg.cwd)
    tree = await open_process_tree(
        [cfg.command, *cfg.args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=os.fspath(cwd),
        env=env,
    )
    read_send, read_recv = anyio.create_memory_object_stream[Any](0)
    write_send, write_recv = anyio.create_memory_object_stream[Any](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_stdout, tree, read_send, health, max_message_bytes)
            tg.start_soon(_write_stdin, tree, write_recv, read_send)
            tg.start_soon(_read_stderr, tree, health)
            tg.start_soon(_watch, tree, read_send, health)
            try:
                yield read_recv, write_send
            finally:
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(tree)
            for stream in (read_send, read_recv, write_send, write_recv):
                await stream.aclose()


async def _read_stdout(
    tree: ProcessTree,
    out: anyio.abc.ObjectSendStream[Any],
    health: ServerHealth,
    limit: int,
) -> None:
    assert tree.stdout is not None
    buffer = b""
    try:
        async with out:
            while True:
                try:
                    chunk = await tree.stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                    with anyio.move_on_after(EXIT_GRACE_S):
                        await health.exited.wait()
                    health.end(_exit_words(health) if health.exited.is_set() else "the server closed its stdout")
                    return
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                if len(buffer) > limit or any(len(line) > limit for line in lines):
                    health.end(
                        f"the server sent a message of more than {limit:,} bytes; the "
                        "connection was closed"
                    )
                    return
                for line in lines:
                    if not line.strip():
                        continue
                    message = _session_message(line)
                    if isinstance(message, Exception):
                        text = line[:120].decode("utf-8", "replace")
                        health.junk = f"the server wrote what is not JSON-RPC: {text!r}"
                        continue
                    await out.send(message)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return


def _exit_words(health: ServerHealth) -> str:
    tail = health.stderr_tail()
    return f"the server exited (exit code {health.exit_code})" + (f": {tail}" if tail else "")


async def _watch(
    tree: ProcessTree, reads: anyio.abc.ObjectSendStream[Any], health: ServerHealth
) -> None:
    """The server's exit ends the connection, even while a process it started holds its
    stdout open: every call waiting gets its error at once."""
    health.exit_code = await tree.wait()
    health.exited.set()
    await anyio.sleep(0.05)  # what it wrote to stderr as it went is read first
    health.end(_exit_words(health))
    await reads.aclose()


async def _write_stdin(
    tree: ProcessTree,
    messages: anyio.abc.ObjectReceiveStream[Any],
    reads: anyio.abc.ObjectSendStream[Any],
) -> None:
    assert tree.stdin is not None
    try:
        async with messages:
            async for message in messages:
                data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
                await tree.stdin.send(data.encode("utf-8") + b"\n")
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        await reads.aclose()  # the server cannot be written to: the connection has ended


async def _read_stderr(tree: ProcessTree, health: ServerHealth) -> None:
    assert tree.stderr is not None
    try:
        async for chunk in tree.stderr:
            health.add_stderr(chunk)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
        return


async def _stop(tree: ProcessTree) -> None:
    """Close stdin, give the server :data:`EXIT_GRACE_S` to exit, then kill its tree."""
    if tree.stdin is not None:
        try:
            await tree.stdin.aclose()
        except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
    with anyio.move_on_after(EXIT_GRACE_S):
        await tree.wait()
    await tree.aclose()
