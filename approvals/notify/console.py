"""``ConsoleNotifier``: live notices at the top of every reviewer's open console."""

from __future__ import annotations

from approvals.notify.base import Event, Notifier
from executions.broadcast import PROPOSALS_GROUP, broadcast


class ConsoleNotifier(Notifier):
    """Live notices on every reviewer's open console: one channel message per batch.

    A burst of proposals is one message (one row of the embedded channel
    layer, one render per open console) instead of one per event; each
    console shows, in order, the notices its reviewer wants
    (``approvals.review.consumers.QueueConsumer.notifications``).
    """

    def send(self, event: Event) -> None:
        self.send_all([event])

    def send_all(self, events: list[Event]) -> None:
        broadcast(
            PROPOSALS_GROUP,
            {"type": "notifications", "events": [event.as_dict() for event in events]},
        )
