from accounts.roles import is_admin, is_reviewer


def shell(request) -> dict:
    """What every console page shows: the person's role, the sandbox in force, what waits."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    from approvals.models import Proposal
    from executions.sandboxes.status import sandbox_status

    reviewer = getattr(request, "console_is_reviewer", None)
    if reviewer is None:
        reviewer = is_reviewer(user)
    return {
        "is_reviewer": reviewer,
        "is_admin": is_admin(user),
        "pending_count": Proposal.objects.pending().count() if reviewer else 0,
        "sandbox": sandbox_status(),
    }
