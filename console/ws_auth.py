"""Websocket authentication: a Bearer token header, else the browser session of an allowed origin.

A browser's websocket carries its session cookie to any page that opens it;
``BrowserOriginCheck`` refuses one opened by a page of another origin (a
page on evil.example must not read a reviewer's live queue with their
cookie). A client that sends no ``Origin`` is not a browser: it has no
cookie to lend and authenticates with its own token. ``AuthenticationWatch``
closes an open socket once its session or token no longer signs anyone in.
"""

from __future__ import annotations

import asyncio
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
    return AuthMiddlewareStack(_BearerToken(AuthenticationWatch(inner)))


CLOSE_SIGNED_OUT = 4401


class AuthenticationWatch:
    """Ends a websocket once what authenticated it has ended.

    A session signed out (here, everywhere, or by an admin), idle or too old
    (``accounts.middleware``), or a token revoked: checked at the handshake
    (the consumer then sees no one signed in) and every
    ``WEBSOCKET_AUTH_CHECK_SECONDS`` while open, when the socket is closed
    with 4401 and the consumer told it disconnected (the console reloads,
    and the sign-in page says why).
    """

    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        check = _authentication_check(scope)
        if check is None:
            return await self.inner(scope, receive, send)
        if await check():  # accepted only to be closed with a code the page acts on
            if (await receive())["type"] == "websocket.connect":
                await send({"type": "websocket.accept"})
                await send({"type": "websocket.close", "code": CLOSE_SIGNED_OUT})
            return None
        over = asyncio.Event()
        closed = False
        waiting: asyncio.Future | None = None

        async def watch() -> None:
            while not await _after_a_while(check):
                pass
            over.set()

        async def guarded_send(message: dict) -> None:
            if not closed:
                await send(message)

        async def guarded_receive() -> dict:
            nonlocal waiting, closed
            waiting = waiting or asyncio.ensure_future(receive())
            ended = asyncio.ensure_future(over.wait())
            try:
                await asyncio.wait({waiting, ended}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ended.cancel()
            if waiting.done():
                message, waiting = waiting.result(), None
                return message
            if not closed:
                await send({"type": "websocket.close", "code": CLOSE_SIGNED_OUT})
                closed = True
            return {"type": "websocket.disconnect", "code": CLOSE_SIGNED_OUT}

        watcher = asyncio.ensure_future(watch())
        try:
            return await self.inner(scope, guarded_receive, guarded_send)
        finally:
            watcher.cancel()
            if waiting is not None:
                waiting.cancel()


async def _after_a_while(check) -> bool:
    await asyncio.sleep(settings.WEBSOCKET_AUTH_CHECK_SECONDS)
    return await check()


def _authentication_check(scope):
    """An async callable saying whether the socket's authentication has ended, or None."""
    if scope.get("type") != "websocket":
        return None
    if scope.get("auth") is not None:  # a token
        token = _bearer(scope)

        async def token_revoked() -> bool:
            user, _ = await _resolve(token)
            return not user.is_authenticated

        return token_revoked
    user, session = scope.get("user"), scope.get("session")
    key = getattr(session, "session_key", None)
    if key is None or user is None or not user.is_authenticated:
        return None

    async def session_ended() -> bool:
        from accounts.middleware import session_over

        return await database_sync_to_async(session_over)(key) is not None

    return session_ended


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
