"""Find and end what Airlock's own sandbox containers left behind.

Two kinds of leftovers: labelled containers whose worker died (or that never
started properly), and gVisor processes — a failed ``runsc`` start leaves
``runsc-sandbox``, ``runsc-gofer`` and a ``containerd-shim`` running that
``docker ps -a`` no longer shows. ``reap_orphans`` handles both; the Docker
backends call it at start-up and a periodic task can call it too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import docker
import docker.errors

log = logging.getLogger(__name__)

LABEL = "airlock.sandbox"
OWNER_LABEL = "airlock.owner"
RUNSC_NAMES = ("runsc", "runsc-sandbox", "runsc-gofer")
SHIM_PREFIX = "containerd-shim"
LIVE_STATES = ("running", "paused", "restarting")  # their runtime processes are in use


@dataclass
class ReapReport:
    """What one pass ended."""

    containers: list[str] = field(default_factory=list)
    processes: list[int] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.containers or self.processes)


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    name: str
    argv: tuple[str, ...]
    age: float

    @property
    def is_runsc(self) -> bool:
        return self.name in RUNSC_NAMES or os.path.basename(self.argv[0]) in RUNSC_NAMES

    @property
    def is_shim(self) -> bool:
        return os.path.basename(self.argv[0]).startswith(SHIM_PREFIX)

    def mentions(self, container_id: str) -> bool:
        return any(container_id in arg for arg in self.argv)

    def container_id(self) -> str | None:
        """The container this runtime process serves, from its arguments."""
        for i, arg in enumerate(self.argv):
            if arg == "-id" and i + 1 < len(self.argv):
                return self.argv[i + 1]
        for arg in reversed(self.argv):
            tail = os.path.basename(arg.rstrip("/"))
            if len(tail) == 64 and all(c in "0123456789abcdef" for c in tail):
                return tail
        return None


def _process_start_ticks(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[19]


def owner_label() -> str:
    """Identifies this process across PID reuse: host, pid and start time."""
    try:
        start = _process_start_ticks(os.getpid())
    except OSError:
        start = "0"
    return f"{socket.gethostname()}:{os.getpid()}:{start}"


def owner_alive(owner: str | None) -> bool | None:
    """Whether the labelled owner still runs; None when it lives on another host."""
    if not owner:
        return False
    host, _, rest = owner.partition(":")
    if host != socket.gethostname():
        return None
    pid, _, start = rest.partition(":")
    try:
        return _process_start_ticks(int(pid)) == start
    except (OSError, ValueError, IndexError):
        return False


def _uptime() -> float:
    with open("/proc/uptime") as fh:
        return float(fh.read().split()[0])


def list_processes() -> list[Proc]:
    ticks = os.sysconf("SC_CLK_TCK")
    now = _uptime()
    procs = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                argv = tuple(a.decode(errors="replace") for a in fh.read().split(b"\0") if a)
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat.rsplit(")", 1)[1].split()
        age = now - int(fields[19]) / ticks
        procs.append(Proc(int(entry), int(fields[1]), name, argv or (name,), age))
    return procs


def _kill(pids: list[int]) -> list[int]:
    ended = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            ended.append(pid)
    return ended


def kill_runtime_processes(container_id: str) -> list[int]:
    """End the shim and runsc processes of one container (after a failed start)."""
    pids = [
        p.pid
        for p in list_processes()
        if (p.is_runsc or p.is_shim) and p.mentions(container_id) and p.pid != os.getpid()
    ]
    return _kill(pids)


def _stray_runtime_processes(
    procs: list[Proc],
    known: set[str],
    running: set[str],
    ours: set[str],
    min_age: float,
    gone: Callable[[str], bool],
) -> list[int]:
    """runsc processes of containers that are not running, and shims of containers gone.

    Shims of containers dockerd still knows are left alone unless the container
    is ours and stopped: other people's containers are not ours to judge. A
    container missing from ``known`` counts as gone only when the engine says
    so (``gone``): behind the Docker gate the list holds sandboxes only, and the
    host's other containers are still there.
    """
    stray = []
    for p in procs:
        if p.age < min_age or not (p.is_runsc or p.is_shim):
            continue
        cid = p.container_id()
        if cid is None or cid in running:
            continue
        if cid not in known and not gone(cid):
            continue
        if p.is_runsc or cid not in known or cid in ours:
            stray.append(p.pid)
    return stray


def _gone(client: docker.DockerClient, cid: str) -> bool:
    """Whether the engine says it has no such container (not: it would not say)."""
    try:
        client.api.inspect_container(cid)
    except docker.errors.NotFound:
        return True
    except docker.errors.DockerException:
        return False
    return False


def _abandoned(container: dict, now: float, min_age: float) -> bool:
    """Its worker died, or it is not running and old enough not to be starting."""
    if owner_alive(container.get("Labels", {}).get(OWNER_LABEL)) is False:
        return True
    stopped = container.get("State") not in LIVE_STATES
    return stopped and now - container.get("Created", now) > min_age


def reap_orphans(
    client: docker.DockerClient | None = None, min_age_seconds: float = 30.0
) -> ReapReport:
    """End Airlock containers whose owner died or that are not running, and stray runsc processes.

    ``min_age_seconds`` spares anything younger: a container being started
    right now looks exactly like a stray for a moment.
    """
    report = ReapReport()
    client = client or docker.from_env(timeout=10)
    try:
        everything = client.api.containers(all=True)
    except docker.errors.DockerException as exc:
        log.warning("reaper: cannot list containers: %s", exc)
        return report
    known = {c["Id"] for c in everything}
    live = {c["Id"] for c in everything if c.get("State") in LIVE_STATES}
    ours = [c for c in everything if LABEL in (c.get("Labels") or {})]
    now = time.time()
    for container in ours:
        if _abandoned(container, now, min_age_seconds):
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_container(container["Id"], force=True)
                report.containers.append(container["Id"][:12])
                live.discard(container["Id"])
    our_ids = {c["Id"] for c in ours}
    strays = _stray_runtime_processes(
        list_processes(), known, live, our_ids, min_age_seconds, lambda cid: _gone(client, cid)
    )
    report.processes = _kill(strays)
    if report:
        log.info(
            "reaper: removed containers %s, ended processes %s", report.containers, report.processes
        )
    return report
