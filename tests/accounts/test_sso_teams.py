"""A review team named by the provider's groups, against a real OpenID Connect provider process.

A team's ``sso_groups`` hold whoever the provider put in them at their last sign-in
(``accounts.roles.set_provider_groups``, called by ``accounts.sso.adapter`` every time):
a person in the group decides the team's proposals, and one taken out of it at the
provider stops deciding them at their next sign-in (at once, in every session: who is in
a team is read when someone decides).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from accounts.roles import PROVIDER_GROUP_PREFIX, provider_groups
from approvals.choices import ProposalStatus
from approvals.core.tokens import create_user_token
from approvals.models import Decision, Proposal
from audit.models import AuditEvent
from console.settings import oidc_provider
from tests.accounts.idp import TEST_CLIENT_CALLBACK, IdentityProvider
from tests.approvals.test_cascade import propose
from tests.approvals.test_routing import call
from tests.conftest import client_for, use_policy

pytestmark = pytest.mark.django_db

TEAMS = {"dba": {"sso_groups": ["db-admins"]}}
REVIEWS = [{"match": ["tool:db.*"], "require": {"dba": 1}}]


@pytest.fixture(scope="module")
def idp(tmp_path_factory):
    provider = IdentityProvider(
        tmp_path_factory.mktemp("idp"), [TEST_CLIENT_CALLBACK.format(id="corp")]
    )
    yield provider
    provider.stop()


@pytest.fixture
def corp(idp, settings, monkeypatch):
    """Airlock signing in through ``idp`` as provider ``corp``, configured as its environment
    says (``OIDC_CORP_*``, read by the settings' own ``oidc_provider``)."""
    for name, value in idp.environment("corp", "Corp IdP").items():
        monkeypatch.setenv(name, value)
    settings.SOCIALACCOUNT_PROVIDERS = {
        "oidc": {"APPS": [oidc_provider("OIDC_CORP_", "corp")], "OAUTH_PKCE_ENABLED": True}
    }
    return idp


def signed_in(idp: IdentityProvider, person) -> Client:
    """A new browser, signed in through the provider as ``person``."""
    client = Client()
    response = idp.sign_in(client, "corp", person)
    assert response.status_code == 302 and response["Location"] == "/", response.content[:500]
    assert client.get("/queue/").status_code == 200
    return client


def group_changes(user) -> list[tuple[str, dict]]:
    events = AuditEvent.objects.filter(verb="user.provider_groups", object_id=str(user.pk))
    return [(event.actor, event.data) for event in events]


def test_leaving_the_providers_group_leaves_its_team_at_the_next_sign_in(corp, agent_api):
    use_policy(teams=TEAMS, reviews=REVIEWS)
    olga = corp.add("olga", ["airlock-reviewers", "db-admins"])

    first = signed_in(corp, olga)
    user = get_user_model().objects.get(username="olga")
    assert provider_groups(user) == {"airlock-reviewers", "db-admins"}
    assert user.groups.filter(name=PROVIDER_GROUP_PREFIX + "db-admins").exists()
    assert group_changes(user) == [
        ("sso:corp", {"added": ["airlock-reviewers", "db-admins"], "removed": []})
    ]

    made = propose(agent_api, call("db.drop_index", name="orders_idx"))
    assert made["status"] == "pending" and made["decision_path"]["route"] == "reviews[1]: tool:db.*"
    assert made["risk"]["score"] < 7  # below STEP_UP_MIN_RISK: the SSO session decides as it is
    assert made["required_reviews"][0]["members"] == ["olga"]
    approved = first.post(
        reverse("console:decide", args=[made["id"], "approve"]), {"comment": "index unused"}
    )
    assert approved.status_code == 302, approved.content[:500]
    assert Proposal.objects.get(pk=made["id"]).status == ProposalStatus.APPROVED
    [decision] = Decision.objects.filter(proposal_id=made["id"])
    assert (decision.reviewer, decision.team) == (user, "dba")
    [event] = AuditEvent.objects.filter(verb="proposal.decision.approve", object_id=str(made["id"]))
    assert event.data["team"] == "dba" and event.data["auth"]["method"] == "sso:corp"

    olga.groups = ["airlock-reviewers"]  # taken out of db-admins at the provider
    corp.save()
    second = signed_in(corp, olga)
    assert provider_groups(user) == {"airlock-reviewers"}
    assert not user.groups.filter(name=PROVIDER_GROUP_PREFIX + "db-admins").exists()
    assert group_changes(user)[1:] == [("sso:corp", {"added": [], "removed": ["db-admins"]})]

    made = propose(agent_api, call("db.drop_index", name="orders_idx"))
    assert made["required_reviews"][0]["members"] == []
    still_needs = "needs 1 approval from dba (nobody who may decide)"
    url = reverse("console:decide", args=[made["id"], "approve"])
    for browser in (second, first):  # the session from before the change too
        refused = browser.post(url, {"comment": "index unused"})
        assert refused.status_code == 403
        assert f'id="decision-error">{still_needs}</p>' in refused.text
    api = client_for(create_user_token(user))
    for kind in ("approve", "reject"):
        refused = api.post(f"/api/v1/proposals/{made['id']}/{kind}", {}, format="json")
        assert refused.status_code == 403
        assert refused.json()["error"] == {
            "type": "not_a_required_reviewer",
            "message": still_needs,
        }
    assert Proposal.objects.get(pk=made["id"]).status == ProposalStatus.PENDING
    assert not Decision.objects.filter(proposal_id=made["id"]).exists()

    signed_in(corp, olga)  # the same groups again: nothing to record
    assert len(group_changes(user)) == 2


def test_leaving_every_group_that_gives_a_role_takes_the_role_and_the_teams_at_once(
    corp, agent_api
):
    """Refused at the door, they keep nothing: not the reviewer role, not the team."""
    use_policy(teams=TEAMS, reviews=REVIEWS)
    nils = corp.add("nils", ["airlock-reviewers", "db-admins"])
    signed_in(corp, nils)
    user = get_user_model().objects.get(username="nils")
    api = client_for(create_user_token(user))

    nils.groups = ["marketing"]
    corp.save()
    refused = Client()
    assert corp.sign_in(refused, "corp", nils).status_code == 403
    assert provider_groups(user) == {"marketing"}
    made = propose(agent_api, call("db.drop_index"))
    assert made["required_reviews"][0]["members"] == []
    answer = api.post(f"/api/v1/proposals/{made['id']}/approve", {}, format="json")
    assert (answer.status_code, answer.json()["error"]["type"]) == (403, "permission_denied")
    roles = AuditEvent.objects.filter(verb="user.role_from_provider", object_id=str(user.pk))
    assert [event.data for event in roles][-1] == {"before": "reviewer", "after": "none"}
