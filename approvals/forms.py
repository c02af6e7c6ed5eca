"""Console forms: queue and history filters, decisions, the policy editor, agents.

Filter forms only narrow a queryset (``apply``); invalid filter values are
ignored rather than shown as errors, so a stale bookmark still opens a page.
"""

from __future__ import annotations

from datetime import datetime, time, timedelta

from django import forms
from django.db.models import Q, QuerySet
from django.utils import timezone

from executions.actions import catalog
from executions.choices import ExecutionStatus

from .choices import ProposalStatus
from .policy import OVERRIDABLE, RULE_KINDS

RISK_BANDS = {
    "low": (0, 3),
    "medium": (4, 6),
    "high": (7, 10),
}


def action_choices() -> list[tuple[str, str]]:
    return [("", "any action")] + [(name, name) for name in sorted(catalog())]


class _FilterForm(forms.Form):
    agent = forms.CharField(required=False, max_length=100)
    action = forms.CharField(required=False, max_length=100)
    q = forms.CharField(required=False, max_length=200, label="Search")

    def values(self) -> dict:
        """Cleaned, non-empty filter values (invalid ones dropped)."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return {k: v for k, v in data.items() if v not in (None, "")}

    def _common(self, queryset: QuerySet, values: dict) -> QuerySet:
        if "agent" in values:
            queryset = queryset.filter(agent__name=values["agent"])
        if "action" in values:
            queryset = queryset.filter(action=values["action"])
        if "q" in values:
            queryset = queryset.filter(_search(values["q"]))
        return queryset


def _search(text: str) -> Q:
    text = text.strip()
    match = (
        Q(summary__icontains=text)
        | Q(reason__icontains=text)
        | Q(action__icontains=text)
        | Q(agent__name__icontains=text)
    )
    if text.lstrip("#").isdigit():
        match |= Q(pk=int(text.lstrip("#")))
    return match


class QueueFilterForm(_FilterForm):
    risk = forms.ChoiceField(
        required=False,
        choices=[("", "any risk")] + [(band, band) for band in RISK_BANDS],
    )

    def apply(self, queryset: QuerySet) -> QuerySet:
        values = self.values()
        queryset = self._common(queryset, values)
        if "risk" in values:
            low, high = RISK_BANDS[values["risk"]]
            queryset = queryset.filter(risk_score__gte=low, risk_score__lte=high)
        return queryset


EXECUTION_PREFIX = "run:"


def status_choices() -> list:
    return [
        ("", "any status"),
        ("Proposal", [(s.value, s.label) for s in ProposalStatus]),
        ("Execution", [(EXECUTION_PREFIX + s.value, s.label) for s in ExecutionStatus]),
    ]


class HistoryFilterForm(_FilterForm):
    status = forms.ChoiceField(required=False, choices=status_choices)
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def apply(self, queryset: QuerySet) -> QuerySet:
        values = self.values()
        queryset = self._common(queryset, values)
        status = values.get("status", "")
        if status.startswith(EXECUTION_PREFIX):
            queryset = queryset.filter(execution__status=status.removeprefix(EXECUTION_PREFIX))
        elif status:
            queryset = queryset.filter(status=status)
        if "since" in values:
            queryset = queryset.filter(created_at__gte=_day_start(values["since"]))
        if "until" in values:
            queryset = queryset.filter(
                created_at__lt=_day_start(values["until"]) + timedelta(days=1)
            )
        return queryset


def _day_start(day) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


class DecisionForm(forms.Form):
    comment = forms.CharField(
        required=False, max_length=4000, widget=forms.Textarea(attrs={"rows": 2})
    )


# --- policy editor -----------------------------------------------------------


class RuleForm(forms.Form):
    kind = forms.ChoiceField(choices=[(k, k) for k in RULE_KINDS])
    pattern = forms.CharField(max_length=500, required=False)
    note = forms.CharField(max_length=200, required=False)

    def rule(self) -> dict | None:
        """The rule this row holds, or None for a blank or deleted row."""
        data = self.cleaned_data
        if not data or data.get("DELETE") or not data.get("pattern"):
            return None
        return {"kind": data["kind"], "pattern": data["pattern"], "note": data.get("note", "")}


RuleFormSet = forms.formset_factory(RuleForm, extra=2, can_delete=True)


class PolicySettingsForm(forms.Form):
    auto_approve_below = forms.IntegerField(
        min_value=0, max_value=11, help_text="scores below this run at once (0 = never)"
    )
    high_risk_at = forms.IntegerField(
        min_value=0, max_value=11, help_text="scores at or above this need the quorum"
    )
    high_risk_quorum = forms.IntegerField(
        min_value=1, max_value=10, help_text="distinct reviewers needed at high risk"
    )
    review_timeout_minutes = forms.IntegerField(
        min_value=1, max_value=10080, help_text="pending proposals expire after this"
    )
    script_network = forms.BooleanField(
        required=False, help_text="scripts may ask for network access"
    )
    self_approval = forms.BooleanField(
        required=False, help_text="the owner of an agent may approve its proposals"
    )
    use_prevalidator = forms.BooleanField(
        required=False, help_text="ask the configured pre-validator; if it fails, a person decides"
    )
    allow_weak_sandbox = forms.BooleanField(
        required=False,
        label="Allow weak sandbox",
        help_text=(
            "policy alone may approve scripts while the sandbox in force has weak isolation "
            "(no namespaces, no Landlock); off, a person approves each one"
        ),
    )
    comment = forms.CharField(max_length=500, required=False, help_text="why, for the audit trail")


class InheritSelect(forms.NullBooleanSelect):
    """Yes / no / inherit from the policy (an override that leaves the value alone)."""

    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.choices = [("unknown", "inherit"), ("true", "yes"), ("false", "no")]


class OverrideForm(forms.Form):
    agent = forms.CharField(max_length=100, required=False)
    auto_approve_below = forms.IntegerField(min_value=0, max_value=11, required=False)
    high_risk_at = forms.IntegerField(min_value=0, max_value=11, required=False)
    high_risk_quorum = forms.IntegerField(min_value=1, max_value=10, required=False)
    review_timeout_minutes = forms.IntegerField(min_value=1, max_value=10080, required=False)
    script_network = forms.NullBooleanField(required=False, widget=InheritSelect)

    def override(self) -> tuple[str, dict] | None:
        data = self.cleaned_data
        if not data or data.get("DELETE") or not data.get("agent"):
            return None
        values = {k: data[k] for k in OVERRIDABLE if data.get(k) is not None}
        return data["agent"], values


OverrideFormSet = forms.formset_factory(OverrideForm, extra=1, can_delete=True)


def policy_initial(data: dict) -> dict:
    """Initial values for the editor's forms from a stored policy document."""
    overrides = [
        {"agent": name, **values} for name, values in sorted(data["agent_overrides"].items())
    ]
    return {
        "settings": {k: data[k] for k in PolicySettingsForm.base_fields if k in data},
        "deny": data["deny"],
        "allow": data["allow"],
        "notify": data["notify"],
        "overrides": overrides,
    }


def policy_document(base: dict, settings_form, rule_sets: dict, overrides) -> dict:
    """The policy ``base`` with what the editor's valid forms say; keys it lacks stay as they were."""
    document = dict(base)
    document.update({k: v for k, v in settings_form.cleaned_data.items() if k != "comment"})
    for name, formset in rule_sets.items():
        document[name] = [rule for form in formset if (rule := form.rule())]
    document["agent_overrides"] = dict(
        item for form in overrides if (item := form.override()) is not None
    )
    return document


# --- agents -------------------------------------------------------------------


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
        from django.contrib.auth import get_user_model

        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = get_user_model().objects.order_by("username")

    def clean_capabilities(self) -> list[str]:
        return _capability_list(self.cleaned_data["capabilities"])


class CapabilitiesForm(forms.Form):
    capabilities = forms.CharField(widget=forms.Textarea(attrs={"rows": 2}))

    def clean_capabilities(self) -> list[str]:
        return _capability_list(self.cleaned_data["capabilities"])
