"""The MCP server: the caller's tools, and the answers to their calls.

Built on the official SDK's low-level ``Server``. The caller is the principal
the HTTP endpoint authenticated (``approvals.agents.mcp.http``), read off the
request each handler receives.
"""

from __future__ import annotations

import logging
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError

from approvals.agents.mcp import calls, gateway, results
from approvals.agents.mcp.auth import SCOPE_KEY, UNAUTHENTICATED_CODE, Principal
from approvals.agents.mcp.context import Call, Progress
from approvals.agents.mcp.tools import Catalog
from approvals.gateway.connections import split

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "Airlock stands between you and real infrastructure. Each action tool (scripts, sandbox "
    "sessions, Docker and host operations) proposes the action: policy and risk scoring approve "
    "it at once, deny it, or hold it for human reviewers, and approved work runs in a sandbox or "
    "on a worker. A call returns when the run ends, with stdout, stderr and the exit code. Give a "
    "reason reviewers can judge, and an idempotency_key whenever you might retry. If a call "
    "returns a proposal that is still pending, call get_proposal with its id later, or "
    "withdraw it once you no longer need it. A refusal to propose (too_many_pending, "
    "rate_limited) says how many seconds to wait; agent_paused means an admin must resume "
    "you. You cannot approve or reject proposals: people do."
)

_catalog: Catalog | None = None


def catalog() -> Catalog:
    """Every tool, generated once per process from the action catalog."""
    global _catalog
    if _catalog is None:
        _catalog = Catalog(calls.all_tools())
    return _catalog


def principal_of(ctx: ServerRequestContext) -> Principal:
    request = ctx.request
    principal = request.scope.get(SCOPE_KEY) if request is not None else None
    if principal is None:  # only the authenticating endpoint serves this server
        raise MCPError(UNAUTHENTICATED_CODE, "not authenticated")
    return principal


async def list_tools(
    ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    principal = principal_of(ctx)
    upstreams = await gateway.listed_for(principal)
    return types.ListToolsResult(tools=catalog().listed_for(principal) + upstreams)


async def call_tool(
    ctx: ServerRequestContext, params: types.CallToolRequestParams
) -> types.CallToolResult:
    principal = principal_of(ctx)
    tool = catalog().get(params.name)
    if tool is None and split(params.name) is None:
        raise MCPError(
            types.INVALID_PARAMS, f"unknown tool {params.name!r}; tools/list shows yours"
        )
    call = Call(principal, Progress(ctx.session.report_progress))
    try:
        if tool is None:  # <server>__<tool>: an upstream's, through the gateway
            return await gateway.call(call, params.name, params.arguments or {})
        return await calls.run(call, tool, params.arguments or {})
    except Exception:
        log.exception("MCP tool %s failed", params.name)
        return results.tool_error(f"{params.name} failed inside Airlock; the error was logged")


def input_schema(name: str) -> dict[str, Any] | None:
    return catalog().input_schema(name)


def make_server() -> Server:
    try:
        airlock_version = version("airlock")
    except PackageNotFoundError:
        airlock_version = ""
    return Server(
        "airlock",
        version=airlock_version,
        title="Airlock",
        instructions=INSTRUCTIONS,
        get_tool_input_schema=input_schema,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )
