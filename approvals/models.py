from __future__ import annotations

import hashlib
import secrets
from fnmatch import fnmatchcase

from django.conf import settings
from django.db import models
from django.utils import timezone

from approvals.choices import ACTIVE, DecisionKind, ProposalStatus, Urgency
from executions.models import Execution
from infrastructure.text_index import TextIndex

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
    # Paused (approvals.guard): its proposals are refused until an admin resumes it.
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=200, blank=True)  # an audit label, or "policy"
    pause_reason = models.CharField(max_length=500, blank=True)
    resumed_at = models.DateTimeField(null=True, blank=True)  # rejections before it are forgiven
    # Its proposals-per-minute bucket: tokens left at ``bucket_at``.
    bucket_tokens = models.FloatField(null=True, blank=True)
    bucket_at = models.DateTimeField(null=True, blank=True)
    refused_at = models.DateTimeField(null=True, blank=True)  # the last burst's first refusal
    # Proposals refused by its limits, by reason (the metrics read them).
    refused_pending = models.PositiveBigIntegerField(default=0)
    refused_rate = models.PositiveBigIntegerField(default=0)
    refused_paused = models.PositiveBigIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def set_token(self, token: str) -> None:
        self.token_hash = hash_token(token)
        self.token_hint = token[:8]

    def may_propose(self, action: str) -> bool:
        """Whether some capability grants ``action``, on any target or on some."""
        return any(fnmatchcase(action, c.partition(":")[0]) for c in self.capabilities)

    def capability_for(self, action: str, target: str | None = None) -> str | None:
        """The first capability that grants ``action`` (on ``target``, its first target's
        value), or None. A capability is an action glob (``docker.*``) or an action glob
        and a target glob (``tool.call:github.*``), which grants only on such targets."""
        for capability in self.capabilities:
            glob, _, on = capability.partition(":")
            if fnmatchcase(action, glob) and (
                not on or (target is not None and fnmatchcase(target, on))
            ):
                return capability
        return None


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
    # [{"reason", "lines"}]: the lines of a script each reason was found on (NULL: none known).
    risk_lines = models.JSONField(null=True, blank=True)
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
    # The review route that applied when it was made (approvals.routing), or None: which
    # teams must approve, how many, and where a silent team escalates to.
    routing = models.JSONField(null=True, blank=True, default=None)
    escalate_at = models.DateTimeField(null=True, blank=True)  # when its route escalates
    escalated_at = models.DateTimeField(null=True, blank=True)
    # An admin decided it outside its route ("break glass"): shown in red until reviewed.
    break_glass_at = models.DateTimeField(null=True, blank=True)
    break_glass_reviewed_at = models.DateTimeField(null=True, blank=True)
    # Its parameters and reason as sent, sealed, when they held a credential (what
    # ``parameters`` and ``reason`` show is masked: approvals.core.credentials).
    sealed = models.TextField(null=True, blank=True)  # noqa: DJ001 - NULL: nothing sealed
    # The agent's, when withdrawn. NULL otherwise: a column SQLite adds without a rebuild.
    withdraw_reason = models.CharField(max_length=500, null=True, blank=True)  # noqa: DJ001
    # The W3C traceparent of the span it was made in (infrastructure.tracing), when tracing
    # was on: the decision's, the run's and the report's spans are its children. NULL: none.
    trace_parent = models.CharField(max_length=55, null=True, blank=True)  # noqa: DJ001
    break_glass_reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProposalQuerySet.as_manager()

    # ``?q=`` on the proposals and executions lists (migration 0007 makes it).
    text_index = TextIndex("approvals_proposal", ("summary", "reason"))

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
            # An agent's pending proposals (its max_pending): pending rows only.
            models.Index(
                fields=["agent"],
                condition=models.Q(status="pending"),
                name="proposal_agent_pending",
            ),
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
    # For a routed proposal: the team this approval counted for ("" when none).
    team = models.CharField(max_length=40, blank=True)
    break_glass = models.BooleanField(default=False)  # an admin's, outside the route
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
    notifier, and deletes them (``approvals.notify.outbox.drain``). A batch
    claimed by a worker that died is taken again after ``CLAIM_SECONDS``.
    """

    kind = models.CharField(max_length=30)
    proposal = models.ForeignKey(Proposal, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField()
    claim = models.CharField(max_length=32, blank=True, db_index=True)
    claimed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.kind} {self.proposal_id}"
