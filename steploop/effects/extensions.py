"""What a run adds for embedding, beside the machine: MCP servers and their tools, the refresh
of the tool list (specs/ R-REFRESH-1, E-MCP-5), telemetry spans (E-OTEL-1).

:class:`RunExtensions` is the interpreter's (:mod:`steploop.effects.run`) one object for them:
it connects the MCP servers a run was given as configurations (and closes them when the run
ends), keeps the registry's ``mcp`` group equal to the servers' current tools and tells the
model client when the list changed (a client with ``set_tools(definitions)``, as
:class:`~steploop.effects.model.AnthropicModelClient` has), answers ``RefreshTools`` with the
list, and opens the turn's spans.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from steploop.effects.tools.base import ToolRegistry

__all__ = ["MCP_GROUP", "RunExtensions"]

#: The registry group MCP servers' tools are kept in.
MCP_GROUP = "mcp"


class RunExtensions:
    """The MCP servers and telemetry of one run.

    ``mcp_servers``: an :class:`~steploop.effects.mcp.McpServers` (entered by the caller, or
    entered and closed by the run when it is not yet), or configurations for one (a mapping of
    names to :class:`~steploop.effects.mcp.McpServerConfig` or to Claude Code's JSON), which
    the run connects for the turn. ``telemetry``: a :class:`~steploop.effects.telemetry.Telemetry`.
    """

    def __init__(
        self,
        *,
        tools: ToolRegistry,
        model: object,
        workspace: Path,
        mcp_servers: Any = None,
        telemetry: Any = None,
    ) -> None:
        self._tools = tools
        self._model = model
        self._workspace = workspace
        self._given = mcp_servers
        self.servers: Any = None
        self._owned = False
        self.telemetry = telemetry
        self.notices: list[str] = []
        """One line per thing the user should hear of: a server that failed, a tool refused."""

    async def enter(self) -> None:
        """Connect the servers the run owns; put their tools in the registry."""
        given = self._given
        if given is None:
            return
        from steploop.effects.mcp import McpServers

        if isinstance(given, McpServers):
            self.servers = given
            if not given.entered:
                await given.__aenter__()
                self._owned = True
        elif isinstance(given, Mapping):
            self.servers = McpServers(given, workspace=self._workspace)
            await self.servers.__aenter__()
            self._owned = True
        else:
            raise TypeError(
                f"mcp_servers must be an McpServers or a mapping of configurations, not "
                f"{type(given).__name__}"
            )
        self.notices.extend(self.servers.notices)
        self.sync()

    async def exit(self) -> None:
        """Close the servers the run connected, and take their tools out of the registry."""
        if self._owned:
            self._owned = False
            try:
                await self.servers.__aexit__(None, None, None)
            finally:
                self._tools.set_group(MCP_GROUP, ())

    def sync(self) -> bool:
        """Make the registry's MCP tools the servers' current ones; whether they changed."""
        if self.servers is None:
            return False
        before = self._tools.version
        self.notices.extend(self._tools.set_group(MCP_GROUP, self.servers.tools()))
        if self._tools.version == before:
            return False
        tell = getattr(self._model, "set_tools", None)
        if callable(tell):
            tell(self._tools.definitions())
        return True

    async def refresh(self) -> tuple[tuple[str, ...], str]:
        """The tool list as it is now (``RefreshTools``'s answer): the names and the digest,
        after listing again the servers that said their tools changed."""
        if self.servers is not None:
            await self.servers.refresh()
            self.sync()
        return self._tools.names, self._tools.digest()

    def spans(self, *, session_id: str, config: Any, start_ms: int) -> Any:
        """The turn's spans, under the context current now; None without telemetry."""
        if self.telemetry is None:
            return None
        return self.telemetry.turn(session_id=session_id, config=config, start_ms=start_ms)
