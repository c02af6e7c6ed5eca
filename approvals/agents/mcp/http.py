"""``/mcp``: the MCP server over streamable HTTP, in front of Django in the ASGI app.

Stateless: the SDK's session manager serves every POST on its own, with no
session a later request must find in the same process, so any of serve's web
processes answers any request. A tool call's progress notifications stream
on that call's own response.

Every request authenticates with the agent's bearer token (or a user's
personal token); without a valid one it gets a 401 in the API's error shape
before the MCP machinery sees it. Tokens are not ambient like cookies, so a
page in a browser cannot call on a user's behalf (no Origin check needed).

The session manager needs a running task group. Channels' router answers no
lifespan events, and Daphne sends none, so each event loop starts its
manager on its first request, in a task of its own that lives as long as the
loop (Uvicorn cancels it at shutdown).
"""

from __future__ import annotations

import asyncio
import contextvars
import weakref

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

from approvals.agents.mcp.auth import SCOPE_KEY, Refused, authenticate, refusal_body
from approvals.agents.mcp.server import make_server

PATHS = ("/mcp", "/mcp/")


class McpEndpoint:
    """The ASGI app behind ``/mcp``."""

    def __init__(self):
        self.server = make_server()
        self._managers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _RunningManager] = (
            weakref.WeakKeyDictionary()
        )

    async def __call__(self, scope, receive, send) -> None:
        try:
            principal = await authenticate(scope.get("headers", []))
        except Refused as refused:
            await _send_refusal(send, refused.message)
            return
        manager = await self._manager()
        await manager.handle_request({**scope, SCOPE_KEY: principal}, receive, send)

    async def _manager(self) -> StreamableHTTPSessionManager:
        loop = asyncio.get_running_loop()
        running = self._managers.get(loop)
        if running is None or running.stopped:
            running = self._managers[loop] = _RunningManager(self.server)
        return await running.ready()


class _RunningManager:
    """A stateless session manager kept running on one event loop."""

    def __init__(self, server):
        self.manager = StreamableHTTPSessionManager(app=server, stateless=True)
        self._started = asyncio.Event()
        # A context of its own, not the first request's (whose executor ends with it).
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name="mcp-session-manager", context=contextvars.Context()
        )

    @property
    def stopped(self) -> bool:
        return self._task.done()

    async def ready(self) -> StreamableHTTPSessionManager:
        if not self._started.is_set():
            started = asyncio.ensure_future(self._started.wait())
            await asyncio.wait([started, self._task], return_when=asyncio.FIRST_COMPLETED)
            started.cancel()
            if self._task.done():
                self._task.result()  # raises what stopped it
                raise RuntimeError("the MCP session manager stopped")
        return self.manager

    async def _run(self) -> None:
        async with self.manager.run():
            self._started.set()
            await asyncio.Event().wait()  # until the loop shuts down and cancels this task


async def _send_refusal(send, message: str) -> None:
    body = refusal_body(message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b'Bearer realm="airlock"'),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def with_mcp(application):
    """``application`` with ``/mcp`` answered by the MCP endpoint first."""
    endpoint = McpEndpoint()

    async def route(scope, receive, send):
        if scope["type"] == "http" and scope["path"] in PATHS:
            await endpoint(scope, receive, send)
        else:
            await application(scope, receive, send)

    return route
