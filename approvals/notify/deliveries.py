"""The delivery log of every channel that can fail: one row per message, each attempt recorded.

Webhooks (``WebhookDelivery``), mail and Slack (``Delivery``) keep the same
retry state (``Attempts``: state, attempts, last error, when next) and it
moves here alone. ``record`` writes a message to its log and attempts it at
once (channels run on a worker, never in a request); ``attempt`` claims the
row, calls the channel's sender and records the outcome. A failed attempt
keeps the reason and schedules the next one with backoff
(``schedule_retry``), or gives up after the last; ``retry_due`` is the
periodic safety net for a retry whose message was lost. Nothing here raises
into the notifier: a failure is a row in the log, never a lost decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta

from django.db.models import F
from django.utils import timezone

from approvals.notify.models import Attempts, Delivery, WebhookDelivery
from infrastructure.enqueue import enqueue

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
BACKOFF_SECONDS = 10  # 10 s, 20 s, 40 s, 80 s between attempts
# While an attempt is under way, a scheduled retry and the sweep leave the row alone this long.
LEASE_SECONDS = 120
# The task that retries a row of each log (notify/tasks.py, which imports this module).
RETRY_TASKS = {
    Delivery: "approvals.tasks.deliver",
    WebhookDelivery: "approvals.tasks.deliver_webhook",
}

Sender = Callable[[Attempts], None]


class DeliveryFailed(Exception):
    """An attempt that did not get through; ``reason`` goes to the log."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason[:1000]


def retry_delay(attempts: int) -> int | None:
    """Seconds until the next attempt after ``attempts`` failed ones; None: give up."""
    if attempts >= MAX_ATTEMPTS:
        return None
    return BACKOFF_SECONDS * 2 ** (attempts - 1)


def record(log_model: type[Attempts], send: Sender, **fields) -> Attempts:
    """A new message in ``log_model``'s log, attempted at once with ``send``."""
    delivery = log_model.objects.create(**fields)
    return attempt(log_model, delivery.pk, send)


def attempt(log_model: type[Attempts], delivery_id: int, send: Sender) -> Attempts:
    """One attempt; on failure, schedule the next one or give up after the last.

    ``send(delivery)`` delivers the message or raises ``DeliveryFailed`` with
    the reason; it may note what the endpoint answered on the row.
    """
    delivery = log_model.objects.select_related(*log_model.attempt_related).get(pk=delivery_id)
    if delivery.state != Attempts.State.PENDING or not _claim(delivery):
        return delivery
    try:
        send(delivery)
    except DeliveryFailed as exc:
        _failed(delivery, exc.reason)
    except Exception as exc:  # a bug in a sender must still leave a readable row
        log.exception("%s %s failed", log_model.__name__, delivery.pk)
        _failed(delivery, f"internal error: {exc}")
    else:
        delivery.state, delivery.error = Attempts.State.DELIVERED, ""
        delivery.delivered_at, delivery.next_attempt_at = timezone.now(), None
    delivery.save()
    return delivery


def _claim(delivery: Attempts) -> bool:
    # A scheduled retry and the sweep may meet: only one of them attempts.
    claimed = (
        type(delivery)
        .objects.filter(pk=delivery.pk, state=Attempts.State.PENDING, attempts=delivery.attempts)
        .update(
            attempts=F("attempts") + 1,
            next_attempt_at=timezone.now() + timedelta(seconds=LEASE_SECONDS),
        )
    )
    if claimed:
        delivery.attempts += 1
    return bool(claimed)


def _failed(delivery: Attempts, reason: str) -> None:
    delivery.error = reason
    delay = retry_delay(delivery.attempts)
    if delay is None:
        delivery.state, delivery.next_attempt_at = Attempts.State.FAILED, None
        return
    delivery.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    schedule_retry(type(delivery), delivery.pk, delay)


def schedule_retry(log_model: type[Attempts], delivery_id: int, delay: int) -> None:
    """The one place that schedules a next attempt: the log's retry task, ``delay`` s from now."""
    try:
        enqueue(RETRY_TASKS[log_model], delivery_id, countdown=delay)
    except Exception:  # retry_due picks it up from next_attempt_at
        log.exception("could not schedule a retry of %s %s", log_model.__name__, delivery_id)


def retry_due(log_model: type[Attempts], send: Sender) -> int:
    """Safety net for retries whose scheduled message was lost; how many were attempted."""
    due = log_model.objects.filter(
        state=Attempts.State.PENDING, next_attempt_at__lte=timezone.now()
    )
    return sum(
        1
        for delivery_id in due.values_list("pk", flat=True)
        if attempt(log_model, delivery_id, send)
    )
