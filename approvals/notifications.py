"""Telling people: notify-list runs, new reviews, approaching expiry and decisions.

``notify(kind, proposal)`` is the one entry point. It writes the event to the
outbox (``PendingNotification``) in the transaction of the change it tells
of, so no change commits untold and no event is told of a change that rolled
back; after the commit it asks a worker to drain the outbox. The worker takes
the events in batches and hands them to every configured notifier
(``NOTIFIERS`` setting). Notifiers share one small interface: live in the
console, email, signed webhooks, Slack (``approvals.slack``). Every message
links to the proposal.

A burst of proposals costs one broker message per ``WAKE_INTERVAL_SECONDS``
and process, not one per event (``_Waker``); the periodic drain is the safety
net for a wake-up that never arrived (a process that died after its commit).

People are told about the kinds in ``TOLD``, as their preferences allow
(``ReviewerPreferences``). The ``FOLLOW_UPS`` (a partial approval, the end of
the execution) only keep messages already posted up to date, so only
notifiers that post such messages take them.
"""

from __future__ import annotations

import atexit
import hashlib
import hmac
import json
import logging
import threading
import time
import urllib.error
import urllib.request
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import DateTimeField, F, Q, Value
from django.urls import NoReverseMatch, reverse
from django.utils import timezone
from django.utils.module_loading import import_string

from accounts.roles import REVIEWERS_GROUP
from executions.broadcast import PROPOSALS_GROUP, broadcast
from infrastructure.per_process import PerProcess
from infrastructure.prepared import PreparedInsert

from .models import PendingNotification, Proposal, Webhook, WebhookDelivery, preferences_of
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
DRAIN_BATCH = 100  # events per claim of the outbox
# A claimed batch whose worker died is taken again after this long (a live
# worker tells a batch in far less: every delivery attempt has a short timeout).
CLAIM_SECONDS = 600
WAKE_INTERVAL_SECONDS = 0.1  # at most one drain message per process this often

_outbox = PreparedInsert(PendingNotification)


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


EVENT_FIELDS = ("status", "action", "summary", "risk_score", "agent__name")  # what event_for reads


def event_for(kind: str, proposal: Proposal, at: datetime | None = None) -> Event:
    return Event(
        kind=kind,
        proposal_id=proposal.pk,
        status=proposal.status,
        action=proposal.action,
        agent=proposal.agent.name,
        summary=proposal.summary,
        risk=proposal.risk_score,
        url=proposal_url(proposal.pk),
        at=(at or timezone.now()).isoformat(),
    )


class Notifier(ABC):
    """Sends one event somewhere. Must not raise for a delivery problem; log it."""

    kinds: frozenset[str] = TOLD

    def wants(self, kind: str) -> bool:
        return kind in self.kinds

    @abstractmethod
    def send(self, event: Event) -> None: ...

    def send_all(self, events: list[Event]) -> None:
        """A batch, in order. Notifiers override it where a batch can share work."""
        self.each(events, self.send)

    def each(self, events: list[Event], tell) -> None:
        """``tell(event)`` for each event; one's failure is logged and the others still go out."""
        for event in events:
            try:
                tell(event)
            except Exception:
                log.exception("%s failed for proposal %s", type(self).__name__, event.proposal_id)


class ConsoleNotifier(Notifier):
    """Live notices on every reviewer's open console: one channel message per batch.

    A burst of proposals is one message (one row of the embedded channel
    layer, one render per open console) instead of one per event; each
    console shows, in order, the notices its reviewer wants
    (``approvals.consumers.QueueConsumer.notifications``).
    """

    def send(self, event: Event) -> None:
        self.send_all([event])

    def send_all(self, events: list[Event]) -> None:
        broadcast(
            PROPOSALS_GROUP,
            {"type": "notifications", "events": [event.as_dict() for event in events]},
        )


class EmailNotifier(Notifier):
    """A mail per person: reviewers, and the agent's owner for decisions, as each prefers.

    While a proposal waits, a reviewer's mail carries a one-tap review link bound
    to them (``approvals.review_links``). Each mail is a row of the delivery log,
    retried when the mail server refuses it.
    """

    def send(self, event: Event) -> None:
        self.send_all([event])

    def send_all(self, events: list[Event]) -> None:
        audiences: dict[tuple[str, str], list] = {}  # asked once per batch: who, and as they prefer
        for event in events:
            audience = self.audience(event)
            if audience not in audiences:
                people = self.recipients(event)
                preferences = preferences_of(people)
                audiences[audience] = [(user, preferences[user.pk]) for user in people]
        mailed = [event for event in events if audiences[self.audience(event)]]
        if not mailed:
            return  # nobody to mail: no proposal to read
        proposals = Proposal.objects.select_related("agent").in_bulk(
            {event.proposal_id for event in mailed}
        )
        self.each(
            mailed,
            lambda event: self._send(
                event, proposals[event.proposal_id], audiences[self.audience(event)]
            ),
        )

    @staticmethod
    def audience(event: Event) -> tuple[str, str]:
        """Who hears of it: the agent's owners of a decision, reviewers of the rest."""
        return ("owners", event.agent) if event.kind == "decided" else ("reviewers", "")

    @staticmethod
    def _send(event: Event, proposal: Proposal, audience: list) -> None:
        from . import deliveries, review_links

        now = timezone.now()
        for user, preferences in audience:
            if not preferences.wants("email", event.risk, now):
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
        self.send_all([event])

    def send_all(self, events: list[Event]) -> None:
        webhooks = list(Webhook.objects.filter(is_active=True))
        if webhooks:
            self.each(events, lambda event: self._send(event, webhooks))

    @staticmethod
    def _send(event: Event, webhooks: list[Webhook]) -> None:
        body = json.dumps({"event": event.kind, "proposal": event.as_dict()}, sort_keys=True)
        for webhook in webhooks:
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


def notify(kind: str, proposal: Proposal) -> None:
    """Record the event with the change it tells of; a worker tells people after the commit."""
    if kind in FOLLOW_UPS and not wanted(kind):
        return
    _outbox.create(kind=kind, proposal_id=proposal.pk, created_at=timezone.now())
    transaction.on_commit(request_drain)


def request_drain() -> None:
    """Ask a worker to drain the outbox soon (in-line when tasks run eagerly)."""
    from .tasks import drain_notifications

    if drain_notifications.app.conf.task_always_eager:
        drain_notifications.delay()
        return
    _waker().ring()


def drain(limit: int = DRAIN_BATCH) -> int:
    """Tell every notifier of the outbox's events, oldest first, a batch at a time.

    Returns how many events were told. Drains running at once (worker threads,
    several workers) never take the same event: each claims its batch with one
    conditional UPDATE.
    """
    told = 0
    while True:
        claim, batch, more = _claim(limit)
        if batch:
            send_batch(batch)
            _told(claim)
            told += len(batch)
        if not more:
            return told


def _claim(limit: int) -> tuple[str, list[PendingNotification], bool]:
    """A claim, the batch it took, and whether the outbox may hold more than that."""
    now = timezone.now()
    free = Q(claim="") | Q(claimed_at__lt=now - timedelta(seconds=CLAIM_SECONDS))
    # Read first, without a write lock: an empty outbox (most drains) costs one query.
    ids = list(
        PendingNotification.objects.filter(free).order_by("pk").values_list("pk", flat=True)[:limit]
    )
    if not ids:
        return "", [], False
    claim = uuid.uuid4().hex
    PendingNotification.objects.filter(free, pk__in=ids).update(claim=claim, claimed_at=now)
    batch = list(PendingNotification.objects.filter(claim=claim).order_by("pk"))
    return claim, batch, len(ids) == limit


def _told(claim: str) -> None:
    # One statement (no collector, no transaction around it): the rows have no dependents.
    table = connection.ops.quote_name(PendingNotification._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE claim = %s", [claim])


def send_batch(notices: Iterable[PendingNotification]) -> None:
    """Build each event from its committed proposal and hand the batch to every notifier."""
    notices = list(notices)
    proposals = (
        Proposal.objects.select_related("agent")
        .only(*EVENT_FIELDS)  # not the parameters, reasons and path an event never shows
        .in_bulk({notice.proposal_id for notice in notices})
    )
    events = [
        event_for(notice.kind, proposals[notice.proposal_id], at=notice.created_at)
        for notice in notices
        if notice.proposal_id in proposals
    ]
    for notifier in notifiers():
        taken = [event for event in events if notifier.wants(event.kind)]
        if not taken:
            continue
        try:
            notifier.send_all(taken)
        except Exception:
            log.exception("%s failed for a batch of %d events", type(notifier).__name__, len(taken))


class _Waker:
    """Sends the drain message for a process: one per burst, at once when idle.

    A ring after a commit is answered by a message sent after that ring, so
    the drain it starts sees the committed event; rings that come while a
    message is being sent, or within ``WAKE_INTERVAL_SECONDS`` after it, share
    the next one.
    """

    def __init__(self):
        self._wanted = threading.Event()
        self._failing = False  # the broker refused the last message: said once per outage
        self._thread = threading.Thread(target=self._run, name="notification-waker", daemon=True)
        self._thread.start()
        atexit.register(self._flush)

    def ring(self) -> None:
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            self._send()
            time.sleep(WAKE_INTERVAL_SECONDS)

    def _flush(self) -> None:
        # A short-lived process (a management command) may exit before the thread sends.
        if self._wanted.is_set():
            self._wanted.clear()
            self._send()

    def _send(self) -> None:
        from .tasks import drain_notifications

        try:
            drain_notifications.delay()
        except Exception:
            if not self._failing:
                log.exception(
                    "could not ask for a notification drain (said once until the broker "
                    "answers again); the events wait in the outbox for the periodic drain"
                )
            self._failing = True
            return
        if self._failing:
            log.warning("notification drains are asked for again")
            self._failing = False


_waker = PerProcess(_Waker)  # a forked child needs its own thread


def warn_expiring(now=None) -> int:
    """Warn once about pending proposals within the last fifth of their review time.

    The database picks them: the last fifth begins where the time left is a
    quarter of the time waited (``4 × (expires − now) ≤ now − created``), so
    a long queue costs the rows that are due, not a read of every one.
    """
    now = now or timezone.now()
    at = Value(now, output_field=DateTimeField())
    due = (
        Proposal.objects.pending()
        .filter(expiry_warned_at__isnull=True, expires_at__gt=now)
        .alias(left=F("expires_at") - at, waited=at - F("created_at"))
        .filter(waited__gte=F("left") * 4)
    )
    warned = 0
    for proposal in due:
        if Proposal.objects.filter(pk=proposal.pk, expiry_warned_at__isnull=True).update(
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
