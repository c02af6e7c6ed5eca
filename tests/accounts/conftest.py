"""The cast of the sign-in suites: people with a password, a TOTP app, and step-up on."""

from __future__ import annotations

import time

import pyotp
import pytest
from allauth.mfa.models import Authenticator
from django.test import Client


@pytest.fixture(autouse=True)
def step_up_on(settings):
    """Step-up as an install has it by default: decisions at risk 7 and above."""
    settings.STEP_UP_MIN_RISK = 7


def sign_in(username: str, password: str, client: Client | None = None):
    """(client, response) of the password step of signing in."""
    client = client or Client()
    return client, client.post("/login/", {"login": username, "password": password})


def enrol_totp(client: Client, password: str = "pw-rita") -> str:
    """Activate a TOTP app through allauth's pages, as a person does; its secret.

    Adding a factor asks for the password again first (allauth's reauthentication).
    """
    page = client.get("/accounts/2fa/totp/activate/")
    if page.status_code == 302 and page["Location"].startswith("/accounts/reauthenticate/"):
        again = client.post(page["Location"], {"password": password})
        assert again.status_code == 302, again.content[:300]
        page = client.get("/accounts/2fa/totp/activate/")
    assert page.status_code == 200, page.status_code
    secret = page.context["form"].secret
    done = client.post("/accounts/2fa/totp/activate/", {"code": pyotp.TOTP(secret).now()})
    assert done.status_code == 302, done.content[:500]
    return secret


def fresh_code(secret: str, used: set[str]) -> str:
    """A code of the app not used yet (allauth takes each code once): waits for the next one."""
    totp = pyotp.TOTP(secret)
    while (code := totp.now()) in used:
        time.sleep(0.5)
    used.add(code)
    return code


def has_totp(user) -> bool:
    return Authenticator.objects.filter(user=user, type=Authenticator.Type.TOTP).exists()
