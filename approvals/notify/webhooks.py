"""``WebhookNotifier``: each event posted, signed, to every subscribed endpoint (retried with backoff)."""

from __future__ import annotations

import hashlib
import hmac
import json
import urllib.error
import urllib.request

from approvals.notify import deliveries
from approvals.notify.base import Event, Notifier
from approvals.notify.models import Webhook, WebhookDelivery

WEBHOOK_TIMEOUT_SECONDS = 5
WEBHOOK_MAX_ATTEMPTS = deliveries.MAX_ATTEMPTS  # the same retry policy as mail and Slack
SIGNATURE_HEADER = "X-Airlock-Signature"


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
                deliveries.record(
                    WebhookDelivery,
                    post,
                    webhook=webhook,
                    event=event.kind,
                    proposal_id=event.proposal_id,
                    body=body,
                )


def sign(secret: str, body: str) -> str:
    return "sha256=" + hmac.new(secret.encode(), body.encode(), hashlib.sha256).hexdigest()


def post(delivery: WebhookDelivery) -> None:
    """POST the event to the webhook; ``DeliveryFailed`` unless it answers 2xx."""
    code, error = _post(delivery)
    delivery.response_code = code
    if code is None or not 200 <= code < 300:
        raise deliveries.DeliveryFailed(error or f"HTTP {code}")


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
