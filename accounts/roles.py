"""Who is who: agents propose, reviewers decide, admins (superusers) edit policy."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db.models import Q

from audit.services import record

REVIEWERS_GROUP = "reviewers"


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
