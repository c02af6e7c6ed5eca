"""The scale deployment as the scale suite drives it: real containers, real faults.

``Stack`` wraps ``docker/stack`` (one compose project of its own, on a free
port) and the few ``docker`` commands a fault needs; ``Agent`` is an agent or
a reviewer talking to the API through the proxy; ``follow_output`` is a
browser's live-output websocket that reconnects after its last sequence number.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.sync.client import connect

ROOT = Path(__file__).resolve().parents[2]
STACK = ROOT / "docker" / "stack"
HOSTS = ("host-a", "host-b", "host-c")
TERMINAL = {"succeeded", "failed", "timed_out", "cancelled", "lost"}
# The deployment's timings, shortened so that a fault plays out in seconds.
TIMINGS = {
    "WORKER_HEARTBEAT_SECONDS": "1",
    # WORKER_LOST_AFTER_SECONDS stays the deployment's 30: with 15 a run that outlived
    # the PostgreSQL restart was now and then declared lost on this loaded host.
    "SWEEP_INTERVAL_SECONDS": "2",
    "REQUEUE_AFTER_SECONDS": "4",
}


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.3):
    """Poll until ``predicate`` returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except (requests.RequestException, KeyError, ValueError) as exc:
            last_error, value = exc, None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what} (last: {last_error!r})"
    )


@dataclass
class Stack:
    """One running compose project of the scale deployment."""

    project: str
    port: int
    env: dict[str, str]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, *args: str, timeout: float = 900, check: bool = True) -> str:
        with self.log.open("a") as log:
            log.write(f"$ docker/stack {' '.join(args)}\n")
            log.flush()
            result = subprocess.run(
                [str(STACK), *args],
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                timeout=timeout,
            )
            log.write(result.stdout)
        if check and result.returncode:
            raise AssertionError(f"docker/stack {' '.join(args)} failed; see {self.log}")
        return result.stdout

    def container(self, service: str, index: int = 1) -> str:
        return f"{self.project}_{service}_{index}"

    def worker(self, host: str) -> str:
        return self.container(f"worker-{host.removeprefix('host-')}")

    def docker(self, *args: str, timeout: float = 120) -> str:
        result = subprocess.run(
            ["docker", *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if result.returncode:
            raise AssertionError(f"docker {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def manage(self, *args: str) -> str:
        return self.docker("exec", self.container("web"), "python", "manage.py", *args).strip()

    def state(self, container: str) -> str:
        return self.docker("inspect", "--format", "{{.State.Status}}", container).strip()

    def healthy(self, container: str) -> bool:
        status = self.docker(
            "inspect",
            "--format",
            "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}",
            container,
        ).strip()
        return status in ("healthy", "running")

    def start(self, *containers: str) -> None:
        self.docker("start", *containers)
        for container in containers:
            wait_for(lambda c=container: self.healthy(c), 90, f"{container} to be healthy")

    def main_pid(self, container: str) -> int:
        """The host pid of the container's main process (the one under its init)."""
        init = int(self.docker("inspect", "--format", "{{.State.Pid}}", container))
        children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
        return int(children[0]) if children else init

    def systemctl_log(self, host: str) -> str:
        """What the stand-in systemctl recorded on ``host`` (empty if nothing ran there)."""
        result = subprocess.run(
            ["docker", "exec", self.worker(host), "cat", "/tmp/airlock-systemctl.log"],
            capture_output=True,
            text=True,
            check=False,
        )
        return result.stdout

    def set_workers(self, **env: str) -> None:
        """Every worker container made again with ``env`` on top of the stack's (and left so)."""
        self.env.update(env)
        workers = [f"worker-{host.removeprefix('host-')}" for host in HOSTS]
        self.run("compose", "up", "-d", "--no-deps", "--no-build", *workers)
        for host in HOSTS:
            wait_for(lambda h=host: self.state(self.worker(h)) == "running", 60, f"{host} to run")

    def sandboxes(self, owner_prefix: str = "") -> dict[str, str]:
        """The engine's sandbox containers of this stack's workers: id → owner label.

        Theirs are those the gate labelled with an address on this stack's
        ``engine`` network (other stacks and suites share the engine).
        """
        subnet = ipaddress.ip_network(self.docker(
            "network", "inspect", f"{self.project}_engine",
            "--format", "{{range .IPAM.Config}}{{.Subnet}}{{end}}",
        ).strip())  # fmt: skip
        found = {}
        for line in self.docker(
            "ps", "-a", "--no-trunc", "--filter", "label=airlock.sandbox",
            "--format", '{{.ID}} {{.Label "airlock.gate.peer"}} {{.Label "airlock.owner"}}',
        ).splitlines():  # fmt: skip
            cid, peer, owner = (line.split(" ") + ["", ""])[:3]
            ours = peer and ipaddress.ip_address(peer) in subnet
            if ours and owner.startswith(owner_prefix):
                found[cid] = owner
        return found

    def ensure_running(self) -> None:
        """Every container of the deployment up again, whatever a test did to it."""
        names = self.docker(
            "ps", "-a", "--filter", f"label=com.docker.compose.project={self.project}",
            "--format", "{{.Names}}",
        ).split()  # fmt: skip
        stopped = [n for n in names if "_migrate_" not in n and self.state(n) != "running"]
        if stopped:
            self.start(*stopped)


# As airlock_sdk does: a call that got no answer is sent again when that is safe.
RETRY_PAUSES = (0.5, 1.0, 2.0, 4.0)


@dataclass
class Agent:
    """An API client with a bearer token, through the proxy.

    It behaves as a well-made agent does (and as ``airlock_sdk`` does): every
    proposal carries an idempotency key, and a call whose connection ended
    without an answer (a keep-alive connection the proxy closed at that very
    moment, a web container that went away) is sent again if it is a read or
    carries its key; the server finds the proposal the first try made.
    """

    url: str
    token: str
    session: requests.Session = field(default_factory=requests.Session)

    def __post_init__(self) -> None:
        self.session.headers["Authorization"] = f"Bearer {self.token}"

    def call(self, method: str, path: str, retry: bool = True, **kwargs) -> requests.Response:
        """One call; ``retry=False`` shows a dropped connection to the caller (a test counting them)."""
        kwargs.setdefault("timeout", 90)
        body = kwargs.get("json")
        if method == "POST" and path == "/api/v1/proposals" and isinstance(body, dict):
            kwargs["json"] = body = {"idempotency_key": f"scale-{uuid.uuid4().hex}", **body}
        keyed = isinstance(body, dict) and bool(body.get("idempotency_key"))
        repeatable = retry and (method == "GET" or keyed)
        for pause in (*RETRY_PAUSES, None):
            try:
                return self.session.request(method, self.url + path, **kwargs)
            except requests.ConnectionError:
                if pause is None or not repeatable:
                    raise
                time.sleep(pause)
        raise AssertionError("unreachable")

    def ok(self, method: str, path: str, **kwargs) -> dict:
        response = self.call(method, path, **kwargs)
        assert response.status_code in (200, 201), (response.status_code, response.text[:500])
        return response.json()

    def propose(self, action: str, **parameters) -> dict:
        return self.ok(
            "POST", "/api/v1/proposals", json={"action": action, "parameters": parameters}
        )

    def script(self, code: str, language: str = "python", **parameters) -> dict:
        return self.propose("script.execute", language=language, code=code, **parameters)

    def proposal(self, pk: int, wait: float = 0, until: str = "") -> dict:
        query = {"wait": f"{wait:g}" if wait else "", "until": until}
        return self.ok(
            "GET", f"/api/v1/proposals/{pk}", params={k: v for k, v in query.items() if v}
        )

    def execution(self, pk: int) -> dict:
        return self.ok("GET", f"/api/v1/executions/{pk}")

    def wait_execution(self, pk: int, timeout: float = 60, until=TERMINAL) -> dict:
        return wait_for(
            lambda: (e := self.execution(pk))["status"] in until and e,
            timeout,
            f"execution {pk} to be {'/'.join(sorted(until))}",
        )

    def approve(self, pk: int) -> dict:
        """Approve; after a lost answer, the proposal read again says whether it took."""
        for pause in (*RETRY_PAUSES, None):
            try:
                return self.ok(
                    "POST", f"/api/v1/proposals/{pk}/approve", json={"comment": "scale suite"}
                )
            except requests.ConnectionError:
                if pause is None:
                    raise
                time.sleep(pause)
                if (seen := self.proposal(pk))["status"] != "pending":
                    return seen
        raise AssertionError("unreachable")


def ws_url(url: str, execution_id: int, after: int) -> str:
    return f"ws{url.removeprefix('http')}/ws/executions/{execution_id}/?after={after}"


@dataclass
class Followed:
    """What a live-output client received: every chunk, its reconnects, the final status."""

    chunks: list[dict] = field(default_factory=list)
    status: dict | None = None
    reconnects: int = 0

    @property
    def seqs(self) -> list[int]:
        return [c["seq"] for c in self.chunks]

    @property
    def text(self) -> str:
        return "".join(c["data"] for c in self.chunks if c["stream"] == "stdout")


def follow_output(
    url: str,
    token: str,
    execution_id: int,
    timeout: float = 120,
    on_chunk: Callable[[Followed], None] | None = None,
) -> Followed:
    """Read ``/ws/executions/{id}/`` to the end as a browser does, reconnecting after its last seq.

    A connection that drops, or stays silent for 10 s, is replaced by one that
    asks for what came after the last chunk seen.
    """
    followed = Followed()
    deadline = time.monotonic() + timeout
    while followed.status is None:
        assert time.monotonic() < deadline, f"no final status for execution {execution_id}"
        after = followed.seqs[-1] if followed.chunks else 0
        try:
            with connect(
                ws_url(url, execution_id, after),
                additional_headers={"Authorization": f"Bearer {token}"},
                open_timeout=5,
                close_timeout=1,
            ) as ws:
                while True:
                    message = json.loads(ws.recv(timeout=10))
                    if message["type"] == "chunk":
                        followed.chunks.append(message)
                        if on_chunk:
                            on_chunk(followed)
                    elif message["type"] == "status" and message.get("terminal"):
                        followed.status = message
                        break
        except (ConnectionClosed, InvalidHandshake, InvalidStatus, OSError, TimeoutError):
            followed.reconnects += 1
            time.sleep(0.5)
    return followed


def stack_env(project: str, port: int, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "COMPOSE_PROJECT_NAME": project,
        "AIRLOCK_PORT": str(port),
        "AIRLOCK_BIND": "127.0.0.1",
        # A real process in place of systemd, which does not run in a container.
        "HOST_ACTIONS_SYSTEMCTL": "/app/docker/stand-ins/systemctl",
        "WEB_CONCURRENCY": "1",
        "WORKER_CONCURRENCY": "4",
        "DB_POOL_SIZE": "6",
        "DB_POOL_TIMEOUT": "5",
        # Scripts in containers, started through the Docker gate (test_sandboxes
        # switches the workers to gvisor and back).
        "SANDBOX_BACKEND": "docker",
        # The suite's reviewer approves with a token, also the sandbox probes (risk 10);
        # the second factor a risky decision needs is the console's (tests/accounts).
        "STEP_UP_MIN_RISK": "11",
        "DOCKER_ACTION_CONTAINERS": f"label:airlock.actions={project}",
        "MCP_EGRESS_VOLUME": f"{project}-egress",
        **TIMINGS,
        **extra,
    }
    return env
