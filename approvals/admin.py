import json

from django import forms
from django.contrib import admin

from approvals.models import Agent, Decision, Proposal, UserToken
from approvals.notify.models import (
    Delivery,
    ReviewerPreferences,
    ReviewLink,
    SlackMessage,
    Webhook,
    WebhookDelivery,
)
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import PolicySerializer, current_policy, update_policy


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ["name", "token_hint", "owner", "is_active", "last_seen_at"]
    readonly_fields = ["token_hash", "token_hint", "created_at", "last_seen_at"]


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin):
    list_display = ["id", "agent", "action", "status", "risk_score", "created_at"]
    list_filter = ["status", "action"]
    search_fields = ["summary", "reason"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # decisions go through the workflow, never a raw edit


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin):
    list_display = ["proposal", "reviewer", "kind", "created_at"]

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class PolicyVersionForm(forms.ModelForm):
    """A whole policy document as JSON, validated like the console's editor."""

    class Meta:
        model = PolicyVersion
        fields = ["data", "comment"]

    def clean_data(self) -> dict:
        serializer = PolicySerializer(data=self.cleaned_data["data"])
        if not serializer.is_valid():
            raise forms.ValidationError(json.dumps(serializer.errors))
        return json.loads(json.dumps(serializer.validated_data))


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    """Adding a version here is a policy edit: validated, put in force and audited."""

    form = PolicyVersionForm
    list_display = ["version", "created_by", "created_at", "comment"]

    def get_changeform_initial_data(self, request) -> dict:
        return {"data": current_policy().as_data()}

    def save_model(self, request, obj, form, change) -> None:
        version = update_policy(form.cleaned_data["data"], request.user, obj.comment)
        obj.pk, obj.version, obj.created_at = version.pk, version.version, version.created_at

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # versions are immutable; an edit adds a new one


@admin.register(UserToken)
class UserTokenAdmin(admin.ModelAdmin):
    list_display = ["user", "token_hint", "created_at", "revoked_at"]
    readonly_fields = ["token_hash", "token_hint"]


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    list_display = ["name", "url", "is_active", "created_at"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["id", "webhook", "event", "state", "attempts", "response_code", "created_at"]
    list_filter = ["state", "event"]
    readonly_fields = [f.name for f in WebhookDelivery._meta.fields]


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "channel",
        "operation",
        "event",
        "target",
        "state",
        "attempts",
        "created_at",
    ]
    list_filter = ["channel", "state", "event"]
    readonly_fields = [f.name for f in Delivery._meta.fields]


@admin.register(ReviewerPreferences)
class ReviewerPreferencesAdmin(admin.ModelAdmin):
    list_display = ["user", "console", "email", "slack", "slack_user_id", "updated_at"]
    readonly_fields = ["link_code_hash", "link_code_expires_at", "slack_linked_at"]


@admin.register(SlackMessage)
class SlackMessageAdmin(admin.ModelAdmin):
    list_display = ["proposal", "event", "channel", "ts", "recipient", "created_at"]
    readonly_fields = [f.name for f in SlackMessage._meta.fields]


@admin.register(ReviewLink)
class ReviewLinkAdmin(admin.ModelAdmin):
    list_display = ["proposal", "reviewer", "created_at", "expires_at", "used_at"]
    readonly_fields = [f.name for f in ReviewLink._meta.fields]
