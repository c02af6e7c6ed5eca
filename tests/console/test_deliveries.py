"""The delivery log: webhooks, mail and Slack on one admin page, failures with their reason."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from approvals.notify.models import Delivery, Webhook, WebhookDelivery

pytestmark = pytest.mark.django_db

LOG = reverse("console:deliveries")


@pytest.fixture
def logged(proposal, reviewer):
    hook = Webhook.objects.create(name="pagerduty", url="http://127.0.0.1:9/", secret="k")
    rows = {
        "webhook": WebhookDelivery.objects.create(
            webhook=hook, event="decided", proposal=proposal, body="{}", state="failed",
            attempts=5, error="HTTP 502",
        ),
        "email": Delivery.objects.create(
            channel="email", operation="send", event="review_requested", proposal=proposal,
            recipient=reviewer, target="rita@example.test", state="delivered", attempts=1,
        ),
        "slack": Delivery.objects.create(
            channel="slack", operation="post", event="review_requested", proposal=proposal,
            target="#approvals", state="pending", attempts=2, error="Slack refused: ratelimited",
            next_attempt_at=timezone.now() + timedelta(seconds=40),
        ),
    }  # fmt: skip
    return rows


def test_every_channel_shows_in_one_log_newest_first(admin_client_, logged, proposal):
    html = admin_client_.get(LOG).content.decode()
    rows = html.split('<tr class="delivery-')[1:]
    assert [row.split('"')[0].split()[0] for row in rows] == ["slack", "email", "webhook"]
    slack, email, webhook = rows
    assert "#approvals" in slack and "Slack refused: ratelimited" in slack and "next try" in slack
    assert "rita@example.test" in email and ">sent<" in email
    assert "pagerduty" in webhook and "HTTP 502" in webhook and "failed" in webhook
    assert f'href="/proposals/{proposal.pk}/"' in webhook


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ({"channel": "webhook"}, ["webhook"]),
        ({"channel": "slack"}, ["slack"]),
        ({"state": "failed"}, ["webhook"]),
        ({"state": "delivered", "channel": "email"}, ["email"]),
        ({"channel": "pigeon"}, ["slack", "email", "webhook"]),  # a stale filter is ignored
    ],
)
def test_the_log_filters_by_channel_and_state(admin_client_, logged, query, shown):
    html = admin_client_.get(LOG, query).content.decode()
    rows = html.split('<tr class="delivery-')[1:]
    assert [row.split('"')[0].split()[0] for row in rows] == shown


def test_the_log_pages(admin_client_, proposal):
    Delivery.objects.bulk_create(
        Delivery(channel="email", operation="send", event="decided", target=f"{i}@x.test")
        for i in range(60)
    )
    first = admin_client_.get(LOG).content.decode()
    assert first.count('<tr class="delivery-') == 50 and "page 1 of 2" in first
    second = admin_client_.get(LOG, {"page": 2}).content.decode()
    assert second.count('<tr class="delivery-') == 10


def test_admins_find_the_log_in_the_header(admin_client_):
    assert f'href="{LOG}"' in admin_client_.get(reverse("console:audit")).content.decode()
