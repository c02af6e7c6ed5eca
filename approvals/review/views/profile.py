"""A reviewer's profile: where and when they hear about proposals, and their Slack link."""

from __future__ import annotations

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.access import reviewer_required
from approvals.notify import slack
from approvals.notify.models import Delivery, ReviewerPreferences, preferences_for
from approvals.notify.slack import linking
from approvals.review import forms


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
