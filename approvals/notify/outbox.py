"""Draining the outbox: the core's recorded events, told to every channel in batches.

The core writes each event to the outbox (``approvals.core.outbox``) in the
transaction of the change it tells of and, after the commit, sends
``events_recorded``; ``on_events_recorded`` hears it and asks a worker to
``drain`` the outbox. The worker takes the events in batches and hands them
to every configured notifier (``NOTIFIERS`` setting): live in the console,
email, signed webhooks, Slack. Every message links to the proposal.

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
import logging
import threading
import time
import uuid
from collections.abc import Iterable
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from approvals.core.outbox import notify
from approvals.models import PendingNotification, Proposal
from approvals.moved import import_class
from approvals.notify.base import EVENT_FIELDS, Notifier, event_for
from infrastructure.enqueue import enqueue
from infrastructure.per_process import PerProcess

log = logging.getLogger(__name__)

DEFAULT_NOTIFIERS = [
    "approvals.notify.console.ConsoleNotifier",
    "approvals.notify.email.EmailNotifier",
    "approvals.notify.webhooks.WebhookNotifier",
    "approvals.notify.slack.notifier.SlackNotifier",
]
DRAIN_TASK = "approvals.tasks.drain_notifications"  # notify/tasks.py, which imports this module
DRAIN_BATCH = 100  # events per claim of the outbox
# A claimed batch whose worker died is taken again after this long (a live
# worker tells a batch in far less: every delivery attempt has a short timeout).
CLAIM_SECONDS = 600
WAKE_INTERVAL_SECONDS = 0.1  # at most one drain message per process this often


def notifiers() -> list[Notifier]:
    return [import_class(path)() for path in getattr(settings, "NOTIFIERS", DEFAULT_NOTIFIERS)]


def wanted(kind: str) -> bool:
    """Whether any configured notifier takes this kind of event."""
    return any(notifier.wants(kind) for notifier in notifiers())


def on_events_recorded(sender, **kwargs) -> None:
    """``approvals.core.outbox.events_recorded``: the outbox has events to tell."""
    request_drain()


def request_drain() -> None:
    """Ask a worker to drain the outbox soon (in-line when tasks run eagerly)."""
    if current_app.conf.task_always_eager:
        enqueue(DRAIN_TASK)
        return
    _waker().ring()


def on_execution_ended(sender, execution_id: int, **kwargs) -> None:
    """``executions.signals.execution_ended``: follow up on the proposal it ran for."""
    if not wanted("execution_ended"):
        return
    proposal = Proposal.objects.filter(execution_id=execution_id).first()
    if proposal is not None:
        notify("execution_ended", proposal)


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
        .only(*EVENT_FIELDS)  # not the decision path and the rest an event never shows
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
        try:
            enqueue(DRAIN_TASK)
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
