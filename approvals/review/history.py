"""What a proposal's page shows of the past: the same agent's last proposals of the same
action (and of the same target), and how that action on that target fared for every agent.

A few queries whatever the history holds, each bounded and served by an index:

- the agent's last ``ROWS`` proposals of the action (``proposal_agent_recent``);
- its last ``ROWS`` of the action on the same target, looked for among its newest
  ``TARGET_SCAN`` of the action: a target is a value inside ``parameters``, which no
  index holds, so the scan is capped rather than left to run through years of rows;
- who decided all of those, in one query over their ids;
- for every agent, over ``FARED_DAYS``, how the action on the target fared (approved,
  rejected, runs failed), counted over at most the newest ``FARED_SCAN`` proposals of
  the action (``proposal_action_recent``), in one aggregate.

A target is what the action's policy targets name (``ActionSpec.targets``): the
container of a Docker action, the host and service of a host action, the tool of a
``tool.call``. Actions that run the agent's own code have none: their code, not a
target, says what they do (as ``approvals.policy.suggestions`` holds too).

When reviewers keep approving the action on the target without a rejection, the page
points to the policy suggestions: the threshold and the narrowest rule are the
suggestions' own (``approvals.policy.suggestions.MIN_APPROVALS``, ``narrowest_rule``),
and a target a policy list already decides is not pointed to; the suggestions page
itself weighs the whole history.

Everything shown comes from the rows as stored, where credentials are already masked.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Count, Q, Subquery
from django.db.models.fields.json import KT
from django.utils import timezone

from approvals.choices import DecisionKind, ProposalStatus
from approvals.models import Decision, Proposal
from approvals.policy.rules import current_policy
from approvals.policy.suggestions import MIN_APPROVALS, narrowest_rule
from executions.actions import get_action
from executions.choices import ExecutionStatus

ROWS = 10
TARGET_SCAN = 1000
FARED_DAYS = 30
FARED_SCAN = 5000
FAILED_RUNS = (ExecutionStatus.FAILED, ExecutionStatus.TIMED_OUT, ExecutionStatus.LOST)
ROW_FIELDS = (
    "pk",
    "created_at",
    "decided_at",
    "status",
    "summary",
    "risk_score",
    "execution_id",
    "execution__status",
    "execution__exit_code",
)
# The decision-path steps at which the policy itself decided, as reviewers read them.
POLICY = "policy"


@dataclass
class Past:
    """One earlier proposal, as its row in the history reads."""

    pk: int
    created_at: datetime
    status: str
    summary: str
    risk_score: int
    decided_by: str  # reviewers' names, "policy", or "" (nobody yet)
    decided_at: datetime | None
    execution_id: int | None
    run_status: str | None
    exit_code: int | None
    step: str | None = None  # the decision path's step, for the policy's decisions


@dataclass
class Fared:
    """How proposals of the action (on the target) fared for every agent."""

    days: int
    total: int = 0
    approved: int = 0
    approved_by_people: int = 0
    rejected: int = 0
    denied: int = 0
    expired: int = 0
    runs_succeeded: int = 0
    runs_failed: int = 0
    capped: bool = False  # counted over the newest ``scan`` proposals of the action only
    scan: int = FARED_SCAN


@dataclass
class History:
    """The page's history section."""

    action: str
    target: str  # "container web-1", "" when the action has none
    same_action: list[Past]
    same_target: list[Past] | None  # None: the action has no target
    fared: Fared
    suggested: bool = False  # reviewers keep approving it: the suggestions may have a rule
    rule: str = ""  # the narrowest rule the suggestions would offer, "kind:pattern"
    target_scan: int = TARGET_SCAN


def target_parameters(proposal: Proposal) -> dict[str, object]:
    """Parameter name -> value (as stored) of the proposal's targets; {} when it has none."""
    spec = get_action(proposal.action)
    parameters = proposal.parameters if isinstance(proposal.parameters, dict) else {}
    if spec is None or spec.sandboxed:
        return {}
    return {
        param: parameters[param]
        for param in spec.targets.values()
        if parameters.get(param) not in (None, "")
    }


def target_label(proposal: Proposal) -> str:
    spec = get_action(proposal.action)
    chosen = target_parameters(proposal)
    if spec is None or not chosen:
        return ""
    return ", ".join(
        f"{kind} {chosen[param]}" for kind, param in spec.targets.items() if param in chosen
    )


def _on_target(targets: dict[str, object]) -> Q:
    return Q(**{f"parameters__{param}": value for param, value in targets.items()})


def history_of(proposal: Proposal, now: datetime | None = None) -> History:
    """The history beside ``proposal``: a constant number of queries, however long it is."""
    targets = target_parameters(proposal)
    mine = Proposal.objects.filter(agent_id=proposal.agent_id, action=proposal.action)
    same_action = _rows(mine.exclude(pk=proposal.pk))
    same_target = None
    if targets:
        newest = mine.order_by("-created_at", "-pk").values("pk")[:TARGET_SCAN]
        scanned = Proposal.objects.filter(pk__in=Subquery(newest))
        same_target = _rows(scanned.filter(_on_target(targets)).exclude(pk=proposal.pk))
    _decided_by([*same_action, *(same_target or [])])
    fared = fared_of(proposal, targets, now)
    history = History(
        action=proposal.action,
        target=target_label(proposal),
        same_action=same_action,
        same_target=same_target,
        fared=fared,
    )
    _suggest(history, proposal, fared)
    return history


def _rows(queryset) -> list[Past]:
    rows = queryset.annotate(step=KT("decision_path__step")).order_by("-created_at", "-pk")
    return [
        Past(
            pk=row["pk"],
            created_at=row["created_at"],
            status=row["status"],
            summary=row["summary"],
            risk_score=row["risk_score"],
            decided_by="",
            decided_at=row["decided_at"],
            execution_id=row["execution_id"],
            run_status=row["execution__status"],
            exit_code=row["execution__exit_code"],
            step=row["step"],
        )
        for row in rows.values(*ROW_FIELDS, "step")[:ROWS]
    ]


def _decided_by(rows: list[Past]) -> None:
    """Fill in who decided each row: its reviewers (one query for all), or the policy."""
    ids = {row.pk for row in rows}
    people: dict[int, list[tuple[str, str, bool]]] = defaultdict(list)
    if ids:
        decisions = (
            Decision.objects.filter(proposal_id__in=ids)
            .order_by("created_at", "pk")
            .values_list("proposal_id", "kind", "break_glass", "reviewer__username")
        )
        for proposal_id, kind, break_glass, username in decisions:
            people[proposal_id].append((kind, username, break_glass))
    for row in rows:
        row.decided_by = decided_by(row.status, people.get(row.pk, []))


def decided_by(status: str, decisions: list[tuple[str, str, bool]]) -> str:
    """Who decided a proposal in ``status`` with these (kind, reviewer, break glass)
    decisions: its reviewers, "policy", or "" (undecided, expired or withdrawn)."""
    if status == ProposalStatus.DENIED:
        return POLICY  # the deny list, a missing capability, invalid parameters
    if status not in (ProposalStatus.APPROVED, ProposalStatus.REJECTED):
        return ""
    wanted = DecisionKind.APPROVE if status == ProposalStatus.APPROVED else DecisionKind.REJECT
    names = [
        name + (" (break glass)" if glass else "")
        for kind, name, glass in decisions
        if kind == wanted
    ]
    if names:
        return ", ".join(names)
    return POLICY if status == ProposalStatus.APPROVED else ""


def fared_of(proposal: Proposal, targets: dict[str, object], now: datetime | None = None) -> Fared:
    """How the action on the target fared for every agent over ``FARED_DAYS`` (one query)."""
    since = (now or timezone.now()) - timedelta(days=FARED_DAYS)
    newest = (
        Proposal.objects.filter(action=proposal.action, created_at__gte=since)
        .exclude(pk=proposal.pk)
        .order_by("-created_at", "-pk")
        .values("pk")[:FARED_SCAN]
    )
    on = _on_target(targets)
    counts = Proposal.objects.filter(pk__in=Subquery(newest)).aggregate(
        scanned=Count("pk"),
        total=Count("pk", filter=on),
        approved=Count("pk", filter=on & Q(status=ProposalStatus.APPROVED)),
        approved_by_people=Count(
            "pk", filter=on & Q(status=ProposalStatus.APPROVED, approvals_count__gte=1)
        ),
        rejected=Count("pk", filter=on & Q(status=ProposalStatus.REJECTED)),
        denied=Count("pk", filter=on & Q(status=ProposalStatus.DENIED)),
        expired=Count("pk", filter=on & Q(status=ProposalStatus.EXPIRED)),
        runs_succeeded=Count("pk", filter=on & Q(execution__status=ExecutionStatus.SUCCEEDED)),
        runs_failed=Count("pk", filter=on & Q(execution__status__in=FAILED_RUNS)),
    )
    scanned = counts.pop("scanned")
    return Fared(days=FARED_DAYS, capped=scanned >= FARED_SCAN, **counts)


def _suggest(history: History, proposal: Proposal, fared: Fared) -> None:
    """Whether to point to the policy suggestions: approved by people at least as often as
    the suggestions ask, never rejected, with a narrow rule no policy list already has."""
    if fared.approved_by_people < MIN_APPROVALS or fared.rejected:
        return
    spec = get_action(proposal.action)
    values = spec.target_values(proposal.parameters) if spec is not None else {}
    rule = narrowest_rule(proposal.action, values)
    if rule is None:
        return
    policy = current_policy()
    if any(r.matches(proposal.action, values) for r in policy.deny + policy.allow + policy.notify):
        return
    history.suggested, history.rule = True, rule.label()
