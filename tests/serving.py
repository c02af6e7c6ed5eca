"""Run the embedded deployment (``manage.py serve --demo``) on a free port, for a browser.

Shared by the deployment and browser tests, ``scripts/screenshots.py`` and
``scripts/benchmark_execution.py``. The servers started in a test process are read for
server errors after every test (``unread_server_errors``, by ``tests/server_errors.py``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# An interpreter with Airlock's dependencies that an ordinary user can run:
# scripts/test names it, and makes .venv-user when .venv's is private to root.
USER_PYTHON = os.environ.get("AIRLOCK_USER_PYTHON") or next(
    (str(p) for p in [ROOT / ".venv-user" / "bin" / "python"] if p.exists()), sys.executable
)
DEMO_PASSWORD = "airlock-demo"
# What would point the server at another deployment's database, broker or key.
FOREIGN_ENV = ("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SQLITE_PATH", "SECRET_KEY")
# A line of serve.log that says a request failed: a 5xx Django logged (its format is
# "time LEVEL logger message"; 4xx are WARNING), an MCP tool that failed inside Airlock,
# an exception that escaped the ASGI application.
SERVER_ERROR = re.compile(
    rb" ERROR (?:django\.request|django\.server|approvals\.agents\.mcp\.server) "
    rb"|Exception in ASGI application"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Server:
    base: str
    token: str  # the demo agent's bearer token
    process: subprocess.Popen
    log: Path
    tls: ssl.SSLContext | None = None  # trusts the server's certificate when it serves HTTPS
    read: int = field(default=0, repr=False)  # how far server_errors() has read the log

    def api(self, method: str, path: str, body: dict | None = None, token: str | None = None):
        """(status, JSON body) of an API call made as the demo agent (or ``token``)."""
        request = urllib.request.Request(
            self.base + path, method=method, data=json.dumps(body).encode() if body else None
        )
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Bearer {token or self.token}")
        try:
            with urllib.request.urlopen(request, timeout=70, context=self.tls) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def propose_script(
        self, code: str, reason: str = "", timeout_seconds: int = 60, query: str = ""
    ) -> dict:
        status, body = self.api(
            "POST",
            "/api/v1/proposals" + query,
            {
                "action": "script.execute",
                "parameters": {
                    "language": "python",
                    "code": code,
                    "timeout_seconds": timeout_seconds,
                },
                "reason": reason,
            },
        )
        assert status == 201, body
        return body

    def server_errors(self) -> list[str]:
        """The lines logged since the last call that say a request failed (``SERVER_ERROR``)."""
        try:
            with open(self.log, "rb") as log:
                log.seek(self.read)
                text = log.read()
        except FileNotFoundError:
            return []
        whole = text.rfind(b"\n") + 1  # a line still being written is read the next time
        self.read += whole
        lines = text[:whole].splitlines()
        return [line.decode(errors="replace") for line in lines if SERVER_ERROR.search(line)]

    def children(self) -> list[int]:
        """The pids of serve's children (the web processes, the Celery worker and beat)."""
        found = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError):
                if f"PPid:\t{self.process.pid}\n" in Path(f"/proc/{pid}/status").read_text():
                    found.append(int(pid))
        return found

    def web_processes(self) -> list[int]:
        """serve's web processes (one per core by default)."""
        found = []
        for pid in self.children():
            with contextlib.suppress(OSError):
                if b"uvicorn" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                    found.append(pid)
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_server(
    data_dir: Path | None,
    timeout: float = 180,
    backend: str = "local",
    *,
    wrapper: list[str] = (),
    checkout: Path = ROOT,
    extra_env: dict[str, str] | None = None,
    python: str = sys.executable,
    serve_args: list[str] = (),
    tls: tuple[Path, Path] | None = None,
    port: int | None = None,
    verbose: bool = True,
) -> Server:
    """Start ``serve --demo`` with a fresh data dir and a sandbox backend; wait until it answers.

    ``wrapper`` is an argv prefix (e.g. ``scripts/unprivileged --``); ``checkout``
    the copy of Airlock to serve from; ``data_dir`` None keeps its default
    (``var/`` in that checkout). The log goes to ``serve.log`` beside the data.
    ``tls``: (certificate, key) to serve HTTPS with; ``port``: where (default: a free one).
    ``verbose``: the worker's and the scheduler's logs in ``serve.log`` too (what a failed
    test shows), not in the data dir's ``logs/``.
    """
    port = port or free_port()
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV + ("AIRLOCK_DATA_DIR",)}
    env.update(SANDBOX_BACKEND=backend, **(extra_env or {}))
    if data_dir is not None:
        env["AIRLOCK_DATA_DIR"] = str(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        log_path = data_dir / "serve.log"
    else:
        log_path = Path(tempfile.mkdtemp(prefix="airlock-serve-log-")) / "serve.log"
    log = open(log_path, "wb")  # noqa: SIM115 - the child writes to it until it stops
    context = None
    if tls is not None:
        serve_args = [*serve_args, "--certfile", str(tls[0]), "--keyfile", str(tls[1])]
        context = ssl.create_default_context(cafile=str(tls[0]))
    process = subprocess.Popen(
        [*wrapper, python, str(checkout / "manage.py"), "serve", "--port", str(port), "--demo"]
        + (["--verbose"] if verbose else [])
        + list(serve_args),
        cwd=checkout,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"serve exited early:\n{log_path.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2, context=context):
                break
        except urllib.error.HTTPError:
            break  # it answers (503 = a check is unhappy, still serving)
        except OSError:
            time.sleep(0.3)
    else:
        process.terminate()
        raise RuntimeError(f"serve did not answer:\n{log_path.read_text()[-3000:]}")
    match = re.search(r"token \(shown once\):\s+(\S+)", log_path.read_text())
    if not match:
        process.terminate()
        raise RuntimeError(f"no demo token printed:\n{log_path.read_text()[-3000:]}")
    # Reading starts here: a 503 from /healthz while it started is the waiting above.
    server = Server(base=base, token=match.group(1), process=process, log=log_path, tls=context)
    server.read = log_path.stat().st_size
    _started.append(server)
    return server


_started: list[Server] = []


def unread_server_errors() -> list[str]:
    """What the servers started in this process logged as server errors since the last
    call; a server that has stopped is read a last time and forgotten."""
    found = []
    for server in list(_started):
        found += server.server_errors()
        if server.process.poll() is not None:
            _started.remove(server)
    return found


def manage(data_dir, *args: str, env: dict[str, str] | None = None) -> str:
    """Run a management command on the deployment whose data is in ``data_dir``; its stdout."""
    environment = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    environment.update(env or {}, AIRLOCK_DATA_DIR=str(data_dir))
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def user_token(data_dir, username: str, env: dict[str, str] | None = None) -> str:
    """A new personal API token of ``username`` of the deployment in ``data_dir``."""
    return manage(data_dir, "create_user_token", username, env=env).split()[-1]


def agent_token(data_dir, name: str, *capabilities: str) -> str:
    """The token of a new agent ``name`` with ``capabilities`` in the deployment in ``data_dir``."""
    granted = [arg for capability in capabilities for arg in ("--capability", capability)]
    return manage(data_dir, "create_agent", name, *granted).split()[-1]


def reviewer_token(data_dir) -> str:
    """A personal API token of the demo ``reviewer`` of the deployment in ``data_dir``."""
    return user_token(data_dir, "reviewer")


def decide_when_pending(server, tool: str, kind: str, comment: str = "") -> threading.Thread:
    """A reviewer (``server.reviewer``'s token) who decides the first pending ``tool.call``
    of ``tool`` once it shows: started now, joined by the caller."""

    def decide():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, page = server.api(
                "GET", "/api/v1/proposals?status=pending&action=tool.call", token=server.reviewer
            )
            mine = [p for p in page["items"] if p["parameters"]["tool"] == tool]
            if mine:
                server.api(
                    "POST", f"/api/v1/proposals/{mine[0]['id']}/{kind}", {"comment": comment},
                    token=server.reviewer,
                )  # fmt: skip
                return
            time.sleep(0.1)

    thread = threading.Thread(target=decide)
    thread.start()
    return thread


def lift_agent_limits(data_dir, env: dict | None = None) -> None:
    """Put a policy in force on the deployment in ``data_dir`` whose agents may propose as
    fast and as much as a benchmark asks (``max_pending``, ``max_proposals_per_minute``):
    a benchmark or a suite that writes hard measures the path, not the limits that protect
    reviewers from a flood."""
    import tempfile

    import yaml

    policy = yaml.safe_load(manage(data_dir, "policy", "export", env=env))
    policy.update(max_pending=100_000, max_proposals_per_minute=100_000)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as handle:
        yaml.safe_dump(policy, handle)
        handle.flush()
        manage(
            data_dir, "policy", "apply", handle.name, "--comment", "benchmark: no limits", env=env
        )
