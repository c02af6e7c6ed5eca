"""Celery tasks: take a primary key, reload, check state, call one service."""

from celery import shared_task

from . import deliveries, notifications, services


@shared_task(name="approvals.tasks.expire_pending", ignore_result=True)
def expire_pending() -> dict:
    """Periodic: warn about proposals close to expiry, expire those past it."""
    return {"warned": notifications.warn_expiring(), "expired": services.expire_pending()}


@shared_task(name="approvals.tasks.drain_notifications", ignore_result=True)
def drain_notifications() -> int:
    """Tell people of the outbox's events; asked for after commits, and periodically."""
    return notifications.drain()


@shared_task(name="approvals.tasks.send_notifications", ignore_result=True)
def send_notifications(kind: str, proposal_id: int) -> None:
    """A message of the earlier one-message-per-event kind, still in a broker after an upgrade."""
    from django.utils import timezone

    from .models import PendingNotification

    notice = PendingNotification(kind=kind, proposal_id=proposal_id, created_at=timezone.now())
    notifications.send_batch([notice])


@shared_task(name="approvals.tasks.deliver_webhook", ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    notifications.attempt_delivery(delivery_id)


@shared_task(name="approvals.tasks.retry_webhooks", ignore_result=True)
def retry_webhooks() -> int:
    return notifications.retry_due_deliveries()


@shared_task(name="approvals.tasks.deliver", ignore_result=True)
def deliver(delivery_id: int) -> None:
    """A retry of one mail or Slack message of the delivery log."""
    deliveries.attempt(delivery_id)


@shared_task(name="approvals.tasks.retry_deliveries", ignore_result=True)
def retry_deliveries() -> int:
    return deliveries.retry_due()


@shared_task(name="approvals.tasks.slack_reply", ignore_result=True)
def slack_reply(response_url: str, text: str) -> None:
    """An ephemeral answer to a Slack interaction, off the request that must answer in 3 s."""
    from .slack.notifier import reply

    reply(response_url, text)
