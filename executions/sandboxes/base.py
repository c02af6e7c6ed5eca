"""The one interface every sandbox backend implements.

A backend runs code in a language under limits, hands every byte of output to
an ``OutputSink`` as it is produced, honours a cancel event, and returns a
``RunOutcome``. The sink (not the backend) enforces the output cap and decodes
UTF-8, so every backend truncates and flags output the same way.
"""

from __future__ import annotations

import codecs
import os
import shutil
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

LANGUAGES = ("python", "bash", "javascript")
STREAMS = ("stdout", "stderr")


class SandboxError(Exception):
    """The sandbox could not run the code at all (not a failure of the code)."""


class SandboxUnavailable(SandboxError):
    """The backend cannot work on this host (missing engine, image, runtime)."""


class UnsupportedLanguage(SandboxError):
    """The backend cannot run this language here (e.g. no ``node`` on PATH)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits for one run. Every backend enforces all of them."""

    timeout_seconds: float = 30.0
    memory_mb: int = 256
    max_processes: int = 64
    max_file_size_mb: int = 16
    disk_mb: int = 64
    cpu_seconds: int | None = None  # defaults to the wall timeout, rounded up, plus one
    network: bool = False

    @property
    def cpu_limit(self) -> int:
        if self.cpu_seconds is not None:
            return self.cpu_seconds
        return int(self.timeout_seconds) + 1

    def as_dict(self) -> dict:
        return {
            "timeout_seconds": self.timeout_seconds,
            "memory_mb": self.memory_mb,
            "max_processes": self.max_processes,
            "max_file_size_mb": self.max_file_size_mb,
            "disk_mb": self.disk_mb,
            "cpu_seconds": self.cpu_limit,
            "network": self.network,
        }


SERVER_LIMITS = Limits(memory_mb=2048, max_processes=128, max_file_size_mb=256, disk_mb=256)


@dataclass(frozen=True)
class ServerSpec:
    """A program to keep running confined (an MCP server): what it is, and what it may touch.

    A command (``argv``) runs on this host under the local confinement; an ``image``
    runs as a container of that image (``argv`` then overrides its command).
    """

    name: str  # the server's: names its uid when the caller is root, labels its container
    argv: tuple[str, ...]  # argv[0] absolute, or found on PATH (or in the image)
    env: tuple[tuple[str, str], ...] = ()
    read: tuple[str, ...] = ()  # host paths it may read (its installation), absolute
    write: tuple[str, ...] = ()  # host paths it may write, absolute
    hidden: tuple[str, ...] = ()  # host paths it must never see (the caller's data, keys)
    network: tuple[str, ...] = ()  # host:port it may connect to, through its proxy
    image: str = ""  # a container image to run it from, instead of a host command
    limits: Limits = SERVER_LIMITS


@dataclass
class ConfinedServer:
    """What to spawn: ``argv`` with exactly ``env``; ``cleanup()`` once it has ended."""

    argv: list[str]
    env: dict[str, str]
    method: str
    details: dict = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def cleanup(self) -> None:
        while self.cleanups:
            self.cleanups.pop()()


@dataclass(frozen=True)
class RunRequest:
    """What to run."""

    language: str
    code: str
    limits: Limits = field(default_factory=Limits)


@dataclass
class RunOutcome:
    """How a run ended. Output itself went to the sink."""

    exit_code: int | None
    duration_ms: int
    backend: str
    timed_out: bool = False
    cancelled: bool = False
    error: str | None = None  # the sandbox failed (could not start, crashed); not the code
    details: dict = field(default_factory=dict)  # image, runtime, isolation, container id…

    @property
    def success(self) -> bool:
        return self.exit_code == 0 and not self.timed_out and not self.cancelled and not self.error


@dataclass(frozen=True)
class Availability:
    """Whether a backend works on this host, and how strongly it isolates."""

    ok: bool
    reason: str = ""
    isolation: str = "weak"  # weak | landlock | namespaces | container | gvisor


class OutputSink:
    """Receives raw output bytes, enforces the cap, decodes UTF-8 incrementally.

    Backends call ``write`` from any thread as output arrives and must keep
    draining their pipes after the cap is hit (``full``) so the run never
    stalls on a full pipe; what is past the cap is counted, not kept.
    Subclasses implement ``emit`` (receives decoded text, in order).
    """

    def __init__(self, cap_bytes: int = 1024 * 1024):
        self.cap_bytes = cap_bytes
        self.kept_bytes = 0
        self.dropped_bytes = 0
        self._decoders = {s: codecs.getincrementaldecoder("utf-8")("replace") for s in STREAMS}
        self._lock = threading.Lock()
        self._closed = False

    @property
    def truncated(self) -> bool:
        return self.dropped_bytes > 0

    @property
    def full(self) -> bool:
        return self.kept_bytes >= self.cap_bytes

    def write(self, stream: str, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            if self._closed:
                self.dropped_bytes += len(data)
                return
            room = self.cap_bytes - self.kept_bytes
            if len(data) > room:
                self.dropped_bytes += len(data) - max(room, 0)
                data = data[: max(room, 0)]
            if not data:
                return
            self.kept_bytes += len(data)
            text = self._decoders[stream].decode(data)
            if text:
                self.emit(stream, text)

    def close(self) -> None:
        """Flush any partial UTF-8 sequence; later writes are dropped."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for stream, decoder in self._decoders.items():
                tail = decoder.decode(b"", final=True)
                if tail:
                    self.emit(stream, tail)

    def emit(self, stream: str, text: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class MemorySink(OutputSink):
    """Keeps output in memory: for tests, sessions and the benchmark."""

    def __init__(self, cap_bytes: int = 1024 * 1024):
        super().__init__(cap_bytes)
        self.chunks: list[tuple[str, str]] = []

    def emit(self, stream: str, text: str) -> None:
        self.chunks.append((stream, text))

    def text(self, stream: str) -> str:
        return "".join(t for s, t in self.chunks if s == stream)

    @property
    def stdout(self) -> str:
        return self.text("stdout")

    @property
    def stderr(self) -> str:
        return self.text("stderr")


class Sandbox(ABC):
    """A backend. Instances are long-lived (one per worker process) and thread-safe."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def probe(cls) -> Availability:
        """Check, cheaply and without side effects, whether this backend works here."""

    @abstractmethod
    def run(
        self, request: RunRequest, sink: OutputSink, cancel: threading.Event | None = None
    ) -> RunOutcome:
        """Run the code to completion, timeout or cancel; never raise for a failure of the code."""

    def close(self) -> None:
        """Release pooled resources (warm containers, sessions)."""


def remove_stale_folders(parent: str, prefix: str) -> None:
    """The folders ``<prefix><pid>-…`` in ``parent`` whose process is gone: it died before
    it could remove them (a folder a live process of another user holds stays)."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and not _process_exists(int(pid)):
            shutil.rmtree(entry.path, ignore_errors=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
