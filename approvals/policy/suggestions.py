"""Policy suggestions from history: allow rules reviewers keep earning, rules nothing uses.

A *shape* is one agent's proposals of one action with the same parameter
names and, for the action's policy targets, the same values (the same
container, service, command…). Where reviewers approved a shape at least N
times in the window and rejected nothing the suggested rule would cover, the
narrowest rule the policy can express is suggested: the target's exact value
(``container:web-1``), or the action for actions without targets. Actions
that run code the agent wrote are never suggested: their code, not a target,
says what they do.

Suggestions only ever open a draft in the editor, which goes through the
preview; nothing changes until an admin saves.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import F, Max, Q
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce
from django.utils import timezone

from approvals.choices import DecisionKind, ProposalStatus
from approvals.models import Decision, Proposal
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import RULE_KINDS, Policy, Rule, current_policy
from executions.actions import catalog, get_action

MIN_APPROVALS = 5
WINDOW_DAYS = 90
STALE_DAYS = 30
MAX_ROWS = 20_000  # the newest reviewed proposals a suggestion is drawn from
RULE_LISTS = ("deny", "allow", "notify")
CHUNK = 500  # ids per query: well under any database's limit on parameters


@dataclass
class Suggestion:
    """A narrow allow rule and the history that argues for it."""

    rule: Rule
    action: str
    agents: list[str]
    approvals: int
    reviewers: list[str]
    first: datetime
    last: datetime
    shape: list[str]  # parameter names
    also_matches: list[str]  # other actions the rule would let through for the same target
    examples: list[int] = field(default_factory=list)


@dataclass
class StaleRule:
    """A rule no proposal has matched for the period (or ever)."""

    list_name: str
    rule: Rule
    last_match: datetime | None
    in_force_since: datetime


def suggestible_actions() -> list[str]:
    return sorted(name for name, spec in catalog().items() if not spec.sandboxed)


def glob_escape(value: str) -> str:
    """A glob that matches ``value`` and nothing else."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in value)


def narrowest_rule(action: str, targets: dict[str, str]) -> Rule | None:
    """The narrowest rule for this action and these target values, or None if none is narrow."""
    spec = get_action(action)
    if spec is None or spec.sandboxed:
        return None
    if not spec.targets:
        return Rule("action", action)
    kind = next((kind for kind in spec.targets if kind in targets), None)
    return Rule(kind, glob_escape(targets[kind])) if kind else None


def also_matches(rule: Rule, action: str) -> list[str]:
    if rule.kind == "action":
        return []
    return sorted(
        name for name, spec in catalog().items() if rule.kind in spec.targets and name != action
    )


# --- suggested allow rules ---------------------------------------------------------


def _reviewed_rows(since: datetime) -> list[dict]:
    approved_by_people = Q(status=ProposalStatus.APPROVED, approvals_count__gte=1)
    return list(
        Proposal.objects.filter(
            approved_by_people | Q(status=ProposalStatus.REJECTED),
            created_at__gte=since,
            action__in=suggestible_actions(),
        )
        .order_by("-created_at")
        .values("id", "action", "parameters", "status", "created_at", agent_name=F("agent__name"))[
            :MAX_ROWS
        ]
    )


def _shape(row: dict) -> tuple:
    spec = get_action(row["action"])
    parameters = row["parameters"] if isinstance(row["parameters"], dict) else {}
    targets = spec.target_values(parameters) if spec else {}
    return (
        row["agent_name"],
        row["action"],
        tuple(sorted(parameters)),
        tuple(sorted(targets.items())),
    )


def suggest(
    min_approvals: int = MIN_APPROVALS, window_days: int = WINDOW_DAYS, now=None
) -> list[Suggestion]:
    """Allow rules that reviewers' approvals in the window argue for, most approved first."""
    since = (now or timezone.now()) - timedelta(days=window_days)
    rows = _reviewed_rows(since)
    shapes: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        shapes[_shape(row)].append(row)
    rejected = [(row["action"], dict(_shape(row)[3])) for row in rows if _rejected(row)]
    policy = current_policy()
    by_rule: dict[Rule, list[tuple[tuple, list[dict]]]] = defaultdict(list)
    for shape, members in shapes.items():
        rule = _qualifies(shape, members, min_approvals, rejected, policy)
        if rule is not None:
            by_rule[rule].append((shape, members))
    reviewers = _reviewers([row["id"] for _, rows in _flat(by_rule) for row in rows])
    suggestions = [_suggestion(rule, groups, reviewers) for rule, groups in by_rule.items()]
    return sorted(suggestions, key=lambda s: (-s.approvals, s.rule.label()))


def _rejected(row: dict) -> bool:
    return row["status"] == ProposalStatus.REJECTED


def _qualifies(shape, members, min_approvals, rejected, policy: Policy) -> Rule | None:
    _, action, _, targets = shape
    if len(members) < min_approvals or any(_rejected(row) for row in members):
        return None
    rule = narrowest_rule(action, dict(targets))
    if rule is None or any(rule.matches(a, t) for a, t in rejected):
        return None
    listed = policy.deny + policy.allow + policy.notify
    if any(existing.matches(action, dict(targets)) for existing in listed):
        return None  # already decided by a list (a deny rule would win over any allow)
    return rule


def _flat(by_rule: dict) -> list:
    return [group for groups in by_rule.values() for group in groups]


def _reviewers(ids: list[int]) -> dict[int, list[str]]:
    """Who approved each of ``ids`` (a query per few hundred proposals, not one each)."""
    found: dict[int, list[str]] = defaultdict(list)
    for start in range(0, len(ids), CHUNK):
        decisions = Decision.objects.filter(
            kind=DecisionKind.APPROVE, proposal_id__in=ids[start : start + CHUNK]
        ).values_list("proposal_id", "reviewer__username")
        for proposal_id, username in decisions:
            found[proposal_id].append(username)
    return found


def _suggestion(rule: Rule, groups: list, reviewers: dict[int, list[str]]) -> Suggestion:
    members = [row for _, rows in groups for row in rows]
    members.sort(key=lambda row: row["created_at"])
    action = groups[0][0][1]
    agents = sorted({shape[0] for shape, _ in groups})
    first, last = members[0]["created_at"], members[-1]["created_at"]
    note = (
        f"suggested: {len(members)} approvals of {', '.join(agents)} "
        f"{first:%Y-%m-%d}–{last:%Y-%m-%d}, no rejection"
    )[:200]
    return Suggestion(
        rule=Rule(rule.kind, rule.pattern, note),
        action=action,
        agents=agents,
        approvals=len(members),
        reviewers=sorted({name for row in members for name in reviewers.get(row["id"], [])}),
        first=first,
        last=last,
        shape=sorted({name for shape, _ in groups for name in shape[2]}),
        also_matches=also_matches(rule, action),
        examples=[row["id"] for row in members[-5:]],
    )


# --- stale rules -------------------------------------------------------------------


def stale_rules(days: int = STALE_DAYS, now=None) -> list[StaleRule]:
    """Rules in force for longer than ``days`` that no proposal matched in that time."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=days)
    policy = current_policy()
    since = _in_force_since(policy)
    last_match = _last_matches()
    stale = []
    for list_name, rule in _rules(policy):
        started = since.get((list_name, rule.kind, rule.pattern), now)
        matched = last_match.get(rule.label()) if _first_list(policy, rule) == list_name else None
        if started <= cutoff and (matched is None or matched < cutoff):
            stale.append(StaleRule(list_name, rule, matched, started))
    return stale


def _rules(policy: Policy) -> list[tuple[str, Rule]]:
    return [(name, rule) for name in RULE_LISTS for rule in getattr(policy, name)]


def _first_list(policy: Policy, rule: Rule) -> str | None:
    """The list whose rule a proposal records (the cascade stops at the first)."""
    return next((name for name, r in _rules(policy) if r.label() == rule.label()), None)


def _last_matches() -> dict[str, datetime]:
    """When each rule label last decided a proposal (the weak-sandbox step keeps it aside)."""
    rule = Coalesce(KT("decision_path__policy_rule"), KT("decision_path__rule"))
    rows = (
        Proposal.objects.annotate(matched_rule=rule)
        .filter(matched_rule__isnull=False)
        .values("matched_rule")
        .annotate(last=Max("created_at"))
        .order_by()
    )
    return {row["matched_rule"]: row["last"] for row in rows}


def _in_force_since(policy: Policy) -> dict[tuple, datetime]:
    """For each rule in force, when the unbroken run of versions holding it began."""
    versions = PolicyVersion.objects.order_by("-version").values("data", "created_at")
    since: dict[tuple, datetime] = {}
    open_keys = {(name, rule.kind, rule.pattern) for name, rule in _rules(policy)}
    for version in versions:
        held = {
            (name, rule.get("kind"), rule.get("pattern"))
            for name in RULE_LISTS
            for rule in version["data"].get(name, [])
            if isinstance(rule, dict)
        }
        for key in open_keys & held:
            since[key] = version["created_at"]
        open_keys &= held
        if not open_keys:
            break
    return since


# --- drafts ------------------------------------------------------------------------


def draft_with_rule(document: dict, list_name: str, rule: Rule) -> dict:
    """The policy document with ``rule`` added at the end of a list (nothing is saved)."""
    _check(list_name, rule)
    entry = {"kind": rule.kind, "pattern": rule.pattern, "note": rule.note}
    return {**document, list_name: [*document.get(list_name, []), entry]}


def draft_without_rule(document: dict, list_name: str, rule: Rule) -> dict:
    """The policy document without the list's rules of this kind and pattern."""
    _check(list_name, rule)
    kept = [
        entry
        for entry in document.get(list_name, [])
        if (entry.get("kind"), entry.get("pattern")) != (rule.kind, rule.pattern)
    ]
    return {**document, list_name: kept}


def _check(list_name: str, rule: Rule) -> None:
    if list_name not in RULE_LISTS or rule.kind not in RULE_KINDS or not rule.pattern:
        raise ValueError(f"not a rule of a policy list: {list_name} {rule.label()}")
