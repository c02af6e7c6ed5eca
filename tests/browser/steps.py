"""What a person does in the browser to prove who they are: used by the browser suites and
``scripts/screenshots.py``."""

from __future__ import annotations

import time

import pyotp

from tests.serving import DEMO_PASSWORD


def reauthenticate_if_asked(page, password: str = DEMO_PASSWORD) -> None:
    """allauth asks for the password again before a factor is added or removed."""
    if "/accounts/reauthenticate/" in page.url:
        page.fill("#id_password", password)
        page.click("main form[action*='reauthenticate'] button[type=submit]")
        page.wait_for_load_state()


def enrol_totp(page, base: str) -> str:
    """Activate a TOTP app in the console, as a person does with their phone; its secret."""
    page.goto(base + "/accounts/2fa/totp/activate/")
    reauthenticate_if_asked(page)
    page.wait_for_selector("#authenticator_secret")
    secret = page.input_value("#authenticator_secret")
    page.fill("#id_code", pyotp.TOTP(secret).now())
    page.click("main form[action*='totp/activate'] button[type=submit]")
    page.wait_for_url(lambda url: "/totp/activate/" not in url)
    return secret


def step_up_with_totp(page, secret: str, used: set[str]) -> None:
    """On the step-up page: confirm with a code of the app (a new one: each code works once)."""
    page.click("#step-up-totp")
    page.wait_for_selector("#id_code")
    totp = pyotp.TOTP(secret)
    while (code := totp.now()) in used:
        time.sleep(0.5)
    used.add(code)
    page.fill("#id_code", code)
    page.click("main form[action*='reauthenticate'] button[type=submit]")
    page.wait_for_load_state()
