from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    name = "approvals"

    def ready(self) -> None:
        from executions.signals import execution_ended

        from . import notifications

        # Executions never import approvals; the end of a run reaches messages this way.
        execution_ended.connect(
            notifications.on_execution_ended, dispatch_uid="approvals.execution_ended"
        )
