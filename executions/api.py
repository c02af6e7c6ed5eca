"""Agent API for executions: the result contract, output after a sequence number, cancel."""

from __future__ import annotations

from django.db.models import F
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.roles import is_agent, is_reviewer
from audit.services import actor_label
from infrastructure.prepared import Prepared
from infrastructure.rest.errors import ApiError, error_responses, get_or_404
from infrastructure.rest.serializers import Serializer, refuse_unknown

from . import listing, services
from .models import Execution, OutputChunk

OUTPUT_PAGE_MAX = 1000


class ChunkSerializer(serializers.ModelSerializer):
    class Meta:
        model = OutputChunk
        fields = ["seq", "stream", "data"]


class ExecutionSerializer(serializers.ModelSerializer):
    """The result contract of MISSION §4, of what ``execution_data`` reads."""

    proposal_id = serializers.SerializerMethodField()
    success = serializers.BooleanField(read_only=True)
    stdout = serializers.SerializerMethodField()
    stderr = serializers.SerializerMethodField()
    duration_ms = serializers.IntegerField(read_only=True, allow_null=True)
    provenance = serializers.SerializerMethodField()

    class Meta:
        model = Execution
        fields = [
            "id",
            "proposal_id",
            "action",
            "status",
            "success",
            "stdout",
            "stderr",
            "exit_code",
            "duration_ms",
            "timed_out",
            "truncated",
            "backend",
            "error",
            "last_seq",
            "report_by",
            "provenance",
            "created_at",
            "started_at",
            "finished_at",
            "output_archived_at",
        ]

    # Of the instance ``execution_data`` builds: its row, the proposal's id and the
    # output read with it (two queries, whatever the output's length).
    def get_proposal_id(self, execution: Execution) -> int | None:
        return execution.read_proposal_id

    def _streams(self, execution: Execution) -> dict[str, str]:
        return execution.read_streams

    def get_stdout(self, execution: Execution) -> str:
        return self._streams(execution)["stdout"]

    def get_stderr(self, execution: Execution) -> str:
        return self._streams(execution)["stderr"]

    def get_provenance(self, execution: Execution) -> dict:
        return {
            "command_hash": execution.command_hash,
            "capabilities_used": execution.capabilities_used,
            "worker_host": execution.worker_host,
            "backend": execution.backend,
            "image": execution.details.get("image"),
            "details": execution.details,
            "limits": execution.limits,
            "queue": execution.queue,
            "requested_by": execution.requested_by,
            "timestamps": {
                "queued_at": execution.created_at,
                "started_at": execution.started_at,
                "finished_at": execution.finished_at,
            },
        }


class OutputPageSerializer(serializers.Serializer):
    execution_id = serializers.IntegerField()
    status = serializers.CharField()
    terminal = serializers.BooleanField()
    last_seq = serializers.IntegerField()
    chunks = ChunkSerializer(many=True)


def joined_streams(chunks) -> dict[str, str]:
    """stdout and stderr from output chunks (dicts with ``stream`` and ``data``) in order."""
    texts = {"stdout": [], "stderr": []}
    for chunk in chunks:
        texts[chunk["stream"]].append(chunk["data"])
    return {stream: "".join(parts) for stream, parts in texts.items()}


def may_see_executions(user) -> None:
    if not (is_agent(user) or is_reviewer(user)):
        raise ApiError(
            403, "permission_denied", "only reviewers and the proposing agent can see executions"
        )


def visible_executions(user):
    may_see_executions(user)
    return Execution.objects.select_related("proposal").visible_to(user)


# The result contract is read after every run: the row and its output, each a
# statement compiled once (infrastructure.prepared), one serializer made once.
EXECUTION_FIELDS = [field.attname for field in Execution._meta.concrete_fields]
_execution_row = Prepared(
    lambda pk: Execution.objects.filter(pk=pk).values(
        *EXECUTION_FIELDS, read_proposal_id=F("proposal__id"), read_agent_id=F("proposal__agent_id")
    ),
    pk=int,
)
_chunk_rows = Prepared(
    lambda pk: OutputChunk.objects.filter(execution_id=pk).order_by("seq").values("stream", "data"),
    pk=int,
)
_execution_serializer = ExecutionSerializer()


def execution_data(user, pk: int) -> dict:
    """Execution ``pk``'s result contract as the API answers it (two queries), if ``user``
    may see it; else a 404 that does not tell the two apart."""
    may_see_executions(user)
    row = _execution_row.first(pk=pk)
    if row is None or (is_agent(user) and row["read_agent_id"] != user.agent.pk):
        raise ApiError(404, "not_found", f"execution {pk} does not exist or is not visible to you")
    execution = Execution(**{name: row[name] for name in EXECUTION_FIELDS})
    execution._state.adding = False
    execution.read_proposal_id = row["read_proposal_id"]
    execution.read_streams = joined_streams(_chunk_rows.rows(pk=pk))
    return _execution_serializer.to_representation(execution)


class Executions(APIView):
    @extend_schema(
        parameters=listing.list_parameters(),
        responses={200: listing.PAGE, **listing.LIST_ERRORS},
        operation_id="executions_list",
        summary="List executions",
        description="Reviewers see every execution, an agent those of its own proposals. "
        "Newest first; filters combine; `next_cursor` reads on. Without the output: "
        "read one execution for its stdout and stderr.",
    )
    def get(self, request):
        may_see_executions(request.user)
        return Response(listing.executions_page(request.user, request.query_params))


class ExecutionDetail(APIView):
    @extend_schema(responses=ExecutionSerializer, summary="An execution's result contract")
    def get(self, request, pk: int):
        return Response(execution_data(request.user, pk))


class ExecutionOutput(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="last sequence number already seen"),
            OpenApiParameter(
                "limit", int, description=f"at most this many chunks (≤ {OUTPUT_PAGE_MAX})"
            ),
        ],
        responses=OutputPageSerializer,
        summary="Output chunks after a sequence number",
    )
    def get(self, request, pk: int):
        execution = get_or_404(visible_executions(request.user), pk, "execution")
        after = _int_param(request, "after", 0, 0, 2**31 - 1)
        limit = _int_param(request, "limit", OUTPUT_PAGE_MAX, 1, OUTPUT_PAGE_MAX)
        chunks = execution.chunks.filter(seq__gt=after).order_by("seq")[:limit]
        return Response(
            {
                "execution_id": execution.pk,
                "status": execution.status,
                "terminal": execution.is_terminal,
                "last_seq": execution.last_seq,
                "chunks": ChunkSerializer(chunks, many=True).data,
            }
        )


class ExecutionCancel(APIView):
    @extend_schema(
        request=None, responses={202: ExecutionSerializer}, summary="Cancel an execution"
    )
    def post(self, request, pk: int):
        execution = get_or_404(visible_executions(request.user), pk, "execution")
        try:
            services.request_cancel(execution.pk, actor_label(request.user))
        except services.ExecutionConflict as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return Response(execution_data(request.user, pk), status=status.HTTP_202_ACCEPTED)


class ReportSerializer(Serializer):
    """How a call the agent carried out went (``tool.call``)."""

    status = serializers.ChoiceField(
        choices=["succeeded", "failed"], help_text="whether the call did what it was asked"
    )
    output = serializers.JSONField(
        required=False,
        default="",
        allow_null=True,
        help_text="what the call returned or why it failed: text, or any JSON (kept as the "
        "execution's stdout, text as it is, JSON serialized; null, nothing returned, as empty)",
    )


class ExecutionReport(APIView):
    @extend_schema(
        request=ReportSerializer,
        responses={
            200: ExecutionSerializer,
            **error_responses(
                e400="the body is not a report",
                e403="not the agent whose proposal this execution carries out",
                e404="no such execution",
                e409="carried out by Airlock, already reported, or lost past its deadline",
            ),
        },
        summary="Report how a call the agent carried out went",
        description="For `tool.call`: once approved, the proposing agent makes the call "
        "and reports here, once, before `report_by`; after it the execution is `lost`.",
    )
    def post(self, request, pk: int):
        if not is_agent(request.user):
            raise ApiError(
                403, "permission_denied", "only the proposing agent reports; use its token"
            )
        report = ReportSerializer(data=request.data)
        report.is_valid(raise_exception=True)
        refuse_unknown(request.data, report)  # a valid report is a JSON object
        try:
            services.report(
                pk,
                actor_label(request.user.agent),
                report.validated_data["status"] == "succeeded",
                report.validated_data["output"],
            )
        except services.ReportRefused as refused:
            raise ApiError(refused.status, refused.kind, refused.message) from None
        return Response(execution_data(request.user, pk))


def _int_param(request, name: str, default: int, minimum: int, maximum: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ApiError(400, "validation_error", f"{name} must be an integer, got {raw!r}") from None
    if not minimum <= value <= maximum:
        raise ApiError(400, "validation_error", f"{name} must be between {minimum} and {maximum}")
    return value
