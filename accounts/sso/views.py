"""The OpenID Connect sign-in's two views, with allauth's adapter checked harder.

allauth skips the ID token's signature when the token came straight from the
token endpoint (the specification allows it over TLS); here it is always
checked against the provider's JWKS, so a token signed by any other key is
refused, whatever the transport. The ID token must carry the nonce this
sign-in sent (kept in allauth's state, which also carries the PKCE verifier).
"""

from __future__ import annotations

from allauth.account.internal.decorators import login_not_required
from allauth.socialaccount.helpers import render_authentication_error
from allauth.socialaccount.internal import jwtkit
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from allauth.utils import build_absolute_uri
from django.http import Http404
from django.urls import reverse
from requests import RequestException


class AirlockOIDCAdapter(OpenIDConnectOAuth2Adapter):
    expected_nonce: str | None = None

    def complete_login(self, request, app, token, **kwargs):
        if not kwargs["response"].get("id_token"):
            raise OAuth2Error("the provider sent no ID token")
        return super().complete_login(request, app, token, **kwargs)

    def _decode_id_token(self, app, id_token: str) -> dict:
        claims = jwtkit.verify_and_decode(
            credential=id_token,
            keys_url=self.openid_config["jwks_uri"],
            issuer=self.openid_config["issuer"],
            audience=app.client_id,
            lookup_kid=jwtkit.lookup_kid_jwk,
            verify_signature=True,
        )
        if not self.expected_nonce or claims.get("nonce") != self.expected_nonce:
            raise OAuth2Error("the ID token was not issued for this sign-in (nonce)")
        return claims

    def get_callback_url(self, request, app):
        callback_url = reverse("oidc_callback", kwargs={"provider_id": self.provider_id})
        return build_absolute_uri(request, callback_url, self.redirect_uri_protocol)


class CallbackView(OAuth2CallbackView):
    def _get_state(self, request, provider):
        state, response = super()._get_state(request, provider)
        if state is not None:
            self.adapter.expected_nonce = state.get("nonce")
        return state, response


@login_not_required
def login(request, provider_id):
    adapter = AirlockOIDCAdapter(request, provider_id)
    try:
        return OAuth2LoginView.adapter_view(adapter)(request)
    except SocialApp.DoesNotExist:
        raise Http404(f"no sign-in provider {provider_id!r}") from None
    except RequestException as exc:  # its discovery document could not be read
        return render_authentication_error(request, adapter.get_provider(), exception=exc)


@login_not_required
def callback(request, provider_id):
    try:
        return CallbackView.adapter_view(AirlockOIDCAdapter(request, provider_id))(request)
    except SocialApp.DoesNotExist:
        raise Http404(f"no sign-in provider {provider_id!r}") from None
