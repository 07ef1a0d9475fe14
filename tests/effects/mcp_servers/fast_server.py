"""An MCP server written with the SDK's MCPServer (FastMCP before SDK 2), for the MCP tests.

Run as ``python fast_server.py`` (stdio) or ``python fast_server.py http PORT`` (streamable
HTTP on 127.0.0.1). Its tools: ``add`` (annotated read-only), ``echo``, ``picture`` (an image
and a text), ``weather`` (structured content only), ``fail`` (an error result), ``grow`` (adds
the tool ``added`` and says the list changed), ``nap`` (sleeps), ``die`` (the process exits).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ImageContent, TextContent, ToolAnnotations

server = MCPServer("fast")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    return text


@server.tool()
def picture() -> CallToolResult:
    """A one-pixel picture and a caption."""
    return CallToolResult(
        content=[
            ImageContent(type="image", data="iVBORw0KGgo=", mime_type="image/png"),
            TextContent(type="text", text="a pixel"),
        ]
    )


@server.tool()
def weather(city: str) -> CallToolResult:
    """The weather, as structured content only."""
    return CallToolResult(content=[], structured_content={"city": city, "celsius": 21})


@server.tool()
def fail() -> CallToolResult:
    """An error result."""
    return CallToolResult(content=[TextContent(type="text", text="the disk is full")], is_error=True)


@server.tool()
async def grow(ctx: Context) -> str:
    """Add the tool `added` and tell the client its list changed."""
    server.add_tool(lambda: "added says hi", name="added", description="Added while running.")
    await ctx.session.send_tool_list_changed()
    return "grown"


@server.tool()
async def nap(seconds: float) -> str:
    """Sleep, then answer."""
    await anyio.sleep(seconds)
    return "rested"


@server.tool()
def die() -> str:
    """The server process exits."""
    os._exit(3)


def main(argv: list[str]) -> Any:
    if len(argv) > 2 and argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[2]))
    else:
        server.run()


if __name__ == "__main__":
    main(sys.argv)
