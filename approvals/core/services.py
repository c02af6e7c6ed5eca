"""Proposal workflows: submit → assess → decide → queue; review, quorum; expiry and its warning."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, F, Value
from django.urls import reverse
from django.utils import timezone
from rest_framework import serializers

from accounts import stepup
from accounts.roles import is_admin, is_reviewer
from accounts.stepup import Authentication
from approvals.choices import DecisionKind, ProposalStatus, Urgency
from approvals.core import credentials, pausing, traces
from approvals.core.outbox import notify
from approvals.guard import admission
from approvals.models import Agent, Decision, Proposal
from approvals.policy.prevalidators import prevalidate
from approvals.policy.risk import assess
from approvals.policy.rules import Policy, current_policy, evaluate
from approvals.policy.tool_risk import tool_risk
from approvals.routing.reviews import (
    NotARequiredReviewer,
    Roster,
    counts_for,
    required_reviews,
    standing,
)
from approvals.routing.reviews import awaiting as routing_awaiting
from approvals.routing.reviews import may_decide as routing_may_decide
from audit.services import actor_label, record
from executions import services as executions
from executions.actions import get_action
from executions.broadcast import PROPOSALS_GROUP, broadcast_on_commit
from executions.sandboxes import status
from infrastructure import tracing
from infrastructure.prepared import PreparedInsert
from infrastructure.rest.serializers import Serializer, Text, refuse_unknown

log = logging.getLogger(__name__)
_insert_proposal = PreparedInsert(Proposal)


class ProposalError(Exception):
    """A request about a proposal that cannot be honoured; ``kind`` maps to an API error type.

    ``url``: where a person can complete it instead (a step-up in the console).
    """

    def __init__(self, kind: str, message: str, url: str | None = None):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.url = url


@dataclass
class Submission:
    proposal: Proposal
    created: bool


class EnvelopeSerializer(Serializer):
    action = Text(max_length=100)
    parameters = serializers.JSONField(default=dict)
    reason = Text(max_length=4000, allow_blank=True, default="")
    urgency = serializers.ChoiceField(choices=Urgency.choices, default=Urgency.NORMAL)
    idempotency_key = Text(max_length=200, required=False, allow_null=True)


def submit(agent: Agent, payload: object) -> Submission:
    """Validate, assess and decide a proposal in one transaction; idempotent by key. Its
    span's context is kept with the proposal: the parent of the spans that follow it."""
    with tracing.span("proposal.submit", agent=agent.name) as span:
        submission = _submit(agent, payload)
        proposal = submission.proposal
        span.set(proposal_id=proposal.pk, action=proposal.action, status=proposal.status)
    return submission


def _submit(agent: Agent, payload: object) -> Submission:
    if not isinstance(payload, dict):
        raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
    envelope = EnvelopeSerializer(data=payload)
    refuse_unknown(payload, envelope)  # the fields validation then uses
    envelope.is_valid(raise_exception=True)
    data = envelope.validated_data
    key = data.get("idempotency_key")
    if key:
        existing = _idempotent_match(agent, key, data)
        if existing is not None:
            return Submission(existing, created=False)
    policy, now = current_policy().for_agent(agent.name), timezone.now()
    try:
        admission.check(agent, policy, now, spend=False)  # a flood is turned away cheaply
    except admission.Refused as refusal:
        admission.refused(agent, refusal, now)
        raise
    spec = get_action(data["action"])
    if spec is None:
        raise ProposalError(
            "unknown_action", f"unknown action {data['action']!r}; see /api/v1/capabilities"
        )
    parameters = spec.validate(data["parameters"])
    if spec.authorize is not None:
        spec.authorize(parameters, actor_label(agent))
    try:
        proposal = _decide_new(agent, spec, parameters, data, policy, now)
    except admission.Refused as refusal:
        admission.refused(agent, refusal, now)
        raise
    except IntegrityError:
        existing = _idempotent_match(agent, key, data) if key else None
        if existing is None:
            raise
        return Submission(existing, created=False)
    return Submission(proposal, created=True)


def _refuse_network_the_sandbox_lacks() -> None:
    if status.sandbox_status()["backend"] == "local":
        raise ProposalError(
            "sandbox_unsupported",
            "the sandbox in force (local) gives scripts no network: a run would share the "
            "host's, where the console, Redis and PostgreSQL listen; ask without "
            "'network' or have an admin configure the docker or gvisor backend",
        )


def _idempotent_match(agent: Agent, key: str, data: dict) -> Proposal | None:
    existing = Proposal.objects.filter(agent=agent, idempotency_key=key).first()
    if existing is None:
        return None
    if existing.action != data["action"]:
        raise ProposalError(
            "idempotency_conflict",
            f"idempotency key {key!r} was already used for proposal {existing.pk} "
            f"({existing.action}) with a different action",
        )
    return existing


def _decide_new(agent: Agent, spec, parameters: dict, data: dict, policy: Policy, now) -> Proposal:
    wants_network = bool(parameters.get("network"))
    if spec.sandboxed and wants_network and policy.script_network:
        _refuse_network_the_sandbox_lacks()
    # What is stored and shown, and what a pre-validator (a service elsewhere) is sent.
    shown = credentials.masked(parameters, data["reason"], policy.secret_patterns)
    base, found = spec.base_risk, []
    with tracing.span("proposal.risk") as span:
        if "tool" in spec.targets:
            base, found = tool_risk(policy.tool_risk, parameters, spec.base_risk)
        assessment = assess(spec.name, parameters, base, found)
        span.set(risk_score=assessment.score)
    with tracing.span("proposal.policy") as span:
        outcome = evaluate(
            policy,
            action=spec.name,
            targets=spec.target_values(parameters),
            capability=agent.capability_for(spec.name, spec.primary_target(parameters)),
            risk_score=assessment.score,
            wants_network=wants_network,
            weak_sandbox=status.weak_isolation() if spec.sandboxed else None,
            prevalidate=lambda: prevalidate(
                spec.name, shown.parameters, assessment, read_only=spec.read_only
            ),
        )
        span.set(status=outcome.status, step=outcome.step)
    score, reasons = assessment.score, list(assessment.reasons)
    if credential := shown.risk_reason():
        reasons.append(credential)
    verdict = outcome.extra.get("prevalidator")
    if verdict and verdict["ok"] and verdict["score"] > score:
        score = verdict["score"]
        reasons.append(f"pre-validator: {verdict['reason']}")
    actor = actor_label(agent)
    approved = outcome.status == ProposalStatus.APPROVED
    decision_path = outcome.decision_path(policy.version)
    required, routing, escalate_at = outcome.required_approvals, None, None
    if outcome.status == ProposalStatus.PENDING:
        targets = spec.target_values(parameters)
        route = policy.route_for(spec.name, agent.name, targets, score)
        if route is not None:
            routing = route.snapshot(quorum=required)
            required, decision_path["route"] = routing["needed"], routing["label"]
            if route.escalate_after_minutes:
                escalate_at = now + timedelta(minutes=route.escalate_after_minutes)
    row = _insert_proposal.prepare(
        agent=agent,
        action=spec.name,
        parameters=shown.parameters,
        sealed=shown.sealed,
        summary=shown.scrub(spec.describe(parameters, assessment.pointed_line()))[:300],
        reason=shown.reason,
        urgency=data["urgency"],
        idempotency_key=data.get("idempotency_key"),
        status=outcome.status,
        risk_score=score,
        risk_reasons=shown.scrub(reasons),
        risk_lines=shown.scrub(assessment.located()),
        decision_path=shown.scrub(decision_path),
        policy_version=policy.version,
        required_approvals=required,
        routing=routing,
        escalate_at=escalate_at,
        created_at=now,
        expires_at=(
            now + timedelta(minutes=policy.review_timeout_minutes)
            if outcome.status == ProposalStatus.PENDING
            else None
        ),
        decided_at=None if outcome.status == ProposalStatus.PENDING else now,
        trace_parent=tracing.traceparent() or None,
    )
    with transaction.atomic():
        admission.check(admission.locked(agent), policy, now, spend=True)
        # Approved at once: the execution first, so the proposal's row is written once.
        execution = _new_execution(agent, spec.name, shown, policy) if approved else None
        proposal = _insert_proposal.insert(row, execution=execution)
        record(
            actor,
            "proposal.submitted",
            proposal,
            action=spec.name,
            risk=score,
            policy_version=policy.version,
        )
        record("system", f"proposal.{outcome.status}", proposal, **proposal.decision_path)
        if execution is not None:
            executions.queued(execution, actor="system")
        if outcome.notify:
            notify("notify_list", proposal)
        elif outcome.status == ProposalStatus.PENDING:
            notify("review_requested", proposal)
        announce(proposal)
    return proposal


def _new_execution(agent: Agent, action: str, shown: credentials.Masked, policy: Policy):
    spec = get_action(action)
    target = spec.primary_target(shown.parameters) if spec else None
    capability = agent.capability_for(action, target)
    return executions.create_execution(
        action=action,
        parameters=shown.parameters,
        sealed=shown.sealed,
        secret_patterns=policy.secret_patterns,
        requested_by=actor_label(agent),
        capabilities_used=[capability] if capability else [],
    )


def _queue_execution(proposal: Proposal, actor: str) -> None:
    shown = credentials.Masked(proposal.parameters, proposal.reason, sealed=proposal.sealed)
    policy = current_policy().for_agent(proposal.agent.name)
    proposal.execution = _new_execution(proposal.agent, proposal.action, shown, policy)
    Proposal.objects.filter(pk=proposal.pk).update(execution=proposal.execution)
    executions.queued(proposal.execution, actor)


def announce(proposal: Proposal) -> None:
    # With the proposal's state as long-polls compare it: a waiter wakes on the message alone.
    message = {
        "type": "proposal.changed",
        "proposal_id": proposal.pk,
        "agent_id": proposal.agent_id,  # which waiting lists it could give a row
        "status": proposal.status,
        "approvals": proposal.approvals_count,
        "execution_id": proposal.execution_id,
        "execution_status": proposal.execution.status if proposal.execution_id else None,
    }
    broadcast_on_commit(PROPOSALS_GROUP, message)


def decide(
    proposal_id: int,
    reviewer: AbstractBaseUser,
    kind: str,
    comment: str = "",
    via: str | None = None,
    authentication: Authentication | None = None,
    break_glass: bool = False,
) -> Proposal:
    """A reviewer approves or rejects. Guarded: one decision per reviewer, quorum, expiry,
    the review route's teams (``approvals.routing``), and a fresh second factor at or
    above ``STEP_UP_MIN_RISK``.

    ``authentication`` says how the reviewer proved who they are (a console session
    and its factors, a token, a mail link, Slack: ``via``); the audit trail keeps it.
    ``break_glass``: an admin decides outside the route, at once, with a comment and a
    fresh second factor whatever the risk; everyone the route named, and every admin, is told.
    """
    authentication = authentication or Authentication(via=via or "unknown")
    if not is_reviewer(reviewer):
        raise ProposalError("permission_denied", "only reviewers can approve or reject proposals")
    if kind not in DecisionKind.values:
        raise ProposalError("validation_error", f"unknown decision {kind!r}")
    now = timezone.now()
    with transaction.atomic():
        proposal = (
            Proposal.objects.select_for_update(of=("self",))
            .select_related("agent")
            .filter(pk=proposal_id)
            .first()
        )
        if proposal is None:
            raise ProposalError("not_found", f"proposal {proposal_id} does not exist")
        expired = proposal.is_expired_at(now) and _expire(proposal)
        if not expired:
            policy = current_policy()
            _check_can_decide(proposal, reviewer, policy)
            if break_glass:
                _check_break_glass(proposal, reviewer, kind, comment, authentication)
                team = ""
            else:
                team = _team_of(proposal, reviewer, policy)
                _check_step_up(proposal, kind, authentication)
            _record_decision(
                proposal, reviewer, kind, comment, now, authentication, team, break_glass
            )
    if expired:
        raise ProposalError("conflict", f"proposal {proposal.pk} expired before the decision")
    admission.forget(proposal.agent)  # a place may have freed under its max_pending
    return proposal


def _team_of(proposal: Proposal, reviewer, policy: Policy) -> str:
    """The team the reviewer decides for ("" when none is asked for); refused when the
    proposal's route does not let them decide it."""
    try:
        return counts_for(proposal, reviewer, policy.teams)
    except NotARequiredReviewer as exc:
        raise ProposalError("not_a_required_reviewer", exc.message) from None


def _check_break_glass(
    proposal: Proposal, reviewer, kind: str, comment: str, authentication: Authentication
) -> None:
    if not is_admin(reviewer):
        raise ProposalError("permission_denied", "only admins can break the glass")
    if not comment.strip():
        raise ProposalError(
            "validation_error", "breaking the glass needs a comment: say why it cannot wait"
        )
    if not authentication.fresh():
        raise ProposalError(
            "step_up_required",
            f"breaking the glass on proposal {proposal.pk} needs a second factor proved in "
            f"the last {max(settings.STEP_UP_SECONDS // 60, 1)} minutes, whatever its risk; "
            "complete it in the console",
            url=settings.SITE_URL
            + reverse("console:decide", args=[proposal.pk, kind])
            + "?break_glass=1",
        )


def _check_step_up(proposal: Proposal, kind: str, authentication: Authentication) -> None:
    if not stepup.needed_for_risk(proposal.risk_score) or authentication.fresh():
        return
    minutes = max(settings.STEP_UP_SECONDS // 60, 1)
    raise ProposalError(
        "step_up_required",
        f"proposal {proposal.pk} has risk {proposal.risk_score}: deciding it needs a second "
        f"factor proved in the last {minutes} minute{'s' if minutes > 1 else ''}; "
        "complete the decision in the console",
        url=settings.SITE_URL + reverse("console:decide", args=[proposal.pk, kind]),
    )


def _record_decision(
    proposal: Proposal,
    reviewer,
    kind: str,
    comment: str,
    now,
    authentication: Authentication,
    team: str = "",
    break_glass: bool = False,
) -> None:
    try:
        with transaction.atomic():
            Decision.objects.create(
                proposal=proposal,
                reviewer=reviewer,
                kind=kind,
                comment=comment,
                team=team,
                break_glass=break_glass,
            )
    except IntegrityError:
        raise ProposalError(
            "conflict", f"{reviewer.get_username()} has already decided proposal {proposal.pk}"
        ) from None
    actor = actor_label(reviewer)
    routed = {"team": team} if proposal.routing else {}
    record(
        actor,
        f"proposal.decision.{kind}",
        proposal,
        comment=comment,
        via=authentication.via,
        **routed,
        **({"break_glass": True} if break_glass else {}),
        **authentication.as_audit(),
    )
    if break_glass:
        Proposal.objects.filter(pk=proposal.pk).update(break_glass_at=now)
        proposal.break_glass_at = now
        notify("break_glass", proposal)
    if kind == DecisionKind.REJECT:
        _close(proposal, ProposalStatus.REJECTED, now, actor)
        pausing.after_rejection(proposal, current_policy())
    elif break_glass:
        _approve(proposal, now, actor, proposal.approvals_count + 1)
    else:
        _count_approval(proposal, now, actor)
    announce(proposal)


def may_decide(user, proposal: Proposal) -> bool:
    """Whether ``user`` could decide the proposal now (no link or button for those who can't):
    not its agent's owner (unless self-approval is on), and one its route lets decide."""
    if not proposal.is_pending or proposal.expires_at is None:
        return False
    policy = current_policy()
    if _owner_barred(proposal, user, policy):
        return False
    return routing_may_decide(proposal, user, policy.teams)


def awaiting(user) -> list[int]:
    """The ids of the pending proposals ``user`` may still decide (their "Needs me")."""
    policy = current_policy()
    return routing_awaiting(user, policy.teams, policy.self_approval)


def required_reviews_of(proposal: Proposal, decisions) -> list[dict]:
    """The route's teams, with what each gave and who may still decide for it (the page's)."""
    if not proposal.routing:
        return []
    shown = [
        {"kind": d.kind, "team": d.team, "reviewer_name": d.reviewer.get_username()}
        for d in decisions
    ]
    return required_reviews(proposal.routing, shown, Roster(current_policy().teams))


def mark_break_glass_reviewed(proposal_id: int, user) -> None:
    """Someone other than the admin who broke the glass has looked at it: audited."""
    proposal = Proposal.objects.filter(pk=proposal_id).first()
    if proposal is None or proposal.break_glass_at is None:
        raise ProposalError("not_found", f"proposal {proposal_id} had no break-glass decision")
    breaker = proposal.decisions.filter(break_glass=True).values_list("reviewer_id", flat=True)
    if user.pk in breaker:
        raise ProposalError(
            "permission_denied", "the admin who broke the glass cannot mark it reviewed"
        )
    with transaction.atomic():
        marked = Proposal.objects.filter(
            pk=proposal_id, break_glass_reviewed_at__isnull=True
        ).update(break_glass_reviewed_at=timezone.now(), break_glass_reviewed_by=user)
        if not marked:
            raise ProposalError("conflict", f"proposal {proposal_id} is already marked reviewed")
        record(actor_label(user), "proposal.break_glass_reviewed", proposal)


def waiting_by_team(proposals) -> dict[str, list[Proposal]]:
    """Team → the routed proposals among ``proposals`` still waiting for its approvals (an
    escalated one for its escalate_to teams too)."""
    found: dict[str, list[Proposal]] = {}
    for proposal in proposals:
        state = standing(proposal)
        if state is None:
            continue
        for team in state.deciding_teams():
            found.setdefault(team, []).append(proposal)
    return found


def why_not(user, proposal: Proposal) -> str:
    """Why ``user`` may not decide a pending proposal now ("" when they may)."""
    policy = current_policy()
    if _owner_barred(proposal, user, policy):
        return f"you own agent {proposal.agent.name} and cannot decide its proposals"
    try:
        counts_for(proposal, user, policy.teams)
    except NotARequiredReviewer as exc:
        return exc.message
    return ""


def _owner_barred(proposal: Proposal, user, policy: Policy) -> bool:
    """An agent's owner never decides its proposals, unless the policy allows self-approval."""
    return not policy.self_approval and proposal.agent.owner_id == user.pk


def _check_can_decide(proposal: Proposal, reviewer, policy: Policy) -> None:
    if proposal.status != ProposalStatus.PENDING:
        raise ProposalError("conflict", f"proposal {proposal.pk} is {proposal.status}, not pending")
    if proposal.decisions.filter(reviewer=reviewer).exists():
        raise ProposalError(
            "conflict", f"{reviewer.get_username()} has already decided proposal {proposal.pk}"
        )
    if _owner_barred(proposal, reviewer, policy):
        raise ProposalError(
            "permission_denied",
            f"{reviewer.get_username()} owns agent {proposal.agent.name} and cannot decide its proposals",
        )


def _transition(proposal: Proposal, to: ProposalStatus, **fields) -> bool:
    updated = Proposal.objects.filter(pk=proposal.pk, status=ProposalStatus.PENDING).update(
        status=to, **fields
    )
    if updated:
        proposal.refresh_from_db()
    return bool(updated)


def _close(proposal: Proposal, to: ProposalStatus, now, actor: str) -> None:
    if not _transition(proposal, to, decided_at=now):
        raise ProposalError("conflict", f"proposal {proposal.pk} was decided by someone else")
    record(actor, f"proposal.{to}", proposal)
    notify("decided", proposal)
    traces.reviewed(proposal)


def _count_approval(proposal: Proposal, now, actor: str) -> None:
    approvals = proposal.decisions.filter(kind=DecisionKind.APPROVE).count()
    Proposal.objects.filter(pk=proposal.pk).update(approvals_count=approvals)
    proposal.approvals_count = approvals
    if approvals < proposal.required_approvals:
        notify("partly_approved", proposal)
        return
    _approve(proposal, now, actor, approvals)


def _approve(proposal: Proposal, now, actor: str, approvals: int) -> None:
    if not _transition(
        proposal, ProposalStatus.APPROVED, decided_at=now, approvals_count=approvals
    ):
        raise ProposalError("conflict", f"proposal {proposal.pk} was decided by someone else")
    record(actor, "proposal.approved", proposal, approvals=approvals)
    notify("decided", proposal)
    _queue_execution(proposal, actor=actor)
    traces.reviewed(proposal)


def _expire(proposal: Proposal) -> bool:
    if not _transition(proposal, ProposalStatus.EXPIRED, decided_at=timezone.now()):
        return False
    record("system", "proposal.expired", proposal)
    notify("decided", proposal)
    traces.reviewed(proposal)
    announce(proposal)
    return True


def expire_pending() -> int:
    """Pending proposals past their review timeout become expired (a rejection)."""
    expired = 0
    now = timezone.now()
    for proposal in Proposal.objects.pending().filter(expires_at__lte=now):
        with transaction.atomic():
            expired += _expire(proposal)
    return expired


def warn_expiring(now=None) -> int:
    """Warn once about pending proposals within the last fifth of their review time.

    The database picks them: the last fifth begins where the time left is a
    quarter of the time waited (``4 × (expires − now) ≤ now − created``), so
    a long queue costs the rows that are due, not a read of every one.
    """
    now = now or timezone.now()
    at = Value(now, output_field=DateTimeField())
    due = (
        Proposal.objects.pending()
        .filter(expiry_warned_at__isnull=True, expires_at__gt=now)
        .alias(left=F("expires_at") - at, waited=at - F("created_at"))
        .filter(waited__gte=F("left") * 4)
    )
    warned = 0
    for proposal in due:
        if Proposal.objects.filter(pk=proposal.pk, expiry_warned_at__isnull=True).update(
            expiry_warned_at=now
        ):
            notify("expiry_warning", proposal)
            warned += 1
    return warned
