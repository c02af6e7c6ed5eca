"""The delivery log of mail and Slack: one row per message, each attempt recorded.

A notifier records a ``Delivery`` and attempts it at once (notifiers already
run on a worker, never in a request). A failed attempt keeps the reason and is
tried again with backoff, like a webhook: by a scheduled task, and by the
periodic sweep should that message be lost. Nothing here raises into the
notifier: a failure is a row in the log, never a lost decision.
"""

from __future__ import annotations

import logging
import smtplib
from datetime import timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.db.models import F
from django.utils import timezone

from . import review_links
from .models import Delivery
from .retries import retry_delay

log = logging.getLogger(__name__)

# While an attempt is under way the sweep leaves the row alone this long.
LEASE_SECONDS = 120


class DeliveryFailed(Exception):
    """An attempt that did not get through; ``reason`` goes to the log."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason[:1000]


def record(**fields) -> Delivery:
    """A new delivery, attempted at once."""
    delivery = Delivery.objects.create(**fields)
    return attempt(delivery.pk)


def attempt(delivery_id: int) -> Delivery:
    """One attempt; on failure, schedule the next one or give up after the last."""
    delivery = Delivery.objects.select_related("review_link", "slack_message").get(pk=delivery_id)
    if delivery.state != Delivery.State.PENDING or not _claim(delivery):
        return delivery
    try:
        _sender(delivery.channel)(delivery)
    except DeliveryFailed as exc:
        _failed(delivery, exc.reason)
    except Exception as exc:  # a bug in a sender must still leave a readable row
        log.exception("delivery %s failed", delivery.pk)
        _failed(delivery, f"internal error: {exc}")
    else:
        delivery.state, delivery.error = Delivery.State.DELIVERED, ""
        delivery.delivered_at, delivery.next_attempt_at = timezone.now(), None
    delivery.save()
    return delivery


def _claim(delivery: Delivery) -> bool:
    # A scheduled retry and the sweep may meet: only one of them attempts.
    claimed = Delivery.objects.filter(
        pk=delivery.pk, state=Delivery.State.PENDING, attempts=delivery.attempts
    ).update(
        attempts=F("attempts") + 1,
        next_attempt_at=timezone.now() + timedelta(seconds=LEASE_SECONDS),
    )
    if claimed:
        delivery.attempts += 1
    return bool(claimed)


def _failed(delivery: Delivery, reason: str) -> None:
    delivery.error = reason
    delay = retry_delay(delivery.attempts)
    if delay is None:
        delivery.state, delivery.next_attempt_at = Delivery.State.FAILED, None
        return
    delivery.next_attempt_at = timezone.now() + timedelta(seconds=delay)
    _schedule_retry(delivery.pk, delay)


def _schedule_retry(delivery_id: int, delay: int) -> None:
    from .tasks import deliver

    try:
        deliver.apply_async(args=[delivery_id], countdown=delay)
    except Exception:  # retry_due picks it up from next_attempt_at
        log.exception("could not schedule delivery retry %s", delivery_id)


def retry_due() -> int:
    """Safety net for retries whose scheduled message was lost."""
    due = Delivery.objects.filter(state=Delivery.State.PENDING, next_attempt_at__lte=timezone.now())
    return sum(1 for delivery_id in due.values_list("pk", flat=True) if attempt(delivery_id))


def _sender(channel: str):
    if channel == Delivery.Channel.SLACK:
        from .slack.notifier import deliver

        return deliver
    return send_mail


def send_mail(delivery: Delivery) -> None:
    """One mail to one address; its review link, if any, is added now and never stored."""
    text = delivery.body
    if delivery.review_link is not None:
        text += review_links.mail_paragraph(delivery.review_link)
    message = EmailMessage(delivery.subject, text, settings.DEFAULT_FROM_EMAIL, [delivery.target])
    try:
        message.send()
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryFailed(f"{type(exc).__name__}: {exc}") from None
