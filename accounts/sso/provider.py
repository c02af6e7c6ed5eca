"""The OpenID Connect provider class allauth lists: its own, with the checks of ``views``."""

from __future__ import annotations

import secrets

from allauth.socialaccount.providers.base import AuthAction
from allauth.socialaccount.providers.openid_connect.provider import OpenIDConnectProvider

from accounts.sso.views import AirlockOIDCAdapter

STEP_UP_ACTION = AuthAction.REAUTHENTICATE


class AirlockOIDCProvider(OpenIDConnectProvider):
    id = "oidc"
    name = "OpenID Connect"
    oauth2_adapter_class = AirlockOIDCAdapter
    pkce_enabled_default = True

    def get_default_scope(self):
        return ["openid", "profile", "email"]

    def get_auth_params_from_request(self, request, action):
        params = super().get_auth_params_from_request(request, action)
        if action == STEP_UP_ACTION:
            # Prove presence again at the provider, whatever session it holds.
            params.update(prompt="login", max_age="0")
            acr = self.app.settings.get("step_up_acr_values")
            if acr:
                params["acr_values"] = acr
        return params

    def redirect(self, request, process, next_url=None, data=None, **kwargs):
        # A nonce per sign-in, kept in the state it comes back with (views check it).
        nonce = secrets.token_urlsafe(24)
        auth_params = kwargs.pop("auth_params", None)
        if auth_params is None:
            auth_params = self.get_auth_params()
        auth_params["nonce"] = nonce
        step_up = auth_params.get("prompt") == "login"
        return super().redirect(
            request,
            process,
            next_url,
            data,
            auth_params=auth_params,
            nonce=nonce,
            step_up=step_up,
            **kwargs,
        )


provider_classes = [AirlockOIDCProvider]
