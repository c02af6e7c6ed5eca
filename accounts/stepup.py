"""Step-up: a fresh second factor before a decision or a change that matters.

``Authentication`` says how the person behind one request proved who they
are: how they signed in (a password, a provider's single sign-on, a passkey)
and when they last proved a second factor (a passkey, a TOTP code, a
recovery code, or signing in again at their provider). It is what the audit
trail keeps of every decision. ``fresh`` is the rule: that second factor no
older than ``STEP_UP_SECONDS``. What needs it: deciding a proposal of risk
``STEP_UP_MIN_RISK`` or more (``needed_for_risk``), saving or applying the
policy, making a token, changing someone's role (``fresh_factor_required``
on those pages' forms).

A token, a mail link or a Slack button carries no second factor: what needs
one is sent to the console (``step_up_url``), where the person steps up and
completes it.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import wraps
from urllib.parse import urlencode

from django.conf import settings
from django.http import HttpResponse, HttpResponseRedirect
from django.urls import reverse

SESSION_RECORDS = "account_authentication_methods"  # allauth's log of a session's sign-in steps
SSO_STEP_UP = "sso_reauthenticated"  # a provider's fresh sign-in, recorded by accounts.sso


@dataclass(frozen=True)
class Authentication:
    """How the person behind a request proved who they are."""

    via: str  # console, api token, email link, slack
    method: str | None = None  # password, passkey, sso:<provider>, token
    factor: str | None = None  # webauthn, totp, recovery_codes, sso:<provider>
    factor_at: float | None = None  # when that second factor was proved (epoch seconds)

    @classmethod
    def of_session(cls, request) -> Authentication:
        """What the console session of ``request`` holds (allauth logs each step of a sign-in)."""
        records = request.session.get(SESSION_RECORDS) or [] if request is not None else []
        method = None
        factor = factor_at = None
        for entry in records:
            kind = entry.get("method")
            if kind == "password" and method is None:
                method = "password"
            elif kind == "socialaccount" and method is None:
                method = f"sso:{entry.get('provider')}"
            elif kind == "mfa":
                if method is None and entry.get("passwordless"):
                    method = "passkey"
                factor, factor_at = entry.get("type"), entry.get("at")
            elif kind == SSO_STEP_UP:
                factor, factor_at = f"sso:{entry.get('provider')}", entry.get("at")
        return cls(via="console", method=method, factor=factor, factor_at=factor_at)

    def fresh(self, now: float | None = None) -> bool:
        """A second factor proved within the last ``STEP_UP_SECONDS``."""
        if self.factor_at is None:
            return False
        age = (now or time.time()) - float(self.factor_at)
        return -60 <= age <= settings.STEP_UP_SECONDS

    def as_audit(self) -> dict:
        """What an audit record says of it (times as ages, readable in the trail)."""
        data = {key: value for key, value in asdict(self).items() if value is not None}
        if self.factor_at is not None:
            data["factor_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.factor_at))
            data["fresh"] = self.fresh()
        return {"auth": data}


TOKEN = Authentication(via="api token", method="token")


def needed_for_risk(risk_score: int) -> bool:
    """Whether deciding a proposal of this risk needs a fresh second factor."""
    return risk_score >= settings.STEP_UP_MIN_RISK


def step_up_url(next_url: str) -> str:
    """The console page that asks for a fresh factor, then goes on to ``next_url``."""
    return reverse("accounts:step-up") + "?" + urlencode({"next": next_url})


PURPOSE = "airlock_step_up_for"  # what the step-up page says it is for, kept in the session


def ask(request, next_url: str | None = None, purpose: str = "") -> HttpResponse:
    """Send the person to step up, and back here (or to ``next_url``) afterwards.

    ``purpose`` (e.g. "Approve proposal 12") is what the step-up page says it is for.
    """
    next_url = next_url or request.get_full_path()
    request.session[PURPOSE] = {"next": next_url, "purpose": purpose}
    target = step_up_url(next_url)
    if getattr(request, "htmx", False):
        return HttpResponse(status=204, headers={"HX-Redirect": target})
    return HttpResponseRedirect(target)


def purpose_of(request, next_url: str) -> str:
    """What the step-up for ``next_url`` is for, as ``ask`` was told (never from the URL)."""
    asked = request.session.get(PURPOSE) or {}
    return asked.get("purpose", "") if asked.get("next") == next_url else ""


def fresh_factor_required(view=None, *, then=None, keep: tuple[str, ...] = (), purpose: str = ""):
    """A page whose forms change something that matters: each change needs a fresh factor.

    Reading the page needs none. A change without one is sent to step up, then
    back to ``then(request, *args, **kwargs)`` (default: the page itself), with
    the form fields named in ``keep`` in its query so the form is filled again.
    """

    def decorate(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if request.method in ("GET", "HEAD") or Authentication.of_session(request).fresh():
                return view(request, *args, **kwargs)
            back = then(request, *args, **kwargs) if then else request.path
            kept = {name: request.POST[name] for name in keep if request.POST.get(name)}
            return ask(request, back + ("?" + urlencode(kept) if kept else ""), purpose)

        return wrapped

    return decorate(view) if view is not None else decorate
