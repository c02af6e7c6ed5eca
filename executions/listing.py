"""``GET /api/v1/executions``: what ran and how it ended, filtered, newest first, a page at a time.

Reviewers see every execution, an agent those of its own proposals. A page is
one query (the proposal's id, agent and risk joined in); the output is not in
it: ``GET /api/v1/executions/{id}`` has the result contract with stdout and
stderr, ``…/output`` the chunks.
"""

from __future__ import annotations

from django.db.models import F
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import serializers

from infrastructure.rest.errors import error_responses
from infrastructure.rest.listing import (
    Filters,
    Order,
    Paths,
    comma_list,
    page,
    paging_parameters,
    shared_filters,
)

from .choices import ExecutionStatus
from .models import Execution

ORDERS = {
    "newest": Order("newest", (("created_at", True), ("id", True)), "newest first"),
    "oldest": Order("oldest", (("created_at", False), ("id", False)), "oldest first"),
}
FILTERS = (
    "status", "risk_min", "risk_max", "action", "agent", "reviewer",
    "created_since", "created_until", "q", "since_id", "order",
)  # fmt: skip
COLUMNS = (
    "id", "action", "status", "exit_code", "timed_out", "truncated", "backend", "error",
    "last_seq", "created_at", "started_at", "finished_at",
)  # fmt: skip


class ExecutionItemSerializer(serializers.Serializer):
    """An execution in a list: how it ended, without its output."""

    id = serializers.IntegerField()
    proposal_id = serializers.IntegerField(allow_null=True)
    agent = serializers.CharField(allow_null=True)
    risk = serializers.IntegerField(allow_null=True, help_text="the proposal's risk score")
    action = serializers.CharField()
    status = serializers.ChoiceField(choices=ExecutionStatus.choices)
    success = serializers.BooleanField()
    exit_code = serializers.IntegerField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    timed_out = serializers.BooleanField()
    truncated = serializers.BooleanField()
    backend = serializers.CharField()
    error = serializers.CharField()
    last_seq = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)


_item_serializer = ExecutionItemSerializer()


def _item(row: dict) -> dict:
    started, finished = row["started_at"], row["finished_at"]
    row["success"] = row["status"] == ExecutionStatus.SUCCEEDED
    row["duration_ms"] = (
        int((finished - started).total_seconds() * 1000) if started and finished else None
    )
    return _item_serializer.to_representation(row)


PATHS = Paths(
    risk="proposal__risk_score",
    agent="proposal__agent__name",
    reviewer="proposal__decisions__reviewer__username",
    text="proposal",
)


def executions_page(user, params) -> dict:
    """The page ``params`` ask for, of what ``user`` may see: ``{"items", "next_cursor"}``."""
    filters = Filters(params, FILTERS)
    rows = Execution.objects.visible_to(user)
    statuses = filters.choices("status", ExecutionStatus.values)
    if statuses:
        rows = rows.filter(status__in=statuses)
    rows = shared_filters(filters, rows, PATHS)
    order = ORDERS[filters.choice("order", ORDERS, "newest")]
    cursor, limit = filters.paging()
    rows = rows.values(
        *COLUMNS,
        proposal_id=F("proposal__id"),
        agent=F("proposal__agent__name"),
        risk=F("proposal__risk_score"),
    )
    found, next_cursor = page(rows, order, cursor, limit)
    return {"items": [_item(row) for row in found], "next_cursor": next_cursor}


def list_parameters() -> list[OpenApiParameter]:
    return [
        comma_list("status", ExecutionStatus.values, "only executions with these statuses"),
        OpenApiParameter("risk_min", int, description="only those of proposals of at least this risk (0–10)"),
        OpenApiParameter("risk_max", int, description="only those of proposals of at most this risk (0–10)"),
        OpenApiParameter("action", str, description="only these actions: a name or a glob (`docker.*`)"),
        OpenApiParameter("agent", str, description="only those the agent of this name proposed"),
        OpenApiParameter("reviewer", str, description="only those of proposals this person decided on"),
        OpenApiParameter("created_since", str, description="only those queued at or after this ISO 8601 time"),
        OpenApiParameter("created_until", str, description="only those queued before this ISO 8601 time"),
        OpenApiParameter("q", str, description="only those whose proposal's summary or reason holds this text, case ignored"),
        OpenApiParameter("since_id", int, description="only executions newer than this id"),
        *paging_parameters("`newest`", ORDERS),
    ]  # fmt: skip


PAGE = inline_serializer(
    "ExecutionPage",
    {
        "items": ExecutionItemSerializer(many=True),
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
