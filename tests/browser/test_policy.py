"""The policy editor in a real browser: edit a threshold, preview what moves, confirm it's
you, save."""

from __future__ import annotations

import pyotp
import pytest

from .steps import enrol_totp, step_up_with_totp

pytestmark = pytest.mark.browser

CODE = "import os\nprint(os.getcwd())\n"  # `import os`: held for one reviewer


def test_an_admin_previews_a_threshold_change_then_saves_it(server, login):
    waiting = [server.propose_script(CODE, reason=f"look around {i}") for i in range(3)]
    score = waiting[0]["risk"]["score"]
    assert all(p["status"] == "pending" and p["required_approvals"] == 1 for p in waiting), waiting
    assert 4 <= score < 7, waiting[0]

    page = login("admin")
    assert page.url == server.base + "/overview/"
    secret = enrol_totp(page, server.base)
    used = {pyotp.TOTP(secret).now()}
    page.goto(server.base + "/overview/")
    page.click("nav >> text=Policy")
    page.wait_for_url("**/manage/policy/")  # reading and previewing need no second factor
    assert "version 1 in force" in page.inner_text("h1")
    page.fill("#id_high_risk_at", str(score))  # from this score on, two reviewers
    page.click("#preview-policy")
    page.wait_for_selector("#preview-moved")

    assert page.url == server.base + "/manage/policy/", "the preview navigated away"
    assert int(page.inner_text("#preview-moved")) >= len(waiting)
    preview = page.inner_text("#policy-preview")
    assert "review (1 approval) → review (2 approvals)" in preview
    assert f"high_risk_at: 7 → {score}" in preview
    for proposal in waiting:
        assert page.is_visible(f'#policy-preview a[href="/proposals/{proposal["id"]}/"]')
    assert "version 1 in force" in page.inner_text("h1"), "the preview saved something"
    assert page.input_value("#id_high_risk_at") == str(score)

    page.fill("#id_comment", f"two reviewers from risk {score}")
    page.click("#save-policy")
    page.wait_for_url("**/step-up/**")  # putting it in force does
    step_up_with_totp(page, secret, used)
    page.wait_for_url("**/manage/policy/apply/?draft=*")  # the draft, kept
    assert f"high_risk_at: 7 → {score}" in page.inner_text("#apply-changes")
    page.click("#apply-submit")
    page.wait_for_selector(".message-success")
    assert "Policy version 2 is now in force." in page.inner_text(".messages")
    assert "version 2 in force" in page.inner_text("h1")
    after = server.propose_script(CODE, reason="after the change")
    assert after["status"] == "pending" and after["required_approvals"] == 2, after
