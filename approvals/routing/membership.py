"""Who is in a team: its ``members`` by username, and whoever the identity provider put in one
of its ``sso_groups`` at their last sign-in. Only reviewers and admins decide for a team."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Q

from accounts.roles import PROVIDER_GROUP_PREFIX, provider_groups, reviewers
from approvals.routing.document import Team


def _in(team: Team) -> Q:
    groups = [PROVIDER_GROUP_PREFIX + group for group in team.sso_groups]
    return Q(username__in=team.members) | Q(groups__name__in=groups)


def members(team: Team):
    """The active reviewers and admins in ``team``, by username."""
    return reviewers().filter(_in(team)).distinct().order_by("username")


def is_member(user, team: Team | None) -> bool:
    return team is not None and in_any(user, {team.name: team}, (team.name,))


def in_any(user, teams: dict[str, Team], names) -> bool:
    """Whether ``user`` is in one of the teams ``names`` (the provider's groups read once)."""
    wanted = [teams[name] for name in names if name in teams]
    if not wanted:
        return False
    username, groups = user.get_username(), provider_groups(user)
    return any(username in team.members or groups & set(team.sso_groups) for team in wanted)


def sources(team: Team) -> list[tuple[str, str, bool]]:
    """(username, where the membership comes from, may decide) for everyone in ``team``:
    ``members`` of the document, or ``group X`` of the provider."""
    deciding = set(members(team).values_list("username", flat=True))
    found: dict[str, list[str]] = {name: ["the policy's members"] for name in team.members}
    users = get_user_model().objects.filter(_in(team)).distinct().prefetch_related("groups")
    for user in users:
        for group in sorted(provider_groups(user) & set(team.sso_groups)):
            found.setdefault(user.get_username(), []).append(f"provider group {group}")
    return [(name, ", ".join(where), name in deciding) for name, where in sorted(found.items())]
