"""Step-up: a fresh second factor before every decision and change that matters, on every path."""

from __future__ import annotations

import time

import pyotp
import pytest
from django.test import Client
from django.urls import reverse

from accounts.stepup import Authentication
from approvals.choices import ProposalStatus
from approvals.core import services
from approvals.core.tokens import create_user_token
from approvals.models import Proposal, UserToken
from approvals.notify import review_links
from audit.models import AuditEvent
from tests.accounts.conftest import enrol_totp, fresh_code, sign_in
from tests.conftest import client_for, with_fresh_factor
from tests.console.conftest import logged_in, pending_proposal

pytestmark = pytest.mark.django_db

HIGH, LOW = 9, 5


def decision_events(kind: str = "approve") -> list[dict]:
    return [e.data for e in AuditEvent.objects.filter(verb=f"proposal.decision.{kind}")]


def test_a_high_risk_approval_in_the_console_steps_up_with_a_totp_code_and_is_recorded(
    reviewer, agent
):
    proposal = pending_proposal(agent, risk=HIGH)
    client, _ = sign_in("rita", "pw-rita")
    secret = enrol_totp(client)
    used = {pyotp.TOTP(secret).now()}
    url = reverse("console:decide", args=[proposal.pk, "approve"])
    asked = client.post(url, {"comment": "checked the diff"})
    assert asked.status_code == 302
    assert asked["Location"] == reverse("accounts:step-up") + "?next=" + url.replace("/", "%2F")
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING
    page = client.get(asked["Location"])
    assert 'id="step-up-totp"' in page.text and 'id="step-up-passkey"' not in page.text
    assert page.context["purpose"] == f"Approve proposal {proposal.pk}, risk {HIGH}: " + (
        proposal.summary or proposal.action
    )
    forged = client.get(reverse("accounts:step-up") + "?next=/manage/agents/")
    assert forged.context["purpose"] == ""  # the page says only what the console asked for
    confirmed = client.post(
        "/accounts/2fa/reauthenticate/", {"code": fresh_code(secret, used), "next": url}
    )
    assert confirmed.status_code == 302 and confirmed["Location"] == url
    again = client.get(url)  # the page that completes it, the comment kept
    assert "checked the diff" in again.text and 'id="confirm-kind"' in again.text
    done = client.post(url, {"comment": "checked the diff"})
    assert done.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.APPROVED
    [event] = decision_events()
    assert event["via"] == "console" and event["comment"] == "checked the diff"
    assert event["auth"]["method"] == "password" and event["auth"]["factor"] == "totp"
    assert event["auth"]["fresh"] is True and event["auth"]["factor_at"].endswith("Z")
    assert AuditEvent.objects.filter(verb="signin.stepped_up").count() == 1


def test_below_the_threshold_nothing_changes_for_the_reviewer(reviewer, agent):
    proposal = pending_proposal(agent, risk=LOW)
    client = logged_in(reviewer, stepped_up=False)
    response = client.post(reverse("console:decide", args=[proposal.pk, "approve"]), {})
    assert response.status_code == 302 and "step-up" not in response["Location"]
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.APPROVED
    assert decision_events()[0]["auth"] == {"via": "console"}


def test_a_factor_proved_too_long_ago_is_not_fresh(reviewer, agent, settings):
    proposal = pending_proposal(agent, risk=HIGH)
    client = logged_in(reviewer)
    session = client.session
    for entry in session["account_authentication_methods"]:
        entry["at"] = time.time() - settings.STEP_UP_SECONDS - 1
    session.save()
    response = client.post(reverse("console:decide", args=[proposal.pk, "reject"]), {})
    assert "step-up" in response["Location"]
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING


def test_rejecting_a_high_risk_proposal_needs_it_too_and_htmx_is_sent_there(reviewer, agent):
    proposal = pending_proposal(agent, risk=HIGH)
    client = logged_in(reviewer, stepped_up=False)
    url = reverse("console:decide", args=[proposal.pk, "reject"])
    response = client.post(url, {"comment": "no"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 204 and "/step-up/" in response["HX-Redirect"]


def test_a_reviewers_token_is_refused_with_the_page_that_completes_it(reviewer, agent, settings):
    proposal = pending_proposal(agent, risk=HIGH)
    api = client_for(create_user_token(reviewer))
    refused = api.post(f"/api/v1/proposals/{proposal.pk}/approve", {"comment": "ok"}, format="json")
    assert refused.status_code == 403
    error = refused.json()["error"]
    assert error["type"] == "step_up_required" and "second factor" in error["message"]
    # The comment travels with the link: the console's page shows it, ready to confirm.
    assert error["url"] == f"{settings.SITE_URL}/proposals/{proposal.pk}/approve/?comment=ok"
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING
    low = pending_proposal(agent, risk=LOW)
    fine = api.post(f"/api/v1/proposals/{low.pk}/approve", {}, format="json")
    assert fine.status_code == 200 and decision_events()[0]["auth"]["via"] == "api token"
    url = error["url"].removeprefix(settings.SITE_URL)
    console = logged_in(reviewer, stepped_up=False)
    page = console.get(url)
    assert page.status_code == 200 and 'id="confirm-kind"' in page.text
    assert 'id="decision-comment"' in page.text and ">ok</textarea>" in page.text
    asked = console.post(url, {"comment": "ok"})
    assert asked.status_code == 302 and asked["Location"].startswith("/step-up/")
    assert Proposal.objects.get(pk=proposal.pk).approvals_count == 0
    done = with_fresh_factor(console, reviewer).post(url, {"comment": "ok"})
    assert done.status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).approvals_count == 1
    schema = api.get("/api/v1/schema/?format=json").json()
    documented = schema["paths"]["/api/v1/proposals/{id}/approve"]["post"]["responses"]["403"]
    assert "step_up_required" in documented["description"]
    assert documented["content"]["application/json"]["schema"]["$ref"].endswith("/Error")


def test_a_mail_link_shows_a_high_risk_proposal_but_decides_it_in_the_console(reviewer, agent):
    proposal = pending_proposal(agent, risk=HIGH)
    link = review_links.mint(reviewer, proposal)
    path = reverse("console:review-link", args=[review_links.token(link)])
    page = Client().get(path)
    assert page.status_code == 200 and 'id="link-step-up"' in page.text
    assert 'id="link-approve"' not in page.text and 'id="link-approve-in-console"' in page.text
    tapped = Client().post(path, {"kind": "approve", "comment": ""})
    assert tapped.status_code == 403 and "second factor" in tapped.text
    link.refresh_from_db()
    assert link.used_at is None  # still good for a decision below the threshold later
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING
    console_url = reverse("console:decide", args=[proposal.pk, "approve"])
    assert f'href="{console_url}"' in page.text
    console = logged_in(reviewer, stepped_up=False)
    assert console.post(console_url, {"comment": "from the mail"}).status_code == 302
    assert Proposal.objects.get(pk=proposal.pk).approvals_count == 0  # asked to step up first
    with_fresh_factor(console, reviewer).post(console_url, {"comment": "from the mail"})
    assert Proposal.objects.get(pk=proposal.pk).approvals_count == 1


def test_every_path_records_how_the_decider_proved_who_they_are(reviewer, reviewer2, agent):
    proposal = pending_proposal(agent, risk=LOW, required=2)
    services.decide(proposal.pk, reviewer, "approve", authentication=Authentication(via="slack"))
    services.decide(
        proposal.pk,
        reviewer2,
        "approve",
        authentication=Authentication(
            via="console", method="sso:okta", factor="webauthn", factor_at=time.time()
        ),
    )
    first, second = decision_events()
    assert first["auth"] == {"via": "slack"} and first["via"] == "slack"
    assert second["auth"]["method"] == "sso:okta" and second["auth"]["factor"] == "webauthn"


@pytest.mark.parametrize(
    ("path", "data", "back"),
    [
        ("/manage/agents/", {"name": "ci", "capabilities": "script.execute"}, None),
        ("/manage/agents/{agent}/rotate/", {}, "/manage/agents/"),
        ("/manage/agents/{agent}/revoke/", {}, "/manage/agents/"),
        ("/manage/users/{user}/reviewer/", {"reviewer": "on"}, "/manage/users/"),
        ("/manage/users/{user}/end-access/", {}, "/manage/users/"),
    ],
)
def test_changing_tokens_or_roles_needs_a_fresh_factor_reading_does_not(
    admin_user, reviewer, agent, path, data, back
):
    path = path.format(agent=agent.pk, user=reviewer.pk)
    page = path.rsplit("/", 2)[0] + "/" if back else path
    stale = logged_in(admin_user, stepped_up=False)
    assert stale.get(back or page).status_code == 200  # reading needs nothing
    before = AuditEvent.objects.count()
    asked = stale.post(path, data)
    assert asked.status_code == 302 and asked["Location"].startswith("/step-up/?next=")
    assert AuditEvent.objects.count() == before  # nothing changed
    done = logged_in(admin_user).post(path, data)
    assert done.status_code in (200, 302) and AuditEvent.objects.count() > before


def test_a_new_agents_form_is_filled_again_after_the_step_up(admin_user):
    stale = logged_in(admin_user, stepped_up=False)
    fields = {"name": "nightly", "capabilities": "docker.*, script.execute"}
    asked = stale.post("/manage/agents/", fields)
    step_up = stale.get(asked["Location"])
    back = step_up.context["next"]
    assert back.startswith("/manage/agents/?")
    form = with_fresh_factor(stale, admin_user).get(back).context["form"]
    assert form["name"].value() == "nightly"
    assert form["capabilities"].value() == "docker.*, script.execute"


def test_a_policy_saved_without_a_fresh_factor_is_kept_and_applied_after_it(admin_user):
    from approvals.policy.models import PolicyVersion
    from approvals.policy.rules import current_policy
    from tests.console.test_admin_pages import editor_post

    current_policy()
    stale = logged_in(admin_user, stepped_up=False)
    assert stale.get("/manage/policy/").status_code == 200  # reading and previewing need nothing
    edited = editor_post(stale, auto_approve_below="2", comment="fewer scripts on policy alone")
    assert stale.post("/manage/policy/", {**edited, "intent": "preview"}).status_code == 200
    asked = stale.post("/manage/policy/", edited)
    assert asked.status_code == 302 and asked["Location"].startswith("/step-up/?next=")
    assert PolicyVersion.objects.count() == 1
    back = stale.get(asked["Location"]).context["next"]
    assert back.startswith("/manage/policy/apply/?draft=")
    fresh = with_fresh_factor(stale, admin_user)
    shown = fresh.get(back)
    assert "auto_approve_below: 4 → 2" in shown.text
    assert "fewer scripts on policy alone" in shown.text
    key = back.split("draft=")[1]
    form = shown.context["form"]
    applied = fresh.post(
        "/manage/policy/apply/",
        {
            "draft": key,
            "text": form["text"].value(),
            "comment": form["comment"].value(),
            "intent": "apply",
        },
    )
    assert applied.status_code == 302
    assert current_policy().auto_approve_below == 2 and PolicyVersion.objects.count() == 2


def test_the_step_up_page_offers_what_the_person_has(reviewer, admin_user):
    nothing = logged_in(reviewer, stepped_up=False).get("/step-up/?next=/manage/policy/")
    assert 'id="step-up-enrol"' in nothing.text  # no factor yet: enrol one first
    fresh = logged_in(reviewer).get("/step-up/?next=/manage/policy/")
    assert 'id="step-up-continue"' in fresh.text and 'href="/manage/policy/"' in fresh.text
    elsewhere = logged_in(reviewer).get("/step-up/?next=https://evil.example/")
    assert 'href="https://evil.example/"' not in elsewhere.text


def test_when_the_policy_requires_a_factor_people_enrol_before_the_console(reviewer, admin_user):
    from approvals.policy.rules import current_policy, update_policy

    update_policy({**current_policy().as_data(), "require_second_factor": True}, admin_user)
    bare = logged_in(reviewer, stepped_up=False)
    response = bare.get("/queue/")
    assert response.status_code == 302 and response["Location"] == "/accounts/2fa/"
    assert bare.get("/accounts/2fa/").status_code in (200, 302)
    client, _ = sign_in("rita", "pw-rita")
    enrol_totp(client)
    assert client.get("/queue/").status_code == 200
    api = client_for(create_user_token(reviewer))
    assert api.get("/api/v1/capabilities").status_code == 200  # the API checks on its own


def test_signing_out_everywhere_ends_every_session_and_token(reviewer):
    first, _ = sign_in("rita", "pw-rita")
    second, _ = sign_in("rita", "pw-rita")
    create_user_token(reviewer)
    response = first.post(reverse("console:sign-out-everywhere"))
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert second.get("/queue/").status_code == 302 and first.get("/queue/").status_code == 302
    assert not UserToken.objects.filter(user=reviewer, revoked_at__isnull=True).exists()
    [event] = AuditEvent.objects.filter(verb="user.access_ended")
    assert event.data == {"sessions": 2, "tokens": 1}


def test_an_admin_ends_a_persons_access_at_once(reviewer, admin_user):
    theirs, _ = sign_in("rita", "pw-rita")
    token = create_user_token(reviewer)
    admin = with_fresh_factor(logged_in(admin_user), admin_user)
    response = admin.post(reverse("console:end-access", args=[reviewer.pk]))
    assert response.status_code == 302
    assert theirs.get("/queue/").status_code == 302
    assert client_for(token).get("/api/v1/capabilities").status_code == 401


@pytest.mark.parametrize(
    ("mode", "with_factor", "offered"),
    [
        ("auto", False, {"sso"}),
        ("auto", True, {"totp"}),
        ("provider", True, {"sso"}),
        ("factor", False, {"enrol"}),
        ("factor", True, {"totp"}),
    ],
)
def test_each_provider_says_how_its_people_step_up(reviewer, settings, mode, with_factor, offered):
    from allauth.socialaccount.models import SocialAccount

    settings.SOCIALACCOUNT_PROVIDERS = {
        "oidc": {
            "APPS": [
                {
                    "provider_id": "corp",
                    "name": "Corp IdP",
                    "client_id": "airlock",
                    "secret": "s",
                    "settings": {"server_url": "https://idp.example", "step_up": mode},
                }
            ]
        }
    }
    SocialAccount.objects.create(user=reviewer, provider="corp", uid="rita-at-corp")
    client, _ = sign_in("rita", "pw-rita")
    if with_factor:
        enrol_totp(client)
    page = client.get("/step-up/?next=/queue/").text
    shown = {name for name in ("sso", "totp", "passkey", "enrol") if f'id="step-up-{name}"' in page}
    assert shown == offered
    if "sso" in offered:
        assert "Sign in again at Corp IdP" in page and "/accounts/oidc/corp/login/" in page


def test_a_personal_token_is_made_after_a_fresh_factor_and_shown_once(reviewer):
    client, _ = sign_in("rita", "pw-rita")
    secret = enrol_totp(client)
    asked = client.post(reverse("console:new-token"))
    assert asked.status_code == 302 and asked["Location"].startswith("/step-up/?next=")
    assert not UserToken.objects.filter(user=reviewer).exists()
    used = {pyotp.TOTP(secret).now()}  # taken by the enrolment
    done = client.post("/accounts/2fa/reauthenticate/", {"code": fresh_code(secret, used)})
    assert done.status_code == 302
    made = client.post(reverse("console:new-token"))
    token = made.context["new_token"]
    assert made.status_code == 200 and f'id="new-token" class="token">{token}<' in made.text
    assert client_for(token).get("/api/v1/capabilities").status_code == 200
    [event] = AuditEvent.objects.filter(verb="user_token.created")
    assert event.actor == "user:rita" and event.data["auth"]["factor"] == "totp"
    assert token not in client.get(reverse("console:security")).text
