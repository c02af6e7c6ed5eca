"""Passkeys through Chromium's virtual authenticator: enrol one, sign in with it, step up with it.

The console is opened at ``localhost``: WebAuthn binds a credential to a
domain (never to an IP address), and a browser treats localhost as secure.
"""

from __future__ import annotations

import pytest

from .conftest import VIEWPORT, watch_policy
from .steps import reauthenticate_if_asked

pytestmark = pytest.mark.browser

RISKY = "import subprocess\nsubprocess.run(['rm', '-rf', '/tmp/airlock-passkey-test'])\n"


def passkey_browser(browser, violations: list[str]):
    """A fresh browser with a platform authenticator that verifies its user at once."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(20_000)
    watch_policy(context, violations)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("WebAuthn.enable", {"enableUI": False})
    authenticator = cdp.send(
        "WebAuthn.addVirtualAuthenticator",
        {
            "options": {
                "protocol": "ctap2",
                "transport": "internal",
                "hasResidentKey": True,
                "hasUserVerification": True,
                "isUserVerified": True,
                "automaticPresenceSimulation": True,
            }
        },
    )
    return context, page, cdp, authenticator["authenticatorId"]


def sign_in_with_password(page, base: str, username: str) -> None:
    page.goto(base + "/login/")
    page.fill("#id_login", username)
    page.fill("#id_password", "airlock-demo")
    page.click("#password-submit")
    page.wait_for_url(lambda url: "/login/" not in url)


def add_passkey(page, base: str, name: str) -> None:
    page.goto(base + "/accounts/2fa/webauthn/add/")
    reauthenticate_if_asked(page)
    page.wait_for_selector("#mfa_webauthn_add")
    page.fill("input[name=name]", name)
    passwordless = page.locator("input[name=passwordless]")
    if passwordless.count() and not passwordless.is_checked():
        passwordless.check()  # a passkey: it signs in on its own
    page.click("#mfa_webauthn_add")
    page.wait_for_url(lambda url: "/webauthn/add/" not in url)


def test_a_reviewer_enrols_a_passkey_signs_in_with_it_and_steps_up_before_a_risky_approval(
    server, browser, csp_violations
):
    base = server.base.replace("127.0.0.1", "localhost")
    proposal = server.propose_script(RISKY, reason="clean up")
    assert proposal["status"] == "pending" and proposal["risk"]["score"] >= 7, proposal

    context, page, cdp, authenticator = passkey_browser(browser, csp_violations)
    try:
        sign_in_with_password(page, base, "reviewer")
        add_passkey(page, base, "laptop")
        credentials = cdp.send("WebAuthn.getCredentials", {"authenticatorId": authenticator})
        assert len(credentials["credentials"]) == 1
        assert credentials["credentials"][0]["isResidentCredential"]

        # Signed in with a password, a passkey added: no factor proved in this session yet.
        page.goto(base + f"/proposals/{proposal['id']}/")
        page.fill("#decision-comment", "the cleanup is expected")
        page.click("#approve-button")
        page.wait_for_url("**/step-up/**")  # risk 7 and above: a fresh factor first
        assert page.is_visible("#step-up-passkey") and not page.is_visible("#step-up-totp")
        page.click("#step-up-passkey")
        page.wait_for_selector("#mfa_webauthn_reauthenticate")
        page.click("#mfa_webauthn_reauthenticate")
        page.wait_for_url(f"**/proposals/{proposal['id']}/approve/")
        assert page.input_value("#decision-comment") == "the cleanup is expected"
        page.click("#approve-button")
        page.wait_for_selector("text=You have decided")
        _, after = server.api("GET", f"/api/v1/proposals/{proposal['id']}")
        assert after["approvals"] == 1 and after["decisions"][0]["reviewer"] == "reviewer"
        assert after["status"] == "pending"  # high risk: a second reviewer still needed

        page.click("header form.logout button[type=submit]")
        page.wait_for_url("**/login/**")
        page.click("#passkey_login")  # no name, no password: the passkey alone
        page.wait_for_url(lambda url: "/login/" not in url and "/accounts/" not in url)
        assert "reviewer" in page.inner_text("header .who")
    finally:
        context.close()


def test_an_admin_steps_up_with_a_passkey_before_the_policy_is_saved(
    server, browser, csp_violations
):
    base = server.base.replace("127.0.0.1", "localhost")
    context, page, _, _ = passkey_browser(browser, csp_violations)
    try:
        sign_in_with_password(page, base, "admin")
        add_passkey(page, base, "security key")
        page.goto(base + "/manage/policy/")
        timeout = int(page.input_value("#id_review_timeout_minutes"))
        page.fill("#id_review_timeout_minutes", str(timeout + 5))
        page.fill("#id_comment", "a little longer to review")
        page.click("#save-policy")
        page.wait_for_url("**/step-up/**")
        page.click("#step-up-passkey")
        page.wait_for_selector("#mfa_webauthn_reauthenticate")
        page.click("#mfa_webauthn_reauthenticate")
        page.wait_for_url("**/manage/policy/apply/?draft=*")
        assert f"review_timeout_minutes: {timeout} → {timeout + 5}" in page.inner_text(
            "#apply-changes"
        )
        page.click("#apply-submit")
        page.wait_for_selector(".message-success")
        assert "is now in force" in page.inner_text(".messages")
        assert page.input_value("#id_review_timeout_minutes") == str(timeout + 5)
    finally:
        context.close()
