"""The OpenID Connect sign-in's URLs (found by allauth beside ``provider``): /accounts/oidc/<id>/…"""

from django.urls import include, path

from accounts.sso import views

urlpatterns = [
    path(
        "oidc/<str:provider_id>/",
        include(
            [
                path("login/", views.login, name="oidc_login"),
                path("login/callback/", views.callback, name="oidc_callback"),
            ]
        ),
    )
]
