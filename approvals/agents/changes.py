"""What could give a waiting list call a row: the changes since a point of the audit trail.

Every change of a proposal (and of the policy) appends to the audit trail in
the change's own transaction, so where the trail ends (``marker``) marks a
moment, and the events past it (``changes_since``) say which proposals changed
since. A waiting list call says which changes it wants (``Interest``); the
long-poll watcher (``waiting``) reads once for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import close_old_connections, connection
from django.db.models import Max

from approvals.models import Proposal
from audit.models import AuditEvent

CHANGES_PER_READ = 1000  # audit events a tick reads for the list calls, at most


@dataclass(frozen=True)
class Interest:
    """What a waiting list call could get a row from: a proposal of this agent (None: any)
    that reached one of these statuses (None: any). A wider wake is harmless: the view
    reads again and waits on."""

    agent_id: int | None
    statuses: frozenset[str] | None

    def wants(self, agent_id: int | None, status: str | None) -> bool:
        if status is None:  # a change of anything (the policy: teams, routes)
            return True
        return (self.agent_id is None or agent_id == self.agent_id) and (
            self.statuses is None or status in self.statuses
        )


def marker() -> int:
    """Where the audit trail ends: every change of a proposal (and of the policy) moves it."""
    return AuditEvent.objects.aggregate(end=Max("seq"))["end"] or 0


def changes_since(low: int) -> tuple[int, list[tuple[int, int | None, str | None]]]:
    """The audit trail's end past ``low`` and, for each change since that a list could see,
    ``(seq, agent id, status now)`` of its proposal (``None, None``: the policy changed).
    One query when nothing changed, two when something did."""
    close_old_connections()  # a connection the database dropped is replaced, not reused
    try:
        events = list(
            AuditEvent.objects.filter(seq__gt=low)
            .order_by("seq")
            .values_list("seq", "object_type", "object_id", "verb")[:CHANGES_PER_READ]
        )
        if not events:
            return low, []
        ids = {int(pk) for _, kind, pk, _ in events if kind == "proposal" and pk.isdigit()}
        now = {pk: rest for pk, *rest in Proposal.objects.filter(pk__in=ids).values_list(
            "pk", "agent_id", "status"
        )} if ids else {}  # fmt: skip
        found = []
        for seq, kind, pk, verb in events:
            if kind == "proposal" and pk.isdigit() and int(pk) in now:
                found.append((seq, *now[int(pk)]))
            elif verb.startswith("policy."):
                found.append((seq, None, None))
        return events[-1][0], found
    except Exception:
        connection.close()
        raise
