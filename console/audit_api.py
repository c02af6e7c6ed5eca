"""``GET /api/v1/audit`` and ``/api/v1/audit/verify``: the audit trail for admins' tools.

The export reads the chain in order, a page at a time after a sequence
number (``after``), so a copy taken page by page is the chain as it was,
with every row's hashes: a copy can be checked against the server's later.
Verification walks the whole chain with the server's key and names the first
row that was edited, inserted or deleted.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.roles import is_admin
from audit.models import AuditEvent
from audit.services import verify_chain
from infrastructure.rest.errors import ApiError, error_responses
from infrastructure.rest.listing import Filters

PAGE_MAX = 1000


class AuditEventSerializer(serializers.Serializer):
    seq = serializers.IntegerField()
    created_at = serializers.DateTimeField()
    actor = serializers.CharField()
    verb = serializers.CharField()
    object_type = serializers.CharField()
    object_id = serializers.CharField()
    data = serializers.JSONField()
    prev_hash = serializers.CharField()
    hash = serializers.CharField()


_event_serializer = AuditEventSerializer()


def _may_read(user) -> None:
    if not is_admin(user):
        raise ApiError(403, "permission_denied", "only admins can read the audit trail")


class AuditEvents(APIView):
    @extend_schema(
        operation_id="audit_list",
        parameters=[
            OpenApiParameter("after", int, description="the last sequence number already read"),
            OpenApiParameter("limit", int, description=f"rows per page, 1 to {PAGE_MAX}"),
        ],
        responses={
            200: inline_serializer(
                "AuditPage",
                {
                    "events": AuditEventSerializer(many=True),
                    "next_after": serializers.IntegerField(
                        allow_null=True, help_text="`after` of the next page; null at the end"
                    ),
                },
            ),
            **error_responses(
                e400="validation_error: a parameter", e403="permission_denied: not an admin"
            ),
        },
        summary="The audit trail in order, a page at a time (admins)",
    )
    def get(self, request):
        _may_read(request.user)
        filters = Filters(request.query_params, ("after",))
        if filters.raw("cursor") is not None:
            raise ApiError(400, "validation_error", "cursor: the audit trail pages by `after`")
        after = filters.integer("after", 0, 2**63 - 1) or 0
        limit = filters.integer("limit", 1, PAGE_MAX) or PAGE_MAX
        rows = list(
            AuditEvent.objects.filter(seq__gt=after)
            .order_by("seq")
            .values(*AuditEventSerializer().fields)[: limit + 1]
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Response(
            {
                "events": [_event_serializer.to_representation(row) for row in rows],
                "next_after": rows[-1]["seq"] if more else None,
            }
        )


class AuditVerify(APIView):
    @extend_schema(
        operation_id="audit_verify",
        responses={
            200: inline_serializer(
                "AuditVerification",
                {
                    "ok": serializers.BooleanField(),
                    "checked": serializers.IntegerField(help_text="rows found sound"),
                    "first_bad_seq": serializers.IntegerField(allow_null=True),
                    "problem": serializers.CharField(help_text="empty when ok"),
                },
            ),
            **error_responses(e403="permission_denied: not an admin"),
        },
        summary="Check the whole audit chain with the server's key (admins)",
    )
    def get(self, request):
        _may_read(request.user)
        report = verify_chain()
        return Response(
            {
                "ok": report.ok,
                "checked": report.checked,
                "first_bad_seq": report.first_bad_seq,
                "problem": report.problem,
            }
        )
