"""Connections to MCP servers and their tools (specs/ E-MCP-2 ... E-MCP-6).

:class:`McpServers` connects to every configured server when entered (``async with``), each
in a task of its own, so one that fails to start, dies or hangs never holds up the others: it
is reported in :attr:`McpServers.notices` and has no tools. A server that connected offers its
tools as :class:`McpTool`, named ``mcp__<server>__<tool>`` as Claude Code names them (every
character outside ``[A-Za-z0-9_-]`` becomes ``_``), with the tool's input schema, concurrency-
safe exactly when the tool is annotated ``readOnlyHint: true`` (Claude Code's
``isConcurrencySafe``; no annotation is not safe).

The list can change while a session runs: a server that sends ``notifications/tools/list_changed``
is listed again at the next :meth:`McpServers.refresh`, and one whose connection ended loses its
tools there (the run refreshes at the end of each tool round: specs/ R-REFRESH-1).

A call never raises and never hangs past its deadline: a server that died, sent what is not a
result, or a message over the size limit gives an error result saying so; one that never
answers is ended by the call's deadline (the run's ``tool_timeout_s``, or the server's
``timeout``). Leaving the block closes every connection; a stdio server's whole process tree is
killed (:mod:`steploop.effects.mcp.transport`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import anyio

from steploop.effects.mcp import results
from steploop.effects.mcp.config import McpConfigError, McpServerConfig, parse_mcp_servers
from steploop.effects.mcp.results import tool_output
from steploop.effects.mcp.transport import ServerHealth, stdio_transport
from steploop.effects.tools.base import ToolContext, ToolOutput, tool_use_error
from steploop.reducer.events import InterruptBehavior

__all__ = ["McpServers", "McpTool", "mcp_tool_name"]

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")
#: Claude Code cuts an MCP tool's description at 2,048 characters.
MAX_DESCRIPTION = 2048
#: A line of more than this from a stdio server ends its connection.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_LIST_PAGES = 100
_LIST_TIMEOUT_S = 30.0


def mcp_tool_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, each part with every character outside ``[A-Za-z0-9_-]``
    replaced by ``_`` (Claude Code's ``buildMcpToolName``)."""
    return f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"


def _require_sdk() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise McpConfigError(
            "MCP servers need the MCP SDK: pip install 'steploop[mcp]'"
        ) from None


class McpTool:
    """One tool of an MCP server, as a steploop tool (the :class:`~steploop.effects.tools.Tool`
    protocol)."""

    interrupt: InterruptBehavior = "block"  # Claude Code's default for a tool
    cancels_siblings_on_error = False
    max_result_chars: int | None = 100_000  # Claude Code's MCPTool.maxResultSizeChars

    def __init__(self, connection: _Connection, remote: Any) -> None:
        self._connection = connection
        self.server = connection.config.name
        self.remote_name: str = remote.name
        self.name = mcp_tool_name(self.server, remote.name)
        self.description = (remote.description or "")[:MAX_DESCRIPTION]
        schema = remote.input_schema
        self.input_schema: Mapping[str, Any] = schema if isinstance(schema, dict) else {}
        annotations = getattr(remote, "annotations", None)
        self.read_only = getattr(annotations, "read_only_hint", None) is True
        self.timeout_s = connection.config.timeout_s

    def __repr__(self) -> str:
        return f"McpTool({self.name})"

    def is_concurrency_safe(self, input: Mapping[str, Any]) -> bool:
        return self.read_only

    async def call(self, input: Mapping[str, Any], ctx: ToolContext) -> ToolOutput:
        return await self._connection.call(self, dict(input))


class _Connection:
    """One server: its task connects, lists its tools, and holds the connection open."""

    def __init__(self, config: McpServerConfig, owner: McpServers) -> None:
        self.config = config
        self._owner = owner
        self.health = ServerHealth()
        self.client: Any = None
        self.tools: list[McpTool] = []
        self.state: Literal["connecting", "connected", "failed", "closed"] = "connecting"
        self.reason = ""
        self.changed = False
        self.ready = anyio.Event()
        self.closing = anyio.Event()

    def problem(self) -> str:
        """Why calls fail, in words."""
        return self.health.ended or self.health.junk or self.reason or "no reason given"

    async def _on_message(self, message: object) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.changed = True

    def _transport(self) -> Any:
        cfg = self.config
        if cfg.transport == "stdio":
            return stdio_transport(
                cfg,
                workspace=self._owner.workspace,
                health=self.health,
                max_message_bytes=self._owner.max_message_bytes,
            )
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        http = httpx2.AsyncClient(headers=dict(cfg.headers), timeout=httpx2.Timeout(30.0, read=None))
        return _ClosingHttp(streamable_http_client(cfg.url, http_client=http), http)

    async def serve(self) -> None:
        from mcp import Client
        from mcp.types import Implementation

        client = Client(
            self._transport(),
            mode="legacy",  # the initialize handshake, as Claude Code 2.1.88 speaks it
            message_handler=self._on_message,
            client_info=Implementation(name="steploop", version=_version()),
        )
        try:
            with anyio.CancelScope() as startup:
                startup.deadline = anyio.current_time() + self._owner.startup_timeout_s
                async with client:
                    self.tools = await self.list(client)
                    startup.deadline = math.inf
                    self.client, self.state = client, "connected"
                    self.ready.set()
                    await self.closing.wait()
            if startup.cancelled_caught and self.state == "connecting":
                self._failed(f"did not answer within {self._owner.startup_timeout_s:g} s")
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:  # a server that cannot start or breaks: reported, not raised
            self._failed(_what(exc))
        finally:
            self.client = None
            if self.state == "connected":
                self.state = "closed"
            self.ready.set()

    def _failed(self, why: str) -> None:
        if self.state == "connecting":
            detail = self.health.ended or self.health.stderr_tail()
            self.reason = f"failed to connect: {why}" + (f" ({detail})" if detail else "")
            self._owner.notices.append(f"mcp: {self.config.name}: {self.reason}")
        else:
            self.reason = why
        self.state = "failed"
        self.tools = []

    async def list(self, client: Any) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        with anyio.fail_after(_LIST_TIMEOUT_S):
            for _ in range(_LIST_PAGES):
                page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(McpTool(self, t) for t in page.tools)
                cursor = page.next_cursor
                if not cursor:
                    break
        return tools

    async def call(self, tool: McpTool, arguments: dict[str, Any]) -> ToolOutput:
        client = self.client
        where = f"MCP server {self.config.name!r}"
        if client is None or self.health.ended:
            return tool_use_error(f"{where} is not connected: {self.problem()}")
        try:
            result = await client.call_tool(tool.remote_name, arguments)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as exc:
            if self.health.ended or self.health.junk:
                return tool_use_error(f"{where} failed during {tool.name}: {self.problem()}")
            return tool_use_error(f"{where} failed during {tool.name}: {_what(exc)}")
        return tool_output(tool.name, result, self._owner.max_output_chars)


class _ClosingHttp:
    """The SDK's HTTP transport, closing the httpx client it was given when it ends."""

    def __init__(self, inner: Any, http: Any) -> None:
        self._inner = inner
        self._http = http

    async def __aenter__(self) -> Any:
        return await self._inner.__aenter__()

    async def __aexit__(self, *exc: Any) -> Any:
        try:
            return await self._inner.__aexit__(*exc)
        finally:
            with anyio.CancelScope(shield=True):
                await self._http.aclose()


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("steploop")
    except PackageNotFoundError:
        return "0+unknown"


def _what(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    text = " ".join(str(exc).split())[:300]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class McpServers:
    """The MCP servers of a session; use as ``async with McpServers(...) as servers``.

    Args:
        servers: the configurations, as :class:`McpServerConfig` or as Claude Code's JSON
            (``{"name": {"command": ...}}``, or ``{"mcpServers": {...}}``).
        workspace: where stdio servers run (a relative ``cwd`` is taken from it).
        startup_timeout_s: how long a server may take to connect and list its tools
            (Claude Code's ``MCP_TIMEOUT``, 30 s).
        max_output_chars: the cap on a result's text (None: ``MAX_MCP_OUTPUT_TOKENS`` × 4,
            else 100,000).
        max_message_bytes: a stdio line longer than this ends the server's connection.
    """

    def __init__(
        self,
        servers: Mapping[str, Any] | Iterable[McpServerConfig],
        *,
        workspace: str | Path = ".",
        startup_timeout_s: float = 30.0,
        max_output_chars: int | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        _require_sdk()
        if isinstance(servers, Mapping):
            configs = [
                v if isinstance(v, McpServerConfig) else parse_mcp_servers({k: v})[k]
                for k, v in servers.get("mcpServers", servers).items()
            ]
        else:
            configs = list(servers)
        self.workspace = Path(workspace).resolve()
        self.startup_timeout_s = startup_timeout_s
        self.max_output_chars = (
            max_output_chars if max_output_chars is not None else results.max_output_chars()
        )
        self.max_message_bytes = max_message_bytes
        self.notices: list[str] = []
        """One line per server that failed to connect, saying why."""
        self._connections = [_Connection(c, self) for c in configs]
        self._tg: Any = None
        self.entered = False

    async def __aenter__(self) -> McpServers:
        if self.entered:
            raise RuntimeError("McpServers can be entered once")
        self.entered = True
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        for conn in self._connections:
            self._tg.start_soon(conn.serve, name=f"steploop mcp ({conn.config.name})")
        for conn in self._connections:
            await conn.ready.wait()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Close every connection (an exception of the block goes on as it was)."""
        for conn in self._connections:
            conn.closing.set()
        await self._tg.__aexit__(None, None, None)

    def status(self) -> dict[str, str]:
        """Each server's state: ``connected``, ``failed: WHY`` (it never connected), ``ended:
        WHY`` (its connection ended) or ``closed``."""
        out: dict[str, str] = {}
        for c in self._connections:
            if c.state == "failed":
                out[c.config.name] = f"failed: {c.reason}"
            elif c.health.ended:
                out[c.config.name] = f"ended: {c.health.ended}"
            else:
                out[c.config.name] = c.state
        return out

    def tools(self) -> list[McpTool]:
        """The tools of every connected server, server by server, in their listed order."""
        out: list[McpTool] = []
        for conn in self._connections:
            if conn.client is not None and not conn.health.ended:
                out.extend(conn.tools)
        return out

    async def refresh(self) -> None:
        """List again the servers that said their tools changed; a listing that fails keeps
        the last one. Servers whose connection ended have no tools from now on."""
        for conn in self._connections:
            client = conn.client
            if client is None or not conn.changed or conn.health.ended:
                continue
            conn.changed = False
            try:
                conn.tools = await conn.list(client)
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as exc:
                self.notices.append(f"mcp: {conn.config.name}: listing its tools failed: {_what(exc)}")
