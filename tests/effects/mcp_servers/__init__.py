"""MCP servers the MCP tests start: one written with the SDK's MCPServer (FastMCP's name before
SDK 2), run over stdio or streamable HTTP, and a raw JSON-RPC server that misbehaves."""
