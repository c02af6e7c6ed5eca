"""The right people decide: teams, review routes, escalation and break-glass (approvals.routing)."""

from __future__ import annotations

import re
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.utils import timezone

from accounts import stepup
from accounts.roles import REVIEWERS_GROUP, set_provider_groups
from approvals.core import escalation, services
from approvals.models import Decision, Proposal
from approvals.policy import simulation
from approvals.policy.models import PolicyVersion
from approvals.policy.text import PolicyTextError, apply_text, parse, version_text
from audit.models import AuditEvent
from tests.approvals.test_cascade import propose
from tests.conftest import _user, client_for, use_policy

TEAMS = {
    "dba": {"members": ["alice", "bob"]},
    "sre": {"sso_groups": ["sre-oncall"]},
    "finance": {"members": ["fiona"]},
}
REVIEWS = [
    {"match": ["tool:db.*"], "require": {"dba": 1, "sre": 1}},
    {
        "match": ["tool:billing.refund"],
        "require": {"finance": 1},
        "escalate_after_minutes": 15,
        "escalate_to": ["sre"],
    },
    {"match": ["tool:payments.*"], "risk_at_least": 7, "require": {"finance": 1}},
]


def fresh() -> stepup.Authentication:
    return stepup.Authentication(
        via="console", method="password", factor="totp", factor_at=time.time()
    )


def call(tool: str, **arguments) -> dict:
    return {"action": "tool.call", "parameters": {"tool": tool, "arguments": arguments}}


@pytest.fixture
def cast(db):
    """alice and bob (dba), sam (sre, through the provider's group), fiona (finance), rita
    (a reviewer in no team), ada (an admin in no team)."""
    people = {name: _user(name, reviewer=True) for name in ("alice", "bob", "sam", "fiona")}
    set_provider_groups(people["sam"], ["sre-oncall"], actor="test")
    people["rita"] = _user("rita", reviewer=True)
    people["ada"] = _user("ada", superuser=True)
    use_policy(
        teams=TEAMS,
        reviews=REVIEWS,
        tool_risk=[{"tool": "payments.*", "risk": 8}],
    )
    return people


def api_of(user):
    from approvals.core.tokens import create_user_token

    return client_for(create_user_token(user))


def decide(user, proposal_id: int, kind: str = "approve", **body):
    return api_of(user).post(f"/api/v1/proposals/{proposal_id}/{kind}", body, format="json")


def test_a_routed_proposal_needs_each_teams_approval_and_only_they_may_give_it(cast, agent_api):
    made = propose(agent_api, call("db.drop_index", name="orders_idx"))
    assert (made["status"], made["required_approvals"]) == ("pending", 2)
    assert made["decision_path"]["route"] == "reviews[1]: tool:db.*"
    assert made["required_reviews"] == [
        {"team": "dba", "needed": 1, "given": 0, "approved_by": [], "members": ["alice", "bob"]},
        {"team": "sre", "needed": 1, "given": 0, "approved_by": [], "members": ["sam"]},
    ]

    refused = decide(cast["rita"], made["id"])
    assert refused.status_code == 403
    assert refused.json()["error"] == {
        "type": "not_a_required_reviewer",
        "message": "needs 1 approval from dba (alice, bob) and 1 approval from sre (sam)",
    }
    assert decide(cast["rita"], made["id"], "reject").status_code == 403  # reject alike

    first = decide(cast["alice"], made["id"]).json()
    assert (first["status"], first["required_reviews"][0]["approved_by"]) == ("pending", ["alice"])
    # bob is in dba too, whose approval is given: he may no longer decide it.
    late = decide(cast["bob"], made["id"])
    assert late.status_code == 403
    assert late.json()["error"]["message"] == "needs 1 approval from sre (sam)"

    done = decide(cast["sam"], made["id"]).json()
    assert done["status"] == "approved" and done["execution_id"]
    teams = dict(
        Decision.objects.filter(proposal_id=made["id"]).values_list("reviewer__username", "team")
    )
    assert teams == {"alice": "dba", "sam": "sre"}
    recorded = AuditEvent.objects.filter(
        verb="proposal.decision.approve", object_id=str(made["id"])
    )
    assert sorted(event.data["team"] for event in recorded) == ["dba", "sre"]


def test_one_person_in_two_required_teams_counts_for_one_only(cast, agent_api):
    set_provider_groups(cast["alice"], ["sre-oncall"], actor="test")  # alice: dba and sre
    made = propose(agent_api, call("db.vacuum"))
    assert decide(cast["alice"], made["id"]).json()["status"] == "pending"
    again = decide(cast["alice"], made["id"])
    assert (again.status_code, again.json()["error"]["type"]) == (409, "conflict")
    assert (
        decide(cast["bob"], made["id"]).status_code == 403
    )  # dba's is given: alice's counted there
    assert decide(cast["sam"], made["id"]).json()["status"] == "approved"


def test_a_rejection_by_one_who_may_approve_rejects(cast, agent_api):
    made = propose(agent_api, call("db.drop_index"))
    rejected = decide(cast["sam"], made["id"], "reject", comment="not during the sale")
    assert rejected.json()["status"] == "rejected"


def test_a_route_never_asks_for_fewer_approvals_than_the_risk_quorum(cast, agent_api):
    made = propose(agent_api, call("payments.capture", amount=125000))
    # risk 8 ≥ high_risk_at 7: the quorum is 2, the route asks finance for 1
    assert (made["risk"]["score"], made["required_approvals"]) == (8, 2)
    assert decide(cast["fiona"], made["id"]).json()["status"] == "pending"
    rest = decide(cast["rita"], made["id"])
    assert (
        rest.json()["error"]["message"]
        == "needs 1 more approval from one of finance (nobody who may decide)"
    )


def test_an_unrouted_proposal_keeps_todays_rule(cast, agent_api):
    made = propose(agent_api, call("crm.lookup", email="a@example.com"))
    assert made["required_reviews"] == [] and "route" not in made["decision_path"]
    assert decide(cast["rita"], made["id"]).json()["status"] == "approved"


def test_each_reviewers_queue_lists_what_waits_for_them(cast, agent_api):
    db = propose(agent_api, call("db.drop_index"))["id"]
    refund = propose(agent_api, call("billing.refund", amount=1250))["id"]
    free = propose(agent_api, call("crm.lookup"))["id"]

    def mine(user) -> list[int]:
        answer = api_of(user).get("/api/v1/proposals?review_requested=me")
        assert answer.status_code == 200, answer.json()
        return sorted(item["id"] for item in answer.json()["items"])

    assert mine(cast["alice"]) == sorted([db, free])
    assert mine(cast["fiona"]) == sorted([refund, free])
    assert mine(cast["rita"]) == [free]
    decide(cast["alice"], db)
    assert mine(cast["alice"]) == [free] and mine(cast["bob"]) == [free]
    bad = api_of(cast["rita"]).get("/api/v1/proposals?review_requested=you")
    assert (bad.status_code, bad.json()["error"]["type"]) == (400, "validation_error")
    assert agent_api.get("/api/v1/proposals?review_requested=me").status_code == 400


def test_a_silent_team_is_escalated_once_and_the_escalated_team_may_decide(cast, agent_api):
    made = propose(agent_api, call("billing.refund", amount=1250))
    assert decide(cast["sam"], made["id"]).status_code == 403  # not yet escalated
    assert escalation.escalate_due() == 0  # not due
    later = timezone.now() + timedelta(minutes=16)
    assert escalation.escalate_due(later) == 1
    assert escalation.escalate_due(later) == 0  # exactly once
    assert AuditEvent.objects.filter(verb="proposal.escalated").count() == 1
    done = decide(cast["sam"], made["id"]).json()
    assert done["status"] == "approved"
    assert Decision.objects.get(proposal_id=made["id"]).team == "finance"  # in its place


def test_a_team_that_answered_in_time_is_not_escalated(cast, agent_api):
    made = propose(agent_api, call("billing.refund", amount=5))
    decide(cast["fiona"], made["id"])
    assert escalation.escalate_due(timezone.now() + timedelta(minutes=16)) == 0


def test_an_admin_breaks_the_glass_loudly(cast, agent_api):
    made = propose(agent_api, call("db.drop_index"))
    admin = cast["ada"]
    assert decide(admin, made["id"]).status_code == 403  # an admin outside the route, too
    token = decide(admin, made["id"], break_glass=True, comment="outage: the index blocks writes")
    assert (token.status_code, token.json()["error"]["type"]) == (403, "step_up_required")
    assert token.json()["error"]["url"].endswith(
        "?break_glass=1&comment=outage%3A+the+index+blocks+writes"
    )
    with pytest.raises(services.ProposalError, match="needs a comment"):
        services.decide(made["id"], admin, "approve", "", authentication=fresh(), break_glass=True)
    with pytest.raises(services.ProposalError, match="only admins"):
        services.decide(
            made["id"], cast["rita"], "approve", "x", authentication=fresh(), break_glass=True
        )
    services.decide(
        made["id"], admin, "approve", "outage", authentication=fresh(), break_glass=True
    )
    proposal = Proposal.objects.get(pk=made["id"])
    assert proposal.status == "approved" and proposal.break_glass_at is not None
    event = AuditEvent.objects.get(verb="proposal.decision.approve", object_id=str(made["id"]))
    assert event.data["break_glass"] is True


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            "  dba: {members: [alice]}\nreviews:\n- match: ['tool:x']\n  require: {ops: 1}",
            "reviews[1].require.ops: unknown team 'ops' (teams: dba)",
        ),
        ("  dba: {}\nreviews: []", "teams.dba: a team needs members or sso_groups"),
        (
            "  dba: {members: [alice]}\nreviews:\n- match: ['tool:x']\n  require: {dba: 0}",
            "reviews[1].require.dba: Ensure this value is greater than or equal to 1.",
        ),
        (
            "  dba: {members: [alice]}\nreviews:\n- match: ['colour:red']\n  require: {dba: 1}",
            "reviews[1].match: unknown match kind 'colour' in 'colour:red'",
        ),
    ],
    ids=["unknown-team", "empty-team", "zero-approvals", "unknown-kind"],
)
def test_a_policy_with_a_broken_route_is_refused_by_line_and_nothing_is_saved(db, change, said):
    teams, reviews = change.split("\nreviews:")
    text = version_text().replace("teams: {}\n", "teams:\n" + teams + "\n")
    text = text.replace("reviews: []", "reviews:" + reviews)
    before = PolicyVersion.objects.count()
    with pytest.raises(PolicyTextError) as refused:
        apply_text(text, actor="test")
    # each problem names its line in the file, then the setting
    located = [
        re.sub(r"^line \d+, ", "", p) for p in refused.value.problems if p.startswith("line ")
    ]
    assert any(problem.startswith(said) for problem in located), refused.value.problems
    assert PolicyVersion.objects.count() == before


def test_a_team_member_needs_the_reviewer_role_too(cast, agent_api):
    cast["bob"].groups.remove(Group.objects.get(name=REVIEWERS_GROUP))
    made = propose(agent_api, call("db.drop_index"))
    assert made["required_reviews"][0]["members"] == ["alice"]
    refused = decide(cast["bob"], made["id"])
    assert (refused.status_code, refused.json()["error"]["type"]) == (403, "permission_denied")


def test_the_preview_shows_which_route_and_teams_each_proposal_would_need(db, agent_api, capsys):
    from django.core.management import call_command

    for tool in ("db.drop_index", "db.vacuum", "crm.lookup"):
        propose(agent_api, call(tool))
    draft = version_text().replace(
        "teams: {}\n", "teams:\n  dba: {members: [alice]}\n  finance: {members: [fiona]}\n"
    )
    draft = draft.replace(
        "reviews: []",
        "reviews:\n- match: ['tool:db.*']\n  require: {dba: 1}\n"
        "- match: ['tool:billing.*']\n  require: {finance: 1}",
    )
    preview = simulation.simulate(parse(draft), 100)
    first, second = preview.review_routes
    assert (first["route"], first["count"], first["require"]) == (
        "reviews[1]: tool:db.*",
        2,
        {"dba": 1},
    )
    assert second["count"] == 0 and preview.unrouted == 1  # crm.lookup: any reviewer
    assert preview.as_dict()["unused_review_routes"] == ["reviews[2]: tool:billing.*"]
    path = Path(tempfile.mkdtemp()) / "draft.yaml"
    path.write_text(draft)
    call_command("policy", "simulate", str(path), "--last", "100")
    shown = capsys.readouterr().out
    assert "reviews[1]: tool:db.* → dba 1: 2 (2 need 1 approvals)" in shown
    assert "reviews[2]: tool:billing.* → finance 1: matches nothing" in shown
    assert "no route (any reviewer, quorum by risk): 1" in shown
