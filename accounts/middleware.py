"""A console session's limits: it ends after ``SESSION_IDLE_MINUTES`` idle or ``SESSION_MAX_HOURS`` in all.

The times are kept in the session itself; the last-seen time is written at
most once a minute, so a busy console does not write its session on every
request. An API call with a bearer token has no session and is not touched.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import logout
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
    started = session.setdefault(SIGNED_IN_AT, now)
    seen = session.get(SEEN_AT, started)
    if now - started > settings.SESSION_MAX_HOURS * 3600:
        return f"You were signed in for {settings.SESSION_MAX_HOURS} hours: sign in again."
    if now - seen > settings.SESSION_IDLE_MINUTES * 60:
        return (
            f"Your session ended after {settings.SESSION_IDLE_MINUTES} idle minutes: sign in again."
        )
    if now - seen >= SEEN_RESOLUTION:
        session[SEEN_AT] = now
    return None


def started(session, now: float | None = None) -> None:
    """A new sign-in: its session's clock starts now."""
    now = now or time.time()
    session[SIGNED_IN_AT] = session[SEEN_AT] = now
