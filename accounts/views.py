"""The sign-in page, the step-up page, and the page of someone the provider gave no role."""

from __future__ import annotations

from allauth.account.views import LoginView
from allauth.mfa.models import Authenticator
from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from accounts.sso.stepup import reauthentication_for
from accounts.stepup import Authentication, purpose_of


class SignIn(LoginView):
    """allauth's sign-in, with password sign-in shown only where it is allowed."""

    def get_context_data(self, **kwargs) -> dict:
        context = super().get_context_data(**kwargs)
        context["password_signin"] = settings.PASSWORD_SIGNIN or bool(settings.BREAK_GLASS_USERS)
        return context


sign_in = SignIn.as_view()


def safe_next(request: HttpRequest, default: str = "/") -> str:
    target = request.GET.get("next") or request.POST.get("next") or ""
    allowed = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if target and allowed else default


@login_required
def step_up(request: HttpRequest) -> HttpResponse:
    """Prove presence again: the person's passkey or TOTP code, or their provider's sign-in."""
    next_url = safe_next(request, reverse("console:home"))
    sso = reauthentication_for(request, next_url)
    types = set(Authenticator.objects.filter(user=request.user).values_list("type", flat=True))
    if sso and sso["only"]:
        types = set()  # the provider's sign-in is how this person steps up
    context = {
        "next": next_url,
        "purpose": purpose_of(request, next_url),
        "fresh": Authentication.of_session(request).fresh(),
        "window_minutes": max(settings.STEP_UP_SECONDS // 60, 1),
        "has_passkey": Authenticator.Type.WEBAUTHN in types,
        "has_totp": Authenticator.Type.TOTP in types,
        "sso": sso,
    }
    return render(request, "accounts/step_up.html", context)


def no_role(request: HttpRequest) -> HttpResponse:
    """Signed in at the provider, but in none of the groups that give a role here."""
    return render(request, "accounts/no_role.html", status=403)
