"""The stdio bridge: Airlock's MCP tools for clients that only launch a command.

A desktop client starts ``manage.py mcp-stdio --url URL`` and speaks MCP on
its stdin and stdout; the bridge relays every request to a running Airlock's
``/mcp`` with the agent's token and passes progress notifications back as
they arrive. Both ends are the official SDK's: a low-level server on stdio,
a client over streamable HTTP. Nothing is decided here: the tools, their
schemas and every answer are the server's.
"""

from __future__ import annotations

import httpx2
import mcp_types as types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

TOKEN_ENV = "AIRLOCK_TOKEN"
# A waiting call's stream carries a progress notification every 15 s at least.
TIMEOUT = httpx2.Timeout(30.0, read=300.0)


def relay(upstream: Client) -> Server:
    """A server whose tools are ``upstream``'s, answered by ``upstream``."""

    async def list_tools(
        ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return await upstream.list_tools(cursor=params.cursor if params else None)

    async def call_tool(
        ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        async def progress(value: float, total: float | None, message: str | None) -> None:
            await ctx.session.report_progress(value, total, message)

        # Progress is always asked for upstream: it keeps a long wait's stream busy.
        return await upstream.call_tool(params.name, params.arguments, progress_callback=progress)

    info = upstream.server_info
    return Server(
        info.name if info else "airlock",
        version=info.version if info else "",
        title=info.title if info else None,
        instructions=upstream.instructions,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


async def bridge(url: str, token: str) -> None:
    """Serve stdin and stdout until the client closes them; ``MCPError`` if Airlock refuses."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT)
    async with http, Client(streamable_http_client(url, http_client=http)) as upstream:
        server = relay(upstream)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())
