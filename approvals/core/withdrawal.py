"""An agent takes back a proposal it no longer needs: pending → withdrawn, a final state.

Only the proposing agent may; to anyone else the proposal does not exist
(404), so withdrawing cannot probe other agents' ids. Once decided it is a
conflict (409). Nothing runs; open consoles, Slack and mail are told.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.core import traces
from approvals.core.outbox import notify
from approvals.core.services import ProposalError, announce
from approvals.guard import admission
from approvals.models import Agent, Proposal
from audit.services import actor_label, record


def withdraw(agent: Agent, proposal_id: int, reason: str = "") -> Proposal:
    """The agent's pending proposal, withdrawn; ``ProposalError`` not_found or conflict."""
    with transaction.atomic():
        proposal = (
            Proposal.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(pk=proposal_id, agent=agent)
            .first()
        )
        if proposal is None:
            raise ProposalError("not_found", f"proposal {proposal_id} does not exist")
        if proposal.status != ProposalStatus.PENDING:
            raise ProposalError(
                "conflict",
                f"proposal {proposal.pk} is {proposal.status}: only a pending one can be withdrawn",
            )
        now = timezone.now()
        Proposal.objects.filter(pk=proposal.pk).update(
            status=ProposalStatus.WITHDRAWN, decided_at=now, withdraw_reason=reason[:500]
        )
        proposal.status, proposal.decided_at = ProposalStatus.WITHDRAWN, now
        proposal.withdraw_reason = reason[:500]
        record(actor_label(agent), "proposal.withdrawn", proposal, reason=reason)
        notify("withdrawn", proposal)
        traces.reviewed(proposal)
        announce(proposal)
    admission.forget(agent)
    return proposal
