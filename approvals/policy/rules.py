"""The approval cascade: capability → deny list → allow list → notify list → risk.

A policy is an immutable, versioned JSON document (``PolicyVersion``); the
newest version is in force. ``evaluate`` is a pure function of the policy, the
agent, the action and its risk, so every proposal can record exactly which
version and which rule decided it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from fnmatch import fnmatchcase

from django.db import IntegrityError, transaction
from rest_framework import serializers

from approvals.choices import DecisionStep, ProposalStatus
from approvals.policy.limits import LIMITS, valid_pattern
from approvals.policy.models import PolicyVersion
from approvals.policy.prevalidators import PreValidation
from approvals.policy.slack_routes import SlackRoute, SlackRouteSerializer
from approvals.policy.tool_risk import ToolRisk, ToolRiskSerializer
from approvals.routing import document as routing
from audit.services import actor_label, record
from infrastructure.prepared import Prepared

RULE_KINDS = (
    "action", "command", "service", "container", "process", "language", "host", "tool",
)  # fmt: skip

DEFAULT_POLICY = {
    "deny": [
        {"kind": "command", "pattern": "rm -rf /*", "note": "wipes the root filesystem"},
        {"kind": "command", "pattern": "mkfs*", "note": "formats a device"},
        {"kind": "command", "pattern": "shutdown*", "note": "stops the host"},
        {"kind": "command", "pattern": "reboot*", "note": "restarts the host"},
        {"kind": "service", "pattern": "sshd*", "note": "would cut remote access"},
    ],
    "allow": [
        {"kind": "action", "pattern": "docker.inspect_container", "note": "read-only"},
        {"kind": "action", "pattern": "docker.container_logs", "note": "read-only"},
        {"kind": "action", "pattern": "host.service_status", "note": "read-only"},
        {"kind": "command", "pattern": "uptime", "note": "read-only"},
        {"kind": "command", "pattern": "df -h*", "note": "read-only"},
        {"kind": "command", "pattern": "free -m", "note": "read-only"},
    ],
    "notify": [
        {
            "kind": "action",
            "pattern": "docker.restart_container",
            "note": "routine, but tell people",
        },
    ],
    "auto_approve_below": 4,
    "high_risk_at": 7,
    "high_risk_quorum": 2,
    "review_timeout_minutes": 60,
    "script_network": False,
    "self_approval": False,
    "use_prevalidator": False,
    "allow_weak_sandbox": False,
    "require_second_factor": False,
    "max_pending": 100,
    "max_proposals_per_minute": 600,
    "pause_after_rejections": 5,
    "secret_patterns": [],
    "agent_overrides": {},
    "slack_routes": [],
    "teams": {},
    "reviews": [],
}

# What a per-agent override may change.
OVERRIDABLE = (
    "auto_approve_below",
    "high_risk_at",
    "high_risk_quorum",
    "review_timeout_minutes",
    "script_network",
    "max_pending",
    "max_proposals_per_minute",
    "pause_after_rejections",
)


class RuleSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=RULE_KINDS)
    pattern = serializers.CharField(max_length=500)
    note = serializers.CharField(max_length=200, allow_blank=True, default="")


class OverrideSerializer(serializers.Serializer):
    auto_approve_below = serializers.IntegerField(min_value=0, max_value=11, required=False)
    high_risk_at = serializers.IntegerField(min_value=0, max_value=11, required=False)
    high_risk_quorum = serializers.IntegerField(min_value=1, max_value=10, required=False)
    review_timeout_minutes = serializers.IntegerField(min_value=1, max_value=10080, required=False)
    script_network = serializers.BooleanField(required=False)
    max_pending = serializers.IntegerField(required=False, **LIMITS["max_pending"])
    max_proposals_per_minute = serializers.IntegerField(
        required=False, **LIMITS["max_proposals_per_minute"]
    )
    pause_after_rejections = serializers.IntegerField(
        required=False, **LIMITS["pause_after_rejections"]
    )


class PolicySerializer(serializers.Serializer):
    """Validates a whole policy document; what the editor and the admin save."""

    deny = RuleSerializer(many=True, default=list)
    allow = RuleSerializer(many=True, default=list)
    notify = RuleSerializer(many=True, default=list)
    auto_approve_below = serializers.IntegerField(
        min_value=0,
        max_value=11,
        help_text="scores below this run at once (0 = never, 11 = always)",
    )
    high_risk_at = serializers.IntegerField(
        min_value=0, max_value=11, help_text="scores at or above this need the quorum"
    )
    high_risk_quorum = serializers.IntegerField(
        min_value=1, max_value=10, help_text="distinct reviewers needed at high risk"
    )
    review_timeout_minutes = serializers.IntegerField(
        min_value=1, max_value=10080, help_text="pending proposals expire after this"
    )
    script_network = serializers.BooleanField(help_text="scripts may ask for network access")
    self_approval = serializers.BooleanField(
        help_text="the owner of an agent may approve its proposals"
    )
    use_prevalidator = serializers.BooleanField(
        default=False, help_text="ask the configured pre-validator; if it fails, a person decides"
    )
    allow_weak_sandbox = serializers.BooleanField(
        default=False,
        help_text=(
            "policy alone may approve scripts even when the sandbox in force has weak "
            "isolation (no namespaces, no Landlock); off, a person approves each one"
        ),
    )
    require_second_factor = serializers.BooleanField(
        default=False,
        help_text=(
            "every reviewer and admin enrols a second factor (a passkey or a TOTP app) "
            "before the console lets them in"
        ),
    )
    max_pending = serializers.IntegerField(default=100, **LIMITS["max_pending"])
    max_proposals_per_minute = serializers.IntegerField(
        default=600, **LIMITS["max_proposals_per_minute"]
    )
    pause_after_rejections = serializers.IntegerField(default=5, **LIMITS["pause_after_rejections"])
    secret_patterns = serializers.ListField(
        child=serializers.CharField(max_length=500, validators=[valid_pattern]),
        default=list,
        max_length=50,
        help_text="regular expressions of credentials of your own, masked like the known "
        "kinds (group 1, if any, is the secret)",
    )
    agent_overrides = serializers.DictField(child=OverrideSerializer(), default=dict)
    slack_routes = SlackRouteSerializer(many=True, default=list)
    tool_risk = ToolRiskSerializer(many=True, default=list)
    teams = serializers.DictField(child=routing.TeamSerializer(), default=dict)
    reviews = routing.RouteSerializer(many=True, default=list)

    def validate_teams(self, teams: dict) -> dict:
        if problems := routing.team_problems(teams):
            raise serializers.ValidationError(problems)
        return teams

    def validate(self, data: dict) -> dict:
        if problems := routing.route_problems(data["teams"], data["reviews"]):
            raise serializers.ValidationError({"reviews": problems})
        if data["high_risk_at"] < data["auto_approve_below"]:
            raise serializers.ValidationError(
                {
                    "high_risk_at": (
                        "the high-risk threshold must not be below the auto-approve threshold"
                    )
                }
            )
        return data


@dataclass(frozen=True)
class Rule:
    """A glob over one kind of target (an action name, a host command, a service, …)."""

    kind: str
    pattern: str
    note: str = ""

    def matches(self, action: str, targets: dict[str, str]) -> bool:
        value = action if self.kind == "action" else targets.get(self.kind)
        return value is not None and fnmatchcase(value, self.pattern)

    def label(self) -> str:
        return f"{self.kind}:{self.pattern}"


@dataclass(frozen=True)
class Policy:
    """The policy in force, parsed from a ``PolicyVersion``."""

    version: int
    deny: tuple[Rule, ...] = ()
    allow: tuple[Rule, ...] = ()
    notify: tuple[Rule, ...] = ()
    auto_approve_below: int = 4
    high_risk_at: int = 7
    high_risk_quorum: int = 2
    review_timeout_minutes: int = 60
    script_network: bool = False
    self_approval: bool = False
    use_prevalidator: bool = False
    allow_weak_sandbox: bool = False
    require_second_factor: bool = False
    # Limits per agent (approvals.guard) and the credentials masked (infrastructure.credentials).
    max_pending: int = 100
    max_proposals_per_minute: int = 600
    pause_after_rejections: int = 5
    secret_patterns: tuple[str, ...] = ()
    agent_overrides: dict = field(default_factory=dict)
    # Slack channels for review requests, first match wins. In the policy because
    # admins edit it where they edit who reviews what: versioned, audited, exported.
    slack_routes: tuple[SlackRoute, ...] = ()
    # The risk of tool calls (tool.call) by tool and argument: approvals.policy.tool_risk.
    tool_risk: tuple[ToolRisk, ...] = ()
    # Who decides what (approvals.routing): the teams, and the review routes, first match wins.
    teams: dict[str, routing.Team] = field(default_factory=dict)
    reviews: tuple[routing.Route, ...] = ()

    @classmethod
    def from_data(cls, version: int, data: dict) -> Policy:
        lists = {
            name: tuple(Rule(**rule) for rule in data.get(name, []))
            for name in ("deny", "allow", "notify")
        }
        scalars = {
            key: data[key]
            for key in (
                "auto_approve_below",
                "high_risk_at",
                "high_risk_quorum",
                "review_timeout_minutes",
                "script_network",
                "self_approval",
                "use_prevalidator",
                "allow_weak_sandbox",
                "require_second_factor",
                "max_pending",
                "max_proposals_per_minute",
                "pause_after_rejections",
                "agent_overrides",
            )
            if key in data
        }
        routes = tuple(SlackRoute.from_data(route) for route in data.get("slack_routes", []))
        tools = tuple(ToolRisk.from_data(rule) for rule in data.get("tool_risk", []))
        teams = {n: routing.Team.from_data(n, t) for n, t in data.get("teams", {}).items()}
        reviews = tuple(
            routing.Route.from_data(i, r) for i, r in enumerate(data.get("reviews", []), 1)
        )
        return cls(
            version=version,
            **lists,
            **scalars,
            slack_routes=routes,
            tool_risk=tools,
            secret_patterns=tuple(data.get("secret_patterns", ())),
            teams=teams,
            reviews=reviews,
        )

    def as_data(self) -> dict:
        """The policy as the JSON document it was parsed from."""
        data = json.loads(json.dumps(asdict(self)))
        data.pop("version")
        data["tool_risk"] = [rule.as_data() for rule in self.tool_risk]
        data["teams"] = {name: team.as_data() for name, team in self.teams.items()}
        data["reviews"] = [route.as_data() for route in self.reviews]
        return data

    def route_for(self, action: str, agent: str, targets: dict[str, str], risk: int):
        """The first review route the proposal matches (``approvals.routing``), or None."""
        return routing.first_route(self.reviews, action, agent, targets, risk)

    def slack_channel_for(self, agent: str, action: str, risk_score: int) -> str | None:
        """The channel of the first Slack route the proposal matches, if any."""
        route = next((r for r in self.slack_routes if r.matches(agent, action, risk_score)), None)
        return route.channel if route else None

    def for_agent(self, agent_name: str) -> Policy:
        """This policy with the agent's overrides applied."""
        override = {
            k: v for k, v in self.agent_overrides.get(agent_name, {}).items() if k in OVERRIDABLE
        }
        return replace(self, **override) if override else self


@dataclass(frozen=True)
class Outcome:
    """What the cascade decided and why."""

    status: ProposalStatus
    step: DecisionStep
    reason: str
    rule: str | None = None
    required_approvals: int = 0
    notify: bool = False
    extra: dict = field(default_factory=dict)

    def decision_path(self, policy_version: int) -> dict:
        return {
            "step": self.step.value,
            "rule": self.rule,
            "reason": self.reason,
            "policy_version": policy_version,
            "notify": self.notify,
            **self.extra,
        }


def _newest_version():
    return PolicyVersion.objects.order_by("-version").values("version", "data")[:1]


# Every proposal reads the policy in force: a prepared query (a tenth of the
# queryset's cost); parsing the row is cheaper still, so nothing is cached.
_newest = Prepared(_newest_version)


def current_policy() -> Policy:

    latest = _newest.first()
    if latest is None:
        try:
            with transaction.atomic():
                PolicyVersion.objects.create(
                    version=1, data=DEFAULT_POLICY, comment="default policy"
                )
        except IntegrityError:  # another process created it first
            pass
        latest = _newest.first()
    return Policy.from_data(latest["version"], latest["data"])


def _first_match(rules: tuple[Rule, ...], action: str, targets: dict[str, str]) -> Rule | None:
    return next((rule for rule in rules if rule.matches(action, targets)), None)


def evaluate(
    policy: Policy,
    *,
    action: str,
    targets: dict[str, str],
    capability: str | None,
    risk_score: int,
    wants_network: bool = False,
    weak_sandbox: str | None = None,
    prevalidate: Callable[[], PreValidation] | None = None,
) -> Outcome:
    """Run the cascade; first match wins.

    ``weak_sandbox``: for an action that runs code in the sandbox, why the
    sandbox in force isolates weakly (None when it does not). Unless the
    policy allows it, such code never runs on policy alone: what would have
    been approved waits for a person instead.
    """
    outcome = _cascade(
        policy,
        action=action,
        targets=targets,
        capability=capability,
        risk_score=risk_score,
        wants_network=wants_network,
        prevalidate=prevalidate,
    )
    if weak_sandbox and outcome.status == ProposalStatus.APPROVED and not policy.allow_weak_sandbox:
        return Outcome(
            ProposalStatus.PENDING,
            DecisionStep.WEAK_SANDBOX,
            f"policy would approve this ({outcome.reason}), but the sandbox in force has weak "
            f"isolation ({weak_sandbox}): a person must approve code that runs there",
            rule="allow_weak_sandbox",
            required_approvals=_required_approvals(policy, risk_score),
            notify=outcome.notify,
            extra={**outcome.extra, "policy_step": outcome.step.value, "policy_rule": outcome.rule},
        )
    return outcome


def _cascade(
    policy: Policy,
    *,
    action: str,
    targets: dict[str, str],
    capability: str | None,
    risk_score: int,
    wants_network: bool,
    prevalidate: Callable[[], PreValidation] | None,
) -> Outcome:
    if capability is None:
        on = "".join(f" on {kind} {value}" for kind, value in list(targets.items())[:1])
        return Outcome(
            ProposalStatus.DENIED,
            DecisionStep.CAPABILITY,
            f"the agent has no capability for {action}{on}",
        )
    if wants_network and not policy.script_network:
        return Outcome(
            ProposalStatus.DENIED,
            DecisionStep.DENY_LIST,
            "policy does not allow scripts to use the network",
            rule="script_network",
        )
    for rules, status, step, listed in (
        (policy.deny, ProposalStatus.DENIED, DecisionStep.DENY_LIST, "on the deny list"),
        (policy.allow, ProposalStatus.APPROVED, DecisionStep.ALLOW_LIST, "on the allow list"),
        (policy.notify, ProposalStatus.APPROVED, DecisionStep.NOTIFY_LIST, "on the notify list"),
    ):
        if rule := _first_match(rules, action, targets):
            notify = step == DecisionStep.NOTIFY_LIST
            return Outcome(status, step, rule.note or listed, rule.label(), notify=notify)
    if policy.use_prevalidator and prevalidate is not None:
        return _with_prevalidator(policy, risk_score, prevalidate())
    return _by_score(policy, risk_score)


def _by_score(policy: Policy, risk_score: int, extra: dict | None = None) -> Outcome:
    extra = extra or {}
    if risk_score < policy.auto_approve_below:
        return Outcome(
            ProposalStatus.APPROVED,
            DecisionStep.RISK,
            f"risk {risk_score} is below the auto-approve threshold {policy.auto_approve_below}",
            extra=extra,
        )
    required = _required_approvals(policy, risk_score)
    reason = (
        f"risk {risk_score} is at or above the high-risk threshold {policy.high_risk_at}: "
        f"{required} reviewers must approve"
        if required > 1
        else f"risk {risk_score} needs a reviewer (auto-approve below {policy.auto_approve_below})"
    )
    return Outcome(
        ProposalStatus.PENDING,
        DecisionStep.REVIEW,
        reason,
        required_approvals=required,
        extra=extra,
    )


def _required_approvals(policy: Policy, risk_score: int) -> int:
    return max(policy.high_risk_quorum, 1) if risk_score >= policy.high_risk_at else 1


def _with_prevalidator(policy: Policy, static_score: int, verdict) -> Outcome:
    """The pre-validator can only raise the score; when it fails, a person decides."""
    extra = {"prevalidator": verdict.as_dict()}
    if not verdict.ok or verdict.score is None:
        return Outcome(
            ProposalStatus.PENDING,
            DecisionStep.PREVALIDATOR,
            f"the pre-validator gave no verdict ({verdict.reason}); a person decides",
            required_approvals=_required_approvals(policy, static_score),
            extra=extra,
        )
    return _by_score(policy, max(static_score, verdict.score), extra)


# Where a recorded step left a proposal: run on policy, held for people, or refused.
APPROVED_STEPS = frozenset({DecisionStep.ALLOW_LIST, DecisionStep.NOTIFY_LIST, DecisionStep.RISK})
DENIED_STEPS = frozenset({DecisionStep.DENY_LIST, DecisionStep.CAPABILITY, DecisionStep.INVALID})
RECORDED_WEAK = "recorded: the sandbox in force was weak when this was proposed"


def replay(
    policy: Policy,
    *,
    agent_name: str,
    action: str,
    targets: dict[str, str],
    risk_score: int,
    decision_path: dict,
    wants_network: bool = False,
    sandboxed: bool = False,
    weak_sandbox_now: str | None = None,
) -> Outcome:
    """The cascade for a stored proposal, as ``policy`` would decide it.

    The inputs that are not in the proposal's row come from its recorded
    decision path, so replaying the version that decided a proposal gives
    what it got: no capability when the capability step refused it; the
    pre-validator's recorded verdict (it is never called again, and a
    proposal without one is scored without it); a weak sandbox when the
    weak-sandbox step held it. Whether the sandbox was weak is not recorded
    for a proposal policy held for review or refused, so for those the
    sandbox in force now (``weak_sandbox_now``) stands in.
    """
    step = decision_path.get("step")
    verdict = decision_path.get("prevalidator")
    recorded = (
        PreValidation(verdict.get("score"), str(verdict.get("reason", "")), bool(verdict.get("ok")))
        if isinstance(verdict, dict)
        else None
    )
    if not sandboxed:
        weak = None
    elif step == DecisionStep.WEAK_SANDBOX:
        weak = RECORDED_WEAK
    else:
        weak = None if step in APPROVED_STEPS else weak_sandbox_now
    return evaluate(
        policy.for_agent(agent_name),
        action=action,
        targets=targets,
        capability=None if step == DecisionStep.CAPABILITY else "recorded",
        risk_score=risk_score,
        wants_network=wants_network,
        weak_sandbox=weak,
        prevalidate=(lambda: recorded) if recorded is not None else None,
    )


def update_policy(data: object, user=None, comment: str = "", actor: str | None = None):
    """Validate a whole policy document and put it in force as a new, audited version.

    ``actor`` names who acted when no user did (``manage.py policy apply``).
    """
    serializer = PolicySerializer(data=data)
    serializer.is_valid(raise_exception=True)
    document = json.loads(json.dumps(serializer.validated_data))
    with transaction.atomic():
        previous = current_policy()
        version = PolicyVersion.objects.create(
            version=previous.version + 1, data=document, comment=comment[:500], created_by=user
        )
        record(
            actor or actor_label(user),
            "policy.updated",
            version,
            version=version.version,
            previous=previous.version,
            comment=comment,
            changes=diff(previous.as_data(), document),
        )
    return version


def diff(before: dict, after: dict) -> dict:
    """Top-level keys whose value changed: {key: [before, after]}."""
    return {
        key: [before.get(key), after.get(key)]
        for key in sorted(set(before) | set(after))
        if before.get(key) != after.get(key)
    }


def describe_diff(before: dict, after: dict) -> list[str]:
    """What changed from one document to the other, a short line per setting."""
    lines = []
    for key, (old, new) in diff(before, after).items():
        if isinstance(old, list) and isinstance(new, list):
            lines += [f"{key}: + {_rule_label(r)}" for r in new if r not in old]
            lines += [f"{key}: − {_rule_label(r)}" for r in old if r not in new]
        elif isinstance(old, dict) or isinstance(new, dict):
            lines.append(
                f"{key}: {json.dumps(old, sort_keys=True)} → {json.dumps(new, sort_keys=True)}"
            )
        else:
            lines.append(f"{key}: {json.dumps(old)} → {json.dumps(new)}")
    return lines


def _rule_label(rule: object) -> str:
    if isinstance(rule, dict) and "channel" in rule:
        return SlackRoute.from_data(rule).label()
    if isinstance(rule, dict) and "tool" in rule:
        return ToolRisk.from_data(rule).reason().removeprefix("policy: ")
    return f"{rule.get('kind')}:{rule.get('pattern')}" if isinstance(rule, dict) else str(rule)
