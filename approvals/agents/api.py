"""Agent API for proposals: submit, read (long-poll), approve/reject, capabilities."""

from __future__ import annotations

import time
from urllib.parse import urlencode

from django.conf import settings
from django.db.models import F
from drf_spectacular.utils import (
    OpenApiParameter,
    extend_schema,
    inline_serializer,
)
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import stepup
from accounts.roles import is_agent, is_reviewer
from approvals.agents import listing
from approvals.agents.serializers import (
    DecisionRequestSerializer,
    ProposalSerializer,
    WithdrawSerializer,
)
from approvals.choices import CHANGE, UNTIL, ProposalStatus
from approvals.core import services, withdrawal
from approvals.guard.admission import Refused
from approvals.models import Decision, Proposal
from approvals.policy.rules import current_policy
from approvals.routing.reviews import Roster, required_reviews
from audit.services import actor_label
from executions import sessions
from executions.actions import catalog
from executions.api import execution_data
from executions.models import SandboxSession
from executions.sandboxes.status import sandbox_status
from infrastructure import tracing
from infrastructure.prepared import Prepared
from infrastructure.rest.errors import ApiError, error_body, error_responses, get_or_404

WAIT_POLL_SECONDS = 0.05
STATUS_FOR = {
    "unknown_action": 400,
    "validation_error": 400,
    "permission_denied": 403,
    "not_found": 404,
    "conflict": 409,
    "idempotency_conflict": 409,
    "step_up_required": 403,
    "not_a_required_reviewer": 403,
    "sandbox_unsupported": 422,
}


PROPOSAL_FIELDS = [
    "id", "status", "agent_id", "action", "parameters", "summary", "reason", "urgency",
    "idempotency_key", "risk_score", "risk_reasons", "risk_lines", "decision_path",
    "policy_version", "required_approvals", "approvals_count", "execution_id", "created_at", "expires_at",
    "decided_at", "routing", "escalated_at", "withdraw_reason",
]  # fmt: skip
_proposal_row = Prepared(
    lambda pk: Proposal.objects.filter(pk=pk).values(
        *PROPOSAL_FIELDS, agent_name=F("agent__name"), execution_status=F("execution__status")
    ),
    pk=int,
)
_decision_rows = Prepared(
    lambda pk: (
        Decision.objects.filter(proposal_id=pk)
        .order_by("created_at", "pk")
        .values(*listing.DECISION_FIELDS, reviewer_name=F("reviewer__username"))
    ),
    pk=int,
)
_proposal_serializer = ProposalSerializer()


def may_read_proposals(user) -> None:
    if not (is_agent(user) or is_reviewer(user)):
        raise ApiError(403, "permission_denied", "only reviewers and agents can read proposals")


def proposal_data(user, pk: int) -> dict:
    """Proposal ``pk`` as the API answers it, if ``user`` may read it (two queries), else 404."""
    may_read_proposals(user)
    row = _proposal_row.first(pk=pk)
    if row is None or (is_agent(user) and row["agent_id"] != user.agent.pk):
        raise ApiError(404, "not_found", f"proposal {pk} does not exist or is not visible to you")
    row["decisions"] = _decision_rows.rows(pk=pk) if listing.may_have_decisions(row) else []
    return represent(row)


def inline_result(user, data: dict) -> dict:
    """``{"result": …}`` for a proposal whose run ended, as ``long_poll`` adds it."""
    return {"result": result_of(execution_data(user, data["execution_id"]))}


def result_of(execution: dict) -> dict:
    """A finished execution as an answer carries it inline (``?until=finished``, the MCP
    tools): stdout and stderr cut at ``RESULT_INLINE_BYTES``, and where the rest is."""
    result, limit, cut = dict(execution), settings.RESULT_INLINE_BYTES, False
    for stream in ("stdout", "stderr"):
        encoded = result[stream].encode()
        if len(encoded) > limit:
            result[stream] = encoded[:limit].decode(errors="ignore")
            cut = True
    result["output_truncated"] = cut
    result["output_url"] = f"/api/v1/executions/{execution['id']}/output"
    return result


def represent(row: dict, roster: Roster | None = None) -> dict:
    """A proposal row (with ``decisions``) as the API answers it; ``roster``: the teams'
    members, shared by the rows of one answer."""
    routing = row.pop("routing", None)
    if routing:
        roster = roster or Roster(current_policy().teams)
        row["required_reviews"] = required_reviews(routing, row["decisions"], roster)
    else:
        row["required_reviews"] = []
    pending = row["status"] == ProposalStatus.PENDING
    row["approvals_remaining"] = (
        max(row["required_approvals"] - row["approvals_count"], 0) if pending else 0
    )
    return _proposal_serializer.to_representation(row)


def _raise(exc: services.ProposalError):
    extra = {"url": exc.url} if exc.url else {}
    raise ApiError(STATUS_FOR.get(exc.kind, 400), exc.kind, exc.message, **extra) from None


def refused(refusal: Refused) -> Response:
    """429 too_many_pending / rate_limited with Retry-After, 423 agent_paused; not logged
    one by one (a flood would fill the log): they are counted, the first of a burst audited."""
    headers = {"Retry-After": str(refusal.retry_after)} if refusal.retry_after else None
    response = Response(
        error_body(refusal.kind, refusal.message), status=refusal.status, headers=headers
    )
    response._has_been_logged = True  # Django's log of each 4xx
    return response


def submitted(request, submission: services.Submission) -> Response:
    """201 with a new proposal as it stands (no second read), 200 with a replayed one."""
    proposal = submission.proposal
    if not submission.created:
        return Response(proposal_data(request.user, proposal.pk), status=status.HTTP_200_OK)
    row = {name: getattr(proposal, name) for name in PROPOSAL_FIELDS}
    row["agent_name"] = proposal.agent.name
    row["execution_status"] = proposal.execution.status if proposal.execution_id else None
    row["decisions"] = []  # none yet
    return Response(represent(row), status=status.HTTP_201_CREATED)


WAIT_PARAMETERS = [
    OpenApiParameter(
        "wait",
        float,
        description=f"block up to this many seconds (≤ {settings.LONG_POLL_MAX_SECONDS}) "
        "for a change of status, approvals or execution status; a proposal that has "
        "reached its end (denied, rejected, expired, or its execution finished) "
        "answers at once",
    ),
    OpenApiParameter(
        "until",
        str,
        enum=UNTIL,
        description="what a `wait` waits for: `change` (the default) any change of "
        "what the call read; `decided` the proposal's decision (approved, denied, "
        "rejected, expired); `finished` its end: a decision against it, or its "
        "execution's end. A proposal already there answers at once.",
    ),
]


class Proposals(APIView):
    @extend_schema(
        parameters=listing.list_parameters(),
        responses={200: listing.page_serializer(ProposalSerializer), **listing.LIST_ERRORS},
        examples=listing.LIST_EXAMPLES,
        operation_id="proposals_list",
        summary="List proposals",
        description="Reviewers and admins see every proposal, an agent its own. Filters "
        "combine (all must hold); a page holds at most `limit` proposals and `next_cursor` "
        "reads on. `status=pending` alone orders by risk, then age: the queue as reviewers "
        "see it. With `since_id` and `wait` a bot hears of new proposals as they come.",
    )
    def get(self, request):
        may_read_proposals(request.user)
        return Response(
            listing.proposals_page(request.user, request.query_params, PROPOSAL_FIELDS, represent)
        )

    @extend_schema(
        request=services.EnvelopeSerializer,
        parameters=WAIT_PARAMETERS,
        responses={
            201: ProposalSerializer,
            200: ProposalSerializer,
            **error_responses(
                e423="agent_paused: an admin paused this agent (or its rejections in a row did)",
                e429="too_many_pending: the agent's max_pending proposals wait for review; "
                "rate_limited: past its max_proposals_per_minute. Both carry Retry-After.",
            ),
        },
        summary="Propose an action",
        description="The same idempotency key returns the original proposal (200). With "
        "`?wait=N&until=finished` the call answers once the proposal has run (or was "
        "decided against), within N seconds: proposal to result in one call.",
    )
    @tracing.server_span("POST /api/v1/proposals")  # the agent's traceparent continued
    def post(self, request):
        if not is_agent(request.user):
            raise ApiError(403, "permission_denied", "only agent tokens can propose actions")
        _check_waiting(request)  # before anything is made: a bad wait leaves no proposal
        try:
            submission = services.submit(request.user.agent, request.data)
        except services.ProposalError as exc:
            _raise(exc)
        except Refused as refusal:
            return refused(refusal)
        return submitted(request, submission)


class ProposalDetail(APIView):
    @extend_schema(
        parameters=WAIT_PARAMETERS,
        responses=ProposalSerializer,
        summary="Read a proposal",
    )
    def get(self, request, pk: int):
        data = proposal_data(request.user, pk)
        _check_waiting(request)
        return Response(data)


def _check_waiting(request) -> None:
    """400 for a bad ``wait`` or ``until``; the waiting is approvals.agents.waiting.long_poll's."""
    _wait_seconds(request)
    _until(request)


def _wait_seconds(request) -> float:
    raw = request.query_params.get("wait")
    if raw in (None, ""):
        return 0
    try:
        wait = float(raw)
    except ValueError:
        raise ApiError(
            400, "validation_error", f"wait must be a number of seconds, got {raw!r}"
        ) from None
    if not 0 <= wait <= settings.LONG_POLL_MAX_SECONDS:
        raise ApiError(
            400, "validation_error", f"wait must be between 0 and {settings.LONG_POLL_MAX_SECONDS}"
        )
    return wait


def _until(request) -> str:
    until = request.query_params.get("until") or CHANGE
    if until not in UNTIL:
        raise ApiError(
            400, "validation_error", f"until must be one of {', '.join(UNTIL)}, got {until!r}"
        )
    return until


DECISION_RESPONSES = {
    200: ProposalSerializer,
    **error_responses(
        e400="validation_error: the comment",
        e403=(
            "permission_denied: an agent's token, no review rights, your own proposal; "
            "not_a_required_reviewer: the proposal's review route needs approvals from teams "
            "you are not in (the message names them and who may decide); or "
            "step_up_required: the proposal's risk (or breaking the glass) needs a second "
            "factor proved just now, which a token cannot carry; `url` is the console page "
            "that completes the decision"
        ),
        e404="not_found: no such proposal",
        e409="conflict: no longer pending, or already decided by you",
    ),
}


class _DecisionView(APIView):
    kind = ""

    def post(self, request, pk: int):
        if is_agent(request.user):
            raise ApiError(403, "permission_denied", "agent tokens cannot approve or reject")
        body = DecisionRequestSerializer(data=_object(request))
        body.is_valid(raise_exception=True)
        try:
            services.decide(
                pk,
                request.user,
                self.kind,
                body.validated_data["comment"],
                authentication=stepup.TOKEN,
                break_glass=body.validated_data["break_glass"],
            )
        except services.ProposalError as exc:
            comment = body.validated_data["comment"]
            if exc.url and comment:  # the console's page shows it, ready to confirm
                joiner = "&" if "?" in exc.url else "?"
                exc.url = f"{exc.url}{joiner}{urlencode({'comment': comment})}"
            _raise(exc)
        return Response(proposal_data(request.user, pk))


class ProposalWithdraw(APIView):
    @extend_schema(
        request=WithdrawSerializer,
        responses={
            200: ProposalSerializer,
            **error_responses(
                e400="validation_error: the reason",
                e403="permission_denied: not an agent's token",
                e404="not_found: no such proposal of this agent",
                e409="conflict: already decided (or withdrawn)",
            ),
        },
        summary="Withdraw a pending proposal (the agent that made it)",
        description="The proposal becomes `withdrawn`, a final state: nothing will run, "
        "reviewers see it go. Only the proposing agent may; to anyone else it does not exist.",
    )
    def post(self, request, pk: int):
        if not is_agent(request.user):
            raise ApiError(
                404, "not_found", f"proposal {pk} does not exist or is not visible to you"
            )
        body = WithdrawSerializer(data=_object(request))
        body.is_valid(raise_exception=True)
        try:
            withdrawal.withdraw(request.user.agent, pk, body.validated_data["reason"])
        except services.ProposalError as exc:
            _raise(exc)
        return Response(proposal_data(request.user, pk))


class ProposalApprove(_DecisionView):
    kind = "approve"

    @extend_schema(
        request=DecisionRequestSerializer,
        responses=DECISION_RESPONSES,
        summary="Approve (reviewers)",
    )
    def post(self, request, pk: int):
        return super().post(request, pk)


class ProposalReject(_DecisionView):
    kind = "reject"

    @extend_schema(
        request=DecisionRequestSerializer,
        responses=DECISION_RESPONSES,
        summary="Reject (reviewers)",
    )
    def post(self, request, pk: int):
        return super().post(request, pk)


def describe_parameters(serializer_class) -> dict:
    """A compact JSON description of an action's parameters."""
    described = {}
    for name, field in serializer_class().fields.items():
        entry = {
            "type": type(field).__name__.removesuffix("Field").lower(),
            "required": field.required,
        }
        for attr in ("min_value", "max_value", "max_length"):
            if getattr(field, attr, None) is not None:
                entry[attr] = getattr(field, attr)
        if getattr(field, "choices", None):
            entry["choices"] = list(field.choices)
        if not field.required and field.default is not serializers.empty:
            entry["default"] = field.default() if callable(field.default) else field.default
        described[name] = entry
    return described


# Session management runs no code, so it is not a proposal; executes are.
SESSION_OPERATIONS = (
    ("sandbox.create", "POST /api/v1/sandboxes"),
    ("sandbox.list", "GET /api/v1/sandboxes"),
    ("sandbox.execute", "POST /api/v1/sandboxes/{id}/execute"),
    ("sandbox.destroy", "DELETE /api/v1/sandboxes/{id}"),
)


class Capabilities(APIView):
    @extend_schema(
        responses=inline_serializer(
            "Capabilities",
            {
                "principal": serializers.CharField(),
                "capabilities": serializers.ListField(child=serializers.CharField()),
                "actions": serializers.ListField(child=serializers.DictField()),
                "sandbox": serializers.DictField(),
            },
        ),
        summary="What this token may propose, and the sandbox in force",
    )
    def get(self, request):
        return Response(capabilities(request.user))


def capabilities(user) -> dict:
    """What ``user``'s token may propose, and the sandbox in force."""
    agent = user.agent if is_agent(user) else None

    def allowed(action: str) -> bool:  # for some of its targets at least
        return agent.may_propose(action) if agent else False

    actions = [
        {
            "name": spec.name,
            "description": spec.description,
            "base_risk": spec.base_risk,
            "read_only": spec.read_only,
            "allowed": allowed(spec.name),
            "parameters": describe_parameters(spec.serializer),
        }
        for spec in sorted(catalog().values(), key=lambda s: s.name)
    ]
    return {
        "principal": user.get_username(),
        "capabilities": agent.capabilities if agent else [],
        "reviewer": is_reviewer(user),
        "actions": actions,
        "sandbox": sandbox_status(),
        "sessions": [
            {"capability": capability, "request": request_line, "allowed": allowed(capability)}
            for capability, request_line in SESSION_OPERATIONS
        ],
    }


# Sandbox sessions: created and destroyed directly (no code runs), every
# execute is a ``sandbox.execute`` proposal and passes through policy.

SESSION_START_WAIT_SECONDS = 15


class SandboxSerializer(serializers.ModelSerializer):
    class Meta:
        model = SandboxSession
        fields = [
            "id",
            "language",
            "status",
            "backend",
            "worker_host",
            "executes",
            "error",
            "created_at",
            "last_used_at",
            "closed_at",
            "closed_reason",
        ]


class SandboxCreateSerializer(serializers.Serializer):
    language = serializers.ChoiceField(choices=["python"], default="python")


class SandboxExecuteSerializer(serializers.Serializer):
    code = serializers.CharField(max_length=100_000, trim_whitespace=False)
    timeout_seconds = serializers.IntegerField(min_value=1, max_value=300, default=30)
    reason = serializers.CharField(max_length=4000, allow_blank=True, default="")
    idempotency_key = serializers.CharField(max_length=200, required=False)


def _agent_with(request, capability: str):
    if not is_agent(request.user):
        raise ApiError(
            403, "permission_denied", "sandbox sessions belong to agents; use an agent token"
        )
    agent = request.user.agent
    if agent.capability_for(capability) is None:
        raise ApiError(403, "permission_denied", f"the agent has no capability for {capability}")
    return agent


def _object(request) -> dict:
    if not isinstance(request.data, dict):
        raise ApiError(400, "validation_error", "expected a JSON object")
    return request.data


def visible_sessions(user):
    if is_agent(user):
        return SandboxSession.objects.filter(owner=actor_label(user.agent))
    if is_reviewer(user):
        return SandboxSession.objects.all()
    raise ApiError(403, "permission_denied", "only agents and reviewers can see sandbox sessions")


class Sandboxes(APIView):
    @extend_schema(
        operation_id="sandboxes_list",
        responses=inline_serializer("SandboxList", {"sandboxes": SandboxSerializer(many=True)}),
        summary="List sandbox sessions (the newest 200)",
    )
    def get(self, request):
        if is_agent(request.user):
            _agent_with(request, "sandbox.list")
        listed = visible_sessions(request.user).order_by("-created_at")[:200]
        return Response({"sandboxes": SandboxSerializer(listed, many=True).data})

    @extend_schema(
        request=SandboxCreateSerializer,
        responses={201: SandboxSerializer},
        summary="Create a persistent sandbox session",
    )
    def post(self, request):
        agent = _agent_with(request, "sandbox.create")
        body = SandboxCreateSerializer(data=_object(request))
        body.is_valid(raise_exception=True)
        session = sessions.start(actor_label(agent), body.validated_data["language"])
        deadline = time.monotonic() + SESSION_START_WAIT_SECONDS
        while session.status == SandboxSession.Status.STARTING and time.monotonic() < deadline:
            time.sleep(WAIT_POLL_SECONDS)
            session.refresh_from_db()
        return Response(SandboxSerializer(session).data, status=status.HTTP_201_CREATED)


class SandboxDetail(APIView):
    @extend_schema(responses=SandboxSerializer, summary="Read a sandbox session")
    def get(self, request, pk: int):
        return Response(
            SandboxSerializer(
                get_or_404(visible_sessions(request.user), pk, "sandbox session")
            ).data
        )

    @extend_schema(responses=SandboxSerializer, summary="Destroy a sandbox session")
    def delete(self, request, pk: int):
        agent = _agent_with(request, "sandbox.destroy")
        session = get_or_404(visible_sessions(request.user), pk, "sandbox session")
        return Response(SandboxSerializer(sessions.destroy(session, actor_label(agent))).data)


class SandboxExecute(APIView):
    @extend_schema(
        request=SandboxExecuteSerializer,
        responses={201: ProposalSerializer},
        summary="Propose an execute in a session (passes through policy like any proposal)",
    )
    def post(self, request, pk: int):
        agent = _agent_with(request, "sandbox.execute")
        session = get_or_404(visible_sessions(request.user), pk, "sandbox session")
        if session.status != SandboxSession.Status.ACTIVE:
            raise ApiError(
                409, "conflict", f"sandbox session {pk} is {session.status}; create a new session"
            )
        body = SandboxExecuteSerializer(data=_object(request))
        body.is_valid(raise_exception=True)
        data = body.validated_data
        envelope = {
            "action": "sandbox.execute",
            "parameters": {
                "session_id": session.pk,
                "code": data["code"],
                "timeout_seconds": data["timeout_seconds"],
            },
            "reason": data["reason"],
        }
        if data.get("idempotency_key"):
            envelope["idempotency_key"] = data["idempotency_key"]
        try:
            submission = services.submit(agent, envelope)
        except services.ProposalError as exc:
            _raise(exc)
        return submitted(request, submission)
