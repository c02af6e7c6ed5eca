"""A runaway agent cannot flood the queue: max_pending, its bucket, pauses, withdraw."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.core import pausing, services
from approvals.guard import admission
from approvals.models import Agent, PendingNotification, Proposal
from audit.models import AuditEvent
from tests.approvals.test_routing import fresh
from tests.conftest import client_for, use_policy

HELD = {
    "action": "host.restart_service",
    "parameters": {"service_name": "nginx"},
    "reason": "held for review",
}


def post(api, body=HELD, **extra):
    return api.post("/api/v1/proposals", body, format="json", **extra)


def refusals(agent_name: str, reason: str) -> int:
    admission.flush_counts()
    agent = Agent.objects.get(name=agent_name)
    return {
        "agent_paused": agent.refused_paused,
        "too_many_pending": agent.refused_pending,
        "rate_limited": agent.refused_rate,
    }[reason]


def test_max_pending_holds_and_refuses_with_retry_after_writing_nothing(agent_api, agent):
    use_policy(max_pending=3)
    for _ in range(3):
        assert post(agent_api).status_code == 201
    before = (Proposal.objects.count(), PendingNotification.objects.count())
    refused = post(agent_api)
    assert refused.status_code == 429, refused.content
    error = refused.json()["error"]
    assert error["type"] == "too_many_pending"
    assert "max_pending 3" in error["message"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert (Proposal.objects.count(), PendingNotification.objects.count()) == before
    assert refusals(agent.name, "too_many_pending") == 1
    # The first of the burst is audited, the rest of it not; refusals are not logged one by one.
    post(agent_api)
    assert AuditEvent.objects.filter(verb="agent.refused").count() == 1


def test_max_pending_is_per_agent_and_overridable(agent_api, make_agent):
    use_policy(max_pending=1, agent_overrides={"requester": {"max_pending": 2}})
    other = client_for(make_agent("other", ["*"])[1])
    assert post(agent_api).status_code == 201
    assert post(agent_api).status_code == 201
    assert post(agent_api).status_code == 429
    assert post(other).status_code == 201  # another agent keeps its share
    assert post(other).status_code == 429


def test_a_withdrawn_or_decided_proposal_frees_a_place(agent_api, reviewer_api):
    use_policy(max_pending=1)
    first = post(agent_api).json()
    assert post(agent_api).status_code == 429
    withdrawn = agent_api.post(
        f"/api/v1/proposals/{first['id']}/withdraw", {"reason": "done"}, format="json"
    )
    assert withdrawn.status_code == 200 and withdrawn.json()["status"] == "withdrawn"
    second = post(agent_api).json()
    assert (
        reviewer_api.post(f"/api/v1/proposals/{second['id']}/reject", {}, format="json").status_code
        == 200
    )
    assert post(agent_api).status_code == 201


def test_the_bucket_refuses_past_the_rate_and_refills(agent_api, agent):
    use_policy(max_proposals_per_minute=2, allow=[{"kind": "action", "pattern": "*"}])
    assert post(agent_api).status_code == 201
    assert post(agent_api).status_code == 201
    refused = post(agent_api)
    assert refused.status_code == 429 and refused.json()["error"]["type"] == "rate_limited"
    assert int(refused["Retry-After"]) == 30  # one token at 2 a minute
    assert refusals(agent.name, "rate_limited") == 1
    # Half a minute later one token is back.
    Agent.objects.filter(pk=agent.pk).update(bucket_at=timezone.now() - timedelta(seconds=31))
    # This process remembers the refusal for half a second at most: past it, checked afresh.
    admission.forget(agent)
    assert post(agent_api).status_code == 201
    assert post(agent_api).status_code == 429


def test_an_idempotent_replay_is_never_refused(agent_api):
    use_policy(max_pending=1)
    body = {**HELD, "idempotency_key": "k-1"}
    assert post(agent_api, body).status_code == 201
    assert post(agent_api, body).status_code == 200


def test_rejections_in_a_row_pause_the_agent_and_tell_people(agent_api, agent, reviewer_api):
    use_policy(pause_after_rejections=3)
    for n in range(3):
        proposal = post(agent_api).json()
        assert Agent.objects.get(pk=agent.pk).paused_at is None, n
        reviewer_api.post(
            f"/api/v1/proposals/{proposal['id']}/reject", {"comment": "no"}, format="json"
        )
    agent.refresh_from_db()
    assert agent.paused_at is not None and agent.paused_by == "policy"
    assert "3 rejections in a row" in agent.pause_reason
    assert PendingNotification.objects.filter(kind="agent_paused").count() == 1
    refused = post(agent_api)
    assert refused.status_code == 423
    assert refused.json()["error"]["type"] == "agent_paused"
    assert "3 rejections in a row" in refused.json()["error"]["message"]
    assert AuditEvent.objects.filter(verb="agent.paused", actor="system").count() == 1
    # Resumed, the old streak is forgiven: one more rejection does not pause it again.
    assert pausing.resume([agent.name], "user:ada", "looked at it") == [agent.name]
    proposal = post(agent_api).json()
    reviewer_api.post(
        f"/api/v1/proposals/{proposal['id']}/reject", {"comment": "no"}, format="json"
    )
    agent.refresh_from_db()
    assert agent.paused_at is None


def test_an_approval_ends_the_streak_and_zero_turns_it_off(agent_api, agent, reviewer_api):
    use_policy(pause_after_rejections=2, high_risk_at=11)  # one approval approves
    first, second, third = (post(agent_api).json() for _ in range(3))
    reviewer_api.post(f"/api/v1/proposals/{first['id']}/reject", {}, format="json")
    reviewer_api.post(f"/api/v1/proposals/{second['id']}/approve", {}, format="json")
    reviewer_api.post(f"/api/v1/proposals/{third['id']}/reject", {}, format="json")
    agent.refresh_from_db()
    assert agent.paused_at is None
    use_policy(pause_after_rejections=0)
    for _ in range(4):
        proposal = post(agent_api).json()
        reviewer_api.post(f"/api/v1/proposals/{proposal['id']}/reject", {}, format="json")
    agent.refresh_from_db()
    assert agent.paused_at is None


def test_withdraw_only_by_its_agent_only_while_pending(agent_api, make_agent, reviewer_api):
    proposal = post(agent_api).json()
    other = client_for(make_agent("other", ["*"])[1])
    url = f"/api/v1/proposals/{proposal['id']}/withdraw"
    assert other.post(url, {}, format="json").status_code == 404
    assert reviewer_api.post(url, {}, format="json").status_code == 404
    assert agent_api.post("/api/v1/proposals/999999/withdraw", {}, format="json").status_code == 404
    too_long = agent_api.post(url, {"reason": "x" * 501}, format="json")
    assert too_long.status_code == 400 and too_long.json()["error"]["type"] == "validation_error"
    answer = agent_api.post(url, {"reason": "not needed any more"}, format="json")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["status"] == "withdrawn" and body["withdraw_reason"] == "not needed any more"
    again = agent_api.post(url, {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["type"] == "conflict"
    # A reviewer can no longer decide it, and nothing runs.
    late = reviewer_api.post(f"/api/v1/proposals/{proposal['id']}/approve", {}, format="json")
    assert late.status_code == 409
    row = Proposal.objects.get(pk=proposal["id"])
    assert row.execution_id is None and row.decided_at is not None
    assert PendingNotification.objects.filter(kind="withdrawn").count() == 1
    event = AuditEvent.objects.get(verb="proposal.withdrawn")
    assert event.actor == "agent:requester"


@pytest.mark.parametrize("until", ["decided", "finished"])
def test_withdrawn_proposals_answer_a_waiting_agent_at_once(agent_api, until):
    proposal = post(agent_api).json()
    agent_api.post(f"/api/v1/proposals/{proposal['id']}/withdraw", {}, format="json")
    started = time.monotonic()
    read = agent_api.get(f"/api/v1/proposals/{proposal['id']}", {"wait": 5, "until": until})
    assert read.json()["status"] == "withdrawn"
    assert time.monotonic() - started < 2


@pytest.fixture
def admin_api(admin_user):
    from approvals.core.tokens import create_user_token

    return client_for(create_user_token(admin_user))


def test_admins_pause_over_the_api_only_with_a_fresh_factor(admin_api, admin_user, client, agent):
    answer = admin_api.post(
        f"/api/v1/agents/{agent.name}/pause", {"reason": "incident"}, format="json"
    )
    assert answer.status_code == 403
    error = answer.json()["error"]
    assert error["type"] == "step_up_required" and "/manage/agents/" in error["url"]
    agent.refresh_from_db()
    assert agent.paused_at is None
    from tests.conftest import with_fresh_factor

    client.force_login(admin_user)
    with_fresh_factor(client, admin_user)
    answer = client.post(
        f"/api/v1/agents/{agent.name}/pause",
        {"reason": "incident"},
        content_type="application/json",
    )
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"agents": [agent.name], "paused": True}
    missing = client.post("/api/v1/agents/nobody/pause", {}, content_type="application/json")
    assert missing.status_code == 404
    listed = client.get("/api/v1/agents").json()
    assert listed[0]["paused"] and listed[0]["pause_reason"] == "incident"
    event = AuditEvent.objects.get(verb="agent.paused")
    assert event.actor == f"user:{admin_user.username}" and event.data["reason"] == "incident"


def test_reviewers_may_not_pause(reviewer_api, agent):
    answer = reviewer_api.post(f"/api/v1/agents/{agent.name}/pause", {}, format="json")
    assert answer.status_code == 403 and answer.json()["error"]["type"] == "permission_denied"


def test_the_kill_switch_pauses_every_agent_while_proposals_are_in_flight(make_agent, capsys):
    tokens = [make_agent(f"bot{n}", ["*"])[1] for n in range(3)]
    apis = [client_for(token) for token in tokens]
    pending = [post(api).json() for api in apis]
    call_command("agents", "pause", "--all", "--reason", "incident 42")
    assert "paused: bot0, bot1, bot2" in capsys.readouterr().out
    for api in apis:
        assert post(api).status_code == 423
    # What was already proposed stays for reviewers to decide.
    assert set(Proposal.objects.pending().values_list("pk", flat=True)) == {
        p["id"] for p in pending
    }
    assert AuditEvent.objects.filter(verb="agent.paused").count() == 3
    call_command("agents", "resume", "bot1", "--reason", "cleared")
    assert post(apis[1]).status_code == 201
    assert post(apis[0]).status_code == 423
    call_command("agents", "resume", "--all")
    assert post(apis[0]).status_code == 201


def test_the_command_refuses_unclear_asks(agent):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="name the agents, or give --all"):
        call_command("agents", "pause")
    with pytest.raises(CommandError, match="no such agent: ghost"):
        call_command("agents", "pause", "ghost")


def test_policy_limits_are_validated(admin_user):
    from rest_framework.exceptions import ValidationError

    from approvals.policy.rules import DEFAULT_POLICY, update_policy

    for bad in (
        {"max_pending": 0},
        {"max_proposals_per_minute": -1},
        {"pause_after_rejections": "many"},
        {"secret_patterns": ["(unclosed"]},
        {"agent_overrides": {"bot": {"max_pending": 0}}},
    ):
        with pytest.raises(ValidationError):
            update_policy({**DEFAULT_POLICY, **bad}, admin_user)


def test_decide_still_works_with_services(agent, reviewer):
    submission = services.submit(agent, HELD)
    assert submission.proposal.status == ProposalStatus.PENDING
    services.decide(submission.proposal.pk, reviewer, "reject", authentication=fresh())


def test_refusals_are_on_the_metrics(agent_api, client):
    use_policy(max_pending=1)
    post(agent_api)
    post(agent_api)
    post(agent_api)
    admission.flush_counts()
    text = client.get("/metrics").content.decode()
    assert (
        'airlock_proposals_refused_total{agent="requester",reason="too_many_pending"} 2.0' in text
    ), text
    assert "airlock_agents_paused 0.0" in text


@pytest.mark.django_db
def test_a_withdrawal_updates_the_slack_message_and_mails_reviewers(
    agent_api, routed, smtp, reviewer_with_mail, eager_tasks
):
    from tests.approvals.slack_support import current
    from tests.approvals.test_cascade import MEDIUM
    from tests.standins import action_ids, blocks_text

    with eager_tasks(execute=True):
        proposal = agent_api.post("/api/v1/proposals", MEDIUM, format="json").json()
    assert proposal["status"] == "pending"
    with eager_tasks(execute=True):
        answer = agent_api.post(
            f"/api/v1/proposals/{proposal['id']}/withdraw", {"reason": "fixed it"}, format="json"
        )
    assert answer.status_code == 200
    [message] = current(routed, proposal["id"])
    assert "Withdrawn by the agent" in blocks_text(message)
    assert action_ids(message) == []  # no buttons on what nobody waits for
    subjects = [mail["Subject"] for mail in smtp.messages]
    assert any("was withdrawn by its agent" in subject for subject in subjects), subjects


@pytest.mark.django_db(transaction=True)
async def test_the_door_turns_a_flood_away_before_django(agent_and_token):
    """After a refusal, the same agent's next proposals get the 429 from the door itself:
    the app behind it never sees them; another agent's go through."""
    from asgiref.sync import sync_to_async
    from asgiref.testing import ApplicationCommunicator

    from approvals.agents.door import at_the_door

    agent, token = agent_and_token
    await sync_to_async(use_policy)(max_pending=1)
    api = client_for(token)
    assert (await sync_to_async(post)(api)).status_code == 201
    assert (await sync_to_async(post)(api)).status_code == 429  # remembered now
    behind = []

    async def app(scope, receive, send):
        behind.append(scope["path"])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def call(bearer: str) -> tuple[int, dict, bytes]:
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/api/v1/proposals",
            "headers": [(b"authorization", f"Bearer {bearer}".encode())],
        }
        talk = ApplicationCommunicator(at_the_door(app), scope)
        await talk.send_input({"type": "http.request", "body": b"{}", "more_body": False})
        start = await talk.receive_output(1)
        body = await talk.receive_output(1)
        return start["status"], dict(start["headers"]), body.get("body", b"")

    status, headers, body = await call(token)
    assert status == 429 and headers[b"retry-after"]
    assert b"too_many_pending" in body
    assert behind == []
    status, _, _ = await call("alk_someone-else")
    assert status == 204 and behind == ["/api/v1/proposals"]
