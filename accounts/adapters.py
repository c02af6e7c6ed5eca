"""django-allauth's hooks for Airlock: who may sign in with a password, and what is recorded.

No one signs up: accounts are made by admins or, at the first sign-in, by
the organisation's identity provider. Password sign-in can be turned off
(``PASSWORD_SIGNIN``) for everyone but the named break-glass admins
(``BREAK_GLASS_USERS``). Failed and refused sign-ins are recorded
(``accounts.signins``); after too many failures for an account, or from an
address, within five minutes sign-in is refused even with the right password.
"""

from __future__ import annotations

from allauth.account.adapter import DefaultAccountAdapter
from django.conf import settings
from django.core.exceptions import ValidationError

from accounts import signins


def password_signin_allowed(username: str) -> bool:
    if settings.PASSWORD_SIGNIN:
        return True
    return username.lower() in {name.lower() for name in settings.BREAK_GLASS_USERS}


class AccountAdapter(DefaultAccountAdapter):
    error_messages = {
        **DefaultAccountAdapter.error_messages,
        "too_many_login_attempts": (
            "Too many failed sign-ins for this account or from this address: sign-in is "
            "refused for a few minutes, even with the right password."
        ),
        "password_signin_off": (
            "Password sign-in is off here: sign in with your organisation's identity provider."
        ),
    }

    def is_open_for_signup(self, request) -> bool:
        return False

    def pre_authenticate(self, request, **credentials) -> None:
        username = str(credentials.get("username", ""))
        if "password" in credentials and not password_signin_allowed(username):
            signins.refused(request, username, "password sign-in is off")
            raise self.validation_error("password_signin_off")
        try:
            super().pre_authenticate(request, **credentials)
        except ValidationError:
            signins.locked(request, username)
            raise

    def get_reauthentication_methods(self, user) -> list[dict]:
        """A step-up is a second factor: the password is offered only to those with none."""
        methods = super().get_reauthentication_methods(user)
        factors = [method for method in methods if method.get("id") != "reauthenticate"]
        return factors or methods

    def authentication_failed(self, request, **credentials) -> None:
        signins.failed(request, str(credentials.get("username", "")))
