"""Slack's Request URLs: interactivity (buttons, modals) and the ``/airlock`` command."""

from django.urls import path

from approvals.notify.slack import views

app_name = "slack"

urlpatterns = [
    path("interactivity/", views.interactivity, name="interactivity"),
    path("commands/", views.command, name="commands"),
]
