from allauth.account.views import logout
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from accounts.views import sign_in

from . import audit_api, health

api_patterns = [
    path("", include("approvals.agents.urls")),
    path("", include("executions.urls")),
    path("audit", audit_api.AuditEvents.as_view(), name="audit-events"),
    path("audit/verify", audit_api.AuditVerify.as_view(), name="audit-verify"),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]

urlpatterns = [
    path("api/v1/", include(api_patterns)),
    path("slack/", include("approvals.notify.slack.urls")),
    path("livez", health.livez, name="livez"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", health.metrics, name="metrics"),
    path("login/", sign_in, name="login"),
    path("logout/", logout, name="logout"),
    path("accounts/login/", sign_in),  # allauth's own redirects land on the same page
    path("accounts/", include("allauth.urls")),  # second factors, sessions, SSO callbacks
    path("", include("accounts.urls")),
    path("admin/", admin.site.urls),
    path("", include("console.console_urls")),
]

handler404 = "console.views.not_found"
handler500 = "console.views.server_error"
