"""Persistent sessions in a container: its command, and the transport over its attached stdin/stdout."""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ..base import Limits
from ..sessions import RUNNER_SOURCE, SESSION_CPU_SECONDS, SessionTransport
from .channel import MUX_HEADER
from .config import RUNNER_PROCESSES


class DockerSessionTransport(SessionTransport):
    """A session runner's attached stdin/stdout in its own container.

    Demultiplexes docker's attach stream (stdout → "protocol", stderr →
    "stderr"); ``stop`` closes the stream and removes the container.
    """

    SEND_TIMEOUT = 10.0  # the runner's listener always reads; longer means it is stuck

    def __init__(
        self,
        client: Any,
        container: str,
        sock: Any,
        on_stop: Callable[[DockerSessionTransport], None],
    ) -> None:
        self.client = client
        self.container = container
        self._on_stop = on_stop  # removes the container and forgets the session
        self._holder = sock  # keeps docker-py's response (and the connection) alive
        self.sock: socket.socket = getattr(sock, "_sock", sock)
        self.sock.setblocking(False)
        self._mux = bytearray()
        self._eof = False
        self._stopped = False
        self._stop_lock = threading.Lock()

    def wait_started(self, timeout: float) -> None:
        """Wait (without reading) until the runner says something: a cold start can be slow."""
        with contextlib.suppress(OSError, ValueError):
            select.select([self.sock], [], [], timeout)

    def send(self, data: bytes) -> None:
        if self._eof or self._stopped:
            raise OSError("the session's container is gone")
        view = memoryview(data)
        deadline = time.monotonic() + self.SEND_TIMEOUT
        try:
            while view:
                try:
                    sent = self.sock.send(view)
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise OSError("the session's runner stopped reading") from None
                    select.select([], [self.sock], [], 0.5)
                    continue
                view = view[sent:]
        except (OSError, ValueError) as exc:
            self._eof = True  # a half-sent frame: the protocol is broken, the session ends
            raise OSError(str(exc)) from exc

    def receive(self, timeout: float) -> list[tuple[str, bytes]]:
        if self._eof or self._stopped:
            return [("eof", b"")]
        try:
            readable = select.select([self.sock], [], [], timeout)[0]
        except (OSError, ValueError):
            readable, self._eof = [], True
        while readable and not self._eof:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            except OSError:
                data = b""
            if not data:
                self._eof = True
            else:
                self._mux += data
        chunks = self._demux()
        if self._eof:
            chunks.append(("eof", b""))
        return chunks

    def _demux(self) -> list[tuple[str, bytes]]:
        chunks: list[tuple[str, bytes]] = []
        offset = 0
        while len(self._mux) - offset >= MUX_HEADER.size:
            stream, size = MUX_HEADER.unpack_from(self._mux, offset)
            end = offset + MUX_HEADER.size + size
            if len(self._mux) < end:
                break
            payload = bytes(self._mux[offset + MUX_HEADER.size : end])
            chunks.append(("protocol" if stream == 1 else "stderr", payload))
            offset = end
        del self._mux[:offset]
        return chunks

    def stop(self) -> None:
        with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self.sock.close()
        self._on_stop(self)

    def exit_code(self) -> int | None:
        try:
            return self.client.api.wait(self.container, timeout=2)["StatusCode"]
        except Exception:  # already removed (auto_remove) or the engine is slow: unknown
            return None


def session_command(limits: Limits, gvisor: bool) -> list[str]:
    """The interpreter command: rlimits for the session's whole life, then the runner."""
    cpu = limits.cpu_seconds if limits.cpu_seconds is not None else SESSION_CPU_SECONDS
    rlimits = [
        ("RLIMIT_CPU", int(cpu)),
        ("RLIMIT_FSIZE", limits.max_file_size_mb * 1024 * 1024),
        ("RLIMIT_CORE", 0),
    ]
    if gvisor:
        # As for runs: gVisor counts processes per sandbox, the host pids cgroup cannot.
        rlimits.append(("RLIMIT_NPROC", limits.max_processes + RUNNER_PROCESSES))
    prelude = (
        "import resource\n"
        f"for _name, _value in {rlimits!r}:\n"
        "    resource.setrlimit(getattr(resource, _name), (_value, _value))\n"
        "del _name, _value, resource\n"
    )
    return ["python3", "-I", "-S", "-c", prelude + RUNNER_SOURCE]
