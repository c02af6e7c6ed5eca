"""Policy as code over the API: export, apply, simulate, versions.

Reviewers and admins (personal tokens or a console session) read and
simulate; only admins apply. Agents never touch policy. A policy travels as
the YAML text ``manage.py policy export`` writes: in a JSON body as
``{"text": ..., "comment": ...}``, or as the raw body with
``Content-Type: application/yaml`` (``?comment=`` / ``?last=`` then).
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.roles import is_admin, is_reviewer
from accounts.stepup import Authentication
from approvals.policy import drafts, simulation
from approvals.policy import text as policy_text
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import (
    PolicySerializer,
    current_policy,
    describe_diff,
    diff,
    update_policy,
)
from infrastructure.rest.errors import ApiError, error_responses

YAML_MEDIA_TYPE = "application/yaml"


class YamlTextParser(BaseParser):
    """A raw YAML body, handed on as ``{"text": ...}`` (parsed later, with line numbers)."""

    media_type = YAML_MEDIA_TYPE

    def parse(self, stream, media_type=None, parser_context=None) -> dict:
        try:
            return {"text": stream.read().decode("utf-8")}
        except UnicodeDecodeError as exc:
            raise ParseError(f"the policy must be UTF-8 text: {exc}") from None


class PolicyTextSerializer(serializers.Serializer):
    text = serializers.CharField(trim_whitespace=False, help_text="the policy as YAML")


class ApplySerializer(PolicyTextSerializer):
    comment = serializers.CharField(max_length=500, allow_blank=True, default="")


class SimulateSerializer(PolicyTextSerializer):
    last = serializers.IntegerField(
        min_value=1, max_value=simulation.MAX_LAST, default=simulation.DEFAULT_LAST
    )


def _may_read(user) -> None:
    if not is_reviewer(user):
        raise ApiError(403, "permission_denied", "only reviewers and admins can read the policy")


def _may_write(user) -> None:
    if not is_admin(user):
        raise ApiError(403, "permission_denied", "only admins can change the policy")


def _body(request, serializer_class, query_fields: tuple[str, ...]) -> dict:
    if not isinstance(request.data, dict):
        raise ApiError(400, "validation_error", "expected a JSON object or a YAML body")
    data = {k: request.query_params[k] for k in query_fields if k in request.query_params}
    body = serializer_class(data={**data, **request.data})
    body.is_valid(raise_exception=True)
    return body.validated_data


def _parsed(text: str) -> dict:
    try:
        return policy_text.parse(text)
    except policy_text.PolicyTextError as exc:
        raise ApiError(400, "validation_error", str(exc)) from None


class PolicyExport(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("version", int, description="a stored version; default: in force")
        ],
        responses={
            (200, YAML_MEDIA_TYPE): PolicySerializer,
            **error_responses(
                e400="validation_error: the version is not a number",
                e403="permission_denied: neither a reviewer nor an admin",
                e404="not_found: no such version",
            ),
        },
        summary="The policy as YAML (reviewers and admins)",
        description="The document `POST /api/v1/policy/apply` takes, with comments.",
    )
    def get(self, request):
        _may_read(request.user)
        raw = request.query_params.get("version")
        if raw not in (None, "") and not (raw.isascii() and raw.isdigit()):
            raise ApiError(400, "validation_error", f"version must be a number, got {raw!r}")
        try:
            text = policy_text.version_text(int(raw) if raw else None)
        except KeyError:
            raise ApiError(404, "not_found", f"policy version {raw} does not exist") from None
        return HttpResponse(text, content_type=f"{YAML_MEDIA_TYPE}; charset=utf-8")


class PolicyApply(APIView):
    parser_classes = [JSONParser, YamlTextParser]

    @extend_schema(
        request={"application/json": ApplySerializer, YAML_MEDIA_TYPE: OpenApiTypes.STR},
        parameters=[OpenApiParameter("comment", str, description="with a YAML body")],
        responses={
            201: inline_serializer(
                "PolicyApplied",
                {
                    "version": serializers.IntegerField(),
                    "comment": serializers.CharField(),
                    "changes": serializers.DictField(),
                },
            ),
            **error_responses(
                e400="validation_error: the text, with its line and field",
                e403=(
                    "permission_denied: not an admin; or step_up_required: putting a policy in "
                    "force needs a second factor proved just now, which a token cannot carry; "
                    "the policy is kept, and `url` is the console page that applies it"
                ),
            ),
        },
        summary="Put a policy in force as a new, audited version (admins)",
    )
    def post(self, request):
        _may_write(request.user)
        data = _body(request, ApplySerializer, ("comment",))
        document = _parsed(data["text"])
        if request.auth is not None or not Authentication.of_session(request).fresh():
            _keep_for_the_console(request, document, data)
        previous = current_policy().as_data()
        version = update_policy(document, request.user, data["comment"])
        return Response(
            {
                "version": version.version,
                "comment": version.comment,
                "changes": diff(previous, current_policy().as_data()),
            },
            status=status.HTTP_201_CREATED,
        )


def _keep_for_the_console(request, document: dict, data: dict) -> None:
    """A token carries no second factor: keep the (valid) policy for the console, say where."""
    checked = PolicySerializer(data=document)
    checked.is_valid(raise_exception=True)
    key = drafts.keep(data["text"], data["comment"], request.user)
    raise ApiError(
        403,
        "step_up_required",
        "putting a policy in force needs a second factor proved just now, which a token "
        "cannot carry; the policy is valid and kept for you for an hour: review and apply "
        "it in the console",
        url=settings.SITE_URL + reverse("console:policy-apply") + f"?draft={key}",
    )


class PolicySimulate(APIView):
    parser_classes = [JSONParser, YamlTextParser]

    @extend_schema(
        request={"application/json": SimulateSerializer, YAML_MEDIA_TYPE: OpenApiTypes.STR},
        parameters=[OpenApiParameter("last", int, description="with a YAML body")],
        responses=OpenApiTypes.OBJECT,
        summary="How the last N proposals would move under a draft policy; nothing is saved",
        description=(
            "Replays each proposal with the risk score and targets it had. The pre-validator is "
            "not called: a verdict recorded at the time is reused."
        ),
    )
    def post(self, request):
        _may_read(request.user)
        data = _body(request, SimulateSerializer, ("last",))
        draft = _parsed(data["text"])
        preview = simulation.simulate(draft, data["last"])
        changes = describe_diff(current_policy().as_data(), draft)
        return Response({"changes": changes, **preview.as_dict()})


class PolicyVersions(APIView):
    @extend_schema(
        responses=inline_serializer(
            "PolicyVersions",
            {"versions": serializers.ListField(child=serializers.DictField())},
        ),
        summary="Stored policy versions, newest first (reviewers and admins)",
    )
    def get(self, request):
        _may_read(request.user)
        versions = PolicyVersion.objects.select_related("created_by")[:200]
        return Response(
            {
                "versions": [
                    {
                        "version": v.version,
                        "created_at": v.created_at,
                        "created_by": v.created_by.get_username() if v.created_by else None,
                        "comment": v.comment,
                    }
                    for v in versions
                ]
            }
        )
