from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"
