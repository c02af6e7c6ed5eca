"""A person's signed-in sessions, as django-allauth tracks them, and ending them all."""

from __future__ import annotations

from allauth.usersessions.models import UserSession


def listed(user) -> list[UserSession]:
    """The person's sessions that still exist, newest first."""
    found = UserSession.objects.purge_and_list(user)
    return sorted(found, key=lambda session: session.created_at, reverse=True)


def end_all(user) -> int:
    """Sign the person out everywhere; how many sessions ended."""
    ended = 0
    for session in UserSession.objects.filter(user=user):
        session.end()
        ended += 1
    return ended
