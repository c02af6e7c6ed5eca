"""The admins' policy pages: the editor with its preview, versions side by side, suggestions."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from rest_framework import serializers

from accounts import stepup
from accounts.access import admin_required
from accounts.stepup import Authentication
from approvals.policy import drafts, simulation, suggestions
from approvals.policy import text as policy_text
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import (
    PolicySerializer,
    Rule,
    current_policy,
    describe_diff,
    update_policy,
)
from approvals.review import forms

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
        "tools": forms.ToolRiskFormSet(data, initial=initial.get("tool_risk"), prefix="tool_risk"),
        "routing": forms.RoutingForm(data, initial=initial.get("routing"), prefix="routing"),
    }


def _valid(policy_forms: dict) -> bool:
    parts = [
        policy_forms["settings"],
        *policy_forms["rules"].values(),
        policy_forms["overrides"],
        policy_forms["routes"],
        policy_forms["tools"],
        policy_forms["routing"],
    ]
    return all([part.is_valid() for part in parts])  # every part, so all errors show


@admin_required
def policy_editor(request: HttpRequest) -> HttpResponse:
    """The editor: save a new version, or preview the draft against history first.

    Saving needs a fresh second factor; without one the draft is kept and shown,
    after the step-up, on the apply page, ready to put in force.
    """
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
            if not Authentication.of_session(request).fresh():
                return _step_up_then_apply(request, policy_text.export_text(document), comment)
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
        policy_forms["tools"],
        policy_forms["routing"],
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
    lines += [
        f"{name}: {message}"
        for name, messages_ in policy_forms["routing"].errors.items()
        for message in messages_
    ]
    parts = {
        **policy_forms["rules"],
        "overrides": policy_forms["overrides"],
        "slack_routes": policy_forms["routes"],
        "tool_risk": policy_forms["tools"],
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


def _step_up_then_apply(request: HttpRequest, text: str, comment: str) -> HttpResponse:
    """Keep the policy being put in force, and ask for a fresh factor before the apply page."""
    key = drafts.keep(text, comment, request.user)
    return stepup.ask(
        request,
        reverse("console:policy-apply") + "?" + urlencode({"draft": key}),
        "Put a new policy in force",
    )


@admin_required
def policy_apply(request: HttpRequest) -> HttpResponse:
    """Policy as code in the console: a YAML policy (pasted, or sent over the API and kept
    for its author), what it would change, and putting it in force."""
    key = request.GET.get("draft") or request.POST.get("draft") or ""
    draft = drafts.find(key, request.user)
    initial = {"text": draft["text"], "comment": draft["comment"]} if draft else None
    form = forms.PolicyTextForm(request.POST or None, initial=initial)
    context = {"form": form, "draft": key if draft else "", "rows": [], "errors": []}
    context["draft_gone"] = bool(key) and draft is None
    text = form.cleaned_data["text"] if request.method == "POST" and form.is_valid() else None
    if text is None and draft and request.method == "GET":
        text = draft["text"]
    if text is not None:
        try:
            document = policy_text.parse(text)
        except policy_text.PolicyTextError as exc:
            context["errors"] = exc.problems
        else:
            if request.method == "POST" and request.POST.get("intent") == "apply":
                if not Authentication.of_session(request).fresh():
                    drafts.forget(key)
                    return _step_up_then_apply(request, text, form.cleaned_data["comment"])
                try:
                    version = update_policy(document, request.user, form.cleaned_data["comment"])
                except serializers.ValidationError as exc:
                    context["errors"] = _flatten(exc.detail)
                else:
                    drafts.forget(key)
                    messages.success(request, f"Policy version {version.version} is now in force.")
                    return redirect("console:policy")
            in_force = policy_text.export_text(current_policy().as_data())
            context["rows"] = policy_text.side_by_side(in_force, policy_text.export_text(document))
            context["changes"] = describe_diff(current_policy().as_data(), document)
    status = 400 if context["errors"] or form.errors else 200
    return render(request, "approvals/policy_apply.html", context, status=status)
