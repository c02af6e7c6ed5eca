"""A silent team's proposals escalated: once per proposal, by the periodic sweep.

When a proposal's route names ``escalate_after_minutes`` and, that long after
it was made, some required team has not given its approvals, the
``escalate_to`` teams are told (their channel, their mail) and may give the
missing approvals in its place (``approvals.routing.reviews``). One
conditional update per proposal makes it happen exactly once, however many
beats or workers run it.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.core.outbox import notify
from approvals.models import Proposal
from approvals.routing.reviews import standing
from audit.services import record
from executions.broadcast import PROPOSALS_GROUP, broadcast_on_commit


def escalate_due(now=None) -> int:
    """Escalate the pending proposals whose route's time is up; how many were."""
    now = now or timezone.now()
    due = Proposal.objects.pending().filter(escalate_at__lte=now, escalated_at__isnull=True)
    escalated = 0
    for proposal in due.only("pk", "routing", "escalated_at"):
        state = standing(proposal)
        with transaction.atomic():
            won = Proposal.objects.filter(
                pk=proposal.pk, status=ProposalStatus.PENDING, escalated_at__isnull=True
            ).update(escalated_at=now)
            if not won:
                continue  # another beat did it, or it was decided meanwhile
            if state is None or not state.short:
                continue  # its teams answered in time: nothing to hand on
            proposal.escalated_at = now
            record(
                "system",
                "proposal.escalated",
                proposal,
                silent=state.short,
                escalate_to=state.routing["escalate_to"],
            )
            notify("escalated", proposal)
            broadcast_on_commit(
                PROPOSALS_GROUP, {"type": "proposal.changed", "proposal_id": proposal.pk}
            )
            escalated += 1
    return escalated
