"""The preview: a draft policy replayed against stored proposals, counted by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.models import Proposal
from approvals.policy import simulation
from approvals.policy.rules import DEFAULT_POLICY, current_policy

STATUS_FOR_STEP = {
    "risk": ProposalStatus.APPROVED,
    "allow_list": ProposalStatus.APPROVED,
    "notify_list": ProposalStatus.APPROVED,
    "deny_list": ProposalStatus.DENIED,
    "capability": ProposalStatus.DENIED,
    "review": ProposalStatus.PENDING,
    "prevalidator": ProposalStatus.PENDING,
    "weak_sandbox": ProposalStatus.PENDING,
}


def stored(
    agent, action: str, parameters: dict, *, risk: int, step: str, required: int = 0, **extra
):
    """A proposal as the cascade recorded it (made directly: the scores are the test's)."""
    status = extra.pop("status", STATUS_FOR_STEP[step])
    path = {"step": step, "rule": extra.pop("rule", None), "reason": "as recorded"}
    path.update(policy_version=1, notify=step == "notify_list", **extra.pop("path", {}))
    return Proposal.objects.create(
        agent=agent,
        action=action,
        parameters=parameters,
        summary=f"{action} {parameters}",
        status=status,
        risk_score=risk,
        decision_path=path,
        policy_version=1,
        required_approvals=required,
        approvals_count=extra.pop("approvals", 0),
        created_at=timezone.now() - timedelta(hours=1, seconds=-Proposal.objects.count()),
        **extra,
    )


def draft(**changes) -> dict:
    return {**DEFAULT_POLICY, **changes}


@pytest.fixture
def history(agent):
    """Seven proposals under the default policy (auto < 4, high risk ≥ 7, quorum 2)."""
    current_policy()
    service = {"service_name": "nginx"}
    return {
        "low": stored(agent, "host.restart_service", service, risk=2, step="risk"),
        "five": stored(agent, "host.restart_service", service, risk=5, step="review", required=1),
        "six": stored(agent, "host.restart_service", service, risk=6, step="review", required=1),
        "eight": stored(agent, "host.restart_service", service, risk=8, step="review", required=2),
        "listed": stored(
            agent,
            "docker.inspect_container",
            {"container": "web-1"},
            risk=1,
            step="allow_list",
            rule="action:docker.inspect_container",
        ),
        "wipe": stored(
            agent,
            "host.exec",
            {"command": "rm -rf /*"},
            risk=9,
            step="deny_list",
            rule="command:rm -rf /*",
        ),
        "no_capability": stored(agent, "host.restart_service", service, risk=1, step="capability"),
    }


def moves(preview) -> dict[tuple[str, str], int]:
    return {(m.before.label, m.after.label): m.count for m in preview.moves}


@pytest.mark.django_db
def test_the_policy_that_decided_them_moves_nothing(history):
    preview = simulation.simulate(draft())
    assert preview.considered == 7
    assert preview.moved == 0 and preview.moves == []
    assert (
        preview.before
        == preview.after
        == {
            "auto-approved": 2,
            "review (1 approval)": 2,
            "review (2 approvals)": 1,
            "denied": 2,
        }
    )


@pytest.mark.django_db
def test_raising_the_auto_approve_threshold_runs_what_scored_below_it(history):
    preview = simulation.simulate(draft(auto_approve_below=6))
    assert moves(preview) == {("review (1 approval)", "auto-approved"): 1}
    assert [e.id for e in preview.moves[0].examples] == [history["five"].pk]
    assert preview.after["auto-approved"] == 3 and preview.after["review (1 approval)"] == 1


@pytest.mark.django_db
def test_lowering_the_high_risk_threshold_raises_the_quorum(history):
    preview = simulation.simulate(draft(high_risk_at=5))
    assert moves(preview) == {("review (1 approval)", "review (2 approvals)"): 2}
    assert preview.moved == 2
    assert {e.id for e in preview.moves[0].examples} == {history["five"].pk, history["six"].pk}
    assert preview.totals()[1:3] == [
        ("review (1 approval)", 2, 0, -2),
        ("review (2 approvals)", 1, 3, 2),
    ]


@pytest.mark.django_db
def test_a_quorum_of_three_moves_only_the_high_risk_ones(history):
    preview = simulation.simulate(draft(high_risk_quorum=3))
    assert moves(preview) == {("review (2 approvals)", "review (3 approvals)"): 1}


@pytest.mark.django_db
def test_dropping_a_deny_rule_sends_what_it_caught_to_review(history):
    deny = [r for r in DEFAULT_POLICY["deny"] if r["pattern"] != "rm -rf /*"]
    preview = simulation.simulate(draft(deny=deny))
    assert moves(preview) == {("denied", "review (2 approvals)"): 1}
    assert preview.moves[0].examples[0].id == history["wipe"].pk


@pytest.mark.django_db
def test_a_missing_capability_stays_a_denial_whatever_the_draft(history):
    preview = simulation.simulate(draft(auto_approve_below=11, high_risk_at=11, deny=[]))
    assert all(history["no_capability"].pk not in [e.id for e in m.examples] for m in preview.moves)
    assert preview.after["denied"] == 1
    assert moves(preview) == {
        ("review (1 approval)", "auto-approved"): 2,
        ("review (2 approvals)", "auto-approved"): 1,
        ("denied", "auto-approved"): 1,
    }


@pytest.mark.django_db
def test_an_allow_rule_counts_the_rejections_it_would_have_run(agent):
    current_policy()
    web = {"container": "web-1"}
    stored(
        agent,
        "docker.stop_container",
        web,
        risk=5,
        step="review",
        required=1,
        status="approved",
        approvals=1,
    )
    stored(
        agent, "docker.stop_container", web, risk=5, step="review", required=1, status="rejected"
    )
    stored(agent, "docker.stop_container", {"container": "db"}, risk=5, step="review", required=1)
    rule = {"kind": "container", "pattern": "web-*", "note": ""}
    preview = simulation.simulate(draft(allow=[*DEFAULT_POLICY["allow"], rule]))
    assert moves(preview) == {("review (1 approval)", "auto-approved"): 2}
    assert preview.moves[0].rejected == 1
    assert preview.moves[0].examples[0].reason == "on the allow list"
    assert {e.status for e in preview.moves[0].examples} == {"approved", "rejected"}


@pytest.mark.django_db
def test_only_the_last_n_proposals_are_replayed(history):
    assert simulation.simulate(draft(auto_approve_below=6)).moved == 1
    preview = simulation.simulate(draft(auto_approve_below=6), last=3)
    # The three newest are the last three made: listed, wipe, no_capability.
    assert preview.considered == 3 and preview.moved == 0
    assert preview.newest == history["no_capability"].created_at
    assert preview.oldest == history["listed"].created_at


@pytest.mark.django_db
def test_the_pre_validator_is_never_called_and_its_recorded_verdict_is_reused(agent, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the preview called the pre-validator")

    monkeypatch.setattr("approvals.core.services.prevalidate", refuse)
    monkeypatch.setattr("approvals.policy.prevalidators.prevalidate", refuse)
    current_policy()
    verdict = {"score": None, "reason": "timed out", "ok": False}
    service = {"service_name": "nginx"}
    stored(agent, "host.restart_service", service, risk=2, step="prevalidator", required=1,
           path={"prevalidator": verdict})  # fmt: skip
    raised = {"score": 6, "reason": "restarts a service", "ok": True}
    stored(agent, "host.restart_service", service, risk=6, step="review", required=1,
           path={"prevalidator": raised})  # fmt: skip

    kept = simulation.simulate(draft(use_prevalidator=True))
    assert kept.moved == 0
    dropped = simulation.simulate(draft(use_prevalidator=False))
    assert moves(dropped) == {("review (1 approval)", "auto-approved"): 1}  # no verdict: by score
    # A draft turning it on scores proposals that have no verdict by their score alone.
    stored(agent, "host.restart_service", service, risk=1, step="risk")
    assert simulation.simulate(draft(use_prevalidator=True)).moved == 0


@pytest.mark.django_db
def test_a_recorded_weak_sandbox_is_replayed_as_weak(agent, sandbox_isolation):
    current_policy()
    script = {"language": "python", "code": "print(1)"}
    stored(agent, "script.execute", script, risk=2, step="weak_sandbox", required=1)
    stored(agent, "script.execute", script, risk=2, step="risk")  # the sandbox was strong then
    assert simulation.simulate(draft()).moved == 0
    allowed = simulation.simulate(draft(allow_weak_sandbox=True))
    assert moves(allowed) == {("review (1 approval)", "auto-approved"): 1}


@pytest.mark.django_db
def test_the_sandbox_in_force_now_decides_for_a_script_held_for_review(agent, sandbox_isolation):
    current_policy()
    script = {"language": "python", "code": "import os"}
    stored(agent, "script.execute", script, risk=5, step="review", required=1)
    assert moves(simulation.simulate(draft(auto_approve_below=6))) == {
        ("review (1 approval)", "auto-approved"): 1
    }
    sandbox_isolation.weak()
    assert simulation.simulate(draft(auto_approve_below=6)).moved == 0


@pytest.mark.django_db
def test_scripts_asking_for_the_network_follow_the_network_setting(agent):
    current_policy()
    script = {"language": "python", "code": "import socket", "network": True}
    stored(agent, "script.execute", script, risk=5, step="deny_list", rule="script_network")
    assert simulation.simulate(draft()).moved == 0
    assert moves(simulation.simulate(draft(script_network=True))) == {
        ("denied", "review (1 approval)"): 1
    }


@pytest.mark.django_db
def test_per_agent_overrides_apply_in_the_replay(agent, make_agent):
    current_policy()
    other, _ = make_agent("other-bot")
    service = {"service_name": "nginx"}
    stored(agent, "host.restart_service", service, risk=5, step="review", required=1)
    stored(other, "host.restart_service", service, risk=5, step="review", required=1)
    preview = simulation.simulate(draft(agent_overrides={"other-bot": {"auto_approve_below": 6}}))
    assert moves(preview) == {("review (1 approval)", "auto-approved"): 1}
    assert preview.moves[0].examples[0].agent == "other-bot"


@pytest.mark.django_db
def test_an_empty_history_previews_to_nothing(db):
    preview = simulation.simulate(draft(auto_approve_below=0))
    assert preview.considered == 0 and preview.moved == 0 and preview.oldest is None


@pytest.mark.django_db
def test_moves_the_policy_in_force_already_makes_are_told_apart_from_the_drafts(
    history, admin_user
):
    from approvals.policy.rules import update_policy

    update_policy(draft(high_risk_at=5), admin_user, "in force since the history")
    preview = simulation.simulate(draft(high_risk_at=5))
    # Raising the quorum is the policy in force's doing, not the draft's.
    assert moves(preview) == {("review (1 approval)", "review (2 approvals)"): 2}
    assert preview.moved == 2 and preview.by_draft == 0
    # Lowering auto-approval to 2 is the draft's own: the risk-2 proposal would wait.
    preview = simulation.simulate(draft(high_risk_at=5, auto_approve_below=2))
    assert moves(preview)[("auto-approved", "review (1 approval)")] == 1
    assert preview.moved == 3 and preview.by_draft == 1
