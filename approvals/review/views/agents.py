"""The admins' agents page: create agents, rotate and revoke their tokens, set capabilities,
pause and resume them one by one or all at once (the kill switch).

Every change needs a fresh second factor. Pausing is also offered over the API,
where a token cannot carry one: it answers with a link here (``?reason=…`` and
``#agent-<name>`` or ``#kill-switch``), so the reason comes filled in.
"""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from accounts.access import admin_required
from accounts.stepup import Authentication, fresh_factor_required
from approvals.core import pausing, tokens
from approvals.models import Agent, Proposal
from approvals.policy.rules import current_policy
from audit.services import actor_label

KEPT_FIELDS = ("name", "capabilities", "owner")
PAUSE_OPERATIONS = ("pause", "resume")

# --- forms (only this page's) ------------------------------------------------------


def _capability_list(text: str) -> list[str]:
    return [part for part in text.replace(",", "\n").split() if part]


class AgentCreateForm(forms.Form):
    name = forms.CharField(max_length=100)
    capabilities = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="action-name globs, one per line or comma-separated: script.execute, docker.*",
    )
    owner = forms.ModelChoiceField(queryset=None, required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = get_user_model().objects.order_by("username")

    def clean_capabilities(self) -> list[str]:
        return _capability_list(self.cleaned_data["capabilities"])


class CapabilitiesForm(forms.Form):
    capabilities = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))

    def clean_capabilities(self) -> list[str]:
        return _capability_list(self.cleaned_data["capabilities"])


class PauseForm(forms.Form):
    """Why an agent (or every agent) is paused or resumed: the audit trail and reviewers read it."""

    reason = forms.CharField(max_length=500, required=False)


# --- the page ------------------------------------------------------------------------


def agent_rows() -> list[Agent]:
    """The agents, each with its pending count and its limits (the policy with its overrides):
    two queries, the pending ones counted from the index of pending proposals."""
    policy = current_policy()
    pending = dict(
        Proposal.objects.pending()
        .order_by()
        .values("agent")
        .annotate(n=Count("id"))
        .values_list("agent", "n")
    )
    agents = list(Agent.objects.select_related("owner").order_by("name"))
    for agent in agents:
        agent.pending = pending.get(agent.pk, 0)
        agent.limits = policy.for_agent(agent.name)
        agent.refused = agent.refused_paused + agent.refused_pending + agent.refused_rate
    return agents


def _page(request: HttpRequest, form, new_token: str = "", token_agent=None, status=200):
    rows = agent_rows()
    active = [agent for agent in rows if agent.is_active]
    context = {
        "form": form,
        "new_token": new_token,
        "token_agent": token_agent,
        "agents": rows,
        "active_count": len(active),
        "paused_count": sum(agent.paused_at is not None for agent in active),
        # The API's step-up link brings the reason typed there (``?reason=``).
        "reason": request.GET.get("reason", "")[:500],
    }
    return render(request, "approvals/agents.html", context, status=status)


@admin_required
@fresh_factor_required(keep=KEPT_FIELDS, purpose="Create an agent and its token")
def agents(request: HttpRequest) -> HttpResponse:
    """The agents; a new one's form (filled again from the query after a step-up)."""
    kept = {name: request.GET[name] for name in KEPT_FIELDS if name in request.GET}
    form = AgentCreateForm(request.POST or None, initial=kept)
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
            form = AgentCreateForm()
    return _page(request, form, new_token, status=400 if form.errors else 200)


def _back(request: HttpRequest, anchor: str, operation: str = "pause") -> str:
    """The agents page at ``anchor``, with the reason typed (a pause or resume) kept in the
    query: where a change comes back to after a step-up, as the API's link does."""
    reason = request.POST.get("reason", "").strip() if operation in PAUSE_OPERATIONS else ""
    query = "?" + urlencode({"reason": reason[:500]}) if reason else ""
    return reverse("console:agents") + query + (f"#{anchor}" if anchor else "")


def _agent_anchor(pk: int) -> str:
    name = Agent.objects.filter(pk=pk).values_list("name", flat=True).first()
    return f"agent-{name}" if name else ""


@require_POST
@admin_required
@fresh_factor_required(
    then=lambda request, pk, operation: _back(request, _agent_anchor(pk), operation),
    purpose="Change an agent: its token, its capabilities, or pause or resume it",
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
        form = CapabilitiesForm(request.POST)
        try:
            if not form.is_valid():
                raise tokens.TokenError("capabilities: at least one action-name glob")
            tokens.set_agent_capabilities(agent, form.cleaned_data["capabilities"], actor)
        except tokens.TokenError as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Capabilities of {agent.name} saved.")
    elif operation in PAUSE_OPERATIONS:
        _pause_or_resume(request, [agent.name], operation == "pause")
    else:
        return render(request, "console/404.html", status=404)
    if new_token:
        return _page(request, AgentCreateForm(), new_token, token_agent=agent)
    return redirect(reverse("console:agents") + f"#agent-{agent.name}")


@require_POST
@admin_required
@fresh_factor_required(
    then=lambda request, operation: _back(request, "kill-switch", operation),
    purpose="Pause or resume every agent at once (the kill switch)",
)
def agents_all(request: HttpRequest, operation: str) -> HttpResponse:
    """The kill switch: pause every active agent at once, or resume every paused one."""
    if operation not in PAUSE_OPERATIONS:
        return render(request, "console/404.html", status=404)
    _pause_or_resume(request, None, operation == "pause")
    return redirect(reverse("console:agents") + "#kill-switch")


def _pause_or_resume(request: HttpRequest, names: list[str] | None, pause: bool) -> None:
    """Pause or resume ``names`` (None: every agent), audited with who, why and how they
    proved it; what happened goes in the page's messages."""
    form = PauseForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"The reason: {form.errors['reason'][0]}")
        return
    change = pausing.pause if pause else pausing.resume
    try:
        changed = change(
            names,
            actor_label(request.user),
            form.cleaned_data["reason"],
            via="console",
            **Authentication.of_session(request).as_audit(),
        )
    except pausing.PauseError as exc:
        messages.error(request, f"{exc.message[:1].upper()}{exc.message[1:]}.")
        return
    messages.success(request, _what_happened(names, changed, pause))


def _what_happened(names: list[str] | None, changed: list[str], pause: bool) -> str:
    verb = "Paused" if pause else "Resumed"
    if names is not None and changed:
        follows = ": its proposals are refused until an admin resumes it" if pause else ""
        return f"{verb} {changed[0]}{follows}."
    if names is not None:
        return f"{names[0]} was {'already' if pause else 'not'} paused: nothing changed."
    if changed:
        agents = "1 agent" if len(changed) == 1 else f"{len(changed)} agents"
        return f"{verb} {agents}: {', '.join(changed)}."
    if pause:
        return "Nothing to pause: every agent was already paused."
    return "Nothing to resume: no agent was paused."
