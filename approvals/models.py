from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, time
from fnmatch import fnmatchcase
from zoneinfo import ZoneInfo

from django.conf import settings
from django.db import models
from django.utils import timezone

from executions.models import Execution

from .choices import ACTIVE, RISK_BANDS, DecisionKind, ProposalStatus, Urgency, risk_band

TOKEN_PREFIX = "alk_"


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class Agent(models.Model):
    """A program that proposes actions; authenticates with a bearer token stored hashed."""

    name = models.CharField(max_length=100, unique=True)
    token_hash = models.CharField(max_length=64, unique=True)
    token_hint = models.CharField(max_length=12)  # first characters, to recognise a token
    capabilities = models.JSONField(default=list)  # action-name globs: "script.execute", "docker.*"
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="agents",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def set_token(self, token: str) -> None:
        self.token_hash = hash_token(token)
        self.token_hint = token[:8]

    def capability_for(self, action: str) -> str | None:
        """The first capability glob that grants ``action``, or None."""
        return next((glob for glob in self.capabilities if fnmatchcase(action, glob)), None)


class UserToken(models.Model):
    """A reviewer's personal API token (scripts, chat bots), stored hashed."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="tokens"
    )
    token_hash = models.CharField(max_length=64, unique=True)
    token_hint = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.token_hint}…"


class PolicyVersion(models.Model):
    """One immutable version of the policy; the newest is in force. Edits add a version."""

    version = models.PositiveIntegerField(unique=True)
    data = models.JSONField()
    comment = models.CharField(max_length=500, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"policy v{self.version}"


class ProposalQuerySet(models.QuerySet):
    def pending(self):
        return self.filter(status=ProposalStatus.PENDING)

    def review_queue(self):
        return self.pending().order_by("-risk_score", "created_at")

    def visible_to_agent(self, agent: Agent):
        return self.filter(agent=agent)


class Proposal(models.Model):
    """An action an agent asked to run, with its risk, the policy decision and its fate."""

    # Looked up through proposal_agent_recent (agent first): an index of its own
    # would be one more to write on every proposal.
    agent = models.ForeignKey(
        Agent, on_delete=models.PROTECT, related_name="proposals", db_index=False
    )
    action = models.CharField(max_length=100)
    parameters = models.JSONField(default=dict)
    summary = models.CharField(max_length=300, blank=True)
    reason = models.TextField(blank=True)
    urgency = models.CharField(max_length=10, choices=Urgency.choices, default=Urgency.NORMAL)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 - NULL = no key; unique only when set

    status = models.CharField(max_length=10, choices=ProposalStatus.choices)
    risk_score = models.PositiveSmallIntegerField(default=0)
    risk_reasons = models.JSONField(default=list)
    decision_path = models.JSONField(default=dict)
    policy_version = models.PositiveIntegerField(default=0)
    required_approvals = models.PositiveSmallIntegerField(default=1)
    approvals_count = models.PositiveSmallIntegerField(default=0)

    execution = models.OneToOneField(
        Execution, null=True, blank=True, on_delete=models.PROTECT, related_name="proposal"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    expiry_warned_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProposalQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="unique_agent_idempotency_key",
            ),
        ]
        indexes = [
            models.Index(fields=["status", "-risk_score", "created_at"], name="proposal_queue"),
            models.Index(fields=["-created_at"], name="proposal_recent"),
            models.Index(fields=["agent", "-created_at"], name="proposal_agent_recent"),
            models.Index(fields=["action", "-created_at"], name="proposal_action_recent"),
            models.Index(fields=["status", "expires_at"], name="proposal_expiry"),
            # The overview: counts over a window read this index alone, never the rows.
            models.Index(
                fields=["created_at", "status", "approvals_count", "risk_score"],
                name="proposal_outcomes",
            ),
            models.Index(fields=["status", "created_at"], name="proposal_waiting"),
        ]

    def __str__(self) -> str:
        return f"proposal {self.pk} {self.action} {self.status}"

    @property
    def is_pending(self) -> bool:
        return self.status in ACTIVE

    @property
    def approvals_remaining(self) -> int:
        return max(self.required_approvals - self.approvals_count, 0) if self.is_pending else 0

    def is_expired_at(self, when) -> bool:
        return self.is_pending and self.expires_at is not None and self.expires_at <= when


class Decision(models.Model):
    """A reviewer's approve or reject of a pending proposal; one per reviewer."""

    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="decisions")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    kind = models.CharField(max_length=8, choices=DecisionKind.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["proposal", "reviewer"], name="one_decision_per_reviewer"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.reviewer} {self.kind} {self.proposal_id}"


class PendingNotification(models.Model):
    """An event nobody has been told of yet: the notifications' outbox.

    Written in the transaction of the change it tells of, so a change is never
    committed without it; the worker takes rows in batches, tells every
    notifier, and deletes them (``approvals.notifications.drain``). A batch
    claimed by a worker that died is taken again after ``CLAIM_SECONDS``.
    """

    kind = models.CharField(max_length=30)
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField()
    claim = models.CharField(max_length=32, blank=True, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind} {self.proposal_id}"


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
    """What every delivery log keeps of a message's attempts: state, count, last error, when next."""

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

    class Meta:
        abstract = True
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["state", "next_attempt_at"])]


class WebhookDelivery(Attempts):
    """One event sent to one webhook, with every attempt's outcome: the delivery log."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    body = models.TextField()
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)

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

    The link itself is signed (``approvals.review_links``); this row makes it
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
        return self.event in ("review_requested", "expiry_warning")


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

    class Meta(Attempts.Meta):
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.channel} {self.operation} {self.event} → {self.target} ({self.state})"
