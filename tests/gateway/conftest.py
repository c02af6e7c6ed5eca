"""The gateway against real upstream MCP servers (``tests.gateway.upstream``) and a real ``serve``.

One deployment for the package, fronting four upstreams: ``up`` (stdio, which
may reach ``web``'s port through its proxy),
``slowup`` (stdio, a 1 s timeout), ``web`` (streamable HTTP, a header that
names Airlock's environment) and ``down`` (an HTTP address nobody answers).
Each upstream writes every call it receives to its own file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.executions.attacks import attack, database_steps, port_steps, primary_ip, worker_steps
from tests.mcp.conftest import Served, pytest_runtest_makereport  # noqa: F401
from tests.serving import ROOT, USER_PYTHON, free_port, start_server

SECRET = "gw-secret-7f3a"


@dataclass
class Gateway:
    served: Served
    calls_dir: Path
    reviewer: str
    web_port: int  # the HTTP upstream's: the one host:port the stdio upstream ``up`` may reach

    def calls(self, upstream: str, tool: str | None = None) -> list[dict]:
        """The calls upstream ``upstream`` received (of ``tool``), in order."""
        path = self.calls_dir / f"{upstream}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        return [c for c in map(json.loads, lines) if tool in (None, c["tool"])]

    def agent(self, name: str, *capabilities: str) -> str:
        return self.served.new_agent(name, *capabilities)

    def policy(self, **lists) -> None:
        """The default policy with these rule lists (``allow=[("tool", "up.add")]``)."""
        rules = {
            kind: [{"kind": k, "pattern": p, "note": "test"} for k, p in rules]
            for kind, rules in lists.items()
        }
        self.served.manage(
            "shell",
            "-c",
            "from approvals.policy.rules import DEFAULT_POLICY, update_policy; "
            f"update_policy({{**DEFAULT_POLICY, **{rules!r}}}, None, 'test', actor='test')",
        )

    def decide(self, tool: str, kind: str, comment: str = "") -> None:
        """Decide the first pending call of ``tool`` once it shows (waits for it)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, page = self.served.server.api(
                "GET", "/api/v1/proposals?status=pending&action=tool.call", token=self.reviewer
            )
            mine = [p for p in page["items"] if p["parameters"]["tool"] == tool]
            if mine:
                self.served.decide(mine[0]["id"], kind, self.reviewer, comment)
                return
            time.sleep(0.1)
        raise AssertionError(f"no pending call of {tool}")


def stdio_upstream(calls: Path | None = None, **env: str) -> dict:
    """The suite's stdio upstream as an upstream's configuration.

    It runs sandboxed: it may read its own code (``tests/``) and, when ``calls``
    is given, write its calls there (a folder from ``open_folder``). USER_PYTHON:
    as root, the sandbox runs it as a uid of its own, which cannot reach /root.
    """
    config = {
        "command": [USER_PYTHON, "-m", "tests.gateway.upstream", "stdio"],
        "read": [str(ROOT / "tests")],
        "env": {"PYTHONPATH": str(ROOT), **env},
    }
    if calls is not None:
        config["write"] = [str(calls.parent)]
        config["env"]["UPSTREAM_CALLS"] = str(calls)
    return config


def attack_code(data: Path, port: int, web_pid: int) -> str:
    """The adversarial suites' attack code against a live deployment (its data dir, its port,
    its web process), as an upstream's ``attack`` tool runs it: each step prints REACHED or
    blocked (``attacks.assert_contained`` reads it)."""
    steps = [
        *database_steps(str(data / "airlock.sqlite3")),
        ("read the secret key", f"read({str(data / 'secret_key')!r})"),
        ("list the data dir", f"os.listdir({str(data)!r})"),
        ("write the data dir", f"write({str(data / 'planted')!r})"),
        ("read the host's passwords", "read('/etc/shadow')"),
        *port_steps(
            [("127.0.0.1", port), ("127.0.0.1", 6379), ("127.0.0.1", 5432), (primary_ip(), port)],
            ["/var/run/docker.sock", "/var/run/postgresql/.s.PGSQL.5432"],
        ),
        *worker_steps(web_pid),
        ("see Airlock's processes", "processes_with('manage.py')[0]"),  # IndexError: none
    ]
    return attack(steps)


def open_folder(prefix: str) -> Path:
    """A temp folder a sandboxed upstream can write, whatever uid it runs as (not under
    pytest's own temp dir, which is 0700); the caller removes it."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    folder.chmod(0o777)
    return folder


def _upstreams(calls: Path, web_port: int, down_port: int) -> str:
    def stdio(name: str, timeout: int) -> dict:
        config = stdio_upstream(calls / f"{name}.jsonl", FROM_AIRLOCK="${GATEWAY_SECRET}")
        return {**config, "timeout_seconds": timeout}

    return json.dumps(
        {
            "upstreams": {
                "up": {**stdio("up", 10), "network": [f"127.0.0.1:{web_port}"]},
                "slowup": stdio("slowup", 1),
                "web": {
                    "url": f"http://127.0.0.1:{web_port}/mcp",
                    "headers": {"Authorization": "Bearer ${GATEWAY_SECRET}"},
                },
                "down": {"url": f"http://127.0.0.1:{down_port}/mcp", "timeout_seconds": 5},
            }
        }
    )


@pytest.fixture(scope="package")
def gateway() -> Iterator[Gateway]:
    root = Path(tempfile.mkdtemp(prefix="airlock-gateway-"))
    root.chmod(0o755)
    calls = open_folder("airlock-gateway-calls-")
    web_port, down_port = free_port(), free_port()
    web = subprocess.Popen(
        [sys.executable, "-m", "tests.gateway.upstream", "http", str(web_port)],
        cwd=ROOT,
        env={"UPSTREAM_CALLS": str(calls / "web.jsonl"), "PATH": "/usr/bin:/bin"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = None
    try:
        _wait_for(f"http://127.0.0.1:{web_port}/mcp")
        data = root / "data"
        server = start_server(data, extra_env={"STEP_UP_MIN_RISK": "11", "GATEWAY_SECRET": SECRET})
        served = Served(server, data)
        (root / "upstreams.yaml").write_text(_upstreams(calls, web_port, down_port))
        served.manage("upstreams", "apply", str(root / "upstreams.yaml"))
        yield Gateway(served, calls, served.user_token("reviewer"), web_port)
    finally:
        if server is not None:
            server.stop()
        web.terminate()
        web.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(calls, ignore_errors=True)


def _wait_for(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the upstream at {url} did not start")
