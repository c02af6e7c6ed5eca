"""What telling people keeps: webhooks, the delivery log and its retries, preferences, links, Slack messages."""

from __future__ import annotations

from datetime import datetime, time
from typing import ClassVar
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import models

from approvals.choices import RISK_BANDS, risk_band
from approvals.models import Proposal
from approvals.notify.base import REVIEW_KINDS


class Webhook(models.Model):
    """An HTTP endpoint notified of proposal events, signed with its secret."""

    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500)
    secret = models.CharField(max_length=200, help_text="HMAC-SHA256 key for X-Airlock-Signature")
    events = models.JSONField(default=list, blank=True, help_text="event kinds; empty = all")
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name

    def wants(self, kind: str) -> bool:
        return self.is_active and (not self.events or kind in self.events)


class Attempts(models.Model):
    """What every delivery log keeps of a message's attempts: state, count, last error, when next.

    One retry state for every channel; ``approvals.notify.deliveries`` is the one place that moves it.
    """

    class State(models.TextChoices):
        PENDING = "pending"  # not delivered yet; next_attempt_at says when it is tried again
        DELIVERED = "delivered"  # the endpoint answered 2xx
        FAILED = "failed"  # every attempt failed; not tried again

    event = models.CharField(max_length=50)
    proposal = models.ForeignKey(Proposal, null=True, blank=True, on_delete=models.SET_NULL)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    error = models.TextField(blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    # What an attempt reads besides the row (select_related), per log.
    attempt_related: ClassVar[tuple[str, ...]] = ()

    class Meta:
        abstract = True
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]


class WebhookDelivery(Attempts):
    """One event sent to one webhook, with every attempt's outcome: the delivery log."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    body = models.TextField()
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)

    attempt_related = ("webhook",)

    class Meta(Attempts.Meta):
        pass

    def __str__(self) -> str:
        return f"{self.event} → {self.webhook} ({self.state})"


def every_band() -> list[str]:
    return list(RISK_BANDS)


class ReviewerPreferences(models.Model):
    """Where and when one person hears about proposals, and the Slack account they linked.

    A person without a row has the defaults: console and email, every risk band,
    no quiet hours, no Slack.
    """

    CHANNELS = ("console", "email", "slack")

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_preferences"
    )
    console = models.BooleanField(default=True)  # notices at the top of an open console
    email = models.BooleanField(default=True)
    slack = models.BooleanField(default=False)  # direct messages from the bot; needs a link
    bands = models.JSONField(default=every_band)  # the risk bands worth telling about
    quiet_from = models.TimeField(null=True, blank=True)
    quiet_until = models.TimeField(null=True, blank=True)
    time_zone = models.CharField(max_length=64, blank=True)  # IANA name; blank = TIME_ZONE
    slack_team_id = models.CharField(max_length=32, blank=True)
    slack_user_id = models.CharField(max_length=32, blank=True)
    slack_linked_at = models.DateTimeField(null=True, blank=True)
    # The one-time code typed into Slack to link the account, stored hashed.
    link_code_hash = models.CharField(max_length=64, blank=True, db_index=True)
    link_code_expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["slack_team_id", "slack_user_id"],
                condition=~models.Q(slack_user_id=""),
                name="one_reviewer_per_slack_user",
            ),
        ]

    def __str__(self) -> str:
        return f"preferences of {self.user}"

    @property
    def slack_linked(self) -> bool:
        return bool(self.slack_user_id)

    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.time_zone or settings.TIME_ZONE)

    def is_quiet_at(self, when: datetime) -> bool:
        """Within the quiet hours, in the person's time zone (a span may cross midnight)."""
        start, end = self.quiet_from, self.quiet_until
        if start is None or end is None or start == end:
            return False
        local: time = when.astimezone(self.zone()).time()
        return start <= local < end if start < end else (local >= start or local < end)

    def wants(self, channel: str, risk_score: int, when: datetime) -> bool:
        """Whether a notice about a proposal of this risk should reach them on ``channel`` now."""
        if channel == "slack" and not self.slack_linked:
            return False
        return (
            bool(getattr(self, channel))
            and risk_band(risk_score) in self.bands
            and not self.is_quiet_at(when)
        )


def preferences_for(user) -> ReviewerPreferences:
    """The person's preferences as saved now, or the defaults (unsaved) when they set none."""
    return preferences_of([user])[user.pk]


def preferences_of(people) -> dict[int, ReviewerPreferences]:
    """``preferences_for`` of each person, by primary key, in one query."""
    if not people:
        return {}
    saved = {found.user_id: found for found in ReviewerPreferences.objects.filter(user__in=people)}
    return {user.pk: saved.get(user.pk) or ReviewerPreferences(user_id=user.pk) for user in people}


class ReviewLink(models.Model):
    """A review link mailed to one reviewer for one proposal: good for one decision.

    The link itself is signed (``approvals.notify.review_links``); this row makes it
    single-use and records when it was used.
    """

    nonce = models.CharField(max_length=32, unique=True)
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_links"
    )
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="review_links")
    command_hash = models.CharField(max_length=64)  # of the proposal's action and parameters
    expires_at = models.DateTimeField()  # the proposal's expiry
    created_at = models.DateTimeField(auto_now_add=True)
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"review link of {self.reviewer} for proposal {self.proposal_id}"


class SlackMessage(models.Model):
    """A Slack message about a proposal, kept to update it in place as the proposal moves."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="slack_messages")
    event = models.CharField(max_length=50)  # what it was posted for: review_requested, notify_list
    channel = models.CharField(max_length=40)  # the channel id Slack answered with
    ts = models.CharField(max_length=32)  # the message's id within its channel
    recipient = models.ForeignKey(  # a direct message to this person; None for a channel post
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["channel", "ts"], name="one_row_per_slack_message")
        ]

    def __str__(self) -> str:
        return f"slack {self.channel}/{self.ts} for proposal {self.proposal_id}"

    @property
    def reviewable(self) -> bool:
        """Whether it carries Approve and Reject while the proposal waits."""
        return self.event in REVIEW_KINDS


class Delivery(Attempts):
    """One mail or Slack message to one person or channel, with every attempt's outcome.

    Webhooks keep their own log (``WebhookDelivery``); the console's delivery
    log shows both. A mail's ``body`` is kept without its review link: the log
    must not hold a credential.
    """

    class Channel(models.TextChoices):
        EMAIL = "email"
        SLACK = "slack"

    class Operation(models.TextChoices):
        SEND = "send"  # a mail
        POST = "post"  # a new Slack message
        UPDATE = "update"  # a Slack message brought up to date in place

    channel = models.CharField(max_length=10, choices=Channel.choices)
    operation = models.CharField(max_length=10, choices=Operation.choices)
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    target = models.CharField(max_length=254)  # a mail address, a Slack channel or user id
    subject = models.CharField(max_length=200, blank=True)
    body = models.TextField(blank=True)
    review_link = models.ForeignKey(
        ReviewLink, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    slack_message = models.ForeignKey(
        SlackMessage, null=True, blank=True, on_delete=models.SET_NULL, related_name="deliveries"
    )

    attempt_related = ("review_link", "slack_message")

    class Meta(Attempts.Meta):
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.channel} {self.operation} {self.event} → {self.target} ({self.state})"
