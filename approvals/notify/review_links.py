"""One-tap review from a mail: a signed link good for one decision by one reviewer.

The link carries, signed with the install's key, the reviewer, the proposal,
the hash of the proposal's action and parameters, the proposal's expiry and a
nonce; the nonce's row (``ReviewLink``) makes it single-use. Opening the link
only shows the proposal (mail scanners open links): the decision takes a tap,
a POST with the page's CSRF token, and goes through ``services.decide`` like
the console's.

What a stolen link allows: one decision, as the reviewer it was mailed to, on
that one proposal, before it expires, while its code is what the reviewer was
sent, and only if that reviewer still has review rights and has not decided
yet. It opens no session and shows nothing else.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

from django.conf import settings
from django.core import signing
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from accounts.roles import is_reviewer
from accounts.stepup import Authentication
from approvals.core import services
from approvals.models import Proposal
from approvals.notify.models import ReviewLink
from executions.services import command_hash

SALT = "airlock.review-link"
EMAIL_LINK = Authentication(via="email link")  # a link carries no second factor
FIELDS = {"r": int, "p": int, "h": str, "e": int, "n": str}


class LinkRefused(Exception):
    """A link that cannot be used; ``status`` is the HTTP status the page answers with."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def proposal_hash(proposal: Proposal) -> str:
    return command_hash(proposal.action, proposal.parameters)


def mint(reviewer, proposal: Proposal) -> ReviewLink:
    """A new single-use link for ``reviewer`` to decide ``proposal`` (which must be pending)."""
    return ReviewLink.objects.create(
        nonce=secrets.token_urlsafe(16),
        reviewer=reviewer,
        proposal=proposal,
        command_hash=proposal_hash(proposal),
        expires_at=proposal.expires_at,
    )


def token(link: ReviewLink) -> str:
    payload = {
        "r": link.reviewer_id,
        "p": link.proposal_id,
        "h": link.command_hash,
        "e": int(link.expires_at.timestamp()),
        "n": link.nonce,
    }
    # No timestamp in the signature: the link can be rebuilt from its row when a
    # mail is retried, so the delivery log never has to keep it.
    return signing.Signer(salt=SALT).sign_object(payload, compress=True)


def url(link: ReviewLink) -> str:
    return settings.SITE_URL + reverse("console:review-link", args=[token(link)])


def mail_paragraph(link: ReviewLink) -> str:
    """What a review mail says about its link (added when it is sent, never logged)."""
    return (
        "\nReview it from your phone: this link is for you alone, works once, "
        f"and expires with the proposal.\n{url(link)}\n"
    )


def _payload(text: str) -> dict:
    try:
        payload = signing.Signer(salt=SALT).unsign_object(text)
    except (signing.BadSignature, ValueError):
        raise LinkRefused(404, "This review link is not valid.") from None
    valid = isinstance(payload, dict) and all(
        isinstance(payload.get(key), kind) for key, kind in FIELDS.items()
    )
    if not valid:
        raise LinkRefused(404, "This review link is not valid.")
    return payload


def open_link(text: str, user=None, now: datetime | None = None) -> ReviewLink:
    """The link's row if it may still decide; ``LinkRefused`` with the reason otherwise."""
    payload = _payload(text)
    now = now or timezone.now()
    link = (
        ReviewLink.objects.select_related("reviewer", "proposal__agent", "proposal__execution")
        .filter(nonce=payload["n"], reviewer_id=payload["r"], proposal_id=payload["p"])
        .first()
    )
    if link is None:
        raise LinkRefused(404, "This review link is not valid.")
    if link.used_at is not None:
        raise LinkRefused(410, "This link has been used: each one works once.")
    if now >= datetime.fromtimestamp(payload["e"], UTC) or now >= link.expires_at:
        raise LinkRefused(410, "This link expired with the proposal.")
    if payload["h"] != proposal_hash(link.proposal) or link.command_hash != payload["h"]:
        raise LinkRefused(
            409, "The proposal is not what this link was sent for; review it in the console."
        )
    _check_person(link, user)
    return link


def _check_person(link: ReviewLink, user) -> None:
    reviewer = link.reviewer
    signed_in = getattr(user, "is_authenticated", False)
    if signed_in and user.pk != reviewer.pk:
        raise LinkRefused(
            403,
            f"This link was sent to {reviewer.get_username()}; you are signed in as "
            f"{user.get_username()}.",
        )
    if not reviewer.is_active or not is_reviewer(reviewer):
        raise LinkRefused(403, f"{reviewer.get_username()} can no longer review proposals.")


def decide(text: str, kind: str, comment: str, user=None) -> Proposal:
    """Use the link for its one decision; nothing is marked used unless the decision is made."""
    link = open_link(text, user)
    with transaction.atomic():
        used = ReviewLink.objects.filter(pk=link.pk, used_at__isnull=True).update(
            used_at=timezone.now()
        )
        if not used:
            raise LinkRefused(410, "This link has been used: each one works once.")
        return services.decide(
            link.proposal_id, link.reviewer, kind, comment, authentication=EMAIL_LINK
        )
