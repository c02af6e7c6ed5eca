"""Pausing agents: after rejections in a row (policy), by an admin, or all at once.

A paused agent's proposals are refused (``approvals.guard.admission``) until an
admin resumes it; what it already proposed stays for reviewers to decide. Every
pause and resume is audited with who and why; an automatic pause is told to
reviewers and admins like a decision (the outbox's ``agent_paused``), and every
open console shows the change at once.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from approvals.core.outbox import notify
from approvals.guard import streak
from approvals.models import Agent, Proposal
from approvals.policy.rules import Policy
from audit.services import record
from executions.broadcast import PROPOSALS_GROUP, broadcast_on_commit

POLICY = "policy"  # paused_by of an automatic pause


class PauseError(Exception):
    """A pause or resume that cannot be done: ``kind`` is the API's error type."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind
        self.message = message


def pause(names: list[str] | None, actor: str, reason: str, **audit) -> list[str]:
    """Pause the named agents (None: every active agent not paused yet: the kill switch).
    Returns the names paused now; those already paused are left as they were."""
    return _change(names, actor, reason, pausing=True, **audit)


def resume(names: list[str] | None, actor: str, reason: str, **audit) -> list[str]:
    """Resume the named agents (None: every paused agent); their streak starts anew."""
    return _change(names, actor, reason, pausing=False, **audit)


def _change(names, actor: str, reason: str, *, pausing: bool, **audit) -> list[str]:
    reason = reason.strip()[:500]
    now = timezone.now()
    with transaction.atomic():
        agents = Agent.objects.select_for_update(no_key=True).filter(is_active=True)
        if names is not None:
            agents = agents.filter(name__in=names)
            unknown = sorted(set(names) - set(agents.values_list("name", flat=True)))
            if unknown:
                raise PauseError("not_found", f"no such agent: {', '.join(unknown)}")
        agents = agents.filter(paused_at__isnull=pausing).order_by("name")
        changed = list(agents)
        for agent in changed:
            if pausing:
                agent.paused_at, agent.paused_by, agent.pause_reason = now, actor, reason
            else:
                agent.paused_at, agent.paused_by, agent.pause_reason = None, "", ""
                agent.resumed_at = now
            record(
                actor,
                "agent.paused" if pausing else "agent.resumed",
                agent,
                reason=reason,
                every_agent=names is None,
                **audit,
            )
        fields = ["paused_at", "paused_by", "pause_reason"] + ([] if pausing else ["resumed_at"])
        Agent.objects.bulk_update(changed, fields)
        if changed:
            _announce([agent.name for agent in changed], pausing)
    return [agent.name for agent in changed]


def after_rejection(proposal: Proposal, policy: Policy) -> bool:
    """Inside a rejection's transaction: pause its agent if that made its streak long enough."""
    agent = Agent.objects.select_for_update(no_key=True).get(pk=proposal.agent_id)
    if not streak.pauses(agent, policy.for_agent(agent.name)):
        return False
    count = policy.for_agent(agent.name).pause_after_rejections
    reason = (
        f"{count} rejections in a row (pause_after_rejections), the last proposal {proposal.pk}"
    )
    Agent.objects.filter(pk=agent.pk).update(
        paused_at=timezone.now(), paused_by=POLICY, pause_reason=reason
    )
    record("system", "agent.paused", agent, reason=reason, proposal=proposal.pk, every_agent=False)
    notify("agent_paused", proposal)
    _announce([agent.name], True)
    return True


def _announce(names: list[str], paused: bool) -> None:
    broadcast_on_commit(
        PROPOSALS_GROUP, {"type": "agents.changed", "agents": names, "paused": paused}
    )
