from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from . import health

api_patterns = [
    path("", include("approvals.agents.urls")),
    path("", include("executions.urls")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
]

urlpatterns = [
    path("api/v1/", include(api_patterns)),
    path("slack/", include("approvals.notify.slack.urls")),
    path("livez", health.livez, name="livez"),
    path("healthz", health.healthz, name="healthz"),
    path("metrics", health.metrics, name="metrics"),
    path("login/", auth_views.LoginView.as_view(template_name="console/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("", include("console.console_urls")),
]

handler404 = "console.views.not_found"
handler500 = "console.views.server_error"
