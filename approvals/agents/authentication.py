"""Bearer tokens: agents' tokens and reviewers' personal tokens, both stored hashed."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from approvals.models import Agent, UserToken, hash_token
from infrastructure.prepared import Prepared

# Don't write last_seen_at on every request; once a minute is precise enough.
SEEN_RESOLUTION = timedelta(minutes=1)


@dataclass(eq=False)
class AgentPrincipal:
    """``request.user`` for an agent: authenticated, never a reviewer."""

    agent: Agent
    is_authenticated: bool = True
    is_anonymous: bool = False
    is_agent: bool = True
    is_superuser: bool = False
    is_staff: bool = False
    is_active: bool = True
    pk: None = None
    groups: object = field(default=None)

    def get_username(self) -> str:
        return f"agent:{self.agent.name}"

    def has_perm(self, *args, **kwargs) -> bool:
        return False

    def __str__(self) -> str:
        return self.get_username()


def _touch(model, obj) -> None:
    now = timezone.now()
    if obj.last_seen_at is None or now - obj.last_seen_at > SEEN_RESOLUTION:
        model.objects.filter(pk=obj.pk).update(last_seen_at=now)


_AGENT_FIELDS = [field.attname for field in Agent._meta.concrete_fields]
# Every agent request starts here: compiled once (see infrastructure.prepared).
_active_agent = Prepared(
    lambda digest: (
        Agent.objects.filter(token_hash=digest, is_active=True).order_by().values(*_AGENT_FIELDS)
    ),
    digest=str,
)


def resolve_token(token: str):
    """(user-like, auth object) for a valid token, or None."""
    digest = hash_token(token)
    row = _active_agent.first(digest=digest)
    if row is not None:
        agent = Agent.from_db("default", _AGENT_FIELDS, list(row.values()))
        _touch(Agent, agent)
        return AgentPrincipal(agent), agent
    user_token = (
        UserToken.objects.select_related("user")
        .filter(token_hash=digest, revoked_at__isnull=True, user__is_active=True)
        .first()
    )
    if user_token is not None:
        _touch(UserToken, user_token)
        return user_token.user, user_token
    return None


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not isinstance(header, str):
            header = header.decode("latin-1")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != self.keyword.lower():
            return None
        token = token.strip()
        if not token or " " in token or not token.isascii() or not token.isprintable():
            raise exceptions.AuthenticationFailed(
                "malformed Authorization header; use 'Bearer <token>'"
            )
        resolved = resolve_token(token)
        if resolved is None:
            raise exceptions.AuthenticationFailed("invalid or revoked token")
        return resolved

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="airlock"'


class BearerTokenScheme(OpenApiAuthenticationExtension):
    """The published schema's name for these tokens (found by drf-spectacular on import)."""

    target_class = BearerTokenAuthentication
    name = "bearerToken"

    def get_security_definition(self, auto_schema) -> dict:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An agent's token (alk_…) or a reviewer's personal token.",
        }
