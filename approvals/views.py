"""Console pages for proposals: the queue, a proposal, decisions, history, policy, agents."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import BashLexer, JavascriptLexer, PythonLexer, TextLexer
from rest_framework import serializers

from audit.services import actor_label
from console.access import admin_required, reviewer_required

from . import forms, services, tokens
from .choices import DecisionKind
from .models import Agent, Decision, PolicyVersion, Proposal
from .policy import current_policy, update_policy

QUEUE_LIMIT = 200
HISTORY_PAGE_SIZE = 50
STATUS_FOR_ERROR = {"permission_denied": 403, "not_found": 404, "conflict": 409}
LEXERS = {"python": PythonLexer, "bash": BashLexer, "javascript": JavascriptLexer}
CODE_PARAMETERS = ("code", "command")


# --- queue ----------------------------------------------------------------------


def queue_proposals(params) -> list[Proposal]:
    """Pending proposals, riskiest then oldest first, narrowed by the queue's filters."""
    form = forms.QueueFilterForm(params)
    queryset = Proposal.objects.review_queue().select_related("agent")
    return list(form.apply(queryset)[:QUEUE_LIMIT])


def queue_context(params) -> dict:
    """What the queue list partial needs; the websocket consumer renders it too."""
    proposals = queue_proposals(params)
    return {
        "proposals": proposals,
        "filters_active": _has_filters(params),
        "truncated": len(proposals) == QUEUE_LIMIT,
    }


def _has_filters(params) -> bool:
    return any(params.get(name) for name in forms.QueueFilterForm.base_fields)


@reviewer_required
def queue(request: HttpRequest) -> HttpResponse:
    form = forms.QueueFilterForm(request.GET)
    context = {
        **queue_context(request.GET),
        "form": form,
        "agents": Agent.objects.values_list("name", flat=True),
        "actions": forms.action_choices(),
        "ws_url": "/ws/queue/?" + request.GET.urlencode(),
    }
    template = "approvals/queue.html"
    if request.htmx and request.htmx.target == "queue":
        template += "#queue"
    return render(request, template, context)


# --- proposal detail and decisions ----------------------------------------------


def proposal_for_page(pk: int) -> Proposal:
    decisions = Decision.objects.select_related("reviewer")
    return get_object_or_404(
        Proposal.objects.select_related("agent__owner", "execution").prefetch_related(
            Prefetch("decisions", queryset=decisions)
        ),
        pk=pk,
    )


def highlighted(proposal: Proposal) -> list[tuple[str, SafeString]]:
    """(parameter name, highlighted HTML) for the parameters that hold code or a command."""
    language = str(proposal.parameters.get("language", ""))
    blocks = []
    for name in CODE_PARAMETERS:
        value = proposal.parameters.get(name)
        if not isinstance(value, str):
            continue
        lexer = LEXERS.get(language, BashLexer if name == "command" else TextLexer)()
        html = highlight(value, lexer, HtmlFormatter(cssclass="code", linenos="table"))
        blocks.append((name, mark_safe(html)))  # noqa: S308 - Pygments escapes the source
    return blocks


def other_parameters(proposal: Proposal) -> str:
    rest = {k: v for k, v in proposal.parameters.items() if k not in CODE_PARAMETERS}
    return json.dumps(rest, indent=2, sort_keys=True) if rest else ""


def proposal_context(proposal: Proposal, user, error: str = "") -> dict:
    """What the decision panel shows; the consumer uses it for live updates too."""
    decided_by_user = any(d.reviewer_id == user.pk for d in proposal.decisions.all())
    return {
        "proposal": proposal,
        "decisions": proposal.decisions.all(),
        "decided_by_user": decided_by_user,
        "error": error,
        "form": forms.DecisionForm(),
    }


@reviewer_required
def proposal_detail(request: HttpRequest, pk: int) -> HttpResponse:
    proposal = proposal_for_page(pk)
    context = {
        **proposal_context(proposal, request.user),
        "code_blocks": highlighted(proposal),
        "parameters_json": other_parameters(proposal),
        "pygments_css": HtmlFormatter(cssclass="code").get_style_defs(".code"),
    }
    return render(request, "approvals/detail.html", context)


@require_POST
@reviewer_required
def decide(request: HttpRequest, pk: int, kind: str) -> HttpResponse:
    form = forms.DecisionForm(request.POST)
    comment = form.cleaned_data["comment"] if form.is_valid() else ""
    error, status = "", 200
    if not form.is_valid():
        error, status = "the comment is too long", 400
    else:
        try:
            services.decide(pk, request.user, kind, comment)
        except services.ProposalError as exc:
            error, status = exc.message, STATUS_FOR_ERROR.get(exc.kind, 400)
    if not error and not request.htmx:
        verb = "approved" if kind == DecisionKind.APPROVE else "rejected"
        messages.success(request, f"You {verb} proposal {pk}.")
        return redirect(_next_url(request) or reverse("console:proposal", args=[pk]))
    if status == 404:
        return render(request, "console/404.html", status=404)
    proposal = proposal_for_page(pk)
    context = proposal_context(proposal, request.user, error)
    if request.htmx:
        return render(request, "approvals/detail.html#proposal-panel", context, status=status)
    context.update(
        code_blocks=highlighted(proposal),
        parameters_json=other_parameters(proposal),
        pygments_css=HtmlFormatter(cssclass="code").get_style_defs(".code"),
    )
    return render(request, "approvals/detail.html", context, status=status)


def _next_url(request: HttpRequest) -> str | None:
    """Where the keyboard's confirm dialog asked to return (the queue), if it is ours."""
    target = request.POST.get("next", "")
    safe = url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    )
    return target if target and safe else None


# --- history ------------------------------------------------------------------


def history_page(params):
    """One page of every proposal with its execution: a constant number of queries."""
    form = forms.HistoryFilterForm(params)
    queryset = form.apply(
        Proposal.objects.select_related("agent", "execution").order_by("-created_at", "-pk")
    )
    return form, Paginator(queryset, HISTORY_PAGE_SIZE).get_page(params.get("page"))


@reviewer_required
def history(request: HttpRequest) -> HttpResponse:
    form, page = history_page(request.GET)
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "form": form,
        "page": page,
        "query": query.urlencode(),
        "agents": Agent.objects.values_list("name", flat=True),
        "actions": forms.action_choices(),
    }
    template = "approvals/history.html"
    if request.htmx and request.htmx.target == "history-results":
        template += "#history-results"
    return render(request, template, context)


# --- policy editor ----------------------------------------------------------------


RULE_LISTS = ("deny", "allow", "notify")


def _policy_forms(data=None, initial: dict | None = None) -> dict:
    initial = initial or {}
    return {
        "settings": forms.PolicySettingsForm(data, initial=initial.get("settings")),
        "rules": {
            name: forms.RuleFormSet(data, initial=initial.get(name), prefix=name)
            for name in RULE_LISTS
        },
        "overrides": forms.OverrideFormSet(
            data, initial=initial.get("overrides"), prefix="overrides"
        ),
    }


def _valid(policy_forms: dict) -> bool:
    parts = [policy_forms["settings"], *policy_forms["rules"].values(), policy_forms["overrides"]]
    return all([part.is_valid() for part in parts])  # every part, so all errors show


@admin_required
def policy_editor(request: HttpRequest) -> HttpResponse:
    policy = current_policy()
    errors: list[str] = []
    if request.method == "POST":
        policy_forms = _policy_forms(request.POST)
        if _valid(policy_forms):
            document = forms.policy_document(
                policy.as_data(),
                policy_forms["settings"],
                policy_forms["rules"],
                policy_forms["overrides"],
            )
            try:
                version = update_policy(
                    document, request.user, policy_forms["settings"].cleaned_data["comment"]
                )
            except serializers.ValidationError as exc:
                errors = _flatten(exc.detail)
            else:
                messages.success(request, f"Policy version {version.version} is now in force.")
                return redirect("console:policy")
    else:
        policy_forms = _policy_forms(initial=forms.policy_initial(policy.as_data()))
    context = {
        "policy": policy,
        "forms": policy_forms,
        "errors": errors,
        "versions": PolicyVersion.objects.select_related("created_by")[:10],
    }
    return render(request, "approvals/policy.html", context, status=400 if errors else 200)


def _flatten(detail, prefix: str = "") -> list[str]:
    """Serializer errors as readable lines: ``deny[2].pattern: This field is required.``"""
    if isinstance(detail, dict):
        return [
            line
            for key, value in detail.items()
            for line in _flatten(value, f"{prefix}.{key}" if prefix else str(key))
        ]
    if isinstance(detail, list):
        return [
            line
            for i, value in enumerate(detail)
            for line in _flatten(value, f"{prefix}[{i + 1}]" if isinstance(value, dict) else prefix)
        ]
    label = "" if prefix == "non_field_errors" else prefix
    return [f"{label}: {detail}" if label else str(detail)]


# --- agents -----------------------------------------------------------------------


@admin_required
def agents(request: HttpRequest) -> HttpResponse:
    form = forms.AgentCreateForm(request.POST or None)
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
