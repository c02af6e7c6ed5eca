"""Linking a Slack account to an Airlock reviewer, proven from both sides.

The reviewer, signed in to Airlock, asks their profile for a one-time code
(shown once, stored hashed, good for ten minutes) and types
``/airlock link CODE`` in Slack. Slack signs that request with the user id it
comes from, so the link joins the Airlock account that made the code to the
Slack account that typed it: nobody can link a Slack user they are not, nor
an Airlock account they cannot sign in to.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from approvals.notify.models import ReviewerPreferences
from audit.services import actor_label, record

ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"  # no 0/O, 1/I: codes are typed by hand
CODE_LENGTH = 8
CODE_MINUTES = 10
USAGE = "Usage: `/airlock link CODE` (the code is on your Airlock profile), or `/airlock unlink`."


def profile_url() -> str:
    return settings.SITE_URL + reverse("console:profile")


def how_to_link() -> str:
    return (
        "Your Slack account is not linked to an Airlock reviewer yet. Open your profile "
        f"({profile_url()}), get a link code, and type `/airlock link CODE` here."
    )


def _digest(code: str) -> str:
    normal = code.upper().replace("-", "").replace(" ", "")
    return hashlib.sha256(normal.encode()).hexdigest()


def new_code(user) -> str:
    """A fresh code for ``user`` (the previous one stops working), shown once."""
    code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
    preferences, _ = ReviewerPreferences.objects.get_or_create(user=user)
    preferences.link_code_hash = _digest(code)
    preferences.link_code_expires_at = timezone.now() + timedelta(minutes=CODE_MINUTES)
    preferences.save(update_fields=["link_code_hash", "link_code_expires_at", "updated_at"])
    return f"{code[:4]}-{code[4:]}"


def reviewer_for(team_id: str, user_id: str):
    """The Airlock account linked to this Slack user, if any (and still active)."""
    if not user_id:
        return None
    found = (
        ReviewerPreferences.objects.select_related("user")
        .filter(slack_team_id=team_id, slack_user_id=user_id)
        .first()
    )
    return found.user if found and found.user.is_active else None


def command(team_id: str, user_id: str, text: str) -> str:
    """The answer to ``/airlock …``."""
    words = text.split()
    if len(words) == 2 and words[0].lower() == "link":
        return link(team_id, user_id, words[1])
    if [word.lower() for word in words] == ["unlink"]:
        return unlink_slack_user(team_id, user_id)
    return USAGE


def link(team_id: str, user_id: str, code: str) -> str:
    now = timezone.now()
    with transaction.atomic():
        preferences = (
            ReviewerPreferences.objects.select_related("user")
            .filter(link_code_hash=_digest(code), link_code_expires_at__gt=now)
            .first()
        )
        if preferences is None or not user_id:
            return (
                f"That code is unknown or expired. Get a new one from your profile: {profile_url()}"
            )
        # A Slack user decides as one reviewer: a new link replaces an older one.
        ReviewerPreferences.objects.filter(slack_team_id=team_id, slack_user_id=user_id).exclude(
            pk=preferences.pk
        ).update(slack_team_id="", slack_user_id="", slack_linked_at=None)
        preferences.slack_team_id, preferences.slack_user_id = team_id, user_id
        preferences.slack_linked_at = now
        preferences.link_code_hash, preferences.link_code_expires_at = "", None
        preferences.save()
        person = preferences.user
        record(actor_label(person), "slack.linked", person, slack_user=user_id, slack_team=team_id)
    return f"Linked: from Slack you review as *{person.get_username()}* in Airlock."


def unlink_slack_user(team_id: str, user_id: str) -> str:
    person = reviewer_for(team_id, user_id)
    if person is None:
        return "This Slack account is not linked to Airlock."
    unlink(person)
    return f"Unlinked: this Slack account no longer reviews as *{person.get_username()}*."


def unlink(person) -> bool:
    """Forget the person's Slack account; False when none was linked."""
    with transaction.atomic():
        unlinked = (
            ReviewerPreferences.objects.filter(user=person)
            .exclude(slack_user_id="")
            .update(slack_team_id="", slack_user_id="", slack_linked_at=None)
        )
        if unlinked:
            record(actor_label(person), "slack.unlinked", person)
    return bool(unlinked)
