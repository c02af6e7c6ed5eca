from django.apps import AppConfig


class SsoConfig(AppConfig):
    """Single sign-on: registers the OpenID Connect provider with django-allauth."""

    name = "accounts.sso"
    label = "sso"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        from allauth.account.signals import user_logged_in

        from accounts.sso import adapter

        user_logged_in.connect(adapter.on_signed_in, dispatch_uid="accounts.sso.signed_in")
