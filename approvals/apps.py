from django.apps import AppConfig


class ApprovalsConfig(AppConfig):
    """The approvals app: one Django app (one ``approvals`` label), one package per concern."""

    name = "approvals"

    def import_models(self) -> None:
        super().import_models()
        # The central rows are in approvals.models, where Django looks; each concern
        # keeps its own tables in its package, loaded here with them.
        from approvals.gateway import models as gateway_models  # noqa: F401
        from approvals.notify import models as notify_models  # noqa: F401
        from approvals.policy import models as policy_models  # noqa: F401
        from approvals.review import models as review_models  # noqa: F401

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from approvals.core import outbox

        # Registered in every process, web included: enqueue() finds a task by its name.
        from approvals.core import tasks as core_tasks  # noqa: F401
        from approvals.notify import outbox as notify_outbox
        from approvals.notify import tasks as notify_tasks  # noqa: F401
        from approvals.retention import tasks as retention_tasks  # noqa: F401
        from executions.signals import execution_ended

        # The layers below never import the notification channels; what they record
        # reaches them through these two signals.
        outbox.events_recorded.connect(
            notify_outbox.on_events_recorded, dispatch_uid="approvals.events_recorded"
        )
        execution_ended.connect(
            notify_outbox.on_execution_ended, dispatch_uid="approvals.execution_ended"
        )
        post_migrate.connect(_text_index_in_step, sender=self, dispatch_uid="approvals.text")


def _text_index_in_step(using, **kwargs) -> None:
    """Put back the text index's triggers if a migration remade the proposals table."""
    from django.db import connections

    from approvals.models import Proposal

    Proposal.text_index.ensure(connections[using])
