"""Agents over the API: who they are and whether they may propose; pause and resume (admins).

Reviewers and admins read the list. Pausing and resuming, one agent or every
agent at once (an incident's kill switch), are admins' and need a second
factor proved just now: a console session carries it; a token cannot, so a
token's call answers ``step_up_required`` with the console page that does it.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.db.models import Count, Q
from django.urls import reverse
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.roles import is_admin, is_reviewer
from accounts.stepup import Authentication
from approvals.choices import ProposalStatus
from approvals.core import pausing
from approvals.models import Agent
from approvals.policy.rules import current_policy
from audit.services import actor_label
from infrastructure.rest.errors import ApiError, error_responses


class AgentSerializer(serializers.Serializer):
    name = serializers.CharField()
    active = serializers.BooleanField(help_text="its token works (false: revoked)")
    paused = serializers.BooleanField()
    paused_at = serializers.DateTimeField(allow_null=True)
    paused_by = serializers.CharField(help_text='who paused it, or "policy" (its rejections)')
    pause_reason = serializers.CharField()
    pending = serializers.IntegerField(help_text="its proposals waiting for review")
    max_pending = serializers.IntegerField()
    max_proposals_per_minute = serializers.IntegerField()
    pause_after_rejections = serializers.IntegerField()
    refused = serializers.DictField(
        child=serializers.IntegerField(), help_text="proposals refused by its limits, by reason"
    )


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(max_length=500, allow_blank=True, default="")


CHANGED = inline_serializer(
    "AgentsChanged",
    {
        "agents": serializers.ListField(
            child=serializers.CharField(), help_text="the agents paused (or resumed) by this call"
        ),
        "paused": serializers.BooleanField(),
    },
)
CHANGE_ERRORS = error_responses(
    e400="validation_error: the reason",
    e403="permission_denied: not an admin; step_up_required: a second factor proved just "
    "now is needed, which a token cannot carry; `url` is the console page that does it",
    e404="not_found: no such agent",
)


def agents_data(names: list[str] | None = None) -> list[dict]:
    policy = current_policy()
    agents = Agent.objects.annotate(
        pending=Count("proposals", filter=Q(proposals__status=ProposalStatus.PENDING))
    ).order_by("name")
    if names is not None:
        agents = agents.filter(name__in=names)
    rows = []
    for agent in agents:
        limits = policy.for_agent(agent.name)
        rows.append(
            {
                "name": agent.name,
                "active": agent.is_active,
                "paused": agent.paused_at is not None,
                "paused_at": agent.paused_at,
                "paused_by": agent.paused_by,
                "pause_reason": agent.pause_reason,
                "pending": agent.pending,
                "max_pending": limits.max_pending,
                "max_proposals_per_minute": limits.max_proposals_per_minute,
                "pause_after_rejections": limits.pause_after_rejections,
                "refused": {
                    "agent_paused": agent.refused_paused,
                    "too_many_pending": agent.refused_pending,
                    "rate_limited": agent.refused_rate,
                },
            }
        )
    return AgentSerializer(rows, many=True).data


class Agents(APIView):
    @extend_schema(
        responses={
            200: AgentSerializer(many=True),
            **error_responses(e403="permission_denied: neither a reviewer nor an admin"),
        },
        summary="The agents, their limits and whether they are paused (reviewers, admins)",
    )
    def get(self, request):
        if not is_reviewer(request.user):
            raise ApiError(403, "permission_denied", "only reviewers and admins see the agents")
        return Response(agents_data())


class _Change(APIView):
    pausing = True
    every = False

    def change(self, request, name: str | None = None):
        if not is_admin(request.user):
            raise ApiError(403, "permission_denied", "only admins pause and resume agents")
        body = ReasonSerializer(data=request.data if isinstance(request.data, dict) else None)
        body.is_valid(raise_exception=True)
        reason = body.validated_data["reason"]
        names = None if self.every else [name]
        if names and not Agent.objects.filter(name=name, is_active=True).exists():
            raise ApiError(404, "not_found", f"no such agent: {name}")
        authentication = Authentication.of_session(request) if request.auth is None else None
        if authentication is None or not authentication.fresh():
            self.ask_for_step_up(name, reason)
        change = pausing.pause if self.pausing else pausing.resume
        try:
            changed = change(
                names, actor_label(request.user), reason, via="api", **authentication.as_audit()
            )
        except pausing.PauseError as exc:
            raise ApiError(404, exc.kind, exc.message) from None
        return Response({"agents": changed, "paused": self.pausing})

    def ask_for_step_up(self, name: str | None, reason: str) -> None:
        verb = "pausing" if self.pausing else "resuming"
        what = "every agent" if self.every else f"agent {name}"
        query = urlencode({"reason": reason}) if reason else ""
        anchor = "#kill-switch" if self.every else f"#agent-{name}"
        raise ApiError(
            403,
            "step_up_required",
            f"{verb} {what} needs a second factor proved just now, which a token cannot "
            "carry: do it in the console",
            url=settings.SITE_URL
            + reverse("console:agents")
            + (f"?{query}" if query else "")
            + anchor,
        )


def _schema(operation_id: str, summary: str):
    return extend_schema(
        operation_id=operation_id,
        request=ReasonSerializer,
        responses={200: CHANGED, **CHANGE_ERRORS},
        summary=summary,
    )


class Pause(_Change):
    @_schema(
        "agent_pause", "Pause an agent: its proposals are refused (423) until resumed (admins)"
    )
    def post(self, request, name: str):
        return self.change(request, name)


class Resume(_Change):
    pausing = False

    @_schema("agent_resume", "Resume a paused agent (admins)")
    def post(self, request, name: str):
        return self.change(request, name)


class PauseAll(_Change):
    every = True

    @_schema("agents_pause_all", "Pause every agent at once: the kill switch (admins)")
    def post(self, request):
        return self.change(request)


class ResumeAll(_Change):
    pausing = False
    every = True

    @_schema("agents_resume_all", "Resume every paused agent (admins)")
    def post(self, request):
        return self.change(request)
