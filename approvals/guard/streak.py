"""Rejections in a row: when an agent has had ``pause_after_rejections`` of them, it pauses.

"In a row" runs over the agent's proposals that reviewers approved or
rejected, newest first, since an admin last resumed it: an approval ends the
streak; proposals still waiting, withdrawn, expired or decided by policy
neither count nor end it.
"""

from __future__ import annotations

from approvals.choices import ProposalStatus
from approvals.models import Agent, Proposal
from approvals.policy.rules import Policy

DECIDED = (ProposalStatus.APPROVED, ProposalStatus.REJECTED)


def rejections_in_a_row(agent: Agent, limit: int) -> int:
    """How many of the agent's latest decided proposals were rejected in a row (≤ limit)."""
    rows = Proposal.objects.filter(agent=agent, status__in=DECIDED).order_by("-created_at")
    if agent.resumed_at is not None:
        rows = rows.filter(created_at__gt=agent.resumed_at)
    streak = 0
    for status in rows.values_list("status", flat=True)[:limit]:
        if status != ProposalStatus.REJECTED:
            break
        streak += 1
    return streak


def pauses(agent: Agent, policy: Policy) -> bool:
    """Whether the agent's rejections in a row have reached its ``pause_after_rejections``."""
    limit = policy.pause_after_rejections
    return bool(limit) and agent.paused_at is None and rejections_in_a_row(agent, limit) >= limit
