"""Persistent sandbox sessions (MISSION §2 ``sandbox.*``): state survives between executes.

A session is one long-lived, sandboxed Python process running ``RUNNER_SOURCE``,
which executes each snippet in one persistent namespace. Every session is its
own process tree (with the local backend: its own run uid and namespaces), so
sessions never see each other's state.

The runner speaks a small framed protocol so any backend can host it:

- host → runner, on the runner's stdin: ``x`` + JSON ``{"code": ...}`` runs a
  snippet; ``i`` interrupts the running one (KeyboardInterrupt).
- runner → host, on the runner's stdout: ``r`` ready, ``o``/``e`` output
  bytes of the snippet's stdout/stderr, ``d`` + JSON ``{"exit_code": n}``
  when a snippet is done.

Each frame is a one-byte kind, a 4-byte big-endian length and the payload.
The snippet's own fds 0/1/2 are /dev/null and two pipes the runner forwards,
so neither the snippet nor its children can write to the protocol by accident.

A timed-out or cancelled snippet is interrupted (KeyboardInterrupt) and the
session kept; one that ignores the interrupt for a second ends the session.
Output a snippet's background threads write after it is done arrives with the
next execute.

A backend offers sessions with ``open_session(language, limits) -> Session``;
it implements a ``SessionTransport`` (start the runner, send bytes, receive
bytes, stop everything) and returns ``FramedSession(transport, ...)``: the
local backend's is ``local.sessions.LocalTransport``, the docker backends'
``docker.sessions.DockerSessionTransport``.
"""

from __future__ import annotations

import json
import struct
import threading
import time
import uuid
from abc import ABC, abstractmethod
from typing import Protocol, runtime_checkable

from .base import (
    Limits,
    MemorySink,
    OutputSink,
    RunOutcome,
    SandboxError,
)

HEADER = struct.Struct(">cI")
MAX_FRAME = 4 * 1024 * 1024  # anything longer is a broken or hostile runner
INTERRUPT_GRACE_SECONDS = 1.0
START_TIMEOUT_SECONDS = 10.0
POLL_SECONDS = 0.05
# A session's CPU rlimit covers its whole life; each execute has its own wall timeout.
SESSION_CPU_SECONDS = 600

RUNNER_SOURCE = r"""
import builtins, io, json, linecache, os, queue, select, signal, struct, sys, threading, traceback
HEADER = struct.Struct(">cI")
control = os.dup(0)
protocol = os.dup(1)
null = os.open("/dev/null", os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
out_r, out_w = os.pipe()
err_r, err_w = os.pipe()
os.dup2(out_w, 1)
os.dup2(err_w, 2)
for fd in (out_w, err_w):
    os.close(fd)
for fd in (out_r, err_r):
    os.set_blocking(fd, False)

def text_stream(fd):
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)

sys.stdout, sys.stderr = text_stream(1), text_stream(2)
sys.stdin = open(0, "r", closefd=False)
lock = threading.Lock()
busy = threading.Event()
jobs = queue.Queue()

def send(kind, payload=b""):
    data = HEADER.pack(kind, len(payload)) + payload
    while data:
        data = data[os.write(protocol, data):]

def drain():
    for fd, kind in ((out_r, b"o"), (err_r, b"e")):
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            send(kind, chunk)

def forward():
    while True:
        select.select([out_r, err_r], [], [], 0.05)
        with lock:
            drain()

def read_exact(n):
    data = b""
    while len(data) < n:
        chunk = os.read(control, n - len(data))
        if not chunk:
            os._exit(0)
        data += chunk
    return data

def listen():
    while True:
        kind, size = HEADER.unpack(read_exact(HEADER.size))
        payload = read_exact(size) if size else b""
        if kind == b"x":
            jobs.put(json.loads(payload))
        elif kind == b"i" and busy.is_set():
            os.kill(os.getpid(), signal.SIGINT)

def run(code, namespace, number):
    filename = "<snippet %d>" % number
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        exec(compile(code, filename, "exec"), namespace)
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ else None
        traceback.print_exception(type(exc), exc, tb)
        return 1

namespace = {"__name__": "__main__", "__builtins__": builtins}
threading.Thread(target=forward, daemon=True).start()
threading.Thread(target=listen, daemon=True).start()
send(b"r")
number = 0
while True:
    job = jobs.get()
    number += 1
    busy.set()
    try:
        code = run(job["code"], namespace, number)
    except BaseException:
        code = 1
    busy.clear()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    with lock:
        drain()
        send(b"d", json.dumps({"exit_code": code}).encode())
"""


class Session(ABC):
    """A persistent interpreter in a sandbox. Executes are serialized per session."""

    def __init__(self, backend: str, language: str, limits: Limits):
        self.id = uuid.uuid4().hex
        self.backend = backend
        self.language = language
        self.limits = limits
        self.created_at = time.time()
        self.last_used = self.created_at

    @property
    @abstractmethod
    def closed(self) -> bool:
        """True once the session's process is gone; executes then fail."""

    @abstractmethod
    def execute(
        self,
        code: str,
        sink: OutputSink,
        cancel: threading.Event | None = None,
        limits: Limits | None = None,
    ) -> RunOutcome:
        """Run a snippet in the session's namespace; only ``limits.timeout_seconds`` applies."""

    @abstractmethod
    def close(self) -> None:
        """End the session's process and everything it started."""

    def describe(self) -> dict:
        return {
            "id": self.id,
            "backend": self.backend,
            "language": self.language,
            "created_at": self.created_at,
            "last_used": self.last_used,
            "closed": self.closed,
        }


@runtime_checkable
class SessionCapable(Protocol):
    """A backend that can host sessions."""

    name: str

    def open_session(self, language: str = "python", limits: Limits | None = None) -> Session: ...


def open_session(
    sandbox: object, language: str = "python", limits: Limits | None = None
) -> Session:
    """Open a session on ``sandbox``, or say clearly that its backend has none."""
    if not isinstance(sandbox, SessionCapable):
        name = getattr(sandbox, "name", type(sandbox).__name__)
        raise SandboxError(f"the {name} sandbox backend does not offer persistent sessions")
    return sandbox.open_session(language, limits)


class SessionRegistry:
    """The open sessions of one process, by id; closes those idle too long.

    Sessions are processes of this worker, so the registry is per process;
    whoever routes ``sandbox.*`` actions sends a session's executes here.
    """

    def __init__(self, idle_seconds: float = 600.0, max_sessions: int = 32):
        self.idle_seconds = idle_seconds
        self.max_sessions = max_sessions
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def create(
        self, sandbox: object, language: str = "python", limits: Limits | None = None
    ) -> Session:
        self.reap_idle()
        with self._lock:
            if len(self._sessions) >= self.max_sessions:
                raise SandboxError(f"too many open sessions (at most {self.max_sessions})")
        session = open_session(sandbox, language, limits)
        with self._lock:
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session | None:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is not None and session.closed:
            self.destroy(session_id)
            return None
        return session

    def destroy(self, session_id: str) -> bool:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            return False
        session.close()
        return True

    def list(self) -> list[dict]:
        with self._lock:
            sessions = list(self._sessions.values())
        return [session.describe() for session in sessions if not session.closed]

    def reap_idle(self, now: float | None = None) -> int:
        """Close sessions unused for ``idle_seconds`` (or already dead); returns how many."""
        now = time.time() if now is None else now
        with self._lock:
            stale = [
                sid
                for sid, session in self._sessions.items()
                if session.closed or now - session.last_used > self.idle_seconds
            ]
        return sum(self.destroy(sid) for sid in stale)

    def close_all(self) -> None:
        with self._lock:
            ids = list(self._sessions)
        for sid in ids:
            self.destroy(sid)


class SessionTransport(ABC):
    """A bidirectional byte channel to a running ``RUNNER_SOURCE`` process."""

    @abstractmethod
    def send(self, data: bytes) -> None: ...

    @abstractmethod
    def receive(self, timeout: float) -> list[tuple[str, bytes]]:
        """Chunks that arrived within ``timeout``: ("protocol", bytes) for the runner's
        stdout, ("stderr", bytes) for its own stderr, ("eof", b"") once it is gone."""

    @abstractmethod
    def stop(self) -> None:
        """End the runner and everything it started."""

    @abstractmethod
    def exit_code(self) -> int | None: ...


class ProtocolError(SandboxError):
    """The runner sent something that is not a frame."""


class FramedSession(Session):
    """A session driven over any ``SessionTransport``."""

    def __init__(
        self,
        transport: SessionTransport,
        backend: str,
        language: str,
        limits: Limits,
        details: dict | None = None,
    ):
        super().__init__(backend, language, limits)
        self._transport = transport
        self._lock = threading.Lock()
        self._buffer = bytearray()
        self._closed = False
        self._details = dict(details or {})  # reported with every execute (isolation, uid…)
        self._await_ready()

    @property
    def closed(self) -> bool:
        return self._closed

    def _await_ready(self) -> None:
        errors = MemorySink(cap_bytes=4096)
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            kinds = [kind for kind, _ in self._frames(errors, POLL_SECONDS)]
            if b"r" in kinds:
                return
            if b"eof" in kinds:
                break
        self.close()
        errors.close()
        detail = errors.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SandboxError(f"the session's interpreter did not start: {detail[0]}")

    def execute(
        self,
        code: str,
        sink: OutputSink,
        cancel: threading.Event | None = None,
        limits: Limits | None = None,
    ) -> RunOutcome:
        limits = limits or self.limits
        started = time.monotonic()
        with self._lock:
            self.last_used = time.time()
            try:
                result = self._execute(code, sink, cancel, started + limits.timeout_seconds)
            finally:
                sink.close()
        exit_code, stopped, error = result
        return RunOutcome(
            exit_code=exit_code,
            duration_ms=int((time.monotonic() - started) * 1000),
            backend=self.backend,
            timed_out=stopped == "timeout",
            cancelled=stopped == "cancel",
            error=error,
            details={"session": self.id, **self._details},
        )

    def _execute(
        self, code: str, sink: OutputSink, cancel: threading.Event | None, deadline: float
    ) -> tuple[int | None, str | None, str | None]:
        if self._closed:
            return None, None, "the session is closed"
        self._send(b"x", json.dumps({"code": code}).encode())
        stopped: str | None = None
        while True:
            if stopped is None:
                if cancel is not None and cancel.is_set():
                    stopped = "cancel"
                elif time.monotonic() >= deadline:
                    stopped = "timeout"
                if stopped:
                    # Interrupt, keep the session if the snippet stops in time.
                    self._send(b"i")
                    deadline = time.monotonic() + INTERRUPT_GRACE_SECONDS
            elif time.monotonic() >= deadline:
                self.close()
                return None, stopped, None
            for kind, payload in self._frames(sink, POLL_SECONDS):
                if kind == b"d":
                    return json.loads(payload)["exit_code"], stopped, None
                if kind == b"eof":
                    exit_code = self._transport.exit_code()
                    self.close()
                    return exit_code, stopped, None if stopped else "the session ended"

    def _send(self, kind: bytes, payload: bytes = b"") -> None:
        try:
            self._transport.send(HEADER.pack(kind, len(payload)) + payload)
        except OSError:
            pass  # the runner is gone: receive() reports eof

    def _frames(self, sink: OutputSink | None, timeout: float) -> list[tuple[bytes, bytes]]:
        """Frames that arrived within ``timeout``; output frames go straight to the sink."""
        result: list[tuple[bytes, bytes]] = []
        ended = False
        for stream, data in self._transport.receive(timeout):
            if stream == "eof":
                ended = True
            elif stream == "stderr":
                if sink is not None:
                    sink.write("stderr", data)
            else:
                self._buffer += data
        try:
            for kind, payload in self._parse():
                if kind in (b"o", b"e"):
                    if sink is not None:
                        sink.write("stdout" if kind == b"o" else "stderr", payload)
                else:
                    result.append((kind, payload))
        except ProtocolError:
            ended = True
        if ended:
            result.append((b"eof", b""))
        return result

    def _parse(self):
        while len(self._buffer) >= HEADER.size:
            kind, size = HEADER.unpack_from(self._buffer)
            if size > MAX_FRAME or kind not in (b"r", b"o", b"e", b"d"):
                raise ProtocolError(f"bad frame {kind!r} of {size} bytes")
            if len(self._buffer) < HEADER.size + size:
                return
            payload = bytes(self._buffer[HEADER.size : HEADER.size + size])
            del self._buffer[: HEADER.size + size]
            yield kind, payload

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._transport.stop()
