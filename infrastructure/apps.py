from django.apps import AppConfig


class InfrastructureConfig(AppConfig):
    name = "infrastructure"
    verbose_name = "Infrastructure"

    def ready(self) -> None:
        from .backups import tasks  # noqa: F401 - registers the scheduled backup
