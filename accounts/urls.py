from django.urls import path

from accounts import views

app_name = "accounts"

urlpatterns = [
    path("step-up/", views.step_up, name="step-up"),
    path("no-role/", views.no_role, name="no-role"),
]
