"""tool.call: approved here, carried out by the agent, which reports how it went."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from audit.models import AuditEvent
from executions import services
from executions.models import Execution
from tests.conftest import client_for, use_policy

MERGE = {
    "action": "tool.call",
    "parameters": {
        "tool": "github.merge_pull_request",
        "arguments": {"repo": "acme/web", "number": 42, "method": "squash"},
    },
    "reason": "the checks passed",
}


def propose(api, body=MERGE) -> dict:
    response = api.post("/api/v1/proposals", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def report(api, execution_id, status="succeeded", output="merged", expect=200) -> dict:
    response = api.post(
        f"/api/v1/executions/{execution_id}/report",
        {"status": status, "output": output},
        format="json",
    )
    assert response.status_code == expect, response.content
    return response.json()


def error(response, status: int) -> str:
    assert response.status_code == status, response.content
    return response.json()["error"]["message"]


def test_a_call_allowed_by_policy_waits_for_its_agents_report_and_keeps_it(agent_api):
    use_policy(allow=[{"kind": "tool", "pattern": "github.*", "note": "ci bot"}])
    body = propose(agent_api)
    assert (body["status"], body["decision_path"]["rule"]) == ("approved", "tool:github.*")
    assert body["summary"].startswith('github.merge_pull_request(repo="acme/web", number=42')
    execution = agent_api.get(f"/api/v1/executions/{body['execution_id']}").json()
    assert (execution["status"], execution["backend"]) == ("running", "agent")
    assert execution["report_by"]
    assert not Execution.objects.filter(pk=body["execution_id"], dispatch_count__gt=0).exists()
    done = report(agent_api, body["execution_id"], output={"sha": "abc123", "merged": True})
    assert (done["status"], done["success"], done["exit_code"]) == ("succeeded", True, 0)
    assert done["stdout"] == '{"sha": "abc123", "merged": true}'
    events = list(
        AuditEvent.objects.filter(
            object_type="execution", object_id=str(body["execution_id"])
        ).values_list("actor", "verb")
    )
    assert events == [
        ("system", "execution.awaiting_report"),  # approved by the policy
        ("agent:requester", "execution.succeeded"),  # as the agent reported it
    ]


def test_a_call_that_returned_nothing_is_reported_with_a_null_output(agent_api):
    use_policy(allow=[{"kind": "tool", "pattern": "github.*", "note": "ci bot"}])
    execution_id = propose(agent_api)["execution_id"]
    done = report(agent_api, execution_id, output=None)
    assert (done["status"], done["stdout"]) == ("succeeded", "")


def test_a_held_call_is_reported_once_approved_and_a_failure_is_kept(agent_api, reviewer_api):
    body = propose(agent_api)
    assert body["status"] == "pending" and body["execution_id"] is None
    decided = reviewer_api.post(
        f"/api/v1/proposals/{body['id']}/approve", {"comment": "ok"}, format="json"
    )
    assert decided.status_code == 200, decided.content
    execution_id = decided.json()["execution_id"]
    done = report(agent_api, execution_id, "failed", "409 from GitHub: not mergeable")
    assert (done["status"], done["exit_code"]) == ("failed", 1)
    assert done["stdout"] == "409 from GitHub: not mergeable"
    assert done["error"] == "the agent reported the call failed"


def test_only_the_proposing_agent_reports_only_once_and_only_a_tool_call(
    agent_api, make_agent, reviewer_api
):
    use_policy(allow=[{"kind": "action", "pattern": "*", "note": "all"}])
    execution_id = propose(agent_api)["execution_id"]
    other = client_for(make_agent("other-bot")[1])
    says = error(other.post(f"/api/v1/executions/{execution_id}/report",
                            {"status": "succeeded"}, format="json"), 403)  # fmt: skip
    assert "another agent's proposal" in says
    says = error(reviewer_api.post(f"/api/v1/executions/{execution_id}/report",
                                   {"status": "succeeded"}, format="json"), 403)  # fmt: skip
    assert "only the proposing agent" in says
    report(agent_api, execution_id)
    says = error(agent_api.post(f"/api/v1/executions/{execution_id}/report",
                                {"status": "failed"}, format="json"), 409)  # fmt: skip
    assert "already reported (succeeded)" in says
    script = propose(agent_api, {"action": "script.execute",
                                 "parameters": {"language": "python", "code": "print(1)"}})  # fmt: skip
    says = error(agent_api.post(f"/api/v1/executions/{script['execution_id']}/report",
                                {"status": "succeeded"}, format="json"), 409)  # fmt: skip
    assert "carried out by Airlock, not reported" in says
    assert error(agent_api.post("/api/v1/executions/999999/report",
                                {"status": "succeeded"}, format="json"), 404)  # fmt: skip


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"status": "done"}, "status"),
        ({}, "status"),
        ({"status": "succeeded", "output": "x", "extra": 1}, "extra"),
    ],
)
def test_a_bad_report_is_a_400_that_names_the_field_and_changes_nothing(agent_api, body, says):
    use_policy(allow=[{"kind": "tool", "pattern": "*", "note": "all"}])
    execution_id = propose(agent_api)["execution_id"]
    response = agent_api.post(f"/api/v1/executions/{execution_id}/report", body, format="json")
    assert response.status_code == 400, response.content
    assert says in str(response.json()["error"])
    assert Execution.objects.get(pk=execution_id).status == "running"


def test_a_call_not_reported_in_time_is_lost_and_a_late_report_refused(agent_api):
    use_policy(allow=[{"kind": "tool", "pattern": "*", "note": "all"}])
    execution_id = propose(agent_api)["execution_id"]
    Execution.objects.filter(pk=execution_id).update(
        report_by=timezone.now() - dt.timedelta(seconds=1)
    )
    assert services.sweep()["lost"] == 1
    execution = Execution.objects.get(pk=execution_id)
    assert execution.status == "lost" and "did not report" in execution.error
    says = error(agent_api.post(f"/api/v1/executions/{execution_id}/report",
                                {"status": "succeeded"}, format="json"), 409)  # fmt: skip
    assert "is lost: the report was due by" in says
    assert services.sweep()["lost"] == 0


@pytest.mark.parametrize(
    ("parameters", "field", "says"),
    [
        ({"arguments": {}}, "tool", "required"),
        ({"tool": "bad name!", "arguments": {}}, "tool", "must be a tool name"),
        ({"tool": 5, "arguments": {}}, "tool", "must be a tool name as a string"),
        ({"tool": "x", "arguments": [1, 2]}, "arguments", "must be a JSON object"),
        ({"tool": "x", "arguments": {"blob": "x" * 70000}}, "arguments", "at most 65536 bytes"),
        ({"tool": "x", "argumentz": {}}, "argumentz", "unknown parameter"),
    ],
)
def test_a_bad_tool_call_is_a_400_naming_the_field(agent_api, parameters, field, says):
    response = agent_api.post(
        "/api/v1/proposals", {"action": "tool.call", "parameters": parameters}, format="json"
    )
    assert response.status_code == 400, response.content
    assert field in str(response.json()["error"]) and says in str(response.json()["error"])


def test_a_capability_can_name_the_tools_an_agent_may_ask_for(make_agent):
    agent, token = make_agent("gh-bot", ["tool.call:github.*"])
    api = client_for(token)
    assert propose(api)["status"] in ("pending", "approved")
    refused = propose(
        api,
        {"action": "tool.call", "parameters": {"tool": "billing.refund", "arguments": {}}},
    )
    assert (refused["status"], refused["decision_path"]["step"]) == ("denied", "capability")
    script = propose(api, {"action": "script.execute",
                           "parameters": {"language": "python", "code": "print(1)"}})  # fmt: skip
    assert script["status"] == "denied"
    assert agent.capability_for("tool.call", "github.merge") == "tool.call:github.*"
    assert agent.capability_for("tool.call") is None
    listed = {a["name"]: a for a in api.get("/api/v1/capabilities").json()["actions"]}
    assert listed["tool.call"]["allowed"] and not listed["script.execute"]["allowed"]
    assert listed["tool.call"]["parameters"]["arguments"]["default"] == {}


def test_the_deny_list_stops_a_tool_before_anyone_sees_it(agent_api):
    use_policy(deny=[{"kind": "tool", "pattern": "billing.*", "note": "never by agents"}])
    body = propose(agent_api, {"action": "tool.call",
                               "parameters": {"tool": "billing.refund", "arguments": {"eur": 5}}})  # fmt: skip
    assert (body["status"], body["decision_path"]["rule"]) == ("denied", "tool:billing.*")
    assert body["execution_id"] is None


def test_reviewers_see_the_tool_and_its_arguments_then_what_the_agent_reported(agent_api, reviewer):
    from django.urls import reverse

    from tests.console.conftest import logged_in

    reviewer_client = logged_in(reviewer)
    body = propose(agent_api)
    html = reviewer_client.get(reverse("console:proposal", args=[body["id"]])).content.decode()
    assert '<code id="tool-name">github.merge_pull_request</code>' in html
    assert "<dt>repo</dt><dd><code>acme/web</code></dd>" in html  # text as it is
    assert "<dt>number</dt><dd><code>42</code></dd>" in html
    assert "the agent makes this call itself" in html
    assert "&quot;method&quot;: &quot;squash&quot;" in html  # and the JSON
    approved = reviewer_client.post(
        reverse("console:decide", args=[body["id"], "approve"]), {"comment": "go"}
    )
    assert approved.status_code in (200, 302)
    execution_id = Execution.objects.get(proposal__id=body["id"]).pk
    report(agent_api, execution_id, output="merged as abc123")
    page = reviewer_client.get(reverse("console:execution", args=[execution_id]))
    assert "merged as abc123" in page.content.decode()


def test_a_reviewer_withdraws_an_approval_before_the_agent_reports(agent_api, reviewer_api):
    use_policy(allow=[{"kind": "tool", "pattern": "*", "note": "all"}])
    execution_id = propose(agent_api)["execution_id"]
    cancelled = reviewer_api.post(f"/api/v1/executions/{execution_id}/cancel")
    assert cancelled.status_code == 202, cancelled.content
    assert cancelled.json()["status"] == "cancelled"
    says = error(agent_api.post(f"/api/v1/executions/{execution_id}/report",
                                {"status": "succeeded"}, format="json"), 409)  # fmt: skip
    assert "was cancelled by user:rita before it was reported" in says


def test_an_execution_the_gateway_took_is_taken_once_and_reported_by_it_alone(agent_api):
    use_policy(allow=[{"kind": "tool", "pattern": "github.*", "note": "ci bot"}])
    execution_id = propose(agent_api)["execution_id"]
    taken = services.carry_out(execution_id, "gateway", upstream="github")
    assert taken is not None and taken.backend == "gateway"
    assert services.carry_out(execution_id, "gateway", upstream="github") is None  # once
    message = error(
        agent_api.post(
            f"/api/v1/executions/{execution_id}/report",
            {"status": "succeeded", "output": "merged"},
            format="json",
        ),
        409,
    )
    assert (
        message == f"execution {execution_id} is being carried out by the gateway, which reports it"
    )
    done = services.report(
        execution_id, taken.requested_by, False, {"error": "down"}, carrier="gateway",
        error="upstream github answered with an error",
    )  # fmt: skip
    assert (done.status, done.error) == ("failed", "upstream github answered with an error")
    verbs = list(
        AuditEvent.objects.filter(object_type="execution", object_id=str(execution_id))
        .order_by("seq")
        .values_list("actor", "verb")
    )
    assert verbs[-2:] == [("gateway", "execution.started"), ("gateway", "execution.failed")]
