"""Admin pages: the policy editor, agents and tokens, review rights, the audit trail."""

from __future__ import annotations

import re
import time

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from accounts.roles import is_reviewer
from approvals.models import Agent, hash_token
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import DEFAULT_POLICY, current_policy
from audit.models import AuditEvent, ChainArchive, Checkpoint
from audit.services import record
from console.views import CHAIN_KEY, FULL_CHECK_SECONDS
from tests.conftest import client_for


def editor_post(client, **changes) -> dict:
    """The editor's form as a browser would submit it, from the policy in force, with changes."""
    html = client.get(reverse("console:policy")).content.decode()
    data: dict = {}
    for name, value in re.findall(r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', html):
        data[name] = value
    for name in re.findall(r'<input type="checkbox" name="([^"]+)"[^>]*checked', html):
        data[name] = "on"
    for select, body in re.findall(r'<select name="([^"]+)"[^>]*>(.*?)</select>', html, re.S):
        chosen = re.search(r'<option value="([^"]*)"[^>]*selected', body)
        data[select] = chosen.group(1) if chosen else re.search(r'value="([^"]*)"', body).group(1)
    data.pop("csrfmiddlewaretoken", None)
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


@pytest.mark.django_db
def test_the_policy_editor_shows_every_field_of_the_policy(admin_client_):
    current_policy()
    html = admin_client_.get(reverse("console:policy")).content.decode()
    for field in (
        "auto_approve_below",
        "high_risk_at",
        "high_risk_quorum",
        "review_timeout_minutes",
        "script_network",
        "self_approval",
        "use_prevalidator",
        "deny-0-pattern",
        "allow-0-kind",
        "notify-0-note",
        "overrides-0-agent",
    ):
        assert f'name="{field}"' in html, field
    assert 'value="rm -rf /*"' in html and "version 1 in force" in html


def test_the_editor_covers_every_field_of_the_policy_document():
    from approvals.policy.rules import (
        RULE_KINDS,
        OverrideSerializer,
        PolicySerializer,
        SlackRouteSerializer,
    )
    from approvals.policy.tool_risk import CONDITIONS, ToolRiskSerializer
    from approvals.review.forms import (
        OverrideForm,
        PolicySettingsForm,
        RoutingForm,
        SlackRouteForm,
        ToolRiskForm,
    )

    lists = {"deny", "allow", "notify", "agent_overrides", "slack_routes", "tool_risk"}
    lists |= {"teams", "reviews"}  # RoutingForm: YAML, as in the policy file
    edited = set(PolicySettingsForm.base_fields) | lists
    assert set(PolicySerializer().fields) <= edited
    assert set(OverrideSerializer().fields) <= set(OverrideForm.base_fields)
    assert set(SlackRouteSerializer().fields) <= set(SlackRouteForm.base_fields)
    # The three conditions are one choice (when) and its value.
    assert set(ToolRiskSerializer().fields) - set(CONDITIONS) <= set(ToolRiskForm.base_fields)
    assert {"when", "value"} <= set(ToolRiskForm.base_fields)
    assert "language" in RULE_KINDS
    assert set(RoutingForm.base_fields) == {"teams", "reviews"}


@pytest.mark.django_db
def test_saving_the_editor_puts_a_new_audited_version_in_force(admin_client_, agent):
    current_policy()
    data = editor_post(
        admin_client_,
        auto_approve_below="3",
        high_risk_quorum="3",
        self_approval="on",
        comment="tighter",
        **{
            "deny-0-DELETE": "on",
            "notify-1-kind": "action",
            "notify-1-pattern": "host.restart_service",
            "notify-1-note": "tell people",
            "overrides-0-agent": agent.name,
            "overrides-0-review_timeout_minutes": "15",
            "overrides-0-script_network": "true",
        },
    )
    response = admin_client_.post(reverse("console:policy"), data, follow=True)
    assert "Policy version 2 is now in force." in response.content.decode()
    policy = current_policy()
    assert policy.version == 2
    assert policy.auto_approve_below == 3 and policy.high_risk_quorum == 3
    assert policy.self_approval is True
    assert [r.pattern for r in policy.deny] == [r["pattern"] for r in DEFAULT_POLICY["deny"][1:]]
    assert policy.notify[-1].pattern == "host.restart_service"
    assert policy.agent_overrides == {
        agent.name: {"review_timeout_minutes": 15, "script_network": True}
    }
    event = AuditEvent.objects.filter(verb="policy.updated").get()
    assert event.actor == "user:ada" and event.data["comment"] == "tighter"


@pytest.mark.django_db
def test_an_invalid_policy_is_refused_with_the_reason(admin_client_):
    current_policy()
    data = editor_post(admin_client_, auto_approve_below="8", high_risk_at="5")
    response = admin_client_.post(reverse("console:policy"), data)
    assert response.status_code == 400
    assert "must not be below the auto-approve threshold" in response.content.decode()
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_creating_an_agent_shows_its_token_once(admin_client_, reviewer):
    response = admin_client_.post(
        reverse("console:agents"),
        {"name": "deploy-bot", "capabilities": "script.execute, docker.*", "owner": reviewer.pk},
    )
    html = response.content.decode()
    token = re.search(r'id="new-token" class="token">([^<]+)<', html).group(1)
    agent = Agent.objects.get(name="deploy-bot")
    assert agent.token_hash == hash_token(token)
    assert agent.capabilities == ["script.execute", "docker.*"] and agent.owner == reviewer
    assert client_for(token).get("/api/v1/capabilities").status_code == 200
    assert token not in admin_client_.get(reverse("console:agents")).content.decode()


@pytest.mark.django_db
def test_a_bad_agent_name_or_capability_is_explained(admin_client_):
    response = admin_client_.post(
        reverse("console:agents"), {"name": "bad name", "capabilities": "script.execute"}
    )
    assert response.status_code == 400
    assert "must be letters, digits" in response.content.decode()
    response = admin_client_.post(
        reverse("console:agents"), {"name": "ok-bot", "capabilities": "Rm -rf"}
    )
    assert "is not an action-name glob" in response.content.decode()
    assert not Agent.objects.filter(name="ok-bot").exists()


@pytest.mark.django_db
def test_revoking_an_agent_stops_its_token(admin_client_, agent_and_token):
    agent, token = agent_and_token
    admin_client_.post(reverse("console:agent-action", args=[agent.pk, "revoke"]))
    agent.refresh_from_db()
    assert agent.is_active is False
    assert client_for(token).get("/api/v1/capabilities").status_code == 401
    assert AuditEvent.objects.filter(verb="agent.revoked").exists()
    admin_client_.post(reverse("console:agent-action", args=[agent.pk, "restore"]))
    assert client_for(token).get("/api/v1/capabilities").status_code == 200


@pytest.mark.django_db
def test_rotating_a_token_shows_the_new_one_and_retires_the_old(admin_client_, agent_and_token):
    agent, old = agent_and_token
    html = admin_client_.post(
        reverse("console:agent-action", args=[agent.pk, "rotate"])
    ).content.decode()
    new = re.search(r'id="new-token" class="token">([^<]+)<', html).group(1)
    assert new != old
    assert client_for(old).get("/api/v1/capabilities").status_code == 401
    assert client_for(new).get("/api/v1/capabilities").status_code == 200


@pytest.mark.django_db
def test_editing_capabilities(admin_client_, agent):
    url = reverse("console:agent-action", args=[agent.pk, "capabilities"])
    admin_client_.post(url, {"capabilities": "docker.*\nhost.service_status"})
    agent.refresh_from_db()
    assert agent.capabilities == ["docker.*", "host.service_status"]
    response = admin_client_.post(url, {"capabilities": "NOT VALID"}, follow=True)
    assert "is not an action-name glob" in response.content.decode()
    agent.refresh_from_db()
    assert agent.capabilities == ["docker.*", "host.service_status"]


@pytest.mark.django_db
def test_admins_grant_and_withdraw_review_rights(admin_client_, outsider):
    url = reverse("console:set-reviewer", args=[outsider.pk])
    admin_client_.post(url, {"reviewer": "on"})
    assert is_reviewer(outsider)
    assert 'id="withdraw-' in admin_client_.get(reverse("console:users")).content.decode()
    admin_client_.post(url, {})
    outsider.refresh_from_db()
    assert not is_reviewer(type(outsider).objects.get(pk=outsider.pk))
    verbs = list(AuditEvent.objects.values_list("verb", flat=True))
    assert "user.review_granted" in verbs and "user.review_withdrawn" in verbs


@pytest.mark.django_db
def test_the_audit_trail_shows_the_chain_status(admin_client_, agent):
    html = admin_client_.get(reverse("console:audit")).content.decode()
    assert "Chain verified" in html and "agent.created" in html
    # Rows added since the whole check are checked on every view.
    record("system", "test.later", None)
    last = AuditEvent.objects.order_by("-seq").first()
    AuditEvent.objects.filter(pk=last.pk).update(actor="user:mallory")
    html = admin_client_.get(reverse("console:audit")).content.decode()
    assert f"Chain broken at event {last.seq}" in html and f"row {last.seq} was edited" in html
    # An older row edited shows once the whole chain is checked again (at most an hour).
    AuditEvent.objects.filter(pk=last.pk).update(actor="system")
    assert "Chain verified" in admin_client_.get(reverse("console:audit")).content.decode()
    AuditEvent.objects.filter(seq=1).update(actor="user:mallory")
    cache.set(CHAIN_KEY, {**cache.get(CHAIN_KEY), "at": time.time() - FULL_CHECK_SECONDS})
    html = admin_client_.get(reverse("console:audit")).content.decode()
    assert "Chain broken at event 1" in html and "row 1 was edited" in html


@pytest.mark.django_db
def test_the_audit_trail_says_what_retention_keeps_and_its_last_pass(admin_client_, settings):
    settings.RETENTION_DAYS = settings.RETENTION_PROPOSAL_DAYS = settings.RETENTION_AUDIT_DAYS = 0
    html = admin_client_.get(reverse("console:audit")).content.decode()
    said = html.split('id="retention"')[1].split("</div>")[0]
    assert "kept (<code>RETENTION_DAYS</code> unset)" in said and "kept in the database" in said
    assert "No signed checkpoint yet" in html
    settings.RETENTION_DAYS, settings.RETENTION_ARCHIVE = 90, "s3://airlock/archive"
    settings.RETENTION_PROPOSAL_DAYS, settings.RETENTION_AUDIT_DAYS = 365, 400
    record("system", "retention.archived", None, day="2026-08-01", executions=12, chunks=3400)
    record("system", "retention.archived", None, kind="proposals", day="2026-01-02", proposals=7)
    ChainArchive.objects.create(through_seq=41, through_hash="0" * 64, location="s3://airlock/a")
    Checkpoint.objects.create(
        seq=2, hash="1" * 64, created_at=timezone.now(), key_id="k1", signature=""
    )
    html = admin_client_.get(reverse("console:audit")).content.decode()
    said = html.split('id="retention"')[1].split("</div>")[0]
    assert "to <code>s3://airlock/archive</code>" in said
    assert "after 90 days; last archived 2026-08-01 (12 executions, 3400 chunks)" in said
    assert "removed 365 days after their decision; last archived 2026-01-02 (7 proposals)" in said
    assert "moved to the archive after 400 days" in said
    assert "events 1–41 are in <code>s3://airlock/a</code>" in said
    assert "Last signed checkpoint: event 2" in html and "<code>k1</code>" in html


@pytest.mark.django_db
def test_an_edit_in_the_editor_decides_the_next_proposal(admin_client_, agent_and_token):
    api = client_for(agent_and_token[1])
    medium = {
        "action": "script.execute",
        "parameters": {"language": "python", "code": "import os\nprint(os.getcwd())"},
    }
    before = api.post("/api/v1/proposals", medium, format="json").json()
    assert before["status"] == "pending"
    data = editor_post(
        admin_client_, auto_approve_below="9", high_risk_at="10", comment="let it run"
    )
    admin_client_.post(reverse("console:policy"), data)
    after = api.post("/api/v1/proposals", medium, format="json").json()
    assert after["status"] == "approved"
    assert after["decision_path"]["policy_version"] == before["decision_path"]["policy_version"] + 1
    assert AuditEvent.objects.filter(verb="policy.updated", actor="user:ada").exists()


@pytest.mark.django_db
def test_djangos_admin_adds_policy_versions_through_the_same_validation(admin_client_):
    import json as json_

    url = reverse("admin:approvals_policyversion_add")
    data = {**current_policy().as_data(), "auto_approve_below": 2}
    response = admin_client_.post(url, {"data": json_.dumps(data), "comment": "via admin"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert current_policy().auto_approve_below == 2
    assert AuditEvent.objects.filter(verb="policy.updated").exists()
    bad = {**data, "high_risk_at": 1, "auto_approve_below": 5}
    response = admin_client_.post(url, {"data": json_.dumps(bad), "comment": "bad"})
    assert response.status_code == 200
    assert current_policy().auto_approve_below == 2


@pytest.mark.django_db
def test_the_editor_saves_slack_routes(admin_client_):
    current_policy()
    data = editor_post(
        admin_client_,
        **{
            "slack_routes-0-channel": "#sec-approvals",
            "slack_routes-0-bands": None,
            "slack_routes-0-agent": "",
            "slack_routes-0-action": "script.*",
        },
    )
    data["slack_routes-0-bands"] = ["high", "medium"]
    response = admin_client_.post(reverse("console:policy"), data, follow=True)
    assert "Policy version 2 is now in force." in response.content.decode()
    [route] = current_policy().slack_routes
    assert (route.channel, route.bands, route.agent, route.action) == (
        "#sec-approvals",
        ("medium", "high"),
        "*",
        "script.*",
    )
    html = admin_client_.get(reverse("console:policy")).content.decode()
    assert 'name="slack_routes-0-channel" value="#sec-approvals"' in html


@pytest.mark.django_db
def test_the_editor_refuses_a_bad_channel(admin_client_):
    current_policy()
    data = editor_post(admin_client_, **{"slack_routes-0-channel": "sec approvals"})
    response = admin_client_.post(reverse("console:policy"), data)
    assert response.status_code == 400
    assert "slack_routes[1].channel: a channel id or #name" in response.content.decode()
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_the_audit_trail_pages_by_the_chains_numbers(admin_client_):
    for n in range(120):
        record("system", "test.paged", None, n=n)
    total = AuditEvent.objects.count()
    pages = -(-total // 50)
    html = admin_client_.get(reverse("console:audit"), {"page": pages}).content.decode()
    assert f"page {pages} of {pages}" in html
    assert html.count('<tr id="audit-') == total - 50 * (pages - 1)
    assert 'id="audit-1"' in html  # the first record, on the last page
    ChainArchive.objects.create(through_seq=50, through_hash="0" * 64, location="/a")
    html = admin_client_.get(reverse("console:audit"), {"page": 99}).content.decode()
    assert 'id="audit-51"' in html and 'id="audit-50"' not in html  # moved ones are not listed
