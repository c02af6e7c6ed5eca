"""``DockerSandbox``: the docker backend (see the package's docstring)."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, ClassVar

import docker
import docker.errors
from django.conf import settings

from .. import reaper
from ..base import (
    LANGUAGES,
    Availability,
    Limits,
    OutputSink,
    RunOutcome,
    RunRequest,
    Sandbox,
    SandboxError,
    UnsupportedLanguage,
)
from ..sessions import FramedSession, Session
from .channel import RunnerChannel, RunnerGone
from .config import (
    GVISOR_HOST_PIDS,
    RUNNER_PROCESSES,
    SANDBOX_USER,
    WORK_DIR,
    check_container_config,
)
from .exchange import Exchange, pump, reusable
from .pool import Shape, Warm
from .sessions import DockerSessionTransport, session_command

log = logging.getLogger(__name__)

BUILD_HINT = "build it with docker/sandbox/build"
RUNNER_COMMAND = ["python3", "-I", "-S", "/opt/airlock/runner.py"]
RUNNER_MEMORY_MB = 32  # the runner itself, on top of what the run may use
START_TIMEOUT = 30.0  # a cold gVisor start on a busy host can take seconds


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def _runtimes(client: docker.DockerClient, wanted: str) -> dict | set:
    """The engine's runtimes; behind the Docker gate, which refuses ``/info``, taken on trust.

    The gate lets a sandbox ask only for the runtimes it was given
    (``DOCKER_GATE_RUNTIMES``); a runtime the engine lacks then fails the create
    with the engine's own message.
    """
    try:
        return client.info().get("Runtimes", {})
    except docker.errors.APIError as exc:
        if exc.status_code == 403:
            return {wanted}
        raise


class DockerSandbox(Sandbox):
    """Runs code in Docker containers, one-shot or from a warm pool."""

    name: ClassVar[str] = "docker"
    default_runtime: ClassVar[str | None] = None
    isolation: ClassVar[str] = "container"

    def __init__(
        self,
        *,
        mode: str | None = None,
        image: str | None = None,
        runtime: str | None = None,
        max_runs: int | None = None,
        idle_minutes: float | None = None,
        cpus: float = 1.0,
        spare: bool = True,
        container_options: dict | None = None,
        client: docker.DockerClient | None = None,
    ) -> None:
        self.mode = mode or _setting("SANDBOX_DOCKER_MODE", "keepalive")
        if self.mode not in ("keepalive", "oneshot"):
            raise SandboxError(f"unknown docker sandbox mode {self.mode!r}")
        self.image = image or _setting("SANDBOX_IMAGE", "airlock-sandbox:latest")
        self.runtime = runtime or self.default_runtime
        self.gvisor = self.runtime == "runsc"
        self.max_runs = max_runs or _setting("SANDBOX_POOL_MAX_RUNS", 50)
        self.idle_seconds = 60.0 * (idle_minutes or _setting("SANDBOX_POOL_IDLE_MINUTES", 10))
        self.cpus = cpus
        self.spare = spare
        self.options = {**_setting("SANDBOX_DOCKER_OPTIONS", {}), **(container_options or {})}
        self.owner = reaper.owner_label()
        check_container_config(self._host_config(Shape.of(Limits())))
        self.client = client or docker.from_env(timeout=30)
        self._lock = threading.Lock()
        self._idle: dict[Shape, list[Warm]] = {}
        self._warming: set[Shape] = set()
        self._background: set[threading.Thread] = set()
        self._closed = threading.Event()
        self._sweeper: threading.Thread | None = None
        self._sessions: set[DockerSessionTransport] = set()
        self._reap_at_start()

    # -- availability ---------------------------------------------------------------

    @classmethod
    def probe(cls) -> Availability:
        return cls.check_host(
            _setting("SANDBOX_IMAGE", "airlock-sandbox:latest"), cls.default_runtime
        )

    @classmethod
    def check_host(cls, image: str, runtime: str | None) -> Availability:
        """Engine answers, image present, runtime registered — and what is missing if not."""
        try:
            client = docker.from_env(timeout=5)
            client.ping()
        except Exception as exc:  # any failure here means "no engine"
            return Availability(
                False,
                f"Docker engine not reachable ({exc}); start it with scripts/provision docker",
            )
        try:
            try:
                client.api.inspect_image(image)
            except docker.errors.ImageNotFound:
                return Availability(False, f"image {image} not found; {BUILD_HINT}")
            if runtime and runtime not in _runtimes(client, runtime):
                return Availability(
                    False,
                    f"runtime {runtime} is not registered with dockerd; run scripts/provision gvisor",
                )
        except docker.errors.DockerException as exc:
            return Availability(False, f"Docker engine error: {exc}")
        finally:
            client.close()
        return Availability(
            True, f"image {image}" + (f", runtime {runtime}" if runtime else ""), cls.isolation
        )

    def _reap_at_start(self) -> None:
        try:
            reaper.reap_orphans(self.client)
        except Exception:  # the reaper is housekeeping: never block start-up on it
            log.exception("sandbox reaper failed at start-up")

    # -- container configuration -----------------------------------------------------

    def _host_config(self, shape: Shape) -> dict:
        memory = f"{shape.memory_mb + RUNNER_MEMORY_MB}m"
        tmpfs_opts = f"rw,nosuid,nodev,size={shape.disk_mb}m"
        config = {
            "network_mode": "bridge" if shape.network else "none",
            "read_only": True,
            "tmpfs": {
                "/tmp": f"{tmpfs_opts},mode=1777",
                WORK_DIR: f"{tmpfs_opts},mode=0700,uid=10001,gid=10001",
            },
            "shm_size": f"{shape.disk_mb}m",
            "mem_limit": memory,
            "memswap_limit": memory,
            "nano_cpus": int(self.cpus * 1e9),
            "pids_limit": GVISOR_HOST_PIDS
            if self.gvisor
            else shape.max_processes + RUNNER_PROCESSES,
            "security_opt": ["no-new-privileges"],
            "cap_drop": ["ALL"],
            "ipc_mode": "private",
            "auto_remove": True,
            "init": False,
            "ulimits": [docker.types.Ulimit(name="core", soft=0, hard=0)],
            "user": SANDBOX_USER,
        }
        if self.runtime:
            config["runtime"] = self.runtime
        config.update(self.options)
        return config

    def _labels(self, mode: str | None = None) -> dict:
        return {
            reaper.LABEL: "1",
            reaper.OWNER_LABEL: self.owner,
            "airlock.backend": self.name,
            "airlock.mode": mode or self.mode,
        }

    # -- container life --------------------------------------------------------------

    def _create_attached(
        self, command: list[str], shape: Shape, what: str, mode: str | None = None
    ) -> tuple[str, object]:
        """A hardened container for ``command`` with its stdin/stdout attached, not started."""
        config = self._host_config(shape)
        check_container_config(config)
        user = config.pop("user")
        api = self.client.api
        try:
            created = api.create_container(
                self.image,
                command=command,
                user=user,
                working_dir=WORK_DIR,
                # Not detached + stdin_open means StdinOnce: our connection dropping
                # closes the runner's stdin, which ends it and (auto_remove) the container.
                stdin_open=True,
                tty=False,
                hostname="sandbox",
                environment={},
                labels=self._labels(mode),
                host_config=api.create_host_config(**config),
            )
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"image {self.image} not found; {BUILD_HINT}") from exc
        except Exception as exc:  # API errors and an engine that went away alike
            raise SandboxError(f"cannot create a {what} container: {exc}") from exc
        cid = created["Id"]
        try:
            sock = api.attach_socket(
                cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
        except Exception as exc:
            self._remove(cid, failed_start=True)
            raise SandboxError(f"the {what} container did not start: {exc}") from exc
        return cid, sock

    def _start(self, shape: Shape) -> Warm:
        cid, sock = self._create_attached(RUNNER_COMMAND, shape, "sandbox")
        try:
            channel = RunnerChannel(sock)
            self.client.api.start(cid)
            ready = self._await_ready(channel)
        except Exception as exc:
            self._remove(cid, failed_start=True)
            raise SandboxError(f"the sandbox container did not start: {exc}") from exc
        # A runner that could not shield itself from runs serves exactly one.
        return Warm(cid, channel, shape, guarded=bool(ready.get("guarded")))

    def _await_ready(self, channel: RunnerChannel) -> dict:
        frame = channel.next_frame(START_TIMEOUT)
        if frame is None:
            raise SandboxError(f"no answer from the runner within {START_TIMEOUT:.0f} s")
        if frame[0] != b"R":
            raise SandboxError(f"unexpected first frame from the runner: {frame[1][:200]!r}")
        return json.loads(frame[1])

    def _remove(self, cid: str, failed_start: bool = False) -> None:
        try:
            self.client.api.remove_container(cid, force=True)
        except docker.errors.APIError as exc:
            # 404 / 409: auto_remove got there first.
            if exc.status_code not in (404, 409):
                log.warning("cannot remove sandbox container %s: %s", cid[:12], exc)
        except Exception as exc:  # the engine went away; the reaper removes it later
            log.warning("cannot remove sandbox container %s: %s", cid[:12], exc)
        if failed_start and self.runtime:
            # A failed runsc start leaves its sandbox, gofer and shim behind.
            reaper.kill_runtime_processes(cid)

    def _destroy(self, warm: Warm) -> None:
        warm.channel.close()
        self._remove(warm.id)

    def _in_background(self, target, *args) -> None:
        thread = threading.Thread(target=self._background_task, args=(target, *args), daemon=True)
        with self._lock:
            self._background.add(thread)
        thread.start()

    def _background_task(self, target, *args) -> None:
        try:
            target(*args)
        except Exception:
            log.exception("sandbox background task failed")
        finally:
            with self._lock:
                self._background.discard(threading.current_thread())

    # -- the pool ------------------------------------------------------------------

    def _expired(self, warm: Warm, now: float) -> bool:
        return warm.runs >= self.max_runs or now - warm.last_used > self.idle_seconds

    def _checkout(self, shape: Shape) -> Warm:
        """A warm container (keep-alive), an unused spare (one-shot), or a new one."""
        warm = self._take_idle(shape)
        single_use = self.mode == "oneshot" or self.max_runs == 1
        if single_use and self.spare and not self._closed.is_set():
            self._prewarm(shape)  # the next run's fresh container starts now, not then
        return warm or self._start(shape)

    def _take_idle(self, shape: Shape) -> Warm | None:
        now = time.monotonic()
        found, stale = None, []
        with self._lock:
            idle = self._idle.get(shape, [])
            while idle and found is None:
                warm = idle.pop()
                if self._expired(warm, now) or warm.channel.closed:
                    stale.append(warm)
                else:
                    found = warm
        for warm in stale:
            self._in_background(self._destroy, warm)
        return found

    def _checkin(self, warm: Warm, reusable: bool) -> None:
        warm.runs += 1
        warm.last_used = time.monotonic()
        keep = (
            self.mode == "keepalive"
            and reusable
            and warm.guarded
            and warm.runs < self.max_runs
            and not self._closed.is_set()
        )
        if keep:
            with self._lock:
                self._idle.setdefault(warm.shape, []).append(warm)
            self._ensure_sweeper()
            return
        self._in_background(self._destroy, warm)
        if self.mode == "keepalive" and not self._closed.is_set():
            self._prewarm(warm.shape)

    def _prewarm(self, shape: Shape) -> None:
        """Start a container in the background so the next run does not wait for one.

        Keep-alive: a replacement for a recycled container. One-shot: the spare
        for the next run — still a fresh container that no run has touched.
        """
        with self._lock:
            if self._idle.get(shape) or shape in self._warming:
                return
            self._warming.add(shape)
        self._in_background(self._warm_up, shape)

    def _warm_up(self, shape: Shape) -> None:
        try:
            warm = self._start(shape)
        finally:
            with self._lock:
                self._warming.discard(shape)
        with self._lock:
            keep = not self._closed.is_set()
            if keep:
                self._idle.setdefault(shape, []).append(warm)
        if keep:
            self._ensure_sweeper()  # an unused spare expires like any idle container
        else:
            self._destroy(warm)

    def _ensure_sweeper(self) -> None:
        with self._lock:
            if self._sweeper is None:
                self._sweeper = threading.Thread(target=self._sweep_loop, daemon=True)
                self._sweeper.start()

    def _sweep_loop(self) -> None:
        interval = max(1.0, min(60.0, self.idle_seconds / 4))
        while not self._closed.wait(interval):
            self.sweep()

    def sweep(self) -> int:
        """Remove warm containers past their idle time or run count; return how many."""
        now = time.monotonic()
        with self._lock:
            expired = [w for ws in self._idle.values() for w in ws if self._expired(w, now)]
            for ws in self._idle.values():
                ws[:] = [w for w in ws if w not in expired]
        for warm in expired:
            self._destroy(warm)
        return len(expired)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            warm = [w for ws in self._idle.values() for w in ws]
            self._idle.clear()
        for w in warm:
            self._destroy(w)
        with self._lock:
            sessions = list(self._sessions)
        for transport in sessions:
            transport.stop()
        with self._lock:
            pending = list(self._background)
        for thread in pending:
            thread.join(timeout=30)

    # -- running ---------------------------------------------------------------------

    def run(
        self, request: RunRequest, sink: OutputSink, cancel: threading.Event | None = None
    ) -> RunOutcome:
        if request.language not in LANGUAGES:
            raise UnsupportedLanguage(
                f"language {request.language!r} is not supported; choose one of {', '.join(LANGUAGES)}"
            )
        started = time.monotonic()
        cancel = cancel or threading.Event()
        try:
            warm = self._checkout(Shape.of(request.limits))
        except SandboxError as exc:
            return self._outcome(started, Exchange(error=str(exc)), None)
        exchange = Exchange()
        try:
            self._exchange(warm, request, sink, cancel, exchange)
            return self._outcome(started, exchange, warm)
        finally:
            # Also when the sink raised mid-run: the container (and the run in it) must go.
            self._checkin(warm, reusable=reusable(exchange))

    def _exchange(
        self,
        warm: Warm,
        request: RunRequest,
        sink: OutputSink,
        cancel: threading.Event,
        exchange: Exchange,
    ) -> None:
        limits = request.limits
        try:
            warm.channel.send(
                {
                    "op": "run",
                    "nonce": exchange.nonce,
                    "language": request.language,
                    "code": request.code,
                    "timeout": limits.timeout_seconds,
                    "cpu_seconds": limits.cpu_limit,
                    "max_file_size_mb": limits.max_file_size_mb,
                    # Only gVisor counts processes per sandbox; on runc the
                    # pids cgroup does it (RLIMIT_NPROC would count the host's uid).
                    "max_processes": limits.max_processes + RUNNER_PROCESSES
                    if self.gvisor
                    else None,
                }
            )
            pump(warm.channel, sink, cancel, limits, exchange)
        except RunnerGone as exc:
            exchange.error = str(exc)

    def _outcome(self, started: float, exchange: Exchange, warm: Warm | None) -> RunOutcome:
        result = exchange.result or {}
        details = {
            "image": self.image,
            "runtime": self.runtime or "runc",
            "mode": self.mode,
            "isolation": "gvisor" if self.gvisor else self.isolation,
        }
        if warm is not None:
            details.update(container=warm.id[:12], container_run=warm.runs + 1)
        return RunOutcome(
            exit_code=result.get("exit_code"),
            duration_ms=int((time.monotonic() - started) * 1000),
            backend=self.name,
            timed_out=exchange.timed_out or bool(result.get("timed_out")),
            cancelled=exchange.cancelled or bool(result.get("cancelled")),
            error=exchange.error or result.get("error"),
            details=details,
        )

    # -- persistent sessions ---------------------------------------------------------

    def open_session(self, language: str = "python", limits: Limits | None = None) -> Session:
        """A persistent session (see ``sessions.py``) in a container of its own.

        The container runs ``RUNNER_SOURCE`` instead of the resident runner,
        with the same hardening as every sandbox container; the host speaks the
        session protocol over its attached stdin/stdout. A session's container
        never serves anything else, so sessions never see each other's state;
        closing the session removes it.
        """
        if language != "python":
            raise UnsupportedLanguage(f"sessions support python only, not {language!r}")
        if self._closed.is_set():
            raise SandboxError(f"the {self.name} sandbox backend is closed")
        limits = limits or Limits()
        transport = self._start_session(limits)
        details = {
            "image": self.image,
            "runtime": self.runtime or "runc",
            "mode": "session",
            "isolation": "gvisor" if self.gvisor else self.isolation,
            "container": transport.container[:12],
        }
        try:
            transport.wait_started(START_TIMEOUT)
            return FramedSession(transport, self.name, language, limits, details)
        except BaseException:
            transport.stop()
            raise

    def _start_session(self, limits: Limits) -> DockerSessionTransport:
        command = session_command(limits, self.gvisor)
        cid, sock = self._create_attached(command, Shape.of(limits), "session", mode="session")
        try:
            transport = DockerSessionTransport(
                self.client, cid, sock, on_stop=self._session_stopped
            )
            self.client.api.start(cid)
        except Exception as exc:
            self._remove(cid, failed_start=True)
            raise SandboxError(f"the session container did not start: {exc}") from exc
        with self._lock:
            self._sessions.add(transport)
        return transport

    def _session_stopped(self, transport: DockerSessionTransport) -> None:
        self._remove(transport.container)
        with self._lock:
            self._sessions.discard(transport)
