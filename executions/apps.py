from django.apps import AppConfig


class ExecutionsConfig(AppConfig):
    name = "executions"

    def ready(self) -> None:
        # Registered in every process, web included: enqueue() finds a task by its name.
        from . import tasks  # noqa: F401
