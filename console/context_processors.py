from accounts.roles import is_admin, is_reviewer


def shell(request) -> dict:
    """What every console page shows: the person's role, the sandbox in force, what waits
    (all pending, and what waits for this reviewer's decision: the nav badge and the tab's
    title), and (to reviewers) the agents paused: a query only on the pages that show them."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    from approvals.core.services import awaiting
    from approvals.models import Agent, Proposal
    from executions.sandboxes.status import sandbox_status

    reviewer = getattr(request, "console_is_reviewer", None)
    if reviewer is None:
        reviewer = is_reviewer(user)
    return {
        "is_reviewer": reviewer,
        "is_admin": is_admin(user),
        "pending_count": Proposal.objects.pending().count() if reviewer else 0,
        "awaiting_count": len(awaiting(user)) if reviewer else 0,
        "sandbox": sandbox_status(),
        # Lazy: evaluated (one query) by the pages that show the banner, not the others.
        "paused_agents": (
            Agent.objects.filter(is_active=True, paused_at__isnull=False)
            .order_by("name")
            .only("name", "paused_by", "pause_reason")
            if reviewer
            else ()
        ),
    }
