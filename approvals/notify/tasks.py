"""Celery tasks of the notification channels: take a primary key, reload, call one service."""

from celery import shared_task
from django.utils import timezone

from approvals.models import PendingNotification
from approvals.notify import deliveries, outbox
from approvals.notify.email import send_mail
from approvals.notify.models import Delivery, WebhookDelivery
from approvals.notify.slack import REPLY_TASK
from approvals.notify.slack import notifier as slack
from approvals.notify.webhooks import post


def send_delivery(delivery: Delivery) -> None:
    """The sender of a mail or Slack message of the delivery log, by its channel."""
    if delivery.channel == Delivery.Channel.SLACK:
        slack.deliver(delivery)
    else:
        send_mail(delivery)


# Task names are the ones messages already in a broker carry: kept whatever the module.
@shared_task(name=outbox.DRAIN_TASK, ignore_result=True)
def drain_notifications() -> int:
    """Tell people of the outbox's events; asked for after commits, and periodically."""
    return outbox.drain()


@shared_task(name="approvals.tasks.send_notifications", ignore_result=True)
def send_notifications(kind: str, proposal_id: int) -> None:
    """A message of the earlier one-message-per-event kind, still in a broker after an upgrade."""
    notice = PendingNotification(kind=kind, proposal_id=proposal_id, created_at=timezone.now())
    outbox.send_batch([notice])


@shared_task(name=deliveries.RETRY_TASKS[WebhookDelivery], ignore_result=True)
def deliver_webhook(delivery_id: int) -> None:
    """A retry of one webhook delivery."""
    deliveries.attempt(WebhookDelivery, delivery_id, post)


@shared_task(name="approvals.tasks.retry_webhooks", ignore_result=True)
def retry_webhooks() -> int:
    return deliveries.retry_due(WebhookDelivery, post)


@shared_task(name=deliveries.RETRY_TASKS[Delivery], ignore_result=True)
def deliver(delivery_id: int) -> None:
    """A retry of one mail or Slack message of the delivery log."""
    deliveries.attempt(Delivery, delivery_id, send_delivery)


@shared_task(name="approvals.tasks.retry_deliveries", ignore_result=True)
def retry_deliveries() -> int:
    return deliveries.retry_due(Delivery, send_delivery)


@shared_task(name=REPLY_TASK, ignore_result=True)
def slack_reply(response_url: str, text: str) -> None:
    """An ephemeral answer to a Slack interaction, off the request that must answer in 3 s."""
    slack.reply(response_url, text)
