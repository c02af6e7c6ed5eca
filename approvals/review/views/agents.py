"""The admins' agents page: create agents, rotate and revoke their tokens, set capabilities."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.access import admin_required
from accounts.stepup import fresh_factor_required
from approvals.core import tokens
from approvals.models import Agent
from approvals.review import forms
from audit.services import actor_label

KEPT_FIELDS = ("name", "capabilities", "owner")


@admin_required
@fresh_factor_required(keep=KEPT_FIELDS, purpose="Create an agent and its token")
def agents(request: HttpRequest) -> HttpResponse:
    """The agents; a new one's form (filled again from the query after a step-up)."""
    kept = {name: request.GET[name] for name in KEPT_FIELDS if name in request.GET}
    form = forms.AgentCreateForm(request.POST or None, initial=kept)
    new_token = ""
    if request.method == "POST" and form.is_valid():
        try:
            agent, new_token = tokens.create_agent(
                form.cleaned_data["name"],
                form.cleaned_data["capabilities"],
                owner=form.cleaned_data["owner"],
                actor=actor_label(request.user),
            )
        except tokens.TokenError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, f"Agent {agent.name} created.")
            form = forms.AgentCreateForm()
    context = {
        "form": form,
        "new_token": new_token,
        "agents": Agent.objects.select_related("owner"),
    }
    status = 400 if form.errors else 200
    return render(request, "approvals/agents.html", context, status=status)


@require_POST
@admin_required
@fresh_factor_required(
    then=lambda request, pk, operation: reverse("console:agents"),
    purpose="Change an agent: its token or its capabilities",
)
def agent_action(request: HttpRequest, pk: int, operation: str) -> HttpResponse:
    agent = get_object_or_404(Agent, pk=pk)
    actor = actor_label(request.user)
    new_token = ""
    if operation == "rotate":
        new_token = tokens.rotate_agent_token(agent, actor)
        messages.success(request, f"New token for {agent.name}; the old one no longer works.")
    elif operation in ("revoke", "restore"):
        tokens.set_agent_active(agent, operation == "restore", actor)
        messages.success(request, f"Agent {agent.name} {operation}d.")
    elif operation == "capabilities":
        form = forms.CapabilitiesForm(request.POST)
        try:
            if not form.is_valid():
                raise tokens.TokenError("capabilities: at least one action-name glob")
            tokens.set_agent_capabilities(agent, form.cleaned_data["capabilities"], actor)
        except tokens.TokenError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Capabilities of {agent.name} saved.")
    if new_token:
        context = {
            "form": forms.AgentCreateForm(),
            "new_token": new_token,
            "token_agent": agent,
            "agents": Agent.objects.select_related("owner"),
        }
        return render(request, "approvals/agents.html", context)
    return redirect(reverse("console:agents") + f"#agent-{agent.pk}")
