"""A proposal's wait for review in its trace: one span from its making to the end of the
wait (approved, rejected, expired or withdrawn), each reviewer's decision an event of it.

The span is made once the transaction that ended the wait commits, as the child of the
context the proposal was made in (``Proposal.trace_parent``): in whichever process
decided, however many hours later. A decision's event says what was decided, by whom,
for which team; never the comment. Nothing is read while tracing is off.
"""

from __future__ import annotations

from django.db import transaction

from approvals.choices import DecisionKind
from approvals.models import Decision, Proposal
from infrastructure import tracing

DECIDED = {DecisionKind.APPROVE: "approved", DecisionKind.REJECT: "rejected"}


def reviewed(proposal: Proposal) -> None:
    """The span of ``proposal``'s wait for review, which has just ended (after the commit)."""
    if tracing.enabled():
        transaction.on_commit(lambda: _review_span(proposal))


def _review_span(proposal: Proposal) -> None:
    decisions = (
        Decision.objects.filter(proposal=proposal)
        .select_related("reviewer")
        .order_by("created_at", "pk")
    )
    with tracing.span(
        "proposal.review",
        parent=proposal.trace_parent or "",
        start=proposal.created_at,
        proposal_id=proposal.pk,
        action=proposal.action,
        agent=proposal.agent.name,
        status=proposal.status,
        approvals=proposal.approvals_count,
        required_approvals=proposal.required_approvals,
    ) as span:
        for decision in decisions:
            span.event(
                "decision",
                at=decision.created_at,
                decision=DECIDED.get(decision.kind, decision.kind),
                reviewer=decision.reviewer.get_username(),
                team=decision.team or None,
                break_glass=decision.break_glass or None,
            )
