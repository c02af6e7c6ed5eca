"""Docker actions on the compose deployment: from any worker, through the gate, on allowed containers.

The stack's ``DOCKER_ACTION_CONTAINERS`` (here ``label:airlock.actions=<project>``) says
which containers Docker actions may act on; the test starts one such container
on the host's engine and runs every action of the catalog on it, approved where
the policy holds it. The stack's own PostgreSQL is not one: restarting it is
refused with a clear error, and it keeps running untouched.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from .stack import Agent, Stack, wait_for

APP = "import time\nprint('app ready', flush=True)\nwhile True:\n    time.sleep(0.2)\n"


@pytest.fixture(scope="module")
def docker_agent(stack: Stack) -> Agent:
    return Agent(
        stack.url, stack.manage("create_agent", "scale-docker", "--capability", "docker.*")
    )


@pytest.fixture
def app(stack: Stack) -> Iterator[str]:
    name = f"{stack.project}-app-{uuid.uuid4().hex[:6]}"
    stack.docker(
        "run", "-d", "--init", "--name", name, "--network", "none",
        "--label", f"airlock.actions={stack.project}", "airlock-sandbox:latest", "python3", "-c", APP,
    )  # fmt: skip
    wait_for(lambda: "app ready" in stack.docker("logs", name), 30, f"{name} to start")
    yield name
    stack.docker("rm", "-f", name)


def act(agent: Agent, reviewer: Agent, action: str, **parameters) -> dict:
    proposal = agent.propose(action, **parameters)
    if proposal["status"] == "pending":
        proposal = reviewer.approve(proposal["id"])
    assert proposal["status"] == "approved", proposal
    return agent.wait_execution(proposal["execution_id"], timeout=90)


def started_at(stack: Stack, name: str) -> str:
    return stack.docker("inspect", "--format", "{{.State.StartedAt}}", name).strip()


def test_every_docker_action_runs_on_an_allowed_container(
    stack: Stack, docker_agent: Agent, reviewer: Agent, app: str
):
    inspected = act(docker_agent, reviewer, "docker.inspect_container", container=app)
    logs = act(docker_agent, reviewer, "docker.container_logs", container=app, tail=1)
    before = started_at(stack, app)
    restarted = act(docker_agent, reviewer, "docker.restart_container", container=app, timeout=2)
    after_restart = started_at(stack, app)
    stopped = act(docker_agent, reviewer, "docker.stop_container", container=app, timeout=2)
    state_stopped = stack.state(app)
    started = act(docker_agent, reviewer, "docker.start_container", container=app)
    pruned = act(docker_agent, reviewer, "docker.prune_networks")

    for execution in (inspected, logs, restarted, stopped, started, pruned):
        assert execution["status"] == "succeeded", execution
        assert execution["provenance"]["backend"] == "docker-engine"
    assert json.loads(inspected["stdout"])["Name"] == f"/{app}"
    assert logs["stdout"] == "app ready\n"
    assert after_restart != before
    assert state_stopped == "exited" and stack.state(app) == "running"
    assert "unused network(s) deleted" in pruned["stdout"]
    hosts = {e["provenance"]["worker_host"] for e in (inspected, logs, restarted, stopped, started)}
    assert hosts <= {"host-a", "host-b", "host-c"}


def test_a_container_the_admin_did_not_allow_is_refused_clearly(
    stack: Stack, docker_agent: Agent, reviewer: Agent
):
    postgres = stack.container("postgres")
    before = started_at(stack, postgres)
    refused = act(docker_agent, reviewer, "docker.restart_container", container=postgres)
    assert refused["status"] == "failed", refused
    assert f"container {postgres} is not one Airlock may act on" in refused["stderr"]
    assert f"label:airlock.actions={stack.project}" in refused["stderr"]
    assert started_at(stack, postgres) == before and stack.state(postgres) == "running"
