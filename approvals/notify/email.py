"""``EmailNotifier``: a mail per person, as each prefers, each one a row of the delivery log."""

from __future__ import annotations

import smtplib

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import EmailMessage
from django.utils import timezone

from accounts.roles import is_admin, reviewers
from approvals.core.services import may_decide
from approvals.models import Proposal
from approvals.notify import deliveries, review_links
from approvals.notify.base import REVIEW_KINDS, Event, Notifier
from approvals.notify.models import Delivery, preferences_of
from approvals.policy.rules import current_policy
from approvals.routing.membership import in_any


class EmailNotifier(Notifier):
    """A mail per person: reviewers, and the agent's owner for decisions, as each prefers.

    While a proposal waits, a reviewer's mail carries a one-tap review link bound
    to them (``approvals.notify.review_links``). Each mail is a row of the
    delivery log, retried when the mail server refuses it.
    """

    def send(self, event: Event) -> None:
        self.send_all([event])

    def send_all(self, events: list[Event]) -> None:
        audiences: dict[tuple[str, str], list] = {}  # asked once per batch: who, and as they prefer
        for event in events:
            audience = self.audience(event)
            if audience not in audiences:
                people = self.recipients(event)
                preferences = preferences_of(people)
                audiences[audience] = [(user, preferences[user.pk]) for user in people]
        mailed = [event for event in events if audiences[self.audience(event)]]
        if not mailed:
            return  # nobody to mail: no proposal to read
        proposals = Proposal.objects.select_related("agent").in_bulk(
            {event.proposal_id for event in mailed}
        )
        self.each(
            mailed,
            lambda event: self._send(
                event, proposals[event.proposal_id], audiences[self.audience(event)]
            ),
        )

    @staticmethod
    def audience(event: Event) -> tuple[str, str]:
        """Who hears of it: the agent's owners of a decision, reviewers of the rest (of a
        routed proposal's review, those its route lets decide, and its teams' addresses)."""
        return ("owners", event.agent) if event.kind == "decided" else ("reviewers", "")

    @staticmethod
    def _send(event: Event, proposal: Proposal, audience: list) -> None:
        now = timezone.now()
        routed = bool(proposal.routing) and event.kind in REVIEW_KINDS | {"break_glass"}
        for user, preferences in audience:
            if not preferences.wants("email", event.risk, now):
                continue
            if routed and not _concerned(user, proposal, event):
                continue
            link = None
            if event.kind in REVIEW_KINDS and may_decide(user, proposal):
                link = review_links.mint(user, proposal)
            _mail(event, proposal, user.email, recipient=user, link=link)
        if routed:
            teams = current_policy().teams
            for address in sorted({teams[t].email for t in event.teams if t in teams} - {""}):
                _mail(event, proposal, address)

    @staticmethod
    def recipients(event: Event) -> list:
        if event.kind == "decided":
            people = get_user_model().objects.filter(agents__name=event.agent, is_active=True)
        else:
            people = reviewers()
        return list(people.exclude(email="").distinct().order_by("email"))


def _mail(event: Event, proposal: Proposal, address: str, recipient=None, link=None) -> None:
    """One mail of the delivery log: to a person (with their review link), or a team's address."""
    deliveries.record(
        Delivery,
        send_mail,
        channel=Delivery.Channel.EMAIL,
        operation=Delivery.Operation.SEND,
        event=event.kind,
        proposal=proposal,
        recipient=recipient,
        target=address,
        subject=event.subject,
        body=event.text,
        review_link=link,
    )


def _concerned(user, proposal: Proposal, event: Event) -> bool:
    """Of a routed proposal: those who may decide it hear of its review (of an escalation,
    only those of the teams it escalates to); of a break-glass, every admin and every member
    of its teams."""
    teams = current_policy().teams
    if event.kind == "escalated":
        return may_decide(user, proposal) and in_any(user, teams, event.teams)
    if event.kind != "break_glass":
        return may_decide(user, proposal)
    return is_admin(user) or in_any(user, teams, event.teams)


def send_mail(delivery: Delivery) -> None:
    """One mail to one address; its review link, if any, is added now and never stored."""
    text = delivery.body
    if delivery.review_link is not None:
        text += review_links.mail_paragraph(delivery.review_link)
    message = EmailMessage(delivery.subject, text, settings.DEFAULT_FROM_EMAIL, [delivery.target])
    try:
        message.send()
    except (smtplib.SMTPException, OSError) as exc:
        raise deliveries.DeliveryFailed(f"{type(exc).__name__}: {exc}") from None
