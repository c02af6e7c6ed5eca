"""Creating agents and tokens; a token is returned once and only its hash is kept."""

from __future__ import annotations

import re

from django.db import transaction
from django.utils import timezone

from accounts import sessions
from approvals.models import Agent, UserToken, hash_token, new_token
from audit.services import record

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
# An action-name glob, and for actions with a target, optionally a glob of it.
CAPABILITY_RE = re.compile(r"^[a-z*?][a-z0-9_.*?\[\]-]{0,99}(:[A-Za-z0-9_.:/*?\[\]-]{1,200})?$")


class TokenError(Exception):
    pass


def validate_capabilities(capabilities: list[str]) -> list[str]:
    cleaned = []
    for glob in capabilities:
        glob = glob.strip()
        if not CAPABILITY_RE.match(glob):
            raise TokenError(
                f"capability {glob!r} is not an action-name glob like script.execute or "
                "docker.*, or one with a target glob like tool.call:github.*"
            )
        if glob not in cleaned:
            cleaned.append(glob)
    return cleaned


def create_agent(
    name: str, capabilities: list[str], owner=None, actor: str = "system"
) -> tuple[Agent, str]:
    if not NAME_RE.match(name):
        raise TokenError(f"agent name {name!r} must be letters, digits, '.', '_' or '-'")
    if Agent.objects.filter(name=name).exists():
        raise TokenError(f"an agent named {name!r} already exists")
    token = new_token()
    agent = Agent(name=name, capabilities=validate_capabilities(capabilities), owner=owner)
    agent.set_token(token)
    agent.save()
    record(actor, "agent.created", agent, capabilities=agent.capabilities)
    return agent, token


def rotate_agent_token(agent: Agent, actor: str) -> str:
    token = new_token()
    agent.set_token(token)
    agent.save(update_fields=["token_hash", "token_hint"])
    record(actor, "agent.token_rotated", agent)
    return token


def create_user_token(user, actor: str = "system", **audit) -> str:
    """A personal API token for ``user``, returned once (``audit``: more for the record)."""
    token = new_token()
    with transaction.atomic():
        user_token = UserToken.objects.create(
            user=user, token_hash=hash_token(token), token_hint=token[:8]
        )
        record(actor, "user_token.created", user_token, user=user.get_username(), **audit)
    return token


def set_agent_active(agent: Agent, active: bool, actor: str) -> None:
    """Revoke (or restore) an agent: a revoked agent's token stops working at once."""
    agent.is_active = active
    agent.save(update_fields=["is_active"])
    record(actor, "agent.restored" if active else "agent.revoked", agent)


def set_agent_capabilities(agent: Agent, capabilities: list[str], actor: str) -> None:
    previous = list(agent.capabilities)
    agent.capabilities = validate_capabilities(capabilities)
    agent.save(update_fields=["capabilities"])
    record(
        actor,
        "agent.capabilities_changed",
        agent,
        before=previous,
        after=agent.capabilities,
    )


def revoke_user_token(token: UserToken, actor: str) -> bool:
    """Revoke one personal token at once; False if it already was."""
    revoked = UserToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    if revoked:
        record(actor, "user_token.revoked", token, user=token.user.get_username())
    return bool(revoked)


def end_access(user, actor: str) -> dict:
    """Sign ``user`` out everywhere and revoke every personal token: one step, audited."""
    tokens = UserToken.objects.filter(user=user, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )
    ended = {"sessions": sessions.end_all(user), "tokens": tokens}
    record(actor, "user.access_ended", user, **ended)
    return ended
