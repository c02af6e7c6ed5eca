"""Review routes in the scale deployment: a silent team is escalated exactly once.

The beat container schedules the sweep and any of the worker hosts runs it;
one conditional update per proposal is what keeps it to once.
"""

from __future__ import annotations

import json
import time

import pytest

from .stack import Agent, Stack, wait_for

POLICY = (  # the default with changes, keeping the agents' overrides (the suite's limits)
    "from approvals.policy.rules import DEFAULT_POLICY, current_policy, update_policy; "
    "kept = {{'agent_overrides': current_policy().as_data()['agent_overrides']}}; "
    "update_policy({{**DEFAULT_POLICY, **kept, **{changes}}}, None, 'scale suite', actor='scale')"
)
ROUTES = {
    "teams": {"finance": {"members": ["fiona"]}, "sre": {"members": ["reviewer2"]}},
    "reviews": [
        {
            "match": ["tool:billing.refund"],
            "require": {"finance": 1},
            "escalate_after_minutes": 1,
            "escalate_to": ["sre"],
        }
    ],
}


@pytest.fixture
def routed(stack: Stack):
    stack.manage("shell", "-c", POLICY.format(changes=json.dumps(ROUTES)))
    yield
    stack.manage("shell", "-c", POLICY.format(changes="{}"))


def escalations(stack: Stack, pk: int) -> int:
    counted = stack.manage(
        "shell",
        "-c",
        "from audit.models import AuditEvent; print(AuditEvent.objects.filter("
        f"verb='proposal.escalated', object_id='{pk}').count())",
    )
    return int(counted.strip().splitlines()[-1])


def test_a_silent_team_is_escalated_once_by_the_beat_and_the_team_it_went_to_decides(
    stack: Stack, routed, reviewers: list[Agent]
):
    caller = Agent(
        stack.url, stack.manage("create_agent", "scale-billing", "--capability", "tool.call")
    )
    made = caller.propose("tool.call", tool="billing.refund", arguments={"amount": 1250})
    assert made["status"] == "pending" and made["required_reviews"][0]["team"] == "finance"
    sre = reviewers[1]  # reviewer2
    early = sre.call("POST", f"/api/v1/proposals/{made['id']}/approve", json={})
    assert early.status_code == 403 and early.json()["error"]["type"] == "not_a_required_reviewer"

    escalated = wait_for(
        lambda: (p := caller.proposal(made["id"]))["escalated_at"] and p,
        150,
        f"proposal {made['id']} to be escalated",
        interval=2,
    )
    assert escalated["status"] == "pending"
    wait_for(lambda: escalations(stack, made["id"]) == 1, 30, "its audit record")
    time.sleep(45)  # two more sweeps, on any of the three worker hosts: still once
    assert escalations(stack, made["id"]) == 1
    done = sre.approve(made["id"])
    assert done["status"] == "approved"
    assert done["decisions"][0]["team"] == "finance"  # given in the silent team's place
