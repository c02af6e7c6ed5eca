"""The risk the policy gives a tool call: by tool, by argument; in the policy file with the rest."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from approvals.policy import text as policy_text
from approvals.policy.rules import DEFAULT_POLICY, current_policy, update_policy
from tests.conftest import use_policy

RULES = [
    {"tool": "billing.*", "risk": 6, "note": "money moves"},
    {"tool": "billing.refund", "risk": 7, "argument": "amount", "above": 100},
    {"tool": "mail.send", "risk": 6, "argument": "to", "not_matches": "*@acme.com",
     "note": "outside the company"},
    {"tool": "github.*", "risk": 2, "argument": "repo", "matches": "acme/sandbox-*"},
]  # fmt: skip


def call(api, tool: str, **arguments) -> dict:
    response = api.post(
        "/api/v1/proposals",
        {"action": "tool.call", "parameters": {"tool": tool, "arguments": arguments}},
        format="json",
    )
    assert response.status_code == 201, response.content
    risk = response.json()["risk"]
    # A tool call has no code: nothing located; its top reasons are its reasons but the base.
    assert risk.pop("lines") == []
    assert risk.pop("top") == [r for r in risk["reasons"] if " starts at risk " not in r][:2]
    return risk


def test_the_policy_sets_a_tools_base_risk_and_raises_it_by_its_arguments(agent_api):
    use_policy(tool_risk=RULES)
    assert call(agent_api, "billing.invoice") == {
        "score": 6,
        "reasons": ["policy: tool billing.* is risk 6 (money moves)"],
    }
    small = call(agent_api, "billing.refund", amount=40)
    assert small["score"] == 6
    large = call(agent_api, "billing.refund", amount=400, currency="EUR")
    assert large["score"] == 6 + 4  # the strongest counts in full, the next half (up)
    assert "policy: tool billing.refund with amount above 100 is risk 7" in large["reasons"]
    assert call(agent_api, "billing.refund", amount="250.5")["score"] == 10  # text read as a number
    assert call(agent_api, "billing.refund", amount="a lot")["score"] == 6
    assert call(agent_api, "billing.refund")["score"] == 6  # no amount: the condition does not hold
    assert call(agent_api, "mail.send", to="bob@acme.com")["score"] == 4  # the catalog's base
    outside = call(agent_api, "mail.send", to="eve@example.org")
    assert outside["score"] == 6 + 2
    assert outside["reasons"][0] == (
        "policy: tool mail.send with to not matches *@acme.com is risk 6 (outside the company)"
    )
    assert call(agent_api, "github.merge", repo="acme/sandbox-1")["score"] == 4 + 1
    assert call(agent_api, "github.merge", repo="acme/web")["score"] == 4


def test_a_high_risk_tool_waits_for_the_quorum(agent_api):
    use_policy(tool_risk=[{"tool": "db.drop_*", "risk": 9}])
    response = agent_api.post(
        "/api/v1/proposals",
        {"action": "tool.call", "parameters": {"tool": "db.drop_table", "arguments": {}}},
        format="json",
    )
    body = response.json()
    assert (body["status"], body["required_approvals"], body["risk"]["score"]) == ("pending", 2, 9)


@pytest.mark.django_db
def test_tool_risk_makes_the_round_trip_through_the_policy_file(admin_user, tmp_path):
    current_policy()
    update_policy({**DEFAULT_POLICY, "tool_risk": RULES}, admin_user, "tools")
    out = io.StringIO()
    call_command("policy", "export", stdout=out)
    first = out.getvalue()
    assert "\n# risk of tool calls (tool.call), by tool (a glob)" in first
    assert "- tool: billing.refund\n  risk: 7\n  argument: amount\n  above: 100\n" in first
    path = tmp_path / "policy.yaml"
    path.write_text(first)
    call_command("policy", "apply", str(path), stdout=io.StringIO())
    again = io.StringIO()
    call_command("policy", "export", stdout=again)
    assert again.getvalue() == first
    assert current_policy().tool_risk[2].not_matches == "*@acme.com"


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("- tool: x\n  risk: 11", "tool_risk[1].risk: Ensure this value is less than or equal"),
        ("- tool: x\n  risk: 5\n  argument: a", "tool_risk[1].argument: takes exactly one of"),
        ("- tool: x\n  risk: 5\n  argument: a\n  above: 1\n  matches: b",
         "tool_risk[1].argument: takes exactly one of"),
        ("- tool: x\n  risk: 5\n  above: 1", "tool_risk[1].above: needs the argument"),
        ("- tool: x\n  risk: 5\n  tol: y", "tool_risk[1].tol: unknown setting"),
        ("- risk: 5", "tool_risk[1].tool: This field is required."),
    ],
)  # fmt: skip
def test_a_faulty_tool_rule_is_refused_with_its_line(db, rule, message):
    current_policy()
    out = io.StringIO()
    call_command("policy", "export", stdout=out)
    text = out.getvalue().replace("tool_risk: []", "tool_risk:\n" + rule)
    with pytest.raises(policy_text.PolicyTextError) as refused:
        policy_text.parse(text)
    assert any(message in problem for problem in refused.value.problems), refused.value.problems
    assert any(problem.startswith("line ") for problem in refused.value.problems)


@pytest.mark.django_db
def test_admins_edit_tool_risk_in_the_console_and_a_bad_row_names_its_field(admin_user):
    from django.urls import reverse

    from tests.console.conftest import logged_in
    from tests.console.test_admin_pages import editor_post

    current_policy()
    update_policy({**DEFAULT_POLICY, "tool_risk": RULES[:2]}, admin_user, "tools")
    admin = logged_in(admin_user)
    html = admin.get(reverse("console:policy")).content.decode()
    assert 'name="tool_risk-1-argument" value="amount"' in html
    assert '<option value="above" selected>' in html and 'value="100"' in html
    bad = editor_post(admin, **{"tool_risk-2-tool": "mail.send", "tool_risk-2-risk": "6",
                                "tool_risk-2-argument": "to", "tool_risk-2-when": "above",
                                "tool_risk-2-value": "many", "intent": "save"})  # fmt: skip
    response = admin.post(reverse("console:policy"), bad)
    assert response.status_code == 400
    assert "tool_risk[3].value: above takes a number" in response.content.decode()
    good = {**bad, "tool_risk-2-when": "not_matches", "tool_risk-2-value": "*@acme.com",
            "tool_risk-0-DELETE": "on"}  # fmt: skip
    response = admin.post(reverse("console:policy"), good, follow=True)
    assert "is now in force" in response.content.decode()
    assert [rule.as_data() for rule in current_policy().tool_risk] == [
        RULES[1],
        {"tool": "mail.send", "risk": 6, "argument": "to", "not_matches": "*@acme.com"},
    ]


def test_a_tool_risk_change_is_described():
    from approvals.policy.rules import describe_diff

    before = {**DEFAULT_POLICY, "tool_risk": RULES[:1]}
    after = {**DEFAULT_POLICY, "tool_risk": RULES[1:2]}
    assert describe_diff(before, after) == [
        "tool_risk: + tool billing.refund with amount above 100 is risk 7",
        "tool_risk: − tool billing.* is risk 6 (money moves)",
    ]
