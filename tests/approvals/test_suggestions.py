"""Suggestions from history: narrow allow rules reviewers keep earning, rules nothing matches."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.choices import DecisionKind, ProposalStatus
from approvals.models import Decision, Proposal
from approvals.policy import suggestions
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import DEFAULT_POLICY, Rule, current_policy
from tests.conftest import use_policy

WEB = {"container": "web-1"}


def reviewed(agent, action: str, parameters: dict, by: list, *, rejected=False, days_ago=1):
    """A proposal people decided: approved by everyone in ``by``, or rejected by the first."""
    when = timezone.now() - timedelta(days=days_ago, seconds=Proposal.objects.count())
    proposal = Proposal.objects.create(
        agent=agent,
        action=action,
        parameters=parameters,
        status=ProposalStatus.REJECTED if rejected else ProposalStatus.APPROVED,
        risk_score=5,
        decision_path={"step": "review", "rule": None, "reason": "risk 5", "policy_version": 1},
        required_approvals=len(by),
        approvals_count=0 if rejected else len(by),
        created_at=when,
        decided_at=when + timedelta(minutes=3),
    )
    for reviewer in by[:1] if rejected else by:
        kind = DecisionKind.REJECT if rejected else DecisionKind.APPROVE
        Decision.objects.create(proposal=proposal, reviewer=reviewer, kind=kind)
    return proposal


@pytest.fixture
def cast(agent, reviewer, reviewer2):
    current_policy()
    return agent, reviewer, reviewer2


def labels(found) -> list[str]:
    return [s.rule.label() for s in found]


@pytest.mark.django_db
def test_a_suggestion_appears_after_n_identical_approvals(cast):
    agent, rita, ravi = cast
    for i in range(4):
        reviewed(agent, "docker.stop_container", WEB, [rita if i % 2 else ravi], days_ago=10 - i)
    assert suggestions.suggest(min_approvals=5) == []
    reviewed(agent, "docker.stop_container", WEB, [rita], days_ago=2)
    [found] = suggestions.suggest(min_approvals=5)
    assert found.rule == Rule("container", "web-1", found.rule.note)
    assert found.action == "docker.stop_container" and found.agents == ["requester"]
    assert found.approvals == 5 and found.reviewers == ["ravi", "rita"]
    assert (timezone.now() - found.first).days == 10 and (timezone.now() - found.last).days == 2
    assert found.shape == ["container"]
    assert "docker.restart_container" in found.also_matches
    assert "5 approvals of requester" in found.rule.note and "no rejection" in found.rule.note


@pytest.mark.django_db
def test_one_rejection_of_the_shape_means_no_suggestion(cast):
    agent, rita, _ = cast
    for _ in range(8):
        reviewed(agent, "docker.stop_container", WEB, [rita])
    assert labels(suggestions.suggest(min_approvals=5)) == ["container:web-1"]
    reviewed(agent, "docker.stop_container", WEB, [rita], rejected=True)
    assert suggestions.suggest(min_approvals=5) == []


@pytest.mark.django_db
def test_a_rejection_the_rule_would_cover_vetoes_it_whoever_proposed_it(cast, make_agent):
    agent, rita, _ = cast
    other, _ = make_agent("other-bot")
    for _ in range(6):
        reviewed(agent, "docker.stop_container", WEB, [rita])
    reviewed(other, "docker.restart_container", WEB, [rita], rejected=True)
    assert suggestions.suggest(min_approvals=5) == []


@pytest.mark.django_db
def test_each_agent_and_parameter_shape_counts_on_its_own(cast, make_agent):
    agent, rita, _ = cast
    other, _ = make_agent("other-bot")
    for _ in range(3):
        reviewed(agent, "docker.stop_container", WEB, [rita])
        reviewed(agent, "docker.stop_container", {**WEB, "timeout": 5}, [rita])
        reviewed(other, "docker.stop_container", WEB, [rita])
    assert suggestions.suggest(min_approvals=4) == []
    assert labels(suggestions.suggest(min_approvals=3)) == ["container:web-1"]
    [found] = suggestions.suggest(min_approvals=3)
    assert found.approvals == 9 and found.agents == ["other-bot", "requester"]


@pytest.mark.django_db
def test_code_running_actions_are_never_suggested(cast):
    agent, rita, _ = cast
    for _ in range(10):
        reviewed(agent, "script.execute", {"language": "python", "code": "print(1)"}, [rita])
    assert suggestions.suggest(min_approvals=5) == []


@pytest.mark.django_db
def test_an_action_without_targets_gets_an_action_rule(cast):
    agent, rita, _ = cast
    for _ in range(5):
        reviewed(agent, "docker.prune_networks", {}, [rita])
    [found] = suggestions.suggest(min_approvals=5)
    assert found.rule.label() == "action:docker.prune_networks" and found.also_matches == []


@pytest.mark.django_db
def test_a_command_with_glob_characters_is_matched_exactly(cast):
    agent, rita, _ = cast
    for _ in range(5):
        reviewed(agent, "host.exec", {"command": "ls /var/log/*.log"}, [rita])
    [found] = suggestions.suggest(min_approvals=5)
    assert found.rule.pattern == "ls /var/log/[*].log"
    assert found.rule.matches("host.exec", {"command": "ls /var/log/*.log"})
    assert not found.rule.matches("host.exec", {"command": "ls /var/log/x.log; rm -rf ~"})


@pytest.mark.django_db
def test_what_a_list_already_decides_is_not_suggested(cast):
    agent, rita, _ = cast
    for _ in range(5):
        reviewed(agent, "docker.stop_container", WEB, [rita])
    rule = {"kind": "container", "pattern": "web-*", "note": "added since"}
    use_policy(allow=[*DEFAULT_POLICY["allow"], rule])
    assert suggestions.suggest(min_approvals=5) == []


@pytest.mark.django_db
def test_approvals_outside_the_window_do_not_count(cast):
    agent, rita, _ = cast
    for _ in range(5):
        reviewed(agent, "docker.stop_container", WEB, [rita], days_ago=100)
    assert suggestions.suggest(min_approvals=5, window_days=90) == []
    assert len(suggestions.suggest(min_approvals=5, window_days=120)) == 1


def _matched(agent, rule: str, days_ago: int, step: str = "allow_list"):
    return Proposal.objects.create(
        agent=agent,
        action="host.exec",
        status=ProposalStatus.APPROVED,
        decision_path={"step": step, "rule": rule, "reason": "listed"},
        created_at=timezone.now() - timedelta(days=days_ago),
    )


@pytest.mark.django_db
def test_rules_no_proposal_matched_for_the_period_are_flagged(agent):
    current_policy()
    PolicyVersion.objects.update(created_at=timezone.now() - timedelta(days=60))
    _matched(agent, "command:uptime", days_ago=40)
    _matched(agent, "action:docker.inspect_container", days_ago=5)
    _matched(agent, "allow_weak_sandbox", days_ago=3, step="weak_sandbox")
    Proposal.objects.filter(decision_path__rule="allow_weak_sandbox").update(
        decision_path={
            "step": "weak_sandbox",
            "rule": "allow_weak_sandbox",
            "policy_rule": "action:host.service_status",
        }  # fmt: skip
    )
    stale = {r.rule.label(): r for r in suggestions.stale_rules(days=30)}
    assert "command:uptime" in stale and "action:docker.inspect_container" not in stale
    assert "action:host.service_status" not in stale  # held back by a weak sandbox, still a match
    assert (timezone.now() - stale["command:uptime"].last_match).days == 40
    assert stale["command:mkfs*"].last_match is None
    assert stale["command:mkfs*"].list_name == "deny"
    assert (
        len(stale)
        == len(DEFAULT_POLICY["deny"] + DEFAULT_POLICY["allow"] + DEFAULT_POLICY["notify"]) - 2
    )


@pytest.mark.django_db
def test_a_rule_newer_than_the_period_is_not_stale(agent):
    current_policy()
    PolicyVersion.objects.update(created_at=timezone.now() - timedelta(days=60))
    rule = {"kind": "service", "pattern": "nginx", "note": "new"}
    use_policy(allow=[*DEFAULT_POLICY["allow"], rule])
    stale = {r.rule.label() for r in suggestions.stale_rules(days=30)}
    assert "service:nginx" not in stale and "command:uptime" in stale
    assert "service:nginx" in {
        r.rule.label()
        for r in suggestions.stale_rules(days=30, now=timezone.now() + timedelta(days=31))
    }


def test_drafts_add_or_drop_a_rule_without_touching_the_rest():
    rule = Rule("container", "web-1", "suggested")
    added = suggestions.draft_with_rule(DEFAULT_POLICY, "allow", rule)
    assert added["allow"][-1] == {"kind": "container", "pattern": "web-1", "note": "suggested"}
    assert (
        added["allow"][:-1] == DEFAULT_POLICY["allow"] and added["deny"] == DEFAULT_POLICY["deny"]
    )
    dropped = suggestions.draft_without_rule(DEFAULT_POLICY, "allow", Rule("command", "uptime"))
    assert len(dropped["allow"]) == len(DEFAULT_POLICY["allow"]) - 1
    assert all(r["pattern"] != "uptime" for r in dropped["allow"])
    with pytest.raises(ValueError):
        suggestions.draft_with_rule(DEFAULT_POLICY, "maybe", rule)
