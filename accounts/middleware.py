"""A console session's limits: it ends after ``SESSION_IDLE_MINUTES`` idle or ``SESSION_MAX_HOURS`` in all.

The times are kept in the session itself; the last-seen time is written at
most once a minute, so a busy console does not write its session on every
request. An API call with a bearer token has no session and is not touched.
A websocket, which makes no requests while open, asks ``session_over``
(``console.ws_auth.AuthenticationWatch``).
"""

from __future__ import annotations

import time
from importlib import import_module

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import SESSION_KEY, logout
from django.contrib.auth.views import redirect_to_login

SIGNED_IN_AT = "airlock_signed_in_at"
SEEN_AT = "airlock_seen_at"
SEEN_RESOLUTION = 60


def session_lifetime(get_response):
    def middleware(request):
        if request.COOKIES.get(settings.SESSION_COOKIE_NAME) and request.user.is_authenticated:
            ended = _ended(request.session, time.time())
            if ended:
                logout(request)
                if not request.path.startswith("/api/"):
                    messages.info(request, ended)
                    return redirect_to_login(request.get_full_path())
        return get_response(request)

    return middleware


def _ended(session, now: float) -> str | None:
    """Why the session is over, or None (and its last-seen time kept)."""
    session.setdefault(SIGNED_IN_AT, now)
    reason = why_over(session, now)
    if reason is None and now - session.get(SEEN_AT, session[SIGNED_IN_AT]) >= SEEN_RESOLUTION:
        session[SEEN_AT] = now
    return reason


def why_over(data, now: float) -> str | None:
    """Why a session with these contents is over (too old, or idle too long), or None."""
    started = data.get(SIGNED_IN_AT, now)
    seen = data.get(SEEN_AT, started)
    if now - started > settings.SESSION_MAX_HOURS * 3600:
        return f"You were signed in for {settings.SESSION_MAX_HOURS} hours: sign in again."
    if now - seen > settings.SESSION_IDLE_MINUTES * 60:
        return (
            f"Your session ended after {settings.SESSION_IDLE_MINUTES} idle minutes: sign in again."
        )
    return None


def session_over(session_key: str) -> str | None:
    """Why the stored session ``session_key`` no longer signs anyone in, or None.

    For what holds a session open without requests (a websocket): signed out
    (here, everywhere, or by an admin), expired, idle or too old.
    """
    data = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    if not data.get(SESSION_KEY):
        return "You were signed out."
    return why_over(data, time.time())


def started(session, now: float | None = None) -> None:
    """A new sign-in: its session's clock starts now."""
    now = now or time.time()
    session[SIGNED_IN_AT] = session[SEEN_AT] = now
