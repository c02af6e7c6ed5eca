"""Several hosts: a host action runs on the host it names, and on no other.

Each worker container is a host (its hostname) consuming ``host.<hostname>``;
the stand-in systemctl records every call on the host it ran on.
"""

from __future__ import annotations

import re
import time
import uuid

import requests

from .stack import HOSTS, Agent, Stack, wait_for


def status_of(agent: Agent, host: str, unit: str) -> dict:
    return agent.propose("host.service_status", service_name=unit, host=host)


def test_host_actions_for_host_b_run_on_host_b_only(stack: Stack, agent: Agent):
    unit = f"unit-{uuid.uuid4().hex[:8]}"
    proposals = [status_of(agent, "host-b", unit) for _ in range(6)]

    for proposal in proposals:
        assert proposal["status"] == "approved", proposal
        execution = agent.wait_execution(proposal["execution_id"])
        assert execution["status"] == "succeeded", execution
        assert execution["provenance"]["worker_host"] == "host-b"
        assert execution["provenance"]["queue"] == "host.host-b"
        assert execution["stdout"] == f"systemctl status {unit} on host-b\n"
    assert stack.systemctl_log("host-b").count(f"status {unit}") == 6
    for other in ("host-a", "host-c"):
        assert unit not in stack.systemctl_log(other), other


def test_scripts_spread_over_every_host(stack: Stack, agent: Agent):
    proposals = [agent.script("import time; time.sleep(0.5); print('ok')") for _ in range(12)]

    hosts = {
        agent.wait_execution(p["execution_id"])["provenance"]["worker_host"] for p in proposals
    }

    assert hosts <= set(HOSTS)
    assert len(hosts) >= 2, hosts


def login(stack: Stack) -> requests.Session:
    browser = requests.Session()
    page = browser.get(f"{stack.url}/login/", timeout=10)
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    response = browser.post(
        f"{stack.url}/login/",
        data={"login": "reviewer", "password": "airlock-demo", "csrfmiddlewaretoken": token},
        timeout=10,
    )
    assert response.ok and "/login/" not in response.url, response.url
    return browser


def test_a_stopped_host_keeps_its_host_actions_queued_and_runs_them_when_back(
    stack: Stack, agent: Agent, reviewer: Agent
):
    unit = f"unit-{uuid.uuid4().hex[:8]}"
    stack.docker("stop", "--time", "5", stack.worker("host-c"))

    proposal = status_of(agent, "host-c", unit)
    for_a = status_of(agent, "host-a", unit)
    # Longer than REQUEUE_AFTER_SECONDS plus a sweep: it has been re-dispatched meanwhile.
    assert agent.wait_execution(for_a["execution_id"])["status"] == "succeeded"
    time.sleep(8)

    execution = agent.execution(proposal["execution_id"])
    assert execution["status"] == "queued", execution
    assert execution["provenance"]["worker_host"] in ("", None)
    assert agent.proposal(proposal["id"])["execution_status"] == "queued"
    page = login(stack).get(f"{stack.url}/executions/{proposal['execution_id']}/", timeout=10)
    assert "waiting for host-c's worker" in page.text
    assert f"status {unit}" not in stack.systemctl_log("host-b")
    assert stack.systemctl_log("host-a").count(f"status {unit}") == 1  # for_a only

    stack.start(stack.worker("host-c"))
    execution = agent.wait_execution(proposal["execution_id"], timeout=60)

    assert execution["status"] == "succeeded", execution
    assert execution["provenance"]["worker_host"] == "host-c"
    assert execution["stdout"] == f"systemctl status {unit} on host-c\n"
    assert stack.systemctl_log("host-c").count(f"status {unit}") == 1  # once, not per dispatch
    wait_for(lambda: reviewer.proposal(proposal["id"])["execution_status"] == "succeeded", 10, "it")
