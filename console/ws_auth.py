"""Websocket authentication: a Bearer token header, else the browser session."""

from __future__ import annotations

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async


class _BearerToken:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        token = _bearer(scope)
        if token is not None:
            scope = dict(scope)
            scope["user"], scope["auth"] = await _resolve(token)
        return await self.inner(scope, receive, send)


def _bearer(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
    return None


@database_sync_to_async
def _resolve(token: str):
    from django.contrib.auth.models import AnonymousUser

    from approvals.agents.authentication import resolve_token

    resolved = resolve_token(token)
    return resolved if resolved is not None else (AnonymousUser(), None)


def TokenOrSessionAuthMiddleware(inner):  # noqa: N802 - reads like the Channels stacks
    return AuthMiddlewareStack(_BearerToken(inner))
