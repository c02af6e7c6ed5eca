"""What a provider's sign-in means here: a role from the groups claim, refreshed every time.

``OIDC_ADMIN_GROUPS`` and ``OIDC_REVIEWER_GROUPS`` (per provider) name the
groups that make someone an admin or a reviewer. A person in neither is
refused at the door with a page that says why; one who left a group loses
its role at their next sign-in, and every change is in the audit trail. The
groups themselves are kept too (``accounts.roles.set_provider_groups``): review
teams name them, so leaving a group leaves its teams at the next sign-in.
Accounts are made at the first sign-in (unusable password: they sign in
through the provider only). A step-up sign-in (``prompt=login``) must come
back with an ``auth_time`` no older than ``STEP_UP_SECONDS``.
"""

from __future__ import annotations

import time

from allauth.account.internal.flows.login import record_authentication
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.shortcuts import render
from requests import RequestException

from accounts import signins
from accounts.roles import (
    REVIEWERS_GROUP,
    is_admin,
    is_reviewer,
    set_provider_groups,
    set_review_rights,
)
from accounts.stepup import SSO_STEP_UP
from audit.services import record

ADMIN, REVIEWER, NO_ROLE = "admin", "reviewer", "none"


def claims_of(sociallogin) -> dict:
    """The provider's claims: the ID token's, with the userinfo endpoint's over them."""
    data = sociallogin.account.extra_data or {}
    return {**(data.get("id_token") or {}), **(data.get("userinfo") or {})}


def groups_of(claims: dict, claim_names: str) -> list[str]:
    """The values of the groups claims (comma-separated names): lists joined, a string as one.

    One claim is the usual (``groups``; ``roles`` for Entra ID's app roles); several let a
    provider without groups in its tokens map others (Google: ``hd,email``).
    """
    groups: list[str] = []
    for name in filter(None, (part.strip() for part in claim_names.split(","))):
        value = claims.get(name)
        if isinstance(value, str):
            groups.append(value)
        elif isinstance(value, list | tuple):
            groups.extend(str(item) for item in value)
    return groups


def role_from(groups: list[str], app_settings: dict) -> str | None:
    names = set(groups)
    if names & set(app_settings.get("admin_groups", ())):
        return ADMIN
    if names & set(app_settings.get("reviewer_groups", ())):
        return REVIEWER
    return None


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request, sociallogin) -> bool:
        return True  # the provider vouches for them; the groups decide what they may do

    def pre_social_login(self, request, sociallogin) -> None:
        app = sociallogin.account.get_provider().app
        claims = claims_of(sociallogin)
        groups = groups_of(claims, app.settings.get("groups_claim", "groups"))
        role = role_from(groups, app.settings)
        who = claims.get("preferred_username") or claims.get("email") or sociallogin.account.uid
        if role is None:
            if sociallogin.is_existing:  # they left every group that gives a role: so do they
                actor = f"sso:{app.provider_id}"
                apply_role(sociallogin.user, NO_ROLE, actor)
                set_provider_groups(sociallogin.user, groups, actor)
            signins.refused(request, str(who), f"in no group that gives a role ({app.name})")
            raise ImmediateHttpResponse(
                render(
                    request,
                    "accounts/no_role.html",
                    {"provider": app.name, "who": who, "groups": groups},
                    status=403,
                )
            )
        state = sociallogin.state or {}
        if state.get("step_up"):
            auth_time = claims.get("auth_time")
            if not isinstance(auth_time, int | float) or (
                time.time() - auth_time > settings.STEP_UP_SECONDS
            ):
                signins.refused(request, str(who), "the provider did not ask for a fresh sign-in")
                raise ImmediateHttpResponse(
                    render(
                        request, "accounts/step_up_failed.html", {"provider": app.name}, status=403
                    )
                )
        sociallogin.state = {**state, "airlock_role": role, "airlock_groups": groups}

    def on_authentication_error(
        self, request, provider, error=None, exception=None, extra_context=None
    ) -> None:
        reason = failure_reason(exception)
        if extra_context is not None:
            extra_context["reason"] = reason
        name = getattr(getattr(provider, "app", None), "name", "") or getattr(provider, "name", "")
        signins.refused(request, f"sso:{name}", reason)

    def populate_user(self, request, sociallogin, data):
        user = super().populate_user(request, sociallogin, data)
        if not user.username:
            user.username = str(data.get("username") or sociallogin.account.uid)[:150]
        return user


def failure_reason(exception: BaseException | None) -> str:
    """What the sign-in page says when a provider's sign-in did not complete."""
    if isinstance(exception, RequestException):
        return f"The identity provider could not be reached ({type(exception).__name__}). Try again later."
    if exception is not None:
        return f"The identity provider's answer was refused: {exception}."
    return (
        "This sign-in could not be completed: it was started in another browser, "
        "has expired or was already used. Start again."
    )


def on_signed_in(sender, request, user, sociallogin=None, **kwargs) -> None:
    """allauth's ``user_logged_in``: apply the role the groups gave, note a step-up."""
    if sociallogin is None:
        return
    state = sociallogin.state or {}
    provider = sociallogin.account.provider
    actor = f"sso:{sociallogin.account.get_provider().app.provider_id}"
    apply_role(user, state.get("airlock_role"), actor)
    set_provider_groups(user, state.get("airlock_groups") or [], actor)  # review teams use them
    if state.get("step_up") and request is not None:
        record_authentication(request, user, SSO_STEP_UP, provider=provider)


def apply_role(user, role: str | None, actor: str) -> None:
    """Make ``user`` exactly what ``role`` says (``NO_ROLE``: neither admin nor reviewer),
    recording what changed; None changes nothing."""
    if role is None:
        return
    admin = role == ADMIN
    before = "admin" if is_admin(user) else "reviewer" if is_reviewer(user) else "none"
    if user.is_superuser != admin or user.is_staff != admin:
        user.is_superuser = user.is_staff = admin
        user.save(update_fields=["is_superuser", "is_staff"])
    reviewer_member = user.groups.filter(name=REVIEWERS_GROUP).exists()
    if reviewer_member != (role == REVIEWER):
        set_review_rights(user, role == REVIEWER, actor)
    if before != role:
        record(actor, "user.role_from_provider", user, before=before, after=role)
