"""A persistent session on the local backend: the session runner as a sandboxed local process."""

from __future__ import annotations

import contextlib
import os
import selectors
import time
from dataclasses import replace
from typing import Protocol

from ..base import Limits, UnsupportedLanguage
from ..sessions import RUNNER_SOURCE, SESSION_CPU_SECONDS, FramedSession, SessionTransport
from .process import SandboxProcess


class DetachedStarter(Protocol):
    """What a session needs of the backend: a sandboxed process that outlives its caller."""

    name: str

    def start_detached(
        self, language: str, code: str, limits: Limits, **kwargs
    ) -> SandboxProcess: ...


class LocalTransport(SessionTransport):
    """The runner as a local sandboxed process (same isolation as a local run)."""

    def __init__(self, process: SandboxProcess):
        self.process = process
        self._selector = selectors.DefaultSelector()
        for name, pipe in (("protocol", process.stdout), ("stderr", process.stderr)):
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe.fileno(), selectors.EVENT_READ, name)
        self._stopped = False

    def send(self, data: bytes) -> None:
        stdin = self.process.stdin
        if stdin is None:
            raise OSError("no stdin")
        stdin.write(data)
        stdin.flush()

    def receive(self, timeout: float) -> list[tuple[str, bytes]]:
        if not self._selector.get_map():
            time.sleep(timeout)
            return [("eof", b"")]
        chunks: list[tuple[str, bytes]] = []
        for key, _ in self._selector.select(timeout):
            try:
                data = os.read(key.fd, 64 * 1024)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if data:
                chunks.append((key.data, data))
            else:
                self._selector.unregister(key.fd)
                if key.data == "protocol":
                    chunks.append(("eof", b""))
        return chunks

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        with contextlib.suppress(OSError):
            self.process.stop()
        self._selector.close()
        self.process.cleanup()

    def exit_code(self) -> int | None:
        self.process.stop()
        return self.process.exit_code()


def open_local_session(sandbox: DetachedStarter, language: str, limits: Limits) -> FramedSession:
    """A session on the local backend: the runner started like any local run."""
    if language != "python":
        raise UnsupportedLanguage(f"sessions support python only, not {language!r}")
    cpu = limits.cpu_seconds if limits.cpu_seconds is not None else SESSION_CPU_SECONDS
    session_limits = replace(limits, cpu_seconds=cpu)
    process = sandbox.start_detached("python", RUNNER_SOURCE, session_limits, interactive=True)
    transport = LocalTransport(process)
    try:
        return FramedSession(transport, sandbox.name, language, limits, process.details)
    except BaseException:
        transport.stop()
        raise
