"""One live connection per upstream and process, with the official SDK's client.

A connection opens on first use (a stdio upstream's process starts then) and
stays open: a task of its own holds the client's context, since the SDK's
task groups must be entered and left by one task, while calls come from the
tasks of many requests. An upstream whose process died, or whose connection
closed, is opened again on the next use; the call that found it dead is
never sent again (nothing is called upstream twice). A stdio upstream runs in
a sandbox (``executions.sandboxes.confined_server``): nothing of Airlock's
environment, data dir, database or keys, only the host's system dirs, its
installation and the paths its configuration lists, and of the network only
the hosts its ``network`` lists (none by default), through a proxy; one with an
``image`` runs as a container of it, whose only way out is the same proxy
(under gVisor where that is the sandbox backend, with no network at all; through
the Docker gate in the scale deployment); its stderr
goes to this module's log, a line at a time, named. A changed configuration
(its fingerprint) closes the old connection and opens a new one; while a
process holds connections it reads the upstreams again every few seconds
(``Pool.watch``), so one removed, disabled or changed ends there too, whether a
call reaches that process or not.

Everything here is async and reads no database: the caller resolves the
upstreams (``targets``) on a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from approvals.gateway.config import REFERENCE, fingerprint, hidden_paths, row_of
from approvals.gateway.models import Upstream
from executions.sandboxes import ConfinedServer, SandboxUnavailable, ServerSpec, confined_server

if TYPE_CHECKING:  # the MCP client is imported where it connects: a process that never does
    import mcp_types as types  # (a manage command, a worker) does not pay its import
    from mcp.client import Client

log = logging.getLogger(__name__)

CONNECT_SECONDS = 20  # to start a stdio upstream, or reach an HTTP one, and shake hands
LIST_SECONDS = 15
TOOLS_FRESH_SECONDS = 30  # a listing is read again after this long
RETRY_SECONDS = 10  # an upstream that could not be opened is not tried again sooner
WATCH_SECONDS = 5  # how soon a process ends the server of an upstream removed or changed
SEPARATOR = "__"  # <server>__<tool> on Airlock's /mcp


class UpstreamDown(Exception):
    """The upstream could not be reached, died, or did not answer in time; the message says which."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class Target:
    """An enabled upstream, resolved: ``${NAME}`` references read from Airlock's environment."""

    name: str
    transport: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    read: tuple[str, ...]
    write: tuple[str, ...]
    network: tuple[str, ...]  # host:port it may reach, through its proxy
    hidden: tuple[str, ...]  # Airlock's own paths, which its sandbox never shows
    url: str
    headers: tuple[tuple[str, str], ...]
    timeout_seconds: int
    fingerprint: str
    missing: tuple[str, ...] = ()  # environment variables referenced but not set
    image: str = ""  # run from this image, as a container, rather than a host command


def _resolve(values: dict[str, str], missing: set[str]) -> tuple[tuple[str, str], ...]:
    def one(match) -> str:
        value = os.environ.get(match.group(1))
        if value is None:
            missing.add(match.group(1))
            return ""
        return value

    return tuple((name, REFERENCE.sub(one, value)) for name, value in sorted(values.items()))


def target_of(upstream: Upstream) -> Target:
    missing: set[str] = set()
    env, headers = _resolve(upstream.env, missing), _resolve(upstream.headers, missing)
    return Target(
        name=upstream.name,
        transport=upstream.transport,
        image=upstream.image,
        command=tuple(upstream.command),
        env=env,
        read=tuple(upstream.read),
        write=tuple(upstream.write),
        network=tuple(upstream.network),
        hidden=tuple(path for _, path in hidden_paths()),
        url=upstream.url,
        headers=headers,
        timeout_seconds=upstream.timeout_seconds,
        fingerprint=fingerprint(row_of(upstream)),
        missing=tuple(sorted(missing)),
    )


def targets() -> list[Target]:
    """The enabled upstreams, in name order (reads the database: call on a thread)."""
    return [target_of(upstream) for upstream in Upstream.objects.filter(enabled=True)]


def _client(target: Target, stack: contextlib.AsyncExitStack, heard: list[Heard]) -> Client:
    import httpx2
    from mcp.client import Client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if target.transport == Upstream.Transport.STDIO:
        server = _confined(target)
        stack.callback(server.cleanup)  # after the process has ended (entered first)
        parameters = StdioServerParameters(
            command=server.argv[0], args=server.argv[1:], env=server.env
        )
        heard.append(Heard(target.name, stack))
        return Client(stdio_client(parameters, errlog=heard[-1].file))
    http = httpx2.AsyncClient(
        headers=dict(target.headers),
        timeout=httpx2.Timeout(CONNECT_SECONDS, read=target.timeout_seconds + 5),
    )
    stack.push_async_callback(http.aclose)
    return Client(streamable_http_client(target.url, http_client=http))


def _confined(target: Target) -> ConfinedServer:
    """The upstream's command in a sandbox: no view of Airlock's data or environment, the
    host's system dirs and the paths it was given, a scratch /work, and of the network
    only the hosts its ``network`` lists."""
    spec = ServerSpec(
        name=target.name,
        argv=target.command,
        env=target.env,
        read=target.read,
        write=target.write,
        network=target.network,
        hidden=target.hidden,
        image=target.image,
    )
    try:
        return confined_server(spec)
    except SandboxUnavailable as exc:
        raise UpstreamDown(f"upstream {target.name} cannot be sandboxed: {exc}") from None


class Heard:
    """A pipe for the upstream's stderr whose lines go to this module's log, named; the
    last one is kept, to say why a server that would not start ended."""

    def __init__(self, name: str, stack: contextlib.ExitStack | contextlib.AsyncExitStack):
        self.name, self.last = name, ""
        read_fd, write_fd = os.pipe()
        self.reader = threading.Thread(
            target=self._log_lines, args=(read_fd,), name=f"upstream {name} stderr", daemon=True
        )
        self.reader.start()
        self.file = os.fdopen(write_fd, "w")
        stack.callback(self.file.close)  # the process holds its own copy; EOF once it has ended

    def _log_lines(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as lines:
            for line in lines:
                text = line.decode("utf-8", errors="replace").rstrip()
                if text:
                    self.last = text[:2000]
                    log.warning("upstream %s: %s", self.name, self.last)

    def said(self, timeout: float = 1.0) -> str:
        """Its last line, once the process has ended (its stderr closed), within ``timeout``."""
        self.reader.join(timeout)
        return _clipped(self.last)


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, FileNotFoundError):
        return f"its command was not found ({error.filename or error})"
    import httpx2

    if isinstance(error, httpx2.ConnectError):
        return f"it refused the connection ({error})"
    text = str(error) or type(error).__name__
    return _clipped(text)


def _clipped(text: str) -> str:
    """At most 300 characters of ``text``, for an error message."""
    return text if len(text) < 300 else text[:299] + "…"


@dataclass
class Connection:
    """The live client of one upstream in this process, opened again after it died."""

    target: Target
    opened: int = 0  # how many times it was opened (a restart adds one)
    tools: list[types.Tool] | None = None
    tools_at: float = 0.0
    failure: UpstreamDown | None = None  # why it could not be opened, lately
    failed_at: float = float("-inf")
    _client: Client | None = None
    _owner: asyncio.Task | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def alive(self) -> bool:
        return self._client is not None and self._owner is not None and not self._owner.done()

    async def client(self) -> Client:
        async with self._lock:
            if not self.alive:
                if self.failure and time.monotonic() - self.failed_at < RETRY_SECONDS:
                    raise self.failure  # no agent waits on a start that just failed
                try:
                    await self._open()
                except UpstreamDown as exc:
                    self.failure, self.failed_at = exc, time.monotonic()
                    raise
                self.failure = None
            assert self._client is not None
            return self._client

    async def _open(self) -> None:
        name = self.target.name
        if self.target.missing:
            raise UpstreamDown(
                f"upstream {name} is not configured: environment variable(s) "
                f"{', '.join(self.target.missing)} are not set where Airlock runs"
            )
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._stop = stop = asyncio.Event()
        self._owner = asyncio.create_task(self._own(ready, stop), name=f"upstream {name}")
        try:
            self._client = await asyncio.wait_for(asyncio.shield(ready), CONNECT_SECONDS)
        except TimeoutError:
            self._owner.cancel()
            raise UpstreamDown(
                f"upstream {name} did not answer within {CONNECT_SECONDS} s of starting"
            ) from None
        self.opened += 1
        self.tools = None
        if self.opened > 1:
            log.warning("upstream %s opened again (%d times in all)", name, self.opened)

    async def _own(self, ready: asyncio.Future, stop: asyncio.Event) -> None:
        """Hold the client's context until told to stop or the connection ends."""
        client, heard = None, []
        try:
            async with contextlib.AsyncExitStack() as stack:
                client = await stack.enter_async_context(_client(self.target, stack, heard))
                ready.set_result(client)
                await stop.wait()
        except BaseException as exc:  # noqa: BLE001 - whatever ended it, the next use reopens
            if not ready.done():
                said = ""
                if heard and not isinstance(exc, asyncio.CancelledError):
                    said = await asyncio.to_thread(heard[0].said)
                message = f"upstream {self.target.name} is unreachable: {_describe(exc)}"
                ready.set_exception(UpstreamDown(message + (f" (it said: {said})" if said else "")))
            elif not isinstance(exc, asyncio.CancelledError):
                log.warning("upstream %s closed: %s", self.target.name, _describe(exc))
        finally:
            if self._client is client:  # not a newer connection's
                self._client = None

    def close(self) -> None:
        """Stop using this connection at once (the next use opens a new one) and let it end."""
        self._client = None
        self._stop.set()

    async def ended(self, timeout: float = 5) -> None:
        """Close, and wait until the connection has ended (a stdio upstream's process reaped)."""
        self.close()
        if self._owner is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._owner), timeout)

    async def list_tools(self) -> list[types.Tool]:
        """The upstream's tools, read again when older than ``TOOLS_FRESH_SECONDS``."""
        if self.tools is not None and time.monotonic() - self.tools_at < TOOLS_FRESH_SECONDS:
            return self.tools
        for attempt in (1, 2):  # reading twice is harmless: a listing changes nothing
            client = await self.client()
            try:
                tools, cursor = [], None
                while True:
                    page = await asyncio.wait_for(client.list_tools(cursor=cursor), LIST_SECONDS)
                    tools.extend(page.tools)
                    cursor = page.next_cursor
                    if not cursor:
                        break
            except TimeoutError:
                raise UpstreamDown(
                    f"upstream {self.target.name} did not list its tools within {LIST_SECONDS} s"
                ) from None
            except Exception as exc:
                self.close()
                if attempt == 2:
                    raise UpstreamDown(
                        f"upstream {self.target.name} failed to list its tools: {_describe(exc)}"
                    ) from None
                continue
            self.tools, self.tools_at = tools, time.monotonic()
            return tools
        raise AssertionError("unreachable")

    async def call(self, tool: str, arguments: dict) -> types.CallToolResult:
        """Call ``tool`` once; never again, whatever happens to the connection."""
        from mcp.shared.exceptions import MCPError
        from mcp_types.jsonrpc import CONNECTION_CLOSED

        name, timeout = self.target.name, self.target.timeout_seconds
        client = await self.client()
        try:
            return await asyncio.wait_for(client.call_tool(tool, arguments), timeout)
        except TimeoutError:
            raise UpstreamDown(
                f"upstream {name} did not answer {tool} within {timeout} s; the call may or may "
                "not have taken effect there"
            ) from None
        except MCPError as exc:
            if exc.error.code != CONNECTION_CLOSED:
                raise UpstreamDown(f"upstream {name} refused {tool}: {exc.error.message}") from None
            self.close()
            raise UpstreamDown(
                f"upstream {name} closed the connection during {tool} (it is started again on "
                "the next call); the call may or may not have taken effect there"
            ) from None
        except Exception as exc:
            self.close()
            raise UpstreamDown(
                f"upstream {name} failed during {tool}: {_describe(exc)}; the call may or may "
                "not have taken effect there"
            ) from None


class Pool:
    """This event loop's connections, by upstream name.

    While it holds any, it reads the upstreams again every ``WATCH_SECONDS``
    (``watch``) and ends those removed, disabled or changed since: a process
    that no call or listing reaches ends its servers all the same.
    """

    def __init__(self) -> None:
        self.connections: dict[str, Connection] = {}
        self._watcher: asyncio.Task | None = None

    def connection(self, target: Target) -> Connection:
        current = self.connections.get(target.name)
        if current is not None and current.target.fingerprint == target.fingerprint:
            return current
        if current is not None:
            current.close()  # its configuration changed
        current = self.connections[target.name] = Connection(target)
        return current

    def keep_current(self, found: list[Target]) -> None:
        """Close the connections of upstreams removed, disabled or changed since."""
        fingerprints = {target.name: target.fingerprint for target in found}
        for name, connection in list(self.connections.items()):
            if fingerprints.get(name) != connection.target.fingerprint:
                self.connections.pop(name).close()

    def watch(self, resolve: Callable[[], Awaitable[list[Target]]]) -> None:
        """Keep the connections current with ``resolve()`` (the enabled upstreams, read on a
        thread) while there are any."""
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.get_running_loop().create_task(
                self._watching(resolve), name="upstreams watcher"
            )

    async def _watching(self, resolve: Callable[[], Awaitable[list[Target]]]) -> None:
        while self.connections:
            await asyncio.sleep(WATCH_SECONDS)
            try:
                self.keep_current(await resolve())
            except Exception:  # noqa: BLE001 - a database away for a moment: read again later
                log.warning(
                    "could not read the upstreams to keep connections current", exc_info=True
                )


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = weakref.WeakKeyDictionary()


def pool() -> Pool:
    loop = asyncio.get_running_loop()
    if loop not in _pools:
        _pools[loop] = Pool()
    return _pools[loop]


def check(target: Target) -> list[str]:
    """The tools ``target`` lists, as ``<server>__<tool>``, from a connection opened for this
    and closed (for a command or a console page, outside any event loop); ``UpstreamDown``."""

    async def listed() -> list[str]:
        connection = Connection(target)
        try:
            return [
                f"{target.name}{SEPARATOR}{tool.name}" for tool in await connection.list_tools()
            ]
        finally:
            # Its process is reaped before the loop closes: else asyncio's child watcher
            # reports the exit to a closed loop ("Loop … that handles pid … is closed").
            await connection.ended()

    return asyncio.run(listed())


def split(name: str) -> tuple[str, str] | None:
    """``github__merge_pull_request`` → ``("github", "merge_pull_request")``."""
    server, separator, tool = name.partition(SEPARATOR)
    return (server, tool) if separator and server and tool else None
