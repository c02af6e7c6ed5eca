"""The documentation's agent calls, unchanged, against the compose deployment through its proxy."""

from __future__ import annotations

import uuid

from .stack import Agent, Stack


def test_the_readme_agent_scenario_passes_through_the_proxy(
    stack: Stack, agent: Agent, reviewer: Agent
):
    created = agent.ok(
        "POST",
        "/api/v1/proposals",
        json={
            "action": "script.execute",
            "parameters": {"language": "python", "code": 'print("hi")'},
            "reason": "smoke test",
        },
    )
    assert created["status"] == "approved"
    assert created["risk"]["score"] == 2

    polled = agent.proposal(created["id"], wait=30, until="finished")
    assert polled["execution_status"] == "succeeded"  # one call waited out the run
    execution = agent.ok("GET", f"/api/v1/executions/{created['execution_id']}")
    assert (execution["status"], execution["stdout"], execution["exit_code"]) == (
        "succeeded",
        "hi\n",
        0,
    )
    assert len(execution["provenance"]["command_hash"]) == 64
    output = agent.ok("GET", f"/api/v1/executions/{created['execution_id']}/output?after=0")
    assert "hi" in str(output)

    # Risky work waits for a reviewer, who approves with a personal token.
    unit = f"unit-{uuid.uuid4().hex[:8]}"
    held = agent.propose("host.restart_service", service_name=unit, host="host-a")
    assert held["status"] == "pending"
    approved = reviewer.ok(
        "POST", f"/api/v1/proposals/{held['id']}/approve", json={"comment": "go"}
    )
    assert approved["status"] == "approved"
    ran = agent.wait_execution(approved["execution_id"])
    assert (ran["status"], ran["stdout"]) == ("succeeded", f"systemctl restart {unit} on host-a\n")


def test_bad_input_through_the_proxy_is_a_precise_4xx(stack: Stack, agent: Agent):
    no_host = agent.call(
        "POST",
        "/api/v1/proposals",
        json={"action": "host.restart_service", "parameters": {"service_name": "nginx"}},
    )
    bad_wait = agent.call("GET", "/api/v1/proposals/1?wait=forever")
    no_token = Agent(stack.url, "alk_not-a-token").call("GET", "/api/v1/proposals/1")

    assert no_host.status_code == 400
    assert no_host.json()["error"]["type"] == "validation_error"
    assert "host" in no_host.json()["error"]["message"]
    assert bad_wait.status_code == 400
    assert "wait" in bad_wait.json()["error"]["message"]
    assert no_token.status_code == 401
    assert no_token.json()["error"]["type"]
