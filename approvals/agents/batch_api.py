"""Batch decisions: ``POST /api/v1/proposals/approve`` and ``/reject`` with ``{"ids", "comment"}``.

The answer is 200 with a result per id, each decided by its own rules
(``approvals.core.batch``); only a request that cannot be read at all, or a
caller who may decide nothing (an agent's token, no review rights), is refused
as a whole.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import stepup
from accounts.roles import is_agent, is_reviewer
from approvals.agents.serializers import CommentSerializer
from approvals.core.batch import MAX_IDS, decide_many
from infrastructure.rest.errors import ApiError, ErrorDetail, error_responses


class BatchRequestSerializer(CommentSerializer):
    ids = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=2**63 - 1),
        min_length=1,
        max_length=MAX_IDS,
        help_text=f"the proposals to decide, 1 to {MAX_IDS} (each once; repeats are ignored)",
    )


class BatchResultSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.CharField(
        required=False,
        help_text="decided: the proposal's status now (pending while more approvals are needed)",
    )
    error = ErrorDetail(
        required=False,
        help_text="not decided: not_found, conflict (already decided), permission_denied, "
        "not_a_required_reviewer, step_up_required (`url`: the console page that decides "
        "every such proposal of the batch after one second factor)",
    )


class BatchResponseSerializer(serializers.Serializer):
    results = BatchResultSerializer(many=True)


class _BatchView(APIView):
    kind = ""

    def post(self, request):
        if is_agent(request.user) or not is_reviewer(request.user):
            raise ApiError(403, "permission_denied", "only reviewers can approve or reject")
        if not isinstance(request.data, dict):
            raise ApiError(400, "validation_error", "expected a JSON object")
        body = BatchRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        results = decide_many(
            body.validated_data["ids"],
            request.user,
            self.kind,
            body.validated_data["comment"],
            authentication=stepup.TOKEN,
        )
        return Response({"results": results})


def _schema(verb: str):
    return extend_schema(
        operation_id=f"proposals_{verb.lower()}_many",
        request=BatchRequestSerializer,
        responses={
            200: BatchResponseSerializer,
            **error_responses(
                e400="validation_error: ids (1 to 100 integers) or the comment",
                e403="permission_denied: an agent's token or no review rights",
            ),
        },
        summary=f"{verb} several proposals (reviewers)",
        description="Each id is decided as if alone (its route, quorum, step-up) and gets its "
        "own result; one that cannot be decided does not stop the others.",
    )


class BatchApprove(_BatchView):
    kind = "approve"

    @_schema("Approve")
    def post(self, request):
        return super().post(request)


class BatchReject(_BatchView):
    kind = "reject"

    @_schema("Reject")
    def post(self, request):
        return super().post(request)
