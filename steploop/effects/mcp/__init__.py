"""Tools from MCP servers (the Model Context Protocol), configured as Claude Code users do.

Install the SDK with ``pip install 'steploop[mcp]'``. Configurations are read without it::

    from steploop.effects.mcp import McpServers, mcp_servers_from

    configs, notes = mcp_servers_from(workspace=".", config_files=["servers.json"])
    async with McpServers(configs, workspace=".") as servers:
        registry.set_group("mcp", servers.tools())

or give the configurations to ``run(..., mcp_servers=configs)``, which connects them for the
turn, offers their tools and refreshes the list at the end of each tool round.

- :mod:`steploop.effects.mcp.config`: ``.mcp.json``, ``mcpServers`` in settings, ``--mcp-config``;
- :mod:`steploop.effects.mcp.servers`: the connections and :class:`McpTool`;
- :mod:`steploop.effects.mcp.transport`: stdio servers under steploop's process supervisor;
- :mod:`steploop.effects.mcp.results`: a ``CallToolResult`` as a tool result.
"""

from steploop.effects.mcp.config import (
    McpConfigError,
    McpServerConfig,
    load_mcp_config,
    mcp_servers_from,
    parse_mcp_servers,
)
from steploop.effects.mcp.results import DEFAULT_MAX_OUTPUT_CHARS, tool_output
from steploop.effects.mcp.servers import McpServers, McpTool, mcp_tool_name

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "McpConfigError",
    "McpServerConfig",
    "McpServers",
    "McpTool",
    "load_mcp_config",
    "mcp_servers_from",
    "mcp_tool_name",
    "parse_mcp_servers",
    "tool_output",
]
