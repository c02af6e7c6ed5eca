"""Console pages for proposals: the queue, a proposal, decisions, history, the overview,
policy (editor with preview, versions, suggestions), agents."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.paginator import Paginator
from django.db import transaction
from django.db.models import CharField, F, Prefetch, Value
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme, urlencode
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import BashLexer, JavascriptLexer, PythonLexer, TextLexer
from rest_framework import serializers

from accounts.access import admin_required, reviewer_required
from accounts.roles import is_admin
from audit.services import actor_label

from . import (
    charts,
    forms,
    overview,
    policy_text,
    review_links,
    services,
    simulation,
    slack,
    suggestions,
    tokens,
)
from .choices import DecisionKind
from .models import (
    Agent,
    Decision,
    Delivery,
    PolicyVersion,
    Proposal,
    ReviewerPreferences,
    WebhookDelivery,
    preferences_for,
)
from .policy import PolicySerializer, Rule, current_policy, describe_diff, update_policy
from .slack import linking

QUEUE_LIMIT = 200
HISTORY_PAGE_SIZE = 50
DELIVERY_PAGE_SIZE = 50
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
        "routes": forms.SlackRouteFormSet(
            data, initial=initial.get("slack_routes"), prefix="slack_routes"
        ),
    }


def _valid(policy_forms: dict) -> bool:
    parts = [
        policy_forms["settings"],
        *policy_forms["rules"].values(),
        policy_forms["overrides"],
        policy_forms["routes"],
    ]
    return all([part.is_valid() for part in parts])  # every part, so all errors show


@admin_required
def policy_editor(request: HttpRequest) -> HttpResponse:
    """The editor: save a new version, or preview the draft against history first."""
    policy = current_policy()
    preview_form = forms.PreviewForm(request.POST or None)
    context = {"policy": policy, "preview_form": preview_form, "errors": [], "preview": None}
    previewing = request.POST.get("intent") == "preview"
    if request.method == "POST":
        policy_forms = _policy_forms(request.POST)
        document, context["errors"] = _draft(policy, policy_forms)
        if document is not None and previewing:
            context["preview"] = simulation.simulate(document, preview_form.last())
            context["changes"] = describe_diff(policy.as_data(), document)
        elif document is not None:
            comment = policy_forms["settings"].cleaned_data["comment"]
            try:
                version = update_policy(document, request.user, comment)
            except serializers.ValidationError as exc:
                context["errors"] = _flatten(exc.detail)
            else:
                messages.success(request, f"Policy version {version.version} is now in force.")
                return redirect("console:policy")
    else:
        document, context["draft"] = _opened_draft(request.GET, policy.as_data())
        policy_forms = _policy_forms(initial=forms.policy_initial(document))
        if context["draft"]:
            context["preview"] = simulation.simulate(document, simulation.DEFAULT_LAST)
            context["changes"] = describe_diff(policy.as_data(), document)
    context["forms"] = policy_forms
    context["versions"] = PolicyVersion.objects.select_related("created_by")[:10]
    template = "approvals/policy.html"
    if request.htmx and previewing:
        template += "#policy-preview"
    return render(request, template, context, status=400 if context["errors"] else 200)


def _draft(policy, policy_forms: dict) -> tuple[dict | None, list[str]]:
    """The editor's document and no errors, or None and every error, field by field."""
    if not _valid(policy_forms):
        return None, _form_errors(policy_forms)
    document = forms.policy_document(
        policy.as_data(),
        policy_forms["settings"],
        policy_forms["rules"],
        policy_forms["overrides"],
        policy_forms["routes"],
    )
    checked = PolicySerializer(data=document)
    if not checked.is_valid():
        return None, _flatten(checked.errors)
    return document, []


def _form_errors(policy_forms: dict) -> list[str]:
    lines = [
        f"{name}: {message}" if name != "__all__" else message
        for name, messages_ in policy_forms["settings"].errors.items()
        for message in messages_
    ]
    parts = {
        **policy_forms["rules"],
        "overrides": policy_forms["overrides"],
        "slack_routes": policy_forms["routes"],
    }
    for list_name, formset in parts.items():
        lines += [f"{list_name}: {e}" for e in formset.non_form_errors()]
        for i, errors in enumerate(formset.errors):
            lines += [
                f"{list_name}[{i + 1}]" + (f".{name}" if name != "__all__" else "") + f": {m}"
                for name, found in errors.items()
                for m in found
            ]
    return lines


def _opened_draft(params, document: dict) -> tuple[dict, str]:
    """The policy with a suggestion's rule added or dropped (``?add=allow&kind=…``), unsaved."""
    if "add" not in params and "drop" not in params:
        return document, ""
    form = forms.DraftRuleForm(params)
    if not form.is_valid():
        return document, ""
    data = form.cleaned_data
    rule = Rule(data["kind"], data["pattern"], data["note"])
    if data["add"]:
        return suggestions.draft_with_rule(document, data["add"], rule), (
            f"Draft: adds {rule.label()} to the {data['add']} list."
        )
    return suggestions.draft_without_rule(document, data["drop"], rule), (
        f"Draft: drops {rule.label()} from the {data['drop']} list."
    )


@admin_required
def policy_versions(request: HttpRequest) -> HttpResponse:
    """Any two versions side by side, as exported text, with the changed lines marked."""
    versions = PolicyVersion.objects.select_related("created_by")
    newest = current_policy().version
    form = forms.CompareForm(request.GET or {"a": max(newest - 1, 1), "b": newest})
    rows, chosen = [], {}
    if form.is_valid():
        chosen = {v.version: v for v in versions.filter(version__in=form.cleaned_data.values())}
        a, b = form.cleaned_data["a"], form.cleaned_data["b"]
        for number in (a, b):
            if number not in chosen:
                form.add_error(None, f"there is no version {number}")
        if not form.errors:
            rows = policy_text.side_by_side(
                policy_text.export_text(chosen[a].data), policy_text.export_text(chosen[b].data)
            )
    context = {"form": form, "rows": rows, "chosen": chosen, "versions": versions[:50]}
    context["changed"] = sum(row.tag != "equal" for row in rows)
    return render(request, "approvals/policy_versions.html", context)


@admin_required
def policy_suggestions(request: HttpRequest) -> HttpResponse:
    """Allow rules reviewers keep earning, and rules nothing matches any more; drafts only."""
    form = forms.SuggestionsForm(request.GET)
    chosen = form.settings()
    found = suggestions.suggest(chosen["min_approvals"], chosen["window_days"])
    stale = suggestions.stale_rules(chosen["stale_days"])
    base = reverse("console:policy")
    context = {
        "form": forms.SuggestionsForm(initial=chosen),  # what was used, defaults filled in
        "settings": chosen,
        "suggestions": [(s, base + "?" + _draft_query("add", "allow", s.rule)) for s in found],
        "stale": [(r, base + "?" + _draft_query("drop", r.list_name, r.rule)) for r in stale],
    }
    return render(request, "approvals/policy_suggestions.html", context)


def _draft_query(operation: str, list_name: str, rule: Rule) -> str:
    return urlencode(
        {operation: list_name, "kind": rule.kind, "pattern": rule.pattern, "note": rule.note}
    )


# --- overview -----------------------------------------------------------------------


@reviewer_required
def overview_page(request: HttpRequest) -> HttpResponse:
    """Proposals per day by outcome, time to decision, who decides, risk, top agents and actions."""
    form = forms.OverviewForm(request.GET if "days" in request.GET else None)
    view = overview.overview(form.window())
    context = {"form": form, "view": view, "charts": charts.all_charts(view)}
    template = "approvals/overview.html"
    if request.htmx and request.htmx.target == "overview":
        template += "#overview"
    return render(request, template, context)


def home(request: HttpRequest) -> HttpResponse:
    """The landing page: the overview for admins, the queue for reviewers."""
    if is_admin(request.user):
        return redirect("console:overview")
    return queue(request)


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


# --- a reviewer's profile ---------------------------------------------------------


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


# --- the delivery log -------------------------------------------------------------

DELIVERY_COLUMNS = (
    "id",
    "channel",
    "operation",
    "event",
    "proposal_id",
    "target",
    "state",
    "attempts",
    "error",
    "next_attempt_at",
    "created_at",
    "delivered_at",
)


def delivery_log(filters: dict):
    """Webhook, mail and Slack deliveries, newest first, as one list of dicts."""
    webhooks = WebhookDelivery.objects.annotate(
        channel=Value("webhook", CharField()),
        operation=Value("post", CharField()),
        target=F("webhook__name"),
    )
    others = Delivery.objects.all()
    if "state" in filters:
        webhooks = webhooks.filter(state=filters["state"])
        others = others.filter(state=filters["state"])
    channel = filters.get("channel")
    if channel == "webhook":
        others = others.none()
    elif channel:
        webhooks, others = webhooks.none(), others.filter(channel=channel)
    parts = [queryset.values(*DELIVERY_COLUMNS).order_by() for queryset in (webhooks, others)]
    return parts[0].union(parts[1], all=True).order_by("-created_at", "-id")


@admin_required
def deliveries(request: HttpRequest) -> HttpResponse:
    """Every channel's delivery log: sent, failed with the reason, retried."""
    form = forms.DeliveryFilterForm(request.GET)
    rows = delivery_log(form.values())
    page = Paginator(rows, DELIVERY_PAGE_SIZE).get_page(request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {"form": form, "page": page, "query": query.urlencode()}
    return render(request, "approvals/deliveries.html", context)


# --- one-tap review from a mail -----------------------------------------------------


def _link_page(request: HttpRequest, link, error: str = "", status: int = 200) -> HttpResponse:
    proposal = proposal_for_page(link.proposal_id)
    context = {
        "proposal": proposal,
        "reviewer": link.reviewer,
        "decisions": proposal.decisions.all(),
        "code_blocks": highlighted(proposal),
        "parameters_json": other_parameters(proposal),
        "pygments_css": HtmlFormatter(cssclass="code").get_style_defs(".code"),
        "error": error,
    }
    return render(request, "approvals/review_link.html", context, status=status)


def _refused(request: HttpRequest, refusal: review_links.LinkRefused) -> HttpResponse:
    context = {"refused": refusal.message}
    return render(request, "approvals/review_link.html", context, status=refusal.status)


@never_cache
@require_http_methods(["GET", "POST"])
def review_link(request: HttpRequest, token: str) -> HttpResponse:
    """The page a review mail links to. Opening it decides nothing; a tap (a POST) does.

    No sign-in: the signed link stands for its reviewer, for this one decision.
    """
    try:
        link = review_links.open_link(token, request.user)
    except review_links.LinkRefused as refusal:
        return _refused(request, refusal)
    if request.method == "GET":
        return _link_page(request, link)
    form = forms.LinkDecisionForm(request.POST)
    if not form.is_valid():
        return _link_page(
            request, link, "Choose approve or reject (a comment is at most 4000 characters).", 400
        )
    kind = form.cleaned_data["kind"]
    try:
        review_links.decide(token, kind, form.cleaned_data["comment"], request.user)
    except review_links.LinkRefused as refusal:
        return _refused(request, refusal)
    except services.ProposalError as exc:
        return _link_page(request, link, exc.message, STATUS_FOR_ERROR.get(exc.kind, 400))
    proposal = proposal_for_page(link.proposal_id)
    context = {"proposal": proposal, "reviewer": link.reviewer, "done": kind}
    return render(request, "approvals/review_link.html", context)
