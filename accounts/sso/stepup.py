"""Step-up at the provider, for someone who signed in through it.

Each provider says how its people step up (``OIDC_<ID>_STEP_UP``): ``auto``
(a factor enrolled here if they have one, the stronger proof, else signing
in again at the provider), ``provider`` (always at the provider, whose own
second factor the organisation trusts) or ``factor`` (never at the provider:
they enrol a factor here).
"""

from __future__ import annotations

from urllib.parse import urlencode

from allauth.mfa.utils import is_mfa_enabled
from allauth.socialaccount.models import SocialAccount

from accounts.sso.provider import STEP_UP_ACTION


def reauthentication_for(request, next_url: str) -> dict | None:
    """Where to sign in again (a POST to ``url``) and at which provider, or None.

    ``only`` is set when the provider's sign-in is the one way this person steps up.
    """
    account = SocialAccount.objects.filter(user=request.user).order_by("-last_login").first()
    if account is None:
        return None
    provider = account.get_provider(request)
    mode = provider.app.settings.get("step_up", "auto")
    if mode == "factor" or (mode == "auto" and is_mfa_enabled(request.user)):
        return None
    query = urlencode({"action": STEP_UP_ACTION, "process": "login", "next": next_url})
    return {
        "url": provider.get_login_url(request) + "?" + query,
        "name": provider.name,
        "only": mode == "provider",
    }
