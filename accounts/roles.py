"""Who is who: agents propose, reviewers decide, admins (superusers) edit policy."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Q

from audit.services import record

REVIEWERS_GROUP = "reviewers"
# The identity provider's groups a person was in at their last sign-in, kept as Django
# groups of this prefix: review teams name them (``sso_groups``).
PROVIDER_GROUP_PREFIX = "idp:"


def is_agent(user: object) -> bool:
    return bool(getattr(user, "is_agent", False))


def is_reviewer(user: object) -> bool:
    if not getattr(user, "is_authenticated", False) or is_agent(user):
        return False
    if user.is_superuser:
        return True
    return user.groups.filter(name=REVIEWERS_GROUP).exists()


def is_admin(user: object) -> bool:
    return bool(
        getattr(user, "is_authenticated", False)
        and not is_agent(user)
        and getattr(user, "is_superuser", False)
    )


def reviewers():
    """Everyone who may review: active members of the reviewers group, and admins."""
    people = Q(is_superuser=True) | Q(groups__name=REVIEWERS_GROUP)
    return get_user_model().objects.filter(people, is_active=True).distinct()


def set_review_rights(user, allowed: bool, actor: str) -> None:
    """Grant or withdraw a user's review rights (membership of the reviewers group), audited."""
    group, _ = Group.objects.get_or_create(name=REVIEWERS_GROUP)
    if allowed:
        user.groups.add(group)
    else:
        user.groups.remove(group)
    record(actor, "user.review_granted" if allowed else "user.review_withdrawn", user)


def provider_groups(user) -> set[str]:
    """The identity provider's groups ``user`` was in at their last sign-in through it."""
    names = user.groups.filter(name__startswith=PROVIDER_GROUP_PREFIX).values_list(
        "name", flat=True
    )
    return {name.removeprefix(PROVIDER_GROUP_PREFIX) for name in names}


def set_provider_groups(user, groups: list[str], actor: str) -> None:
    """Make ``user``'s provider groups exactly ``groups`` (at each sign-in), audited when changed."""
    # Django's group names hold 150 characters: a longer provider group cannot name a team.
    wanted = {group for group in groups if len(PROVIDER_GROUP_PREFIX + group) <= 150}
    held = provider_groups(user)
    added, removed = sorted(wanted - held), sorted(held - wanted)
    for name in added:
        group, _ = Group.objects.get_or_create(name=PROVIDER_GROUP_PREFIX + name)
        user.groups.add(group)
    if removed:
        gone = [PROVIDER_GROUP_PREFIX + name for name in removed]
        user.groups.remove(*Group.objects.filter(name__in=gone))
    if added or removed:
        record(actor, "user.provider_groups", user, added=added, removed=removed)
