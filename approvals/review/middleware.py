"""The console's door: when the policy requires a second factor, people enrol one first.

Reviewers and admins without a passkey or an authenticator app are sent to
enrol one before any console page (the sign-in and second-factor pages, the
API and the one-tap review page stay open: they check on their own).
"""

from __future__ import annotations

from allauth.mfa.utils import is_mfa_enabled
from django.conf import settings
from django.contrib import messages
from django.shortcuts import redirect

from accounts.roles import is_reviewer
from approvals.policy.rules import current_policy

OPEN_PATHS = (
    "/accounts/",
    "/login/",
    "/logout/",
    "/static/",
    "/api/",
    "/slack/",
    "/mcp",
    "/review/",
    "/livez",
    "/healthz",
    "/metrics",
    "/step-up/",
    "/no-role/",
)


def enrolment_required(get_response):
    def middleware(request):
        if _must_enrol(request):
            messages.warning(
                request,
                "Airlock requires a second factor: add a passkey or an authenticator app to go on.",
            )
            return redirect("mfa_index")
        return get_response(request)

    return middleware


def _must_enrol(request) -> bool:
    if request.path.startswith(OPEN_PATHS) or not request.COOKIES.get(settings.SESSION_COOKIE_NAME):
        return False
    user = request.user
    if not user.is_authenticated or not current_policy().require_second_factor:
        return False
    return is_reviewer(user) and not is_mfa_enabled(user)
