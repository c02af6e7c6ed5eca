"""Console forms: queue and history filters, decisions, the policy editor, profiles.

Filter forms only narrow a queryset (``apply``); invalid filter values are
ignored rather than shown as errors, so a stale bookmark still opens a page.
"""

from __future__ import annotations

import re
from datetime import datetime, time, timedelta
from zoneinfo import available_timezones

import yaml
from django import forms
from django.db.models import Q, QuerySet
from django.utils import timezone

from approvals.choices import RISK_BANDS, DecisionKind, ProposalStatus
from approvals.notify.models import ReviewerPreferences
from approvals.policy import simulation, suggestions
from approvals.policy.limits import LIMITS
from approvals.policy.rules import OVERRIDABLE, RULE_KINDS
from approvals.policy.tool_risk import CONDITIONS
from approvals.review import overview
from approvals.routing.document import SLACK_CHANNEL
from executions.actions import catalog
from executions.choices import ExecutionStatus


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
    number = text.lstrip("#")
    if number.isascii() and number.isdigit() and int(number) < 2**63:  # "²" is a digit too
        match |= Q(pk=int(number))
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


DECIDED_BY = {"policy": overview.DECIDED_BY_POLICY, "people": overview.DECIDED_BY_PEOPLE}


class HistoryFilterForm(_FilterForm):
    status = forms.ChoiceField(required=False, choices=status_choices)
    decided_by = forms.ChoiceField(
        required=False,
        choices=[("", "anyone"), ("policy", "policy"), ("people", "reviewers")],
        label="Decided by",
    )
    score = forms.IntegerField(required=False, min_value=0, max_value=10, label="Risk")
    since = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    until = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))

    def apply(self, queryset: QuerySet) -> QuerySet:
        values = self.values()
        queryset = self._common(queryset, values)
        if "decided_by" in values:
            queryset = queryset.filter(DECIDED_BY[values["decided_by"]])
        if "score" in values:
            queryset = queryset.filter(risk_score=values["score"])
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
    break_glass = forms.BooleanField(required=False)  # an admin's, outside the review route


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


def _band_choices() -> list[tuple[str, str]]:
    return [(band, f"{band} ({low}–{high})") for band, (low, high) in RISK_BANDS.items()]


class SlackRouteForm(forms.Form):
    channel = forms.CharField(max_length=81, required=False)
    bands = forms.MultipleChoiceField(
        choices=_band_choices, required=False, widget=forms.CheckboxSelectMultiple
    )
    agent = forms.CharField(max_length=200, required=False)
    action = forms.CharField(max_length=200, required=False)

    def clean_channel(self) -> str:
        channel = self.cleaned_data["channel"].strip()
        if channel and not SLACK_CHANNEL.match(channel):
            raise forms.ValidationError("a channel id or #name")
        return channel

    def route(self) -> dict | None:
        """The route this row holds (blank globs match anything), or None for a blank row."""
        data = self.cleaned_data
        if not data or data.get("DELETE") or not data.get("channel"):
            return None
        return {
            "channel": data["channel"],
            "bands": [band for band in RISK_BANDS if band in data.get("bands", [])],
            "agent": data.get("agent") or "*",
            "action": data.get("action") or "*",
        }


SlackRouteFormSet = forms.formset_factory(SlackRouteForm, extra=1, can_delete=True)


class ToolRiskForm(forms.Form):
    """One rule of the policy's tool risk (``approvals.policy.tool_risk``): a blank tool is
    a blank row; ``when`` and ``value`` are its condition on ``argument``."""

    tool = forms.CharField(max_length=200, required=False)
    risk = forms.IntegerField(min_value=0, max_value=10, required=False)
    argument = forms.CharField(max_length=100, required=False)
    when = forms.ChoiceField(
        choices=[("", "—")] + [(c, c.replace("_", " ")) for c in CONDITIONS], required=False
    )
    value = forms.CharField(max_length=500, required=False)
    note = forms.CharField(max_length=200, required=False)

    @classmethod
    def initial_of(cls, rule: dict) -> dict:
        when = next((c for c in CONDITIONS if c in rule), "")
        return {**rule, "when": when, "value": rule.get(when, "")}

    def clean(self) -> dict:
        data = super().clean()
        if data.get("tool") and data.get("risk") is None:
            self.add_error("risk", "a risk from 0 to 10")
        if data.get("when") == "above" and data.get("value"):
            try:
                float(data["value"])
            except ValueError:
                self.add_error("value", "above takes a number")
        return data

    def rule(self) -> dict | None:
        data = self.cleaned_data
        if not data or data.get("DELETE") or not data.get("tool"):
            return None
        rule = {"tool": data["tool"], "risk": data["risk"]}
        if data.get("argument"):
            rule["argument"] = data["argument"]
        if data.get("when"):
            value = data.get("value", "")
            rule[data["when"]] = float(value) if data["when"] == "above" and value else value
        if data.get("note"):
            rule["note"] = data["note"]
        return rule


ToolRiskFormSet = forms.formset_factory(ToolRiskForm, extra=1, can_delete=True)


class RoutingForm(forms.Form):
    """The policy's teams and review routes (``approvals.routing``), written as in the policy
    file: YAML, validated with the whole document."""

    teams = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text="team: {members: [usernames], sso_groups: [provider groups], "
        "slack_channel, email}",
    )
    reviews = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false"}),
        help_text="- {match: [kind:glob, …], risk_at_least, require: {team: approvals}, "
        "escalate_after_minutes, escalate_to: [teams]}; first match wins",
    )

    def clean_teams(self) -> dict:
        return self._yaml("teams", dict, {})

    def clean_reviews(self) -> list:
        return self._yaml("reviews", list, [])

    def _yaml(self, field: str, kind: type, empty):
        text = self.cleaned_data[field].strip()
        try:
            value = yaml.safe_load(text) if text else empty
        except yaml.YAMLError as exc:
            raise forms.ValidationError(f"not YAML: {exc}") from None
        if value is None:
            return empty
        if not isinstance(value, kind):
            raise forms.ValidationError(f"a {'mapping' if kind is dict else 'list'}")
        return value

    @staticmethod
    def initial_of(data: dict) -> dict:
        def text(value) -> str:
            return yaml.safe_dump(value, sort_keys=False, allow_unicode=True) if value else ""

        return {"teams": text(data.get("teams")), "reviews": text(data.get("reviews"))}


def _limit(name: str, required: bool = True) -> forms.IntegerField:
    """A field of one of the limits per agent, bounded and explained as the policy's own."""
    return forms.IntegerField(required=required, **LIMITS[name])


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
    require_second_factor = forms.BooleanField(
        required=False,
        label="Require a second factor",
        help_text="every reviewer and admin enrols a passkey or a TOTP app before the console",
    )
    max_pending = _limit("max_pending")
    max_proposals_per_minute = _limit("max_proposals_per_minute")
    pause_after_rejections = _limit("pause_after_rejections")
    secret_patterns = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        help_text="one regular expression a line; group 1, if any, is the secret",
    )
    comment = forms.CharField(max_length=500, required=False, help_text="why, for the audit trail")

    def clean_secret_patterns(self) -> list[str]:
        """The lines as the policy's list; each must compile (the line number says which not)."""
        lines = [line.strip() for line in self.cleaned_data["secret_patterns"].splitlines()]
        for number, line in enumerate(lines, 1):
            try:
                re.compile(line)
            except re.error as exc:
                raise forms.ValidationError(
                    f"line {number}: not a regular expression: {exc}"
                ) from None
        return [line for line in lines if line]  # stripped, as the policy keeps them


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
    # Every OVERRIDABLE key has its field: ``override()`` keeps only what the form holds.
    max_pending = _limit("max_pending", required=False)
    max_proposals_per_minute = _limit("max_proposals_per_minute", required=False)
    pause_after_rejections = _limit("pause_after_rejections", required=False)

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
    settings = {k: data[k] for k in PolicySettingsForm.base_fields if k in data}
    settings["secret_patterns"] = "\n".join(data.get("secret_patterns", []))
    return {
        "settings": settings,
        "deny": data["deny"],
        "allow": data["allow"],
        "notify": data["notify"],
        "overrides": overrides,
        "slack_routes": data.get("slack_routes", []),
        "tool_risk": [ToolRiskForm.initial_of(rule) for rule in data.get("tool_risk", [])],
        "routing": RoutingForm.initial_of(data),
    }


def policy_document(
    base: dict, settings_form, rule_sets: dict, overrides, routes=None, tools=None, routing=None
) -> dict:
    """The policy ``base`` with what the editor's valid forms say; keys it lacks stay as they were."""
    document = dict(base)
    document.update({k: v for k, v in settings_form.cleaned_data.items() if k != "comment"})
    for name, formset in rule_sets.items():
        document[name] = [rule for form in formset if (rule := form.rule())]
    document["agent_overrides"] = dict(
        item for form in overrides if (item := form.override()) is not None
    )
    if routes is not None:
        document["slack_routes"] = [route for form in routes if (route := form.route())]
    if tools is not None:
        document["tool_risk"] = [rule for form in tools if (rule := form.rule())]
    if routing is not None:
        document["teams"] = routing.cleaned_data["teams"]
        document["reviews"] = routing.cleaned_data["reviews"]
    return document


class PreviewForm(forms.Form):
    """How much history the editor's preview replays."""

    preview_last = forms.IntegerField(
        min_value=1,
        max_value=simulation.MAX_LAST,
        initial=simulation.DEFAULT_LAST,
        label="Preview against the last",
        help_text="proposals",
    )

    def last(self) -> int:
        valid = self.is_bound and self.is_valid()
        return self.cleaned_data["preview_last"] if valid else simulation.DEFAULT_LAST


class DraftRuleForm(forms.Form):
    """A suggestion opened in the editor: add (or drop) one rule of one list, unsaved."""

    add = forms.ChoiceField(required=False, choices=[(n, n) for n in suggestions.RULE_LISTS])
    drop = forms.ChoiceField(required=False, choices=[(n, n) for n in suggestions.RULE_LISTS])
    kind = forms.ChoiceField(choices=[(k, k) for k in RULE_KINDS])
    pattern = forms.CharField(max_length=500)
    note = forms.CharField(max_length=200, required=False)

    def clean(self) -> dict:
        data = super().clean()
        if bool(data.get("add")) == bool(data.get("drop")):
            raise forms.ValidationError("say which list to add the rule to or drop it from")
        return data


class SuggestionsForm(forms.Form):
    min_approvals = forms.IntegerField(
        min_value=2, max_value=1000, initial=suggestions.MIN_APPROVALS, required=False,
        label="Suggest after", help_text="approvals and no rejection",
    )  # fmt: skip
    window_days = forms.IntegerField(
        min_value=1, max_value=3650, initial=suggestions.WINDOW_DAYS, required=False,
        label="Within the last", help_text="days",
    )  # fmt: skip
    stale_days = forms.IntegerField(
        min_value=1, max_value=3650, initial=suggestions.STALE_DAYS, required=False,
        label="Flag rules unmatched for", help_text="days",
    )  # fmt: skip

    def settings(self) -> dict:
        """The cleaned values, a field's default where it is blank or invalid."""
        self.is_valid()
        data = getattr(self, "cleaned_data", {})
        return {
            name: data.get(name) if data.get(name) is not None else field.initial
            for name, field in self.fields.items()
        }


class PolicyTextForm(forms.Form):
    """A whole policy as YAML, as ``manage.py policy export`` writes it."""

    text = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 24, "spellcheck": "false"}),
        max_length=200_000,
        label="Policy (YAML)",
    )
    comment = forms.CharField(max_length=500, required=False, help_text="why, for the audit trail")


class CompareForm(forms.Form):
    a = forms.IntegerField(min_value=1, label="Version")
    b = forms.IntegerField(min_value=1, label="against")


class OverviewForm(forms.Form):
    days = forms.TypedChoiceField(
        coerce=int,
        required=False,
        choices=[(d, f"last {d} days") for d in overview.WINDOWS],
        initial=overview.DEFAULT_WINDOW,
    )

    def window(self) -> int:
        self.is_valid()
        return getattr(self, "cleaned_data", {}).get("days") or overview.DEFAULT_WINDOW


# --- a reviewer's profile, the delivery log, the review link page --------------------


def _time_zones() -> list[tuple[str, str]]:
    return [("", "the console's time zone")] + [
        (zone, zone) for zone in sorted(available_timezones())
    ]


class PreferencesForm(forms.ModelForm):
    """Where and when a person hears about proposals; their mail address too."""

    address = forms.EmailField(
        required=False, label="Mail address", help_text="where review mails go; blank for none"
    )
    bands = forms.MultipleChoiceField(
        choices=_band_choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Risk bands",
        help_text="tell me about proposals in these bands",
    )
    time_zone = forms.ChoiceField(choices=_time_zones, required=False, label="Time zone")

    class Meta:
        model = ReviewerPreferences
        fields = ["console", "email", "slack", "bands", "quiet_from", "quiet_until", "time_zone"]
        labels = {
            "console": "Notices in the console",
            "email": "Mail",
            "slack": "Slack direct messages",
            "quiet_from": "Quiet from",
            "quiet_until": "until",
        }
        widgets = {
            "quiet_from": forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
            "quiet_until": forms.TimeInput(attrs={"type": "time"}, format="%H:%M"),
        }

    def clean_bands(self) -> list[str]:
        return [band for band in RISK_BANDS if band in self.cleaned_data["bands"]]

    def clean(self) -> dict:
        data = super().clean()
        start, end = data.get("quiet_from"), data.get("quiet_until")
        if (start is None) != (end is None):
            raise forms.ValidationError("quiet hours need both a start and an end (or neither)")
        if start is not None and start == end:
            raise forms.ValidationError("quiet hours cannot start and end at the same time")
        return data


DELIVERY_CHANNELS = ("webhook", "email", "slack")


class DeliveryFilterForm(forms.Form):
    channel = forms.ChoiceField(
        required=False, choices=[("", "every channel")] + [(c, c) for c in DELIVERY_CHANNELS]
    )
    state = forms.ChoiceField(
        required=False,
        choices=[
            ("", "any state"),
            ("pending", "pending"),
            ("delivered", "sent"),
            ("failed", "failed"),
        ],
    )

    def values(self) -> dict:
        self.is_valid()
        return {k: v for k, v in getattr(self, "cleaned_data", {}).items() if v}


class LinkDecisionForm(forms.Form):
    """A tap on the review link page: approve or reject, with an optional comment."""

    kind = forms.ChoiceField(choices=DecisionKind.choices)
    comment = forms.CharField(required=False, max_length=4000)
