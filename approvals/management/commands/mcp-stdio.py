"""``manage.py mcp-stdio --url URL``: Airlock's MCP tools on stdin and stdout.

For MCP clients that only launch commands: they start this, and it relays to
a running Airlock's ``/mcp`` with the agent token in ``AIRLOCK_TOKEN``.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
from django.core.management.base import BaseCommand, CommandError
from mcp.shared.exceptions import MCPError

from approvals.agents.mcp.stdio import TOKEN_ENV, bridge
from infrastructure import tracing


class Command(BaseCommand):
    help = (
        "Serve Airlock's MCP tools over stdio by relaying to a running Airlock "
        f"(the agent's token in {TOKEN_ENV})."
    )
    requires_system_checks = []  # relays only: no database, no checks, a quick start

    def add_arguments(self, parser):
        parser.add_argument(
            "--url",
            required=True,
            help="the running Airlock, e.g. http://127.0.0.1:8000 (its /mcp endpoint)",
        )

    def handle(self, *args, url: str, **options) -> None:
        token = os.environ.get(TOKEN_ENV, "").strip()
        if not token:
            raise CommandError(f"set {TOKEN_ENV} to the agent's token")
        endpoint = mcp_endpoint(url)
        tracing.configure("airlock-mcp-stdio")  # the client's trace, relayed in each call's _meta
        try:
            anyio.run(bridge, endpoint, token)
        except BaseException as exc:  # the SDK's task groups wrap what went wrong
            problem = _cause(exc)
            if isinstance(problem, MCPError):
                raise CommandError(f"{endpoint} refused: {problem.message}") from None
            if isinstance(problem, httpx2.HTTPError | OSError):
                raise CommandError(f"cannot reach {endpoint}: {problem}") from None
            raise


def mcp_endpoint(url: str) -> str:
    """``url`` itself, or its ``/mcp`` when it names only the server."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise CommandError(f"--url {url!r}: give an http:// or https:// URL of Airlock")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/mcp")
    return urlunsplit(parts)


def _cause(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
