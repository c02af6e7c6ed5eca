"""Telling people: notify-list runs, new reviews, approaching expiry and decisions.

``notify(kind, proposal)`` is the one entry point; after commit it hands the
event to every configured notifier (``NOTIFIERS`` setting). Notifiers share
one small interface: live in the console, email, signed webhooks, Slack
(``approvals.slack``). Every message links to the proposal.

People are told about the kinds in ``TOLD``, as their preferences allow
(``ReviewerPreferences``). The ``FOLLOW_UPS`` (a partial approval, the end of
the execution) only keep messages already posted up to date, so only
notifiers that post such messages take them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from console.roles import REVIEWERS_GROUP
from executions.broadcast import PROPOSALS_GROUP, broadcast

from .models import Proposal, Webhook, WebhookDelivery, preferences_for
from .retries import MAX_ATTEMPTS, retry_delay

log = logging.getLogger(__name__)

KINDS = {
    "notify_list": "ran from the notify list",
    "review_requested": "waits for review",
    "expiry_warning": "expires soon",
    "decided": "was decided",
    "partly_approved": "has an approval and waits for more",
    "execution_ended": "finished running",
}
TOLD = frozenset({"notify_list", "review_requested", "expiry_warning", "decided"})
FOLLOW_UPS = frozenset({"partly_approved", "execution_ended"})
# Mails to reviewers about these carry a one-tap review link while the proposal waits.
REVIEW_KINDS = frozenset({"review_requested", "expiry_warning"})
DEFAULT_NOTIFIERS = [
    "approvals.notifications.ConsoleNotifier",
    "approvals.notifications.EmailNotifier",
    "approvals.notifications.WebhookNotifier",
    "approvals.slack.notifier.SlackNotifier",
]
WEBHOOK_TIMEOUT_SECONDS = 5
WEBHOOK_MAX_ATTEMPTS = MAX_ATTEMPTS  # the same retry policy as mail and Slack
SIGNATURE_HEADER = "X-Airlock-Signature"


@dataclass(frozen=True)
class Event:
    kind: str
    proposal_id: int
    status: str
    action: str
    agent: str
    summary: str
    risk: int
    url: str
    at: str

    @property
    def subject(self) -> str:
        return f"[Airlock] proposal {self.proposal_id} {KINDS.get(self.kind, self.kind)}: {self.summary}"[
            :200
        ]

    @property
    def text(self) -> str:
        return (
            f"Proposal {self.proposal_id} by {self.agent} {KINDS.get(self.kind, self.kind)}.\n"
            f"Action: {self.action}\nSummary: {self.summary}\nRisk: {self.risk}\n"
            f"Status: {self.status}\n\n{self.url}\n"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def proposal_url(proposal_id: int) -> str:
    try:
        path = reverse("console:proposal", args=[proposal_id])
    except NoReverseMatch:
        path = f"/proposals/{proposal_id}/"
    return f"{settings.SITE_URL}{path}"


def event_for(kind: str, proposal: Proposal) -> Event:
    return Event(
        kind=kind,
        proposal_id=proposal.pk,
        status=proposal.status,
        action=proposal.action,
        agent=proposal.agent.name,
        summary=proposal.summary,
        risk=proposal.risk_score,
        url=proposal_url(proposal.pk),
        at=timezone.now().isoformat(),
    )


class Notifier(ABC):
    """Sends one event somewhere. Must not raise for a delivery problem; log it."""

    kinds: frozenset[str] = TOLD

    def wants(self, kind: str) -> bool:
        return kind in self.kinds

    @abstractmethod
    def send(self, event: Event) -> None: ...


class ConsoleNotifier(Notifier):
    """A live notice to every reviewer's open console."""

    def send(self, event: Event) -> None:
        broadcast(PROPOSALS_GROUP, {"type": "notification", **event.as_dict()})


class EmailNotifier(Notifier):
    """A mail per person: reviewers, and the agent's owner for decisions, as each prefers.

    While a proposal waits, a reviewer's mail carries a one-tap review link bound
    to them (``approvals.review_links``). Each mail is a row of the delivery log,
    retried when the mail server refuses it.
    """

    def send(self, event: Event) -> None:
        from . import deliveries, review_links

        proposal = Proposal.objects.select_related("agent").get(pk=event.proposal_id)
        now = timezone.now()
        for user in self.recipients(event):
            if not preferences_for(user).wants("email", event.risk, now):
                continue
            link = None
            if event.kind in REVIEW_KINDS and may_decide(user, proposal):
                link = review_links.mint(user, proposal)
            deliveries.record(
                channel="email",
                operation="send",
                event=event.kind,
                proposal=proposal,
                recipient=user,
                target=user.email,
                subject=event.subject,
                body=event.text,
                review_link=link,
            )

    @staticmethod
    def recipients(event: Event) -> list:
        if event.kind == "decided":
            people = get_user_model().objects.filter(agents__name=event.agent, is_active=True)
        else:
            people = reviewers()
        return list(people.exclude(email="").distinct().order_by("email"))


def reviewers():
    """Everyone who may review: active members of the reviewers group, and admins."""
    people = Q(is_superuser=True) | Q(groups__name=REVIEWERS_GROUP)
    return get_user_model().objects.filter(people, is_active=True).distinct()


def may_decide(user, proposal: Proposal) -> bool:
    """Whether ``user`` could decide the proposal now (no link or button for those who can't)."""
    from .policy import current_policy

    if not proposal.is_pending or proposal.expires_at is None:
        return False
    owns = proposal.agent.owner_id == user.pk
    return not owns or current_policy().self_approval


class WebhookNotifier(Notifier):
    """Records a delivery per subscribed webhook and sends it (retried with backoff)."""

    def send(self, event: Event) -> None:
        body = json.dumps({"event": event.kind, "proposal": event.as_dict()}, sort_keys=True)
        for webhook in Webhook.objects.filter(is_active=True):
            if webhook.wants(event.kind):
                delivery = WebhookDelivery.objects.create(
                    webhook=webhook, event=event.kind, proposal_id=event.proposal_id, body=body
                )
                attempt_delivery(delivery.pk)


def sign(secret: str, body: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()


def attempt_delivery(delivery_id: int) -> WebhookDelivery:
    """One attempt; on failure, schedule the next one or give up after the last."""
    delivery = WebhookDelivery.objects.select_related("webhook").get(pk=delivery_id)
    if delivery.state != WebhookDelivery.State.PENDING:
        return delivery
    delivery.attempts += 1
    code, error = _post(delivery)
    delivery.response_code, delivery.error = code, error
    if code is not None and 200 <= code < 300:
        delivery.state, delivery.delivered_at, delivery.next_attempt_at = (
            "delivered",
            timezone.now(),
            None,
        )
    elif (delay := retry_delay(delivery.attempts)) is None:
        delivery.state, delivery.next_attempt_at = "failed", None
    else:
        delivery.next_attempt_at = timezone.now() + timedelta(seconds=delay)
        _schedule_retry(delivery.pk, delay)
    delivery.save()
    return delivery


def _post(delivery: WebhookDelivery) -> tuple[int | None, str]:
    request = urllib.request.Request(
        delivery.webhook.url, data=delivery.body.encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    request.add_header("User-Agent", "Airlock-Webhook/1")
    request.add_header("X-Airlock-Event", delivery.event)
    request.add_header("X-Airlock-Delivery", str(delivery.pk))
    request.add_header(SIGNATURE_HEADER, sign(delivery.webhook.secret, delivery.body))
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_SECONDS) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, str(getattr(exc, "reason", exc))[:500]


def _schedule_retry(delivery_id: int, delay: int) -> None:
    from .tasks import deliver_webhook

    try:
        deliver_webhook.apply_async(args=[delivery_id], countdown=delay)
    except Exception:  # retry_due_deliveries picks it up from next_attempt_at
        log.exception("could not schedule webhook retry %s", delivery_id)


def retry_due_deliveries() -> int:
    """Safety net for retries whose scheduled message was lost."""
    due = WebhookDelivery.objects.filter(state="pending", next_attempt_at__lte=timezone.now())
    return sum(
        1 for delivery_id in due.values_list("pk", flat=True) if attempt_delivery(delivery_id)
    )


def notifiers() -> list[Notifier]:
    return [import_string(path)() for path in getattr(settings, "NOTIFIERS", DEFAULT_NOTIFIERS)]


def wanted(kind: str) -> bool:
    """Whether any configured notifier takes this kind of event."""
    return any(notifier.wants(kind) for notifier in notifiers())


def send(kind: str, proposal_id: int) -> None:
    """Build the event from the committed proposal and hand it to every notifier that takes it."""
    proposal = Proposal.objects.select_related("agent").get(pk=proposal_id)
    event = event_for(kind, proposal)
    for notifier in notifiers():
        if not notifier.wants(kind):
            continue
        try:
            notifier.send(event)
        except Exception:
            log.exception("%s failed for proposal %s", type(notifier).__name__, proposal_id)


def notify(kind: str, proposal: Proposal) -> None:
    """After commit, send in the background (mail and webhooks must not slow a request)."""
    from .tasks import send_notifications

    if kind in FOLLOW_UPS and not wanted(kind):
        return

    def enqueue() -> None:
        try:
            send_notifications.delay(kind, proposal.pk)
        except Exception:
            log.exception("could not enqueue %s notification for proposal %s", kind, proposal.pk)

    transaction.on_commit(enqueue)


def warn_expiring(now=None) -> int:
    """Warn once about pending proposals within the last fifth of their review time."""
    now = now or timezone.now()
    warned = 0
    for proposal in Proposal.objects.pending().filter(
        expiry_warned_at__isnull=True, expires_at__isnull=False
    ):
        window = (proposal.expires_at - proposal.created_at) / 5
        due = proposal.expires_at - window <= now < proposal.expires_at
        if due and Proposal.objects.filter(pk=proposal.pk, expiry_warned_at__isnull=True).update(
            expiry_warned_at=now
        ):
            notify("expiry_warning", proposal)
            warned += 1
    return warned


def on_execution_ended(sender, execution_id: int, **kwargs) -> None:
    """``executions.signals.execution_ended``: follow up on the proposal it ran for."""
    if not wanted("execution_ended"):
        return
    proposal = Proposal.objects.filter(execution_id=execution_id).first()
    if proposal is not None:
        notify("execution_ended", proposal)
