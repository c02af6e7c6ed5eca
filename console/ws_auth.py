"""Websocket authentication: a Bearer token header, else the browser session of an allowed origin.

A browser's websocket carries its session cookie to any page that opens it;
``BrowserOriginCheck`` refuses one opened by a page of another origin (a
page on evil.example must not read a reviewer's live queue with their
cookie). A client that sends no ``Origin`` is not a browser: it has no
cookie to lend and authenticates with its own token.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from django.conf import settings


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


def origin_allowed(origin: str) -> bool:
    """Whether a page of ``origin`` may open the console's websockets."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    if settings.WEBSOCKET_LOOPBACK_ORIGINS and parts.hostname in settings.LOOPBACK_HOSTS:
        return True
    allowed = {_normal(entry) for entry in settings.WEBSOCKET_ALLOWED_ORIGINS}
    return "*" in settings.WEBSOCKET_ALLOWED_ORIGINS or _normal(origin) in allowed


def _normal(origin: str) -> tuple[str, str, int]:
    parts = urlsplit(origin.strip())
    try:
        port = parts.port
    except ValueError:
        port = None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or ""), port or (443 if scheme in ("https", "wss") else 80)


class BrowserOriginCheck:
    """Refuses a websocket whose ``Origin`` header names a page not allowed to open it."""

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        origins = [value for name, value in scope.get("headers", []) if name == b"origin"]
        if origins and not origin_allowed(origins[-1].decode("latin-1")):
            return await WebsocketDenier()(scope, receive, send)
        return await self.inner(scope, receive, send)
