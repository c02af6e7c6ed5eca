"""A reviewer's profile: where and when they hear about proposals, and their Slack link."""

from __future__ import annotations

from allauth.mfa.models import Authenticator
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts import sessions, stepup
from accounts.access import reviewer_required
from accounts.stepup import Authentication
from approvals.core import tokens
from approvals.models import UserToken
from approvals.notify import slack
from approvals.notify.models import Delivery, ReviewerPreferences, preferences_for
from approvals.notify.slack import linking
from approvals.review import forms
from audit.services import actor_label


def _profile_context(request: HttpRequest, form, link_code: str = "") -> dict:
    return {
        "form": form,
        "preferences": preferences_for(request.user),
        "slack_configured": slack.configured(),
        "link_code": link_code,
        "link_minutes": linking.CODE_MINUTES,
        "recent": Delivery.objects.filter(recipient=request.user).select_related("proposal")[:10],
    }


@reviewer_required
def profile(request: HttpRequest) -> HttpResponse:
    """Where and when the person hears about proposals; their Slack link."""
    form = forms.PreferencesForm(
        request.POST or None,
        instance=preferences_for(request.user),
        initial={"address": request.user.email},
    )
    if request.method == "POST" and form.is_valid():
        chosen = {name: form.cleaned_data[name] for name in forms.PreferencesForm.Meta.fields}
        with transaction.atomic():
            ReviewerPreferences.objects.update_or_create(user=request.user, defaults=chosen)
            request.user.email = form.cleaned_data["address"]
            request.user.save(update_fields=["email"])
        messages.success(request, "Your preferences are saved.")
        return redirect("console:profile")
    status = 400 if form.errors else 200
    return render(request, "approvals/profile.html", _profile_context(request, form), status=status)


@require_POST
@reviewer_required
def profile_slack_code(request: HttpRequest) -> HttpResponse:
    """A one-time code to type into Slack (``/airlock link CODE``); shown once."""
    if not slack.configured():
        messages.error(request, "Slack is not set up on this Airlock.")
        return redirect("console:profile")
    code = linking.new_code(request.user)
    form = forms.PreferencesForm(
        instance=preferences_for(request.user), initial={"address": request.user.email}
    )
    return render(request, "approvals/profile.html", _profile_context(request, form, code))


@require_POST
@reviewer_required
def profile_slack_unlink(request: HttpRequest) -> HttpResponse:
    if linking.unlink(request.user):
        messages.success(request, "Your Slack account is no longer linked.")
    return redirect("console:profile")


@reviewer_required
def security(request: HttpRequest, new_token: str = "") -> HttpResponse:
    """How the person signs in: their sessions, personal tokens and second factors."""
    context = {
        "new_token": new_token,
        "step_up_min_risk": settings.STEP_UP_MIN_RISK,
        "sessions": sessions.listed(request.user),
        "current_session": request.session.session_key,
        "tokens": UserToken.objects.filter(user=request.user, revoked_at__isnull=True),
        "factors": Authenticator.objects.filter(user=request.user).exclude(
            type=Authenticator.Type.RECOVERY_CODES
        ),
        "signed_in": Authentication.of_session(request),
    }
    return render(request, "approvals/security.html", context)


@require_POST
@reviewer_required
def sign_out_everywhere(request: HttpRequest) -> HttpResponse:
    """End every session of the person (this one too) and revoke their personal tokens."""
    ended = tokens.end_access(request.user, actor_label(request.user))
    messages.success(
        request,
        f"Signed out of {ended['sessions']} session{'s' if ended['sessions'] != 1 else ''}; "
        f"{ended['tokens']} token{'s' if ended['tokens'] != 1 else ''} revoked.",
    )
    return redirect("login")


@require_POST
@reviewer_required
def new_token(request: HttpRequest) -> HttpResponse:
    """A personal API token, shown once; making one needs a fresh second factor."""
    authentication = Authentication.of_session(request)
    if not authentication.fresh():
        return stepup.ask(
            request, reverse("console:security") + "#tokens", "Make a personal API token"
        )
    token = tokens.create_user_token(
        request.user, actor_label(request.user), **authentication.as_audit()
    )
    return security(request, new_token=token)


@require_POST
@reviewer_required
def revoke_token(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(UserToken, pk=pk, user=request.user)
    if tokens.revoke_user_token(token, actor_label(request.user)):
        messages.success(request, f"Token {token.token_hint}… revoked: it no longer works.")
    return redirect("console:security")
