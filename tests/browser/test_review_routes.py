"""Review routes in a real browser: each required team finds the proposal under "Needs me",
a reviewer outside the route sees why the buttons are off, and an admin breaks the glass
with a passkey.

The policy is put in force as the admins' guide says (``manage.py policy export``, teams
and routes appended, ``manage.py policy apply``); the people are made in the served
deployment's own database. dana is the dba team by name, sam the sre team through the
identity provider's group ``sre-oncall``; the demo ``reviewer`` and ``admin`` are in no team.
"""

from __future__ import annotations

import pytest

from tests.serving import DEMO_PASSWORD, manage

from .conftest import wait_for
from .test_passkeys import add_passkey, passkey_browser, sign_in_with_password

pytestmark = pytest.mark.browser

ROUTES = """\
teams:
  dba: {members: [dana]}
  sre: {sso_groups: [sre-oncall]}
reviews:
  - match: ["tool:db.*"]
    require: {dba: 1, sre: 1}
"""
PEOPLE = """\
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from accounts.roles import REVIEWERS_GROUP, set_provider_groups
reviewers = Group.objects.get_or_create(name=REVIEWERS_GROUP)[0]
for name, groups in {people!r}.items():
    user = get_user_model().objects.create_user(name, password={password!r})
    user.groups.add(reviewers)
    set_provider_groups(user, groups, actor="test")
"""
NEEDS_BOTH = "needs 1 approval from dba (dana) and 1 approval from sre (sam)"


@pytest.fixture(scope="module")
def routed(server, tmp_path_factory):
    """The served deployment with the people above and the route in force."""
    data = server.log.parent  # serve.log lies in the data dir
    people = {"dana": [], "sam": ["sre-oncall"]}
    manage(data, "shell", "-c", PEOPLE.format(people=people, password=DEMO_PASSWORD))
    exported = manage(data, "policy", "export").splitlines()
    kept = [line for line in exported if line not in ("teams: {}", "reviews: []")]
    policy = tmp_path_factory.mktemp("policy") / "policy.yaml"
    policy.write_text("\n".join(kept) + "\n" + ROUTES)
    applied = manage(data, "policy", "apply", str(policy), "--comment", "databases: dba and sre")
    assert "is now in force" in applied, applied
    return server


def tool_call(server, tool: str, **arguments) -> dict:
    status, made = server.api(
        "POST",
        "/api/v1/proposals",
        {
            "action": "tool.call",
            "parameters": {"tool": tool, "arguments": arguments},
            "reason": f"browser: {tool}",
        },
    )
    assert status == 201 and made["status"] == "pending", made
    return made


def needs_me(page) -> int:
    """The "Needs me" tab's count, checked against the title and the rows it lists."""
    count = int(page.inner_text("#mine-count"))
    assert page.title() == (f"Needs me ({count}) · Airlock" if count else "Needs me · Airlock")
    assert page.locator("#queue-list tr[data-proposal]").count() == count
    return count


def test_each_required_team_sees_it_under_needs_me_and_an_outsider_only_under_all_pending(
    routed, login
):
    server = routed
    made = tool_call(server, "db.drop_index", name="orders_idx")
    anyone = tool_call(server, "crm.lookup", email="a@example.com")  # no route: any reviewer
    row, other = f"#proposal-row-{made['id']}", f"#proposal-row-{anyone['id']}"
    assert made["required_approvals"] == 2, made
    assert [r["team"] for r in made["required_reviews"]] == ["dba", "sre"]

    for member in ("dana", "sam"):
        page = login(member)
        assert page.get_attribute("#tab-mine", "aria-current") == "page"
        assert page.is_visible(row) and page.is_visible(other)
        assert needs_me(page) >= 2

    outsider = login("reviewer")
    assert outsider.get_attribute("#tab-mine", "aria-current") == "page"
    assert outsider.is_visible(other) and outsider.locator(row).count() == 0
    assert needs_me(outsider) >= 1
    outsider.click("#tab-all")
    outsider.wait_for_url("**/queue/?view=all")
    assert outsider.get_attribute("#tab-all", "aria-current") == "page"
    assert outsider.title().startswith("Queue (")
    assert outsider.is_visible(row) and outsider.is_visible(other)

    outsider.click(f"{row} a")
    outsider.wait_for_url(f"**/proposals/{made['id']}/")
    assert outsider.inner_text("#team-dba") == "dba 0 of 1 · may decide: dana"
    assert outsider.inner_text("#team-sre") == "sre 0 of 1 · may decide: sam"
    assert outsider.is_disabled("#approve-button") and outsider.is_disabled("#reject-button")
    said = f"You cannot decide this proposal: {NEEDS_BOTH}."
    assert outsider.inner_text("#cannot-decide") == said
    assert outsider.locator("#break-glass-form").count() == 0  # a reviewer, not an admin

    dana = login("dana")
    dana.goto(f"{server.base}/proposals/{made['id']}/")
    dana.fill("#decision-comment", "the index is unused")
    dana.click("#approve-button")
    dana.wait_for_selector("text=You have decided")
    assert dana.inner_text("#team-dba") == "dba 1 of 1 · approved by dana"
    dana.goto(server.base + "/queue/")
    assert dana.locator(row).count() == 0  # dba's part is done: not hers any more
    # The outsider's page follows live; once reloaded, the sentence asks sre only.
    wait_for(lambda: outsider.inner_text("#team-dba") == "dba 1 of 1 · approved by dana")
    outsider.reload()
    assert outsider.inner_text("#cannot-decide") == (
        "You cannot decide this proposal: needs 1 approval from sre (sam)."
    )

    sam = login("sam")
    assert sam.is_visible(row)
    sam.goto(f"{server.base}/proposals/{made['id']}/")
    sam.click("#approve-button")
    sam.wait_for_selector("#proposal-state .status-approved")
    _, after = server.api("GET", f"/api/v1/proposals/{made['id']}")
    assert after["status"] == "approved"
    assert {d["reviewer"] for d in after["decisions"]} == {"dana", "sam"}


def test_an_admin_breaks_the_glass_with_a_passkey_and_the_proposal_shows_it_in_red(
    routed, browser, csp_violations
):
    server = routed
    made = tool_call(server, "db.failover", to="replica-2")
    base = server.base.replace("127.0.0.1", "localhost")  # WebAuthn wants a domain
    context, page, _, _ = passkey_browser(browser, csp_violations)
    try:
        sign_in_with_password(page, base, "admin")
        add_passkey(page, base, "security key")
        page.goto(f"{base}/proposals/{made['id']}/")
        assert page.is_disabled("#approve-button")
        assert (
            page.inner_text("#cannot-decide") == f"You cannot decide this proposal: {NEEDS_BOTH}."
        )
        page.fill("#break-glass-comment", "primary is down: fail over now")
        page.click("#break-glass-approve")
        page.wait_for_url("**/step-up/**")  # whatever the risk: a fresh factor, always
        assert "Break the glass: approve" in page.inner_text("main")
        assert server.api("GET", f"/api/v1/proposals/{made['id']}")[1]["status"] == "pending"
        page.click("#step-up-passkey")
        page.wait_for_selector("#mfa_webauthn_reauthenticate")
        page.click("#mfa_webauthn_reauthenticate")
        page.wait_for_url(f"**/proposals/{made['id']}/approve/?break_glass=1")
        assert page.input_value("#break-glass-comment") == "primary is down: fail over now"
        page.click("#break-glass-approve")
        page.wait_for_url(f"**/proposals/{made['id']}/")
        assert "by breaking the glass" in page.inner_text(".messages")
        assert page.inner_text("#proposal-status") == "Approved"
        glass = page.locator("#break-glass")
        assert "unreviewed" in glass.get_attribute("class")
        said = glass.inner_text()
        assert said.startswith("Decided by breaking the glass: admin approved outside the")
        assert "“primary is down: fail over now”" in said
        border = glass.evaluate("el => getComputedStyle(el).borderTopColor")
        assert border == "rgb(194, 50, 43)", border  # --danger
    finally:
        context.close()

    _, after = server.api("GET", f"/api/v1/proposals/{made['id']}")
    assert after["status"] == "approved", after
    assert [(d["reviewer"], d["kind"]) for d in after["decisions"]] == [("admin", "approve")]
