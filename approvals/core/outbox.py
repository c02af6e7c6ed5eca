"""The notifications' outbox: each event is written in the transaction of the change it tells of.

``notify(kind, proposal)`` records the event beside the change, so no change
commits untold and no event tells of a change that rolled back. After the
commit ``events_recorded`` is sent; the notification channels
(``approvals.notify``) listen to it and drain the outbox on a worker. The
core never imports them: they read what it wrote.
"""

from __future__ import annotations

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from approvals.models import PendingNotification, Proposal
from infrastructure.prepared import PreparedInsert

# Sent after a commit that recorded events (no arguments): the outbox has something to tell.
events_recorded = Signal()

_outbox = PreparedInsert(PendingNotification)


def notify(kind: str, proposal: Proposal) -> None:
    """Record the event with the change it tells of; it is told after the commit."""
    _outbox.create(kind=kind, proposal_id=proposal.pk, created_at=timezone.now())
    transaction.on_commit(_recorded)


def _recorded() -> None:
    events_recorded.send(sender=PendingNotification)
