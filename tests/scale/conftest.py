"""The scale suite: the compose deployment on this machine, started once per session.

It runs when asked for (``pytest tests/scale``, scripts/test's last pass, or
``AIRLOCK_SCALE_TESTS=1``), as root (the images are built offline), and needs
a Docker engine and docker-compose: without them it skips, and under
``CI=true`` it fails. The stack is a compose project of its own on a free
port, torn down (containers, network, volumes) at the end, on SIGTERM too;
the stacks of earlier runs that were killed outright are removed first.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.gateway.images import upstream_image
from tests.support import require

from .stack import HOSTS, Agent, Stack, stack_env

SUITE = Path(__file__).resolve().parent
PROJECT_PREFIX = "airlockscale"  # + the pid of the pytest that started it


def _asked_for(config: pytest.Config) -> bool:
    if os.environ.get("AIRLOCK_SCALE_TESTS") == "1":
        return True
    for arg in config.invocation_params.args:
        path = Path(arg.split("::")[0])
        if path.exists() and (path.resolve() == SUITE or SUITE in path.resolve().parents):
            return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Left out of a run that did not name it (deselected, not skipped): it runs on its own."""
    if _asked_for(config):
        return
    scale = [item for item in items if SUITE in Path(str(item.fspath)).parents]
    if scale:
        config.hook.pytest_deselected(items=scale)
        items[:] = [item for item in items if item not in scale]


def _engine_answers() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


def _compose_available() -> bool:
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, check=False)
    return plugin.returncode == 0 or bool(shutil.which("docker-compose"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")  # pytest then tears the session down


def _remove_orphans(log: Path) -> None:
    """Stacks of earlier runs whose pytest was killed before it could take them down."""
    projects = subprocess.run(
        ["docker", "ps", "-a", "--format", '{{.Label "com.docker.compose.project"}}'],
        capture_output=True, text=True, check=False,
    ).stdout.split()  # fmt: skip
    for project in sorted(set(projects)):
        pid = project.removeprefix(PROJECT_PREFIX)
        if project.startswith(PROJECT_PREFIX) and pid.isdigit() and not _alive(int(pid)):
            Stack(project=project, port=0, env=stack_env(project, 0), log=log).run(
                "down", check=False
            )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture(scope="session")
def stack() -> Stack:
    require(_engine_answers(), "no Docker engine answers (scripts/provision docker)")
    require(_compose_available(), "no docker-compose (scripts/provision docker)")
    require(os.geteuid() == 0, "the scale suite builds its images offline, as root")
    project = f"{PROJECT_PREFIX}{os.getpid()}"
    log = Path(tempfile.mkdtemp(prefix="airlock-scale-")) / "stack.log"
    _remove_orphans(log)
    stack = Stack(project=project, port=_free_port(), env=stack_env(project, 0), log=log)
    # The suite's MCP server, which the gate lets the gateway run (test_gateway_upstreams).
    stack.env["DOCKER_GATE_SERVER_IMAGES"] = upstream_image()
    stack.env["AIRLOCK_PORT"] = str(stack.port)
    started = time.monotonic()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        stack.run("up", "--web", "2", "--workers", str(len(HOSTS)))
        print(f"\n[scale] stack up in {time.monotonic() - started:.0f} s (log: {log})")
        yield stack
    finally:
        stack.run("down", check=False)
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(scope="session")
def agent(stack: Stack) -> Agent:
    token = stack.manage(
        "create_agent", "scale-agent", "--capability", "script.execute", "--capability", "host.*"
    )
    # The suite's one agent leaves many proposals waiting and proposes in bursts: past the
    # limits that keep a runaway agent from flooding reviewers (approvals.guard).
    stack.manage("shell", "-c", LIFT_LIMITS)
    return Agent(stack.url, token)


LIFT_LIMITS = (
    "from approvals.policy.rules import current_policy, update_policy; "
    "d = current_policy().as_data(); "
    "d['agent_overrides']['scale-agent'] = "
    "{'max_pending': 100000, 'max_proposals_per_minute': 100000}; "
    "update_policy(d, comment='scale suite: no limits for its agent', actor='system')"
)


@pytest.fixture(scope="session")
def reviewer(stack: Stack) -> Agent:
    stack.manage("demo", "--json")  # the reviewer accounts
    return Agent(stack.url, stack.manage("create_user_token", "reviewer"))


@pytest.fixture(scope="session")
def reviewers(stack: Stack, reviewer: Agent) -> list[Agent]:
    """Two reviewers: a proposal of high risk needs both (the policy's quorum)."""
    return [reviewer, Agent(stack.url, stack.manage("create_user_token", "reviewer2"))]


@pytest.fixture(autouse=True)
def _whole_stack_after(request: pytest.FixtureRequest):
    """A test that stopped or killed a container leaves the next one a whole stack."""
    yield
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").ensure_running()
