"""Single sign-on with OpenID Connect: the organisation's provider proves who someone is.

Built on django-allauth's OpenID Connect support, checked harder: the
authorization-code flow with PKCE and a nonce, and the ID token's signature
checked against the provider's JWKS on every sign-in, its issuer, audience,
expiry and nonce too (``views``). Roles come from the provider's groups claim
at every sign-in (``adapter``): a person in no mapped group gets no access and
a page that says why. For step-up, someone with no factor of their own here
signs in again at the provider (``prompt=login``, ``max_age=0``, the
configured ``acr_values``), and the ID token's ``auth_time`` must be fresh
(``stepup``). Providers are configured from the environment (``OIDC_*``,
see the admins' guide); ``provider`` registers them with allauth.
"""
