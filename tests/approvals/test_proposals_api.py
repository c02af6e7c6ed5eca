"""The agent API for proposals: submit, idempotency, decisions, permissions, errors."""

from __future__ import annotations

import pytest

from approvals.models import Decision, Proposal
from executions.models import Execution
from tests.conftest import client_for

PRINT_HI = {"action": "script.execute", "parameters": {"language": "python", "code": 'print("hi")'}}
RISKY = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nprint(os.listdir('.'))"},
    "reason": "look around",
}
DANGEROUS = {
    "action": "script.execute",
    "parameters": {"language": "python", "code": "import os\nos.system('rm -rf /tmp/x')"},
    "reason": "clean up",
}


def propose(api, body=None, **extra):
    response = api.post("/api/v1/proposals", body or PRINT_HI, format="json", **extra)
    return response, response.json()


def error_type(response) -> str:
    return response.json()["error"]["type"]


def test_a_harmless_script_is_approved_and_queued_at_once(agent_api):
    response, body = propose(agent_api)
    assert response.status_code == 201
    assert body["status"] == "approved"
    assert body["risk"]["score"] <= 3
    assert body["decision_path"]["step"] == "risk"
    assert body["decision_path"]["policy_version"] == 1
    execution = Execution.objects.get(pk=body["execution_id"])
    assert execution.status == "queued"
    assert len(execution.command_hash) == 64


def test_an_rm_rf_os_system_script_is_held_for_review(agent_api):
    response, body = propose(agent_api, DANGEROUS)
    assert response.status_code == 201
    assert body["status"] == "pending"
    assert body["risk"]["score"] >= 7
    assert body["risk"]["reasons"]
    assert body["execution_id"] is None
    assert body["expires_at"]


def test_the_same_idempotency_key_returns_the_original(agent_api):
    first, body = propose(agent_api, {**PRINT_HI, "idempotency_key": "k-1"})
    again, body2 = propose(agent_api, {**PRINT_HI, "idempotency_key": "k-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert body2["id"] == body["id"]
    assert Proposal.objects.count() == 1
    assert Execution.objects.count() == 1


def test_an_idempotency_key_reused_for_another_action_is_a_conflict(agent_api):
    propose(agent_api, {**PRINT_HI, "idempotency_key": "k-2"})
    other = {
        "action": "docker.inspect_container",
        "parameters": {"container": "web"},
        "idempotency_key": "k-2",
    }
    response, _ = propose(agent_api, other)
    assert response.status_code == 409
    assert error_type(response) == "idempotency_conflict"


def test_idempotency_keys_are_per_agent(agent_api, make_agent):
    _, token = make_agent("other-bot", ["script.execute"])
    _, a = propose(agent_api, {**PRINT_HI, "idempotency_key": "same"})
    _, b = propose(client_for(token), {**PRINT_HI, "idempotency_key": "same"})
    assert a["id"] != b["id"]


def test_a_missing_capability_is_denied(make_agent):
    _, token = make_agent("narrow", ["docker.*"])
    response, body = propose(client_for(token))
    assert response.status_code == 201
    assert body["status"] == "denied"
    assert body["decision_path"]["step"] == "capability"
    assert body["execution_id"] is None


def test_the_deny_list_wins_over_everything(make_agent):
    _, token = make_agent("ops", ["host.*"])
    response, body = propose(
        client_for(token), {"action": "host.exec", "parameters": {"command": "shutdown -h now"}}
    )
    assert body["status"] == "denied"
    assert body["decision_path"]["step"] == "deny_list"
    assert body["decision_path"]["rule"] == "command:shutdown*"


@pytest.mark.parametrize(
    "body, field",
    [
        ({"action": "nope.nothing", "parameters": {}}, "unknown_action"),
        (
            {"action": "script.execute", "parameters": {"language": "cobol", "code": "x"}},
            "validation_error",
        ),
        ({"action": "script.execute", "parameters": {"language": "python"}}, "validation_error"),
        (
            {
                "action": "script.execute",
                "parameters": {"language": "python", "code": "1", "timeout_seconds": 301},
            },
            "validation_error",
        ),
        (
            {
                "action": "script.execute",
                "parameters": {"language": "python", "code": "1", "evil": 1},
            },
            "validation_error",
        ),
        ({"action": "script.execute", "parameters": "print(1)"}, "validation_error"),
        ({"parameters": {}}, "validation_error"),
        ({**PRINT_HI, "urgency": "yesterday"}, "validation_error"),
        ({**PRINT_HI, "surprise": True}, "validation_error"),
        ({**PRINT_HI, "reason": 5}, "validation_error"),  # text, not a number taken as "5"
        ({**PRINT_HI, "idempotency_key": 7}, "validation_error"),
        ({**PRINT_HI, "action": ["script.execute"]}, "validation_error"),
        ([1, 2, 3], "validation_error"),
    ],
)
def test_invalid_proposals_get_a_precise_400_and_write_nothing(agent_api, body, field):
    response, payload = propose(agent_api, body)
    assert response.status_code == 400
    assert payload["error"]["type"] == field
    assert payload["error"]["message"]
    assert Proposal.objects.count() == 0


def test_malformed_json_is_a_parse_error(agent_api):
    response = agent_api.post("/api/v1/proposals", "{not json", content_type="application/json")
    assert response.status_code == 400
    assert error_type(response) == "parse_error"


def test_no_token_is_401_and_a_bad_token_is_401(db):
    assert client_for().post("/api/v1/proposals", PRINT_HI, format="json").status_code == 401
    response = client_for("alk_wrong").post("/api/v1/proposals", PRINT_HI, format="json")
    assert response.status_code == 401
    assert error_type(response) == "not_authenticated"


def test_reviewer_tokens_cannot_propose(reviewer_api):
    response, _ = propose(reviewer_api)
    assert response.status_code == 403


def test_agents_cannot_approve_even_their_own(agent_api):
    _, body = propose(agent_api, RISKY)
    response = agent_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    assert response.status_code == 403
    assert error_type(response) == "permission_denied"
    assert Decision.objects.count() == 0


def test_a_reviewer_approves_and_the_execution_is_queued(agent_api, reviewer_api):
    _, body = propose(agent_api, RISKY)
    response = reviewer_api.post(
        f"/api/v1/proposals/{body['id']}/approve", {"comment": "ok"}, format="json"
    )
    assert response.status_code == 200
    approved = response.json()
    assert approved["status"] == "approved"
    assert approved["execution_id"]
    assert approved["decisions"][0]["reviewer"] == "rita"


def test_a_rejection_and_its_comment_reach_the_agent(agent_api, reviewer_api):
    _, body = propose(agent_api, RISKY)
    reviewer_api.post(
        f"/api/v1/proposals/{body['id']}/reject", {"comment": "not today"}, format="json"
    )
    seen = agent_api.get(f"/api/v1/proposals/{body['id']}").json()
    assert seen["status"] == "rejected"
    assert seen["decisions"] == [
        {
            "reviewer": "rita",
            "kind": "reject",
            "comment": "not today",
            "team": "",
            "break_glass": False,
            "created_at": seen["decisions"][0]["created_at"],
        }
    ]
    assert seen["required_reviews"] == []  # no review route applies
    assert seen["execution_id"] is None


def test_a_reviewer_cannot_decide_twice(agent_api, reviewer_api, monkeypatch):
    _, body = propose(agent_api, DANGEROUS)
    assert body["required_approvals"] == 2
    first = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    second = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    assert first.status_code == 200
    assert first.json()["approvals_remaining"] == 1
    assert second.status_code == 409
    assert Proposal.objects.get(pk=body["id"]).status == "pending"


def test_high_risk_needs_two_distinct_reviewers(agent_api, reviewer_api, reviewer2_api):
    _, body = propose(agent_api, DANGEROUS)
    assert body["risk"]["score"] >= 7
    reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    assert Proposal.objects.get(pk=body["id"]).status == "pending"
    done = reviewer2_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").json()
    assert done["status"] == "approved"
    assert done["approvals"] == 2
    assert Execution.objects.count() == 1


def test_the_owner_of_an_agent_cannot_approve_its_proposals(make_agent, reviewer, reviewer_api):
    _, token = make_agent("owned", ["*"], owner=reviewer)
    _, body = propose(client_for(token), RISKY)
    response = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    assert response.status_code == 403
    assert "owns agent" in response.json()["error"]["message"]


def test_outsiders_cannot_decide_or_read(agent_api, outsider_api):
    _, body = propose(agent_api, RISKY)
    assert (
        outsider_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json").status_code
        == 403
    )
    assert outsider_api.get(f"/api/v1/proposals/{body['id']}").status_code == 403


def test_an_agent_cannot_see_another_agents_proposal(agent_api, make_agent):
    _, body = propose(agent_api)
    _, token = make_agent("snoop", ["*"])
    assert client_for(token).get(f"/api/v1/proposals/{body['id']}").status_code == 404


def test_deciding_an_expired_proposal_is_a_conflict_and_expires_it(agent_api, reviewer_api):
    from django.utils import timezone

    _, body = propose(agent_api, RISKY)
    Proposal.objects.filter(pk=body["id"]).update(expires_at=timezone.now())
    response = reviewer_api.post(f"/api/v1/proposals/{body['id']}/approve", {}, format="json")
    assert response.status_code == 409
    assert Proposal.objects.get(pk=body["id"]).status == "expired"
    assert Execution.objects.count() == 0


def test_wait_returns_at_once_without_change_after_the_timeout(agent_api):
    import time

    _, body = propose(agent_api, RISKY)
    started = time.monotonic()
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=1")
    assert response.status_code == 200
    assert 0.9 <= time.monotonic() - started < 5
    assert response.json()["status"] == "pending"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("wait=-1", "wait"),
        ("wait=abc", "wait"),
        ("wait=100000", "wait"),
        ("wait=1&until=done", "change, decided, finished"),
        ("wait=1&until=FINISHED", "change, decided, finished"),
        ("wait=1&until=finished,decided", "change, decided, finished"),
    ],
)
def test_a_bad_wait_or_until_is_a_400_that_says_what_is_allowed(agent_api, query, named):
    _, body = propose(agent_api)
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?{query}")
    assert response.status_code == 400
    assert error_type(response) == "validation_error"
    assert named in response.json()["error"]["message"]


def test_unknown_api_paths_are_json_404(agent_api):
    response = agent_api.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert error_type(response) == "not_found"


def test_capabilities_list_the_catalog_and_what_this_agent_may_do(make_agent):
    _, token = make_agent("caps", ["script.execute"])
    body = client_for(token).get("/api/v1/capabilities").json()
    actions = {a["name"]: a for a in body["actions"]}
    assert actions["script.execute"]["allowed"] is True
    assert actions["script.execute"]["parameters"]["language"]["choices"] == [
        "python",
        "bash",
        "javascript",
    ]
    assert body["capabilities"] == ["script.execute"]
    sessions = {entry["capability"]: entry for entry in body["sessions"]}
    assert sessions["sandbox.create"]["request"] == "POST /api/v1/sandboxes"
    assert sessions["sandbox.create"]["allowed"] is False
    assert body["sandbox"]["backend"] in ("local", "docker", "gvisor")


def test_the_openapi_schema_is_served(agent_api):
    response = agent_api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert "/api/v1/proposals" in response.content.decode()


def test_wait_answers_at_once_when_nothing_can_change_any_more(agent_api, reviewer_api):
    import time

    _, body = propose(agent_api, DANGEROUS)
    reviewer_api.post(f"/api/v1/proposals/{body['id']}/reject", {}, format="json")
    started = time.monotonic()
    response = agent_api.get(f"/api/v1/proposals/{body['id']}?wait=30")
    assert time.monotonic() - started < 2
    assert response.json()["status"] == "rejected"


def test_a_read_takes_the_same_queries_however_many_decisions(
    agent_api, reviewer_api, reviewer2_api, django_assert_num_queries
):
    _, body = propose(agent_api, DANGEROUS)
    path = f"/api/v1/proposals/{body['id']}"
    agent_api.get(path)  # the token's last-seen time is written at most once a minute
    with django_assert_num_queries(2):  # the token, the proposal: nobody decided yet
        assert agent_api.get(path).json()["decisions"] == []
    reviewer_api.post(f"{path}/approve", {"comment": "ok"}, format="json")
    with django_assert_num_queries(3):  # and its decisions
        assert [d["comment"] for d in agent_api.get(path).json()["decisions"]] == ["ok"]
    reviewer2_api.post(f"{path}/approve", {"comment": "ok too"}, format="json")
    with django_assert_num_queries(3):
        decided = agent_api.get(path).json()
    assert [d["comment"] for d in decided["decisions"]] == ["ok", "ok too"]


def test_a_rejection_is_read_with_its_comment(agent_api, reviewer_api, django_assert_num_queries):
    _, body = propose(agent_api, RISKY)
    path = f"/api/v1/proposals/{body['id']}"
    reviewer_api.post(f"{path}/reject", {"comment": "not on prod"}, format="json")
    agent_api.get(path)
    with django_assert_num_queries(3):
        rejected = agent_api.get(path).json()
    assert rejected["status"] == "rejected" and rejected["approvals"] == 0
    assert [(d["kind"], d["comment"]) for d in rejected["decisions"]] == [("reject", "not on prod")]


@pytest.mark.parametrize("body", [PRINT_HI, RISKY], ids=["auto-approved", "pending"])
def test_a_new_proposal_answers_as_a_read_of_it_would_without_reading_it_again(agent_api, body):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    propose(agent_api, body)  # the token's last-seen time is written at most once a minute
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as captured:
            response, created = propose(agent_api, body)
        assert response.status_code == 201
        # (Its agent's pending proposals are counted: max_pending, approvals.guard.)
        reads = [
            q["sql"] for q in captured.captured_queries if 'FROM "approvals_proposal"' in q["sql"]
        ]
        assert all(sql.startswith("SELECT COUNT(*)") for sql in reads), reads
        # Its row is written once: an execution approved with it exists before it.
        assert not any('UPDATE "approvals_proposal"' in q["sql"] for q in captured.captured_queries)
        counts.append(len(captured))
        assert agent_api.get(f"/api/v1/proposals/{created['id']}").json() == created
    assert counts[0] == counts[1], counts  # the same work for every proposal


@pytest.mark.parametrize("body", [{"reason": 5}, {"reason": ["x"]}, {"reason": None}])
def test_a_withdrawal_whose_reason_is_not_text_is_a_400_and_withdraws_nothing(agent_api, body):
    _, made = propose(agent_api, {**PRINT_HI, "action": "host.restart_service",
                                  "parameters": {"service_name": "myapp"}})  # fmt: skip
    response = agent_api.post(f"/api/v1/proposals/{made['id']}/withdraw", body, format="json")
    assert response.status_code == 400, response.content
    assert error_type(response) == "validation_error"
    assert Proposal.objects.get(pk=made["id"]).status == "pending"


def test_a_decision_whose_comment_is_not_text_is_a_400_and_decides_nothing(agent_api, reviewer_api):
    _, made = propose(agent_api, {**PRINT_HI, "action": "host.restart_service",
                                  "parameters": {"service_name": "myapp"}})  # fmt: skip
    response = reviewer_api.post(
        f"/api/v1/proposals/{made['id']}/reject", {"comment": 5}, format="json"
    )
    assert response.status_code == 400, response.content
    assert error_type(response) == "validation_error"
    assert Proposal.objects.get(pk=made["id"]).status == "pending"
