"""``GET /api/v1/proposals``: the queue and the history, filtered, ordered, a page at a time.

Reviewers and admins see every proposal, an agent its own. A page is two
queries whatever its length: the rows (with the agent's name and the
execution's status joined in) and the decisions of those of them that have
any. Pages are cut by keyset (``infrastructure.rest.listing``), so the
pending queue, ordered by risk then age, stays put while proposals arrive.
"""

from __future__ import annotations

from django.db.models import F, Q
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, inline_serializer
from rest_framework import serializers

from accounts.roles import is_agent
from approvals.agents.changes import Interest
from approvals.choices import RISK_BANDS, ProposalStatus
from approvals.models import Decision, Proposal
from approvals.policy.rules import current_policy
from approvals.routing.reviews import Roster, awaiting
from infrastructure.rest.errors import error_responses
from infrastructure.rest.listing import (
    Filters,
    Order,
    Paths,
    comma_list,
    invalid,
    page,
    paging_parameters,
    shared_filters,
)

ORDERS = {
    "risk": Order(
        "risk",
        (("risk_score", True), ("created_at", False), ("id", False)),
        "highest risk first, then oldest first (the pending queue)",
    ),
    "newest": Order("newest", (("created_at", True), ("id", True)), "newest first"),
    "oldest": Order("oldest", (("created_at", False), ("id", False)), "oldest first"),
}
FILTERS = (
    "status", "risk", "risk_min", "risk_max", "action", "agent", "reviewer",
    "created_since", "created_until", "q", "since_id", "order", "review_requested",
)  # fmt: skip


# What the API shows of each decision (with ``reviewer_name``).
DECISION_FIELDS = ("kind", "comment", "team", "break_glass", "created_at")

PATHS = Paths(
    risk="risk_score",
    agent="agent__name",
    reviewer="decisions__reviewer__username",
    text="",
)


def proposals_page(user, params, fields: list[str], represent) -> dict:
    """The page ``params`` ask for, of what ``user`` may see: ``{"items", "next_cursor"}``."""
    filters = Filters(params, FILTERS, waits=True)
    rows = Proposal.objects.all()
    if is_agent(user):
        rows = rows.filter(agent=user.agent)
    statuses = filters.choices("status", ProposalStatus.values)
    if statuses:
        rows = rows.filter(status__in=statuses)
    bands = filters.choices("risk", RISK_BANDS)
    if bands:
        within = Q()
        for band in bands:
            low, high = RISK_BANDS[band]
            within |= Q(risk_score__range=(low, high)) if band != "high" else Q(risk_score__gte=low)
        rows = rows.filter(within)
    rows = shared_filters(filters, rows, PATHS)
    if filters.choice("review_requested", ("me",), ""):
        if is_agent(user):
            raise invalid("review_requested", "is for reviewers: an agent reviews nothing")
        policy = current_policy()
        rows = rows.filter(pk__in=awaiting(user, policy.teams, policy.self_approval))
        statuses = statuses or [ProposalStatus.PENDING]
    default = "risk" if statuses == [ProposalStatus.PENDING] else "newest"
    order = ORDERS[filters.choice("order", ORDERS, default)]
    cursor, limit = filters.paging()
    rows = rows.values(
        *fields, agent_name=F("agent__name"), execution_status=F("execution__status")
    )
    found, next_cursor = page(rows, order, cursor, limit)
    _attach_decisions(found)
    roster = Roster(current_policy().teams) if any(row.get("routing") for row in found) else None
    return {"items": [represent(row, roster) for row in found], "next_cursor": next_cursor}


def list_interest(request) -> Interest:
    """Which changes could give a waiting list call (``?wait=``) a row: an agent sees only
    its own proposals; a ``status`` list (or ``review_requested``: pending) narrows it."""
    agent = request.user.agent.pk if is_agent(request.user) else None
    statuses = {value.strip() for value in request.GET.get("status", "").split(",")} - {""}
    if not statuses and request.GET.get("review_requested") == "me":
        statuses = {ProposalStatus.PENDING}
    return Interest(agent, frozenset(statuses) or None)


def _attach_decisions(rows: list[dict]) -> None:
    """Each row's decisions, oldest first: one query for the page, none if nobody decided."""
    decided = [row["id"] for row in rows if may_have_decisions(row)]
    by_proposal: dict[int, list[dict]] = {pk: [] for pk in decided}
    if decided:
        for decision in (
            Decision.objects.filter(proposal_id__in=decided)
            .order_by("created_at", "pk")
            .values("proposal_id", *DECISION_FIELDS, reviewer_name=F("reviewer__username"))
        ):
            by_proposal[decision.pop("proposal_id")].append(decision)
    for row in rows:
        row["decisions"] = by_proposal.get(row["id"], [])


def may_have_decisions(row: dict) -> bool:
    """Whether reviewers decided anything: an approval is counted with it, a rejection closes."""
    return row["approvals_count"] > 0 or row["status"] == ProposalStatus.REJECTED


def list_parameters() -> list[OpenApiParameter]:
    return [
        comma_list("status", ProposalStatus.values, "only proposals with these statuses"),
        comma_list(
            "risk",
            RISK_BANDS,
            "only proposals in these risk bands (low 0–3, medium 4–6, high 7–10)",
        ),
        OpenApiParameter(
            "risk_min", int, description="only proposals of at least this risk (0–10)"
        ),
        OpenApiParameter("risk_max", int, description="only proposals of at most this risk (0–10)"),
        OpenApiParameter(
            "action",
            str,
            description="only these actions: a name or a glob (`docker.*`, `host.service_?`)",
        ),
        OpenApiParameter("agent", str, description="only proposals of the agent of this name"),
        OpenApiParameter(
            "reviewer", str, description="only proposals the person of this username decided on"
        ),
        OpenApiParameter(
            "created_since", str, description="only proposals made at or after this ISO 8601 time"
        ),
        OpenApiParameter(
            "created_until", str, description="only proposals made before this ISO 8601 time"
        ),
        OpenApiParameter(
            "q",
            str,
            description="only proposals whose summary or reason holds this text, case ignored",
        ),
        OpenApiParameter(
            "since_id",
            int,
            description="only proposals newer than this id: with `wait`, how a bot hears of new ones",
        ),
        OpenApiParameter(
            "review_requested",
            str,
            enum=["me"],
            description="`me`: only the pending proposals the caller may still decide (their "
            "review route names a team of theirs whose approvals are still needed, or no route "
            "applies), not those they decided nor their own agents'; ordered as the queue",
        ),
        *paging_parameters("`risk` for `status=pending` alone, else `newest`", ORDERS, waits=True),
    ]


def page_serializer(item_serializer) -> serializers.Serializer:
    return inline_serializer(
        "ProposalPage",
        {
            "items": item_serializer(many=True),
            "next_cursor": serializers.CharField(
                allow_null=True, help_text="the next page's `cursor`; null on the last page"
            ),
        },
    )


LIST_ERRORS = error_responses(
    e400="validation_error: a filter's value (the message names the filter and what it "
    "takes), an unknown parameter, or a cursor this list did not hand out",
    e403="permission_denied: neither a reviewer nor an agent",
)
LIST_EXAMPLES = [
    OpenApiExample(
        "The pending queue",
        description="GET /api/v1/proposals?status=pending&limit=1",
        response_only=True,
        value={
            "items": [
                {
                    "id": 42,
                    "status": "pending",
                    "agent": "deploy-bot",
                    "action": "host.service_restart",
                    "parameters": {"host": "web-1", "service": "nginx"},
                    "summary": "Restart nginx on web-1",
                    "reason": "config reloaded",
                    "urgency": "normal",
                    "idempotency_key": None,
                    "risk": {"score": 7, "reasons": ["restarts a service"]},
                    "decision_path": {"steps": []},
                    "policy_version": 3,
                    "required_approvals": 1,
                    "approvals": 0,
                    "approvals_remaining": 1,
                    "decisions": [],
                    "execution_id": None,
                    "execution_status": None,
                    "created_at": "2026-11-26T09:00:00Z",
                    "expires_at": "2026-11-26T10:00:00Z",
                    "decided_at": None,
                }
            ],
            "next_cursor": "WyJyaXNrIixbNywiMjAyNi0xMS0yNlQwOTowMDowMCswMDowMCIsNDJdXQ",
        },
    )
]
