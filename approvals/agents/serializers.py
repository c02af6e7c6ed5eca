"""The proposal as the agent API answers it, and what a decision request carries.

``api`` answers with these and the schema is made from them.
"""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from approvals.choices import DecisionKind, ProposalStatus, Urgency
from approvals.policy.risk import top_reasons
from executions.actions import get_action
from executions.api import ExecutionSerializer
from executions.choices import ExecutionStatus
from infrastructure.rest.serializers import Text


# Plain serializers with their fields declared: a ModelSerializer rebuilds its
# fields from the model on every instance, which was a third of a read's time.
# They read the rows of ``proposal_data`` (dicts), and one instance of each
# serves every answer (its fields are bound once; representing is stateless).
class DecisionSerializer(serializers.Serializer):
    reviewer = serializers.CharField(source="reviewer_name")
    kind = serializers.ChoiceField(choices=DecisionKind.choices)
    comment = serializers.CharField()
    team = serializers.CharField(help_text="the team a routed proposal's approval counted for")
    break_glass = serializers.BooleanField(help_text="an admin's decision outside the route")
    created_at = serializers.DateTimeField()


class RequiredReviewSerializer(serializers.Serializer):
    team = serializers.CharField()
    needed = serializers.IntegerField()
    given = serializers.IntegerField()
    approved_by = serializers.ListField(child=serializers.CharField())
    members = serializers.ListField(child=serializers.CharField())


class RiskLineSerializer(serializers.Serializer):
    reason = serializers.CharField()
    lines = serializers.ListField(child=serializers.IntegerField(min_value=1))


class RiskSerializer(serializers.Serializer):
    score = serializers.IntegerField()
    reasons = serializers.ListField(child=serializers.CharField())
    top = serializers.ListField(
        child=serializers.CharField(),
        help_text="the one or two strongest reasons that are not the action's base risk: "
        "what a queue row shows",
    )
    lines = RiskLineSerializer(
        many=True,
        help_text="for code: the lines each reason was found on (the reasons located), "
        "strongest first",
    )


class InlineResultSerializer(ExecutionSerializer):
    """The run's result in the answer of a call that waited ``until=finished``: the
    execution's result contract, stdout and stderr cut at ``RESULT_INLINE_BYTES`` each."""

    output_truncated = serializers.BooleanField(
        help_text="stdout or stderr was cut here: read the rest at output_url"
    )
    output_url = serializers.CharField(help_text="every chunk of the output, by sequence number")

    class Meta(ExecutionSerializer.Meta):
        fields = [*ExecutionSerializer.Meta.fields, "output_truncated", "output_url"]


class ProposalSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=ProposalStatus.choices)
    agent = serializers.CharField(source="agent_name")
    action = serializers.CharField()
    parameters = serializers.JSONField()
    summary = serializers.CharField(
        help_text="one line: for code, the line its strongest risk reason points at; for a "
        "tool, the call with its arguments"
    )
    target = serializers.SerializerMethodField(
        help_text="what it acts on: container, host and service, process, tool (none for a "
        "script: it runs in the sandbox)"
    )
    reason = serializers.CharField()
    urgency = serializers.ChoiceField(choices=Urgency.choices)
    idempotency_key = serializers.CharField(allow_null=True)
    risk = serializers.SerializerMethodField()
    decision_path = serializers.JSONField()
    policy_version = serializers.IntegerField()
    required_approvals = serializers.IntegerField()
    approvals = serializers.IntegerField(source="approvals_count")
    approvals_remaining = serializers.IntegerField()
    decisions = DecisionSerializer(many=True)
    execution_id = serializers.IntegerField(allow_null=True)
    execution_status = serializers.ChoiceField(choices=ExecutionStatus.choices, allow_null=True)
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    withdraw_reason = serializers.CharField(
        required=False,
        allow_null=True,
        help_text="the agent's reason, when it withdrew the proposal",
    )
    escalated_at = serializers.DateTimeField(
        allow_null=True,
        required=False,
        help_text="when its review route handed the missing approvals to its escalate_to teams",
    )
    required_reviews = RequiredReviewSerializer(
        many=True,
        required=False,
        help_text="the review route's teams (empty when no route applies): approvals needed "
        "and given per team, and who may decide for it",
    )
    result = InlineResultSerializer(
        required=False,
        help_text="only with ?until=finished once the run ended: its result, so the agent "
        "needs no second call",
    )

    @extend_schema_field(serializers.DictField(child=serializers.CharField()))
    def get_target(self, proposal: dict) -> dict:
        spec = get_action(proposal["action"])
        return spec.shown_targets(proposal["parameters"]) if spec else {}

    @extend_schema_field(RiskSerializer)
    def get_risk(self, proposal: dict) -> dict:
        return {
            "score": proposal["risk_score"],
            "reasons": proposal["risk_reasons"],
            "top": top_reasons(proposal["action"], proposal["risk_reasons"]),
            "lines": proposal.get("risk_lines") or [],
        }


class CommentSerializer(serializers.Serializer):
    comment = Text(max_length=4000, allow_blank=True, default="")


class WithdrawSerializer(serializers.Serializer):
    reason = Text(max_length=500, allow_blank=True, default="")


class DecisionRequestSerializer(CommentSerializer):
    break_glass = serializers.BooleanField(
        default=False,
        help_text="admins: decide outside the review route, at once; needs a comment and a "
        "second factor proved just now (so a token is sent to the console to complete it), "
        "and every member of the route's teams and every admin is told",
    )
