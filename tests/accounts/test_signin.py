"""Signing in: passwords, second factors, refusals and their audit trail, session limits."""

from __future__ import annotations

import pyotp
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from accounts.middleware import SEEN_AT, SIGNED_IN_AT
from audit.models import AuditEvent
from tests.accounts.conftest import enrol_totp, fresh_code, has_totp, sign_in

pytestmark = pytest.mark.django_db

REVIEWER_PASSWORD = "pw-rita"  # the cast's (tests/conftest.py)


def verbs(*names: str) -> list[tuple[str, dict]]:
    return [(e.verb, e.data) for e in AuditEvent.objects.filter(verb__in=names).order_by("seq")]


def test_a_password_sign_in_lands_on_the_console_and_is_recorded(reviewer):
    client, response = sign_in("rita", REVIEWER_PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/queue/").status_code == 200
    [(verb, data)] = verbs("signin.succeeded")
    assert data["auth"] == {"via": "console", "method": "password"}
    assert data["address"] == "127.0.0.1"


def test_a_wrong_password_says_so_and_is_recorded(reviewer):
    client, response = sign_in("rita", "wrong")
    assert response.status_code == 200 and 'id="sign-in-error"' in response.text
    assert client.get("/queue/").status_code == 302  # still signed out
    [(_, data)] = verbs("signin.failed")
    assert data == {"username": "rita", "address": "127.0.0.1"}


def test_too_many_failures_lock_the_account_even_for_the_right_password(reviewer, settings):
    for _ in range(settings.SIGNIN_FAILURES_PER_ACCOUNT):
        sign_in("rita", "wrong")
    client, response = sign_in("rita", REVIEWER_PASSWORD)
    assert response.status_code == 200
    assert (
        "Too many failed sign-ins" in response.text
        and "even with the right password" in response.text
    )
    assert client.get("/queue/").status_code == 302
    sign_in("rita", REVIEWER_PASSWORD)  # refused again: the lock is recorded once
    assert len(verbs("signin.locked")) == 1
    assert len(verbs("signin.failed")) == settings.SIGNIN_FAILURES_PER_ACCOUNT


def test_too_many_failures_from_one_address_lock_it_for_every_account(reviewer, settings):
    settings.SIGNIN_FAILURES_PER_ADDRESS = 5
    settings.ACCOUNT_RATE_LIMITS = {"login_failed": "5/5m/ip,10/5m/key"}
    for n in range(5):
        sign_in(f"nobody-{n}", "guess")
    _, response = sign_in("rita", REVIEWER_PASSWORD)
    assert "Too many failed sign-ins" in response.text
    other = Client(REMOTE_ADDR="10.1.2.3")
    _, elsewhere = sign_in("rita", REVIEWER_PASSWORD, other)
    assert elsewhere.status_code == 302  # another address is not locked


def test_with_password_sign_in_off_only_the_break_glass_admin_gets_in(
    reviewer, admin_user, settings
):
    settings.PASSWORD_SIGNIN = False
    settings.BREAK_GLASS_USERS = ["ada"]
    page = Client().get("/login/")
    assert 'id="password-sign-in"' in page.text  # for the break-glass admin
    _, refused = sign_in("rita", REVIEWER_PASSWORD)
    assert refused.status_code == 200 and "Password sign-in is off" in refused.text
    _, allowed = sign_in("ada", "pw-ada")
    assert allowed.status_code == 302
    [(_, data)] = verbs("signin.refused")
    assert data == {"username": "rita", "reason": "password sign-in is off"}
    settings.BREAK_GLASS_USERS = []
    assert 'id="password-sign-in"' not in Client().get("/login/").text


def test_a_totp_app_is_enrolled_and_then_asked_for_at_every_sign_in(
    reviewer, django_capture_on_commit_callbacks
):
    client, _ = sign_in("rita", REVIEWER_PASSWORD)
    with django_capture_on_commit_callbacks(execute=True):
        secret = enrol_totp(client)
    assert has_totp(reviewer)
    assert verbs("factor.added")[0][1] == {"type": "totp"}
    used = {pyotp.TOTP(secret).now()}
    fresh, response = sign_in("rita", REVIEWER_PASSWORD)
    assert response.status_code == 302 and response["Location"] == "/accounts/2fa/authenticate/"
    assert fresh.get("/queue/").status_code == 302  # the password alone is not enough
    wrong = fresh.post("/accounts/2fa/authenticate/", {"code": "000000"})
    assert wrong.status_code == 200 and "Incorrect code" in wrong.text
    assert verbs("factor.failed")[-1][1]["type"] == "totp"
    done = fresh.post("/accounts/2fa/authenticate/", {"code": fresh_code(secret, used)})
    assert done.status_code == 302 and fresh.get("/queue/").status_code == 200
    last = verbs("signin.succeeded")[-1][1]["auth"]
    assert (last["method"], last["factor"], last["fresh"]) == ("password", "totp", True)


def test_a_recovery_code_signs_in_once_when_the_phone_is_lost(reviewer):
    from allauth.mfa.models import Authenticator

    client, _ = sign_in("rita", REVIEWER_PASSWORD)
    enrol_totp(client)
    codes = (
        Authenticator.objects.get(user=reviewer, type=Authenticator.Type.RECOVERY_CODES)
        .wrap()
        .get_unused_codes()
    )
    assert len(codes) >= 8
    fresh, _ = sign_in("rita", REVIEWER_PASSWORD)
    done = fresh.post("/accounts/2fa/authenticate/", {"code": codes[0]})
    assert done.status_code == 302 and fresh.get("/queue/").status_code == 200
    last = verbs("signin.succeeded")[-1][1]["auth"]
    assert last["factor"] == "recovery_codes"
    again, _ = sign_in("rita", REVIEWER_PASSWORD)
    spent = again.post("/accounts/2fa/authenticate/", {"code": codes[0]})
    assert spent.status_code == 200 and again.get("/queue/").status_code == 302


def test_too_many_wrong_codes_lock_the_second_step_too(reviewer, settings):
    client, _ = sign_in("rita", REVIEWER_PASSWORD)
    secret = enrol_totp(client)
    fresh, _ = sign_in("rita", REVIEWER_PASSWORD)
    for _ in range(settings.SIGNIN_FAILURES_PER_ACCOUNT):
        fresh.post("/accounts/2fa/authenticate/", {"code": "000000"})
    right = fresh.post("/accounts/2fa/authenticate/", {"code": pyotp.TOTP(secret).now()})
    assert right.status_code == 200 and "Too many failed sign-ins" in right.text
    assert fresh.get("/queue/").status_code == 302


def test_an_idle_session_ends_and_says_why(reviewer, settings):
    client, _ = sign_in("rita", REVIEWER_PASSWORD)
    session = client.session
    session[SEEN_AT] -= settings.SESSION_IDLE_MINUTES * 60 + 5
    session.save()
    ended = client.get("/queue/", follow=True)
    assert ended.redirect_chain[-1][0].startswith("/login/?next=/queue/")
    assert "idle minutes" in ended.text
    assert client.get("/queue/").status_code == 302


def test_a_session_ends_after_its_longest_life_however_busy(reviewer, settings):
    client, _ = sign_in("rita", REVIEWER_PASSWORD)
    session = client.session
    session[SIGNED_IN_AT] -= settings.SESSION_MAX_HOURS * 3600 + 5
    session.save()
    ended = client.get("/queue/", follow=True)
    assert f"signed in for {settings.SESSION_MAX_HOURS} hours" in ended.text


def test_a_busy_session_writes_its_last_seen_time_once_a_minute(reviewer):
    client, _ = sign_in("rita", REVIEWER_PASSWORD)
    seen = client.session[SEEN_AT]
    client.get("/queue/")
    assert client.session[SEEN_AT] == seen  # within the minute: not written again


def test_signing_up_is_closed(db):
    response = Client().post(
        "/accounts/signup/", {"username": "mallory", "password1": "a-long-pass-phrase"}
    )
    assert not get_user_model().objects.filter(username="mallory").exists()
    assert response.status_code in (200, 302, 403)
