"""Policy as code: YAML export and apply (exact round trip, precise refusals), the command."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command

from approvals.policy import text as policy_text
from approvals.policy.models import PolicyVersion
from approvals.policy.rules import DEFAULT_POLICY, current_policy, update_policy
from audit.models import AuditEvent


def export(*args) -> str:
    out = io.StringIO()
    call_command("policy", "export", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def edited_policy(db, admin_user):
    """A policy with every kind of value: overrides, globs YAML would misread, a note with a colon."""
    current_policy()
    data = {
        **DEFAULT_POLICY,
        "allow": [
            *DEFAULT_POLICY["allow"],
            {"kind": "command", "pattern": "*", "note": "yes: everything"},
            {"kind": "service", "pattern": "no", "note": ""},
            {"kind": "container", "pattern": "[web]-?1", "note": "# not a comment"},
        ],
        "high_risk_quorum": 3,
        "agent_overrides": {
            "zeta.bot": {"script_network": True, "auto_approve_below": 2},
            "alpha": {"review_timeout_minutes": 15},
        },
    }
    return update_policy(data, admin_user, "edited")


@pytest.mark.django_db
def test_export_apply_export_gives_the_same_text(edited_policy, tmp_path):
    first = export()
    path = tmp_path / "policy.yaml"
    path.write_text(first)
    call_command("policy", "apply", str(path), "--comment", "round trip", stdout=io.StringIO())
    assert current_policy().version == edited_policy.version + 1
    assert export() == first
    assert (
        policy_text.parse(first)
        == PolicyVersion.objects.get(version=edited_policy.version + 1).data
    )


@pytest.mark.django_db
def test_the_export_is_readable_yaml_with_comments(edited_policy):
    text = export()
    assert text.startswith("# Airlock policy.")
    assert "\n# scores below this run at once" in text
    assert "\nauto_approve_below: 4\n" in text
    assert "- kind: command\n  pattern: '*'\n  note: 'yes: everything'\n" in text
    assert text.index("  alpha:") < text.index("  zeta.bot:")  # agents sorted


@pytest.mark.django_db
def test_an_older_version_is_exported_by_number(edited_policy):
    assert "high_risk_quorum: 2\n" in export("--version", "1")
    assert "high_risk_quorum: 3\n" in export("--version", str(edited_policy.version))
    with pytest.raises(CommandError, match="there is no policy version 99"):
        export("--version", "99")


@pytest.mark.django_db
def test_each_apply_is_a_new_audited_version_by_the_shell_user(edited_policy, tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text(export().replace("high_risk_quorum: 3", "high_risk_quorum: 4"))
    out = io.StringIO()
    call_command("policy", "apply", str(path), "--comment", "four eyes plus two", stdout=out)
    version = edited_policy.version + 1
    assert out.getvalue().strip() == f"policy version {version} is now in force"
    event = AuditEvent.objects.filter(verb="policy.updated").latest("seq")
    assert event.actor.startswith("cli")
    assert event.data["changes"] == {"high_risk_quorum": [3, 4]}
    assert event.data["comment"] == "four eyes plus two"


BAD = [
    ("auto_approve_below: 4", "auto_approve_below: 40", "auto_approve_below: Ensure"),
    ("high_risk_at: 7", "high_risk_at: 2", "high_risk_at: the high-risk threshold must not"),
    ("  pattern: uptime", "  patern: uptime", "allow[4].patern: unknown setting"),
    (
        "- kind: command\n  pattern: mkfs*",
        "- kind: bogus\n  pattern: mkfs*",
        'deny[2].kind: "bogus"',
    ),
    ("script_network: false", "script_netwrk: false", "script_netwrk: unknown setting"),
    ("    review_timeout_minutes: 15", "    review_timeout_minutes: soon", "alpha.review_timeout"),
    (
        "self_approval: false",
        "self_approval: false\nself_approval: true",
        "self_approval: given twice",
    ),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("old", "new", "message"), BAD, ids=[b[2][:24] for b in BAD])
def test_a_faulty_file_is_refused_with_its_line_and_field_and_nothing_is_written(
    edited_policy, tmp_path, old, new, message
):
    text = export()
    assert old in text
    faulty = text.replace(old, new, 1)
    path = tmp_path / "policy.yaml"
    path.write_text(faulty)
    before = (PolicyVersion.objects.count(), AuditEvent.objects.count())
    with pytest.raises(CommandError) as refused:
        call_command("policy", "apply", str(path), stdout=io.StringIO())
    assert message in str(refused.value)
    assert re.search(r"\n  line \d+, ", str(refused.value)), str(refused.value)
    assert (PolicyVersion.objects.count(), AuditEvent.objects.count()) == before


@pytest.mark.django_db
def test_the_line_number_points_at_the_faulty_setting(edited_policy):
    text = export().replace("high_risk_quorum: 3", "high_risk_quorum: 0")
    line = text.split("\n").index("high_risk_quorum: 0") + 1
    with pytest.raises(policy_text.PolicyTextError) as refused:
        policy_text.parse(text)
    assert refused.value.problems == [
        f"line {line}, high_risk_quorum: Ensure this value is greater than or equal to 1."
    ]


@pytest.mark.django_db
def test_a_missing_field_of_a_rule_points_at_the_rule(edited_policy):
    text = export().replace("  pattern: uptime\n", "")
    lines = text.split("\n")
    allow = lines.index("allow:")
    line = [i + 1 for i, t in enumerate(lines) if i > allow and t.startswith("- kind:")][3]
    assert lines[line - 1 : line + 1] == ["- kind: command", "  note: read-only"]
    with pytest.raises(policy_text.PolicyTextError) as refused:
        policy_text.parse(text)
    assert refused.value.problems == [f"line {line}, allow[4].pattern: This field is required."]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("allow: [\n", "line 2, column 1: expected the node content"),
        ("- 1\n", "line 1: expected the policy's settings"),
        ("", "line 1: expected the policy's settings"),
        ("a: &x [1]\nb: *x\n", "line 2, column 4: aliases (*name) are not accepted"),
        ("a: !!python/object:os.system x\n", "could not determine a constructor"),
    ],
)
def test_text_that_is_not_a_policy_is_refused_before_validation(text, message):
    with pytest.raises(policy_text.PolicyTextError) as refused:
        policy_text.parse(text)
    assert message in str(refused.value)


@pytest.mark.django_db
def test_an_unreadable_file_is_refused(db, tmp_path):
    with pytest.raises(CommandError, match="cannot read"):
        call_command("policy", "apply", str(tmp_path / "missing.yaml"))
    assert PolicyVersion.objects.count() == 0


@pytest.mark.django_db
def test_simulate_prints_the_moves_and_saves_nothing(agent, tmp_path):
    from tests.approvals.test_policy_preview import stored

    current_policy()
    stored(
        agent, "host.restart_service", {"service_name": "nginx"}, risk=5, step="review", required=1
    )
    stored(
        agent, "host.restart_service", {"service_name": "nginx"}, risk=8, step="review", required=2
    )
    path = tmp_path / "draft.yaml"
    path.write_text(export().replace("auto_approve_below: 4", "auto_approve_below: 6"))
    out = io.StringIO()
    call_command("policy", "simulate", str(path), "--last", "10", stdout=out)
    report = out.getvalue()
    assert "replayed 2 proposals" in report and "1 would move" in report
    assert "review (1 approval) → auto-approved: 1" in report
    assert "the pre-validator is not called" in report
    assert PolicyVersion.objects.count() == 1


@pytest.mark.django_db
def test_simulate_refuses_a_faulty_draft(db, tmp_path):
    path = tmp_path / "draft.yaml"
    path.write_text("auto_approve_below: 4\n")
    with pytest.raises(CommandError, match="high_risk_at: This field is required"):
        call_command("policy", "simulate", str(path))


def test_a_draft_is_described_setting_by_setting():
    from approvals.policy.rules import describe_diff

    after = {
        **DEFAULT_POLICY,
        "allow": [
            *DEFAULT_POLICY["allow"][1:],
            {"kind": "service", "pattern": "nginx", "note": ""},
        ],
        "high_risk_quorum": 3,
        "agent_overrides": {"bot": {"high_risk_at": 9}},
    }
    assert describe_diff(DEFAULT_POLICY, after) == [
        'agent_overrides: {} → {"bot": {"high_risk_at": 9}}',
        "allow: + service:nginx",
        "allow: − action:docker.inspect_container",
        "high_risk_quorum: 2 → 3",
    ]
    assert describe_diff(DEFAULT_POLICY, dict(DEFAULT_POLICY)) == []


ROUTES = [
    {"channel": "#sec-approvals", "bands": ["high"], "agent": "*", "action": "*"},
    {"channel": "C0123ABCD", "bands": ["low", "medium"], "agent": "deploy-*", "action": "docker.*"},
]


@pytest.mark.django_db
def test_slack_routes_make_the_round_trip_and_say_what_they_are(admin_user, tmp_path):
    current_policy()
    update_policy({**DEFAULT_POLICY, "slack_routes": ROUTES}, admin_user, "routes")
    first = export()
    assert "\n# Slack channels for review requests, first match wins" in first
    assert "- channel: '#sec-approvals'\n  bands:\n  - high\n" in first
    path = tmp_path / "policy.yaml"
    path.write_text(first)
    call_command("policy", "apply", str(path), stdout=io.StringIO())
    assert export() == first
    assert current_policy().slack_routes[1].agent == "deploy-*"


@pytest.mark.django_db
def test_bands_are_kept_in_one_order_however_they_were_typed(admin_user):
    current_policy()
    text = export().replace(
        "slack_routes: []", "slack_routes:\n- channel: '#ops'\n  bands: [high, low, high]"
    )
    assert policy_text.parse(text)["slack_routes"] == [
        {"channel": "#ops", "bands": ["low", "high"], "agent": "*", "action": "*"}
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("route", "message"),
    [
        ("- channel: ops", "slack_routes[1].channel: a channel id or #name"),
        ("- channel: '#ops'\n  bands: [extreme]", 'slack_routes[1].bands[1]: "extreme"'),
        ("- channel: '#ops'\n  chanel: '#ops'", "slack_routes[1].chanel: unknown setting"),
        ("- bands: [high]", "slack_routes[1].channel: This field is required."),
    ],
)
def test_a_faulty_route_is_refused_with_its_line(db, route, message):
    current_policy()
    text = export().replace("slack_routes: []", "slack_routes:\n" + route)
    line = text.split("\n").index(route.split("\n")[-1]) + 1  # the faulty line
    with pytest.raises(policy_text.PolicyTextError) as refused:
        policy_text.parse(text)
    assert any(p.startswith(f"line {line}") and message in p for p in refused.value.problems), (
        refused.value.problems
    )


def test_the_first_matching_route_wins():
    from approvals.policy.rules import Policy

    policy = Policy.from_data(1, {**DEFAULT_POLICY, "slack_routes": ROUTES})
    assert policy.slack_channel_for("anyone", "script.execute", 8) == "#sec-approvals"
    assert policy.slack_channel_for("deploy-web", "docker.restart_container", 5) == "C0123ABCD"
    assert policy.slack_channel_for("deploy-web", "docker.restart_container", 0) == "C0123ABCD"
    assert policy.slack_channel_for("other", "docker.restart_container", 5) is None
    assert policy.slack_channel_for("deploy-web", "script.execute", 5) is None


def test_a_route_change_is_described():
    from approvals.policy.rules import describe_diff

    after = {**DEFAULT_POLICY, "slack_routes": ROUTES[:1]}
    assert describe_diff(DEFAULT_POLICY, after) == [
        "slack_routes: + #sec-approvals ← high, agent *, action *"
    ]
