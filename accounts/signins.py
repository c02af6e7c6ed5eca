"""What the audit trail keeps of signing in: who, how, from where, and each refusal.

django-allauth and Django announce sign-ins, sign-outs and second factors as
signals; ``connect`` hooks the recorders here to them. A lock (too many
failures for an account or an address) is recorded once per lock, not once
per refused attempt.
"""

from __future__ import annotations

from allauth.mfa import signals as mfa_signals
from django.contrib.auth.signals import user_logged_in, user_logged_out
from django.core.cache import cache

from accounts import middleware as sessions
from accounts.stepup import Authentication
from audit.services import actor_label, record

LOCK_SECONDS = 300  # the failures' window: a lock is recorded again after it


def connect() -> None:
    user_logged_in.connect(on_signed_in, dispatch_uid="accounts.signed_in")
    user_logged_out.connect(on_signed_out, dispatch_uid="accounts.signed_out")
    mfa_signals.authenticator_added.connect(on_factor_added, dispatch_uid="accounts.factor_added")
    mfa_signals.authenticator_removed.connect(
        on_factor_removed, dispatch_uid="accounts.factor_removed"
    )
    mfa_signals.authenticator_reset.connect(on_factor_reset, dispatch_uid="accounts.factor_reset")
    mfa_signals.authenticator_used.connect(on_factor_used, dispatch_uid="accounts.factor_used")
    mfa_signals.authentication_failed.connect(
        on_factor_failed, dispatch_uid="accounts.factor_failed"
    )


def address(request) -> str:
    return (request.META.get("REMOTE_ADDR") or "") if request is not None else ""


def on_signed_in(sender, request, user, **kwargs) -> None:
    if request is not None and hasattr(request, "session"):
        sessions.started(request.session)
    how = Authentication.of_session(request)
    record(actor_label(user), "signin.succeeded", user, address=address(request), **how.as_audit())


def on_signed_out(sender, request, user, **kwargs) -> None:
    if user is not None:
        record(actor_label(user), "signin.signed_out", user, address=address(request))


def failed(request, username: str) -> None:
    """A sign-in refused for a wrong password (or an unknown name)."""
    record("system", "signin.failed", None, username=username[:150], address=address(request))


def locked(request, username: str) -> None:
    """Sign-in refused for too many failures: recorded at the first refusal of a lock."""
    key = f"airlock:signin-lock:{username.lower()[:150]}:{address(request)}"
    if cache.add(key, True, timeout=LOCK_SECONDS):
        record(
            "system",
            "signin.locked",
            None,
            username=username[:150],
            address=address(request),
            window_seconds=LOCK_SECONDS,
        )


def refused(request, username: str, reason: str) -> None:
    """A sign-in the policy refuses outright (password sign-in off, no role)."""
    record("system", "signin.refused", None, username=username[:150], reason=reason)


def on_factor_added(sender, request, user, authenticator, **kwargs) -> None:
    record(actor_label(user), "factor.added", user, type=authenticator.type)


def on_factor_removed(sender, request, user, authenticator, **kwargs) -> None:
    record(actor_label(user), "factor.removed", user, type=authenticator.type)


def on_factor_reset(sender, request, user, authenticator, **kwargs) -> None:
    record(actor_label(user), "factor.reset", user, type=authenticator.type)


def on_factor_used(sender, request, user, authenticator, reauthenticated=False, **kwargs) -> None:
    if reauthenticated:  # a step-up; the sign-in itself is recorded by on_signed_in
        record(actor_label(user), "signin.stepped_up", user, factor=authenticator.type)


def on_factor_failed(sender, request, user, authenticator=None, **kwargs) -> None:
    kind = getattr(authenticator, "type", None)
    record(actor_label(user), "factor.failed", user, type=kind, address=address(request))
