"""The gate's proxy: one checked request per connection, sent on to the engine.

Each connection carries one request. Its head and body are read (a body only
with ``Content-Length``, at most 1 MiB), ``rules.plan`` and ``rules.judge`` decide,
and the request written out again from the decision goes to the engine with
``Connection: close``; the engine's answer is copied back and both connections
end. A refusal is a ``403`` with Docker's error body (``{"message": …}``), which
the docker SDK raises as ``APIError`` with that message. An attach (``Upgrade:
tcp``) becomes the container's stream, copied both ways until either side
closes; then the gate removes that sandbox container itself, so a worker that
dies mid-run (its connection dropped by the kernel) leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from dataclasses import dataclass

from .creates import Policy
from .rules import MAX_BODY, VERSION_PREFIX, Denied, Plan, Request, join, judge, plan
from .targets import Targets

log = logging.getLogger("dockergate")

HEAD_LIMIT = 64 * 1024
HEAD_TIMEOUT = 30.0
PASSED_HEADERS = ("user-agent", "content-type", "accept")


@dataclass(frozen=True)
class Engine:
    """Where the engine listens: a unix socket path, or ``host:port``."""

    address: str

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.address.startswith("/"):
            return await asyncio.open_unix_connection(self.address, limit=HEAD_LIMIT)
        host, _, port = self.address.rpartition(":")
        return await asyncio.open_connection(host, int(port), limit=HEAD_LIMIT)

    async def call(self, method: str, target: str) -> tuple[int, bytes]:
        """One bodiless call of the gate's own; the status and the body."""
        reader, writer = await self.connect()
        try:
            writer.write(
                f"{method} {target} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n".encode()
            )
            await writer.drain()
            first, headers = _head(await reader.readuntil(b"\r\n\r\n"))
            status = int(first.split(" ", 2)[1])
            body = await reader.read()
            if headers.get("transfer-encoding", "").lower() == "chunked":
                body = _dechunk(body)
            return status, body
        finally:
            writer.close()


def _head(head: bytes) -> tuple[str, dict[str, str]]:
    """A request's or response's first line, and its headers by lower-cased name."""
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return lines[0], headers


def _dechunk(data: bytes) -> bytes:
    out, rest = bytearray(), data
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        rest = rest[size + 2 :]
    return bytes(out)


def _answer(status: int, reason: str, message: str) -> bytes:
    body = json.dumps({"message": message}).encode()
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


class Gate:
    """The proxy's state: what it lets through, and where the engine is."""

    def __init__(self, engine: Engine, policy: Policy, targets: Targets) -> None:
        self.engine = engine
        self.policy = policy
        self.targets = targets

    async def serve(self, host: str, port: int) -> asyncio.Server:
        return await asyncio.start_server(self.handle, host, port, limit=HEAD_LIMIT)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        try:
            await self._handle(reader, writer, peer)
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
        ):
            pass
        except Exception:
            log.exception("gate: request from %s failed", peer)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader, writer, peer) -> None:
        first, headers = _head(await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT))
        method, target, _version = (first.split(" ") + ["", "", ""])[:3]
        if "transfer-encoding" in headers:
            writer.write(
                _answer(400, "Bad Request", "the gate takes bodies with Content-Length only")
            )
            return
        try:
            length = int(headers.get("content-length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            writer.write(_answer(413, "Payload Too Large", f"a body is at most {MAX_BODY} bytes"))
            return
        body = await asyncio.wait_for(reader.readexactly(length), HEAD_TIMEOUT)
        try:
            address = peer[0] if isinstance(peer, tuple) else str(peer or "")
            planned = plan(Request(method, target, body, address), self.policy)
            if planned.joins:
                planned = join(planned, await self._inspect(planned.joins), address)
            if planned.container:
                container = await self._inspect(planned.container)
                planned = judge(planned, container, self.targets, address)
        except LookupError:
            writer.write(_answer(404, "Not Found", f"No such container: {planned.container}"))
            return
        except OSError as exc:
            writer.write(
                _answer(502, "Bad Gateway", f"the Docker gate cannot reach the engine: {exc}")
            )
            return
        except Denied as exc:
            log.warning("gate: refused %s %s from %s: %s", method, target[:200], peer, exc)
            writer.write(_answer(403, "Forbidden", f"refused by the Docker gate: {exc}"))
            return
        prefix = VERSION_PREFIX.match(target)
        await self._forward(planned, (prefix.group(0) if prefix else ""), headers, reader, writer)

    async def _inspect(self, name: str) -> dict | None:
        status, body = await self.engine.call("GET", f"/containers/{name}/json")
        if status == 404:
            return None
        if status != 200:
            raise Denied(f"the engine could not say what container {name} is ({status})")
        return json.loads(body)

    async def _forward(self, planned: Plan, prefix: str, headers, reader, writer) -> None:
        try:
            engine_reader, engine_writer = await self.engine.connect()
        except OSError as exc:
            writer.write(
                _answer(502, "Bad Gateway", f"the Docker gate cannot reach the engine: {exc}")
            )
            return
        lines = [f"{planned.method} {prefix}{planned.target} HTTP/1.1", "Host: docker"]
        lines += [f"{name}: {headers[name]}" for name in PASSED_HEADERS if name in headers]
        if planned.body or planned.method in ("POST", "PUT"):
            lines.append(f"Content-Length: {len(planned.body)}")
        lines += (
            ["Connection: Upgrade", "Upgrade: tcp"] if planned.tunnel else ["Connection: close"]
        )
        engine_writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + planned.body)
        try:
            await engine_writer.drain()
            if planned.tunnel:
                await self._tunnel(reader, writer, engine_reader, engine_writer)
            else:
                await _copy(engine_reader, writer)
        finally:
            engine_writer.close()
            if planned.tunnel:
                await self._remove(planned.container)

    async def _tunnel(self, reader, writer, engine_reader, engine_writer) -> None:
        """Both directions until either ends: the worker gone means the sandbox is too."""
        upstream = asyncio.ensure_future(_copy(reader, engine_writer))
        downstream = asyncio.ensure_future(_copy(engine_reader, writer))
        await asyncio.wait({upstream, downstream}, return_when=asyncio.FIRST_COMPLETED)
        for task in (upstream, downstream):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _remove(self, cid: str) -> None:
        with contextlib.suppress(Exception):
            status, _ = await self.engine.call("DELETE", f"/containers/{cid}?force=1")
            if status == 204:
                log.info("gate: removed sandbox %s, its stream ended", cid[:12])


async def _copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    while data := await source.read(65536):
        sink.write(data)
        await sink.drain()
