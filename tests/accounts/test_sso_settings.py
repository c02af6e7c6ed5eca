"""Single sign-on as the environment configures it, and what a provider's groups make of someone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accounts.sso.adapter import ADMIN, REVIEWER, groups_of, role_from

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "import json, django; django.setup(); from django.conf import settings; "
    "print(json.dumps([{k: a[k] for k in ('provider_id', 'name', 'client_id')} | a['settings'] "
    "for a in settings.SOCIALACCOUNT_PROVIDERS['oidc']['APPS']]))"
)


def configured(**variables: str) -> subprocess.CompletedProcess:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("OIDC_") and key != "DJANGO_SETTINGS_MODULE"
    }
    env.update(DJANGO_SETTINGS_MODULE="console.settings", **variables)
    return subprocess.run(
        [sys.executable, "-c", SHOW], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


def providers(**variables: str) -> list[dict]:
    done = configured(**variables)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


def test_no_issuer_no_single_sign_on():
    assert providers() == []


def test_one_provider_from_oidc_issuer_with_safe_defaults():
    [sso] = providers(
        OIDC_ISSUER="https://idp.example.com/",
        OIDC_CLIENT_ID="airlock",
        OIDC_CLIENT_SECRET="s3cret",
        OIDC_REVIEWER_GROUPS="ops, sre",
    )
    assert sso["provider_id"] == "sso" and sso["server_url"] == "https://idp.example.com"
    assert sso["name"] == "SSO"  # the button: "Sign in with SSO"
    assert sso["oauth_pkce_enabled"] is True and sso["scope"] == ["openid", "profile", "email"]
    assert sso["reviewer_groups"] == ["ops", "sre"] and sso["admin_groups"] == []
    assert sso["groups_claim"] == "groups" and sso["step_up"] == "auto"


def test_several_providers_each_with_its_own_variables():
    okta, google = providers(
        OIDC_PROVIDERS="okta,google",
        OIDC_OKTA_ISSUER="https://acme.okta.com/oauth2/default",
        OIDC_OKTA_CLIENT_ID="a",
        OIDC_OKTA_CLIENT_SECRET="b",
        OIDC_OKTA_NAME="Okta",
        OIDC_OKTA_SCOPES="openid profile email groups",
        OIDC_OKTA_STEP_UP_ACR_VALUES="phr",
        OIDC_GOOGLE_ISSUER="https://accounts.google.com",
        OIDC_GOOGLE_CLIENT_ID="c",
        OIDC_GOOGLE_CLIENT_SECRET="d",
        OIDC_GOOGLE_GROUPS_CLAIM="hd,email",
        OIDC_GOOGLE_STEP_UP="provider",
    )
    assert (okta["provider_id"], okta["name"], okta["step_up_acr_values"]) == (
        "okta",
        "Okta",
        "phr",
    )
    assert okta["scope"] == ["openid", "profile", "email", "groups"]
    assert (google["provider_id"], google["name"], google["step_up"]) == (
        "google",
        "Google",
        "provider",
    )


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"OIDC_ISSUER": "https://idp.example.com", "OIDC_CLIENT_ID": "a"}, "OIDC_CLIENT_SECRET"),
        ({"OIDC_PROVIDERS": "okta"}, "OIDC_OKTA_ISSUER"),
        (
            {"OIDC_ISSUER": "idp.example.com", "OIDC_CLIENT_ID": "a", "OIDC_CLIENT_SECRET": "b"},
            "is not an http(s) URL",
        ),
        (
            {
                "OIDC_ISSUER": "https://idp.example.com",
                "OIDC_CLIENT_ID": "a",
                "OIDC_CLIENT_SECRET": "b",
                "OIDC_STEP_UP": "sometimes",
            },
            "OIDC_STEP_UP",
        ),
    ],
)
def test_a_provider_configured_wrong_stops_the_start_with_what_is_missing(variables, message):
    done = configured(**variables)
    assert done.returncode != 0 and "ImproperlyConfigured" in done.stderr
    assert message in done.stderr


@pytest.mark.parametrize(
    ("claims", "claim_names", "role"),
    [
        ({"groups": ["staff", "airlock-admins"]}, "groups", ADMIN),
        ({"groups": ["airlock-reviewers", "airlock-admins"]}, "groups", ADMIN),
        ({"groups": ["airlock-reviewers"]}, "groups", REVIEWER),
        ({"groups": ["airlock-reviewers-old"]}, "groups", None),
        ({"groups": "airlock-reviewers"}, "groups", REVIEWER),  # one group as a string
        ({"roles": ["airlock-admins"]}, "groups", None),  # not the configured claim
        ({"roles": ["airlock-admins"]}, "roles", ADMIN),
        ({"hd": "example.com", "email": "ann@example.com"}, "hd,email", REVIEWER),
        ({"hd": "example.com", "email": "boss@example.com"}, "hd, email", ADMIN),
        ({"email": "ann@gmail.com"}, "hd,email", None),
        ({"groups": {"airlock-admins": True}}, "groups", None),  # not a list: no groups
        ({}, "groups", None),
    ],
)
def test_the_groups_claims_decide_the_role(claims, claim_names, role):
    settings = {
        "admin_groups": ["airlock-admins", "boss@example.com"],
        "reviewer_groups": ["airlock-reviewers", "example.com"],
    }
    assert role_from(groups_of(claims, claim_names), settings) == role
