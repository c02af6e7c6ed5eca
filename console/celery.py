"""The Celery app. Workers: ``celery -A console worker``."""

import gc
import os

from celery import Celery
from celery.signals import worker_init, worker_ready

from infrastructure import tracing

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")

app = Celery("airlock")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_finalize.connect
def _schedule_periodic_tasks(sender: Celery, **kwargs) -> None:
    from django.conf import settings

    sender.conf.beat_schedule = {
        "sweep-executions": {
            "task": "executions.tasks.sweep",
            "schedule": float(settings.SWEEP_INTERVAL_SECONDS),
        },
        "expire-proposals": {
            "task": "approvals.tasks.expire_pending",
            "schedule": 20.0,
        },
        "index-text": {  # searches test what it has not reached against the rows
            "task": "approvals.tasks.index_text",
            "schedule": 10.0,
        },
        "reap-sandboxes": {
            "task": "executions.tasks.reap_sandboxes",
            "schedule": 300.0,
        },
        "drain-notifications": {  # a safety net: commits ask for a drain themselves
            "task": "approvals.tasks.drain_notifications",
            "schedule": 10.0,
        },
        "retry-webhooks": {
            "task": "approvals.tasks.retry_webhooks",
            "schedule": 60.0,
        },
        "retry-deliveries": {
            "task": "approvals.tasks.retry_deliveries",
            "schedule": 60.0,
        },
    }
    if settings.AUDIT_SINKS:
        sender.conf.beat_schedule["ship-audit"] = {
            "task": "audit.tasks.ship",
            "schedule": float(settings.AUDIT_SHIP_SECONDS),
        }
    if settings.RETENTION_DAYS or settings.RETENTION_AUDIT_DAYS:  # a pass an hour: whole days only
        sender.conf.beat_schedule["retain"] = {
            "task": "approvals.retention.tasks.retain",
            "schedule": 3600.0,
        }
    if settings.BACKUP_DIR:
        sender.conf.beat_schedule["back-up"] = {
            "task": "infrastructure.backups.tasks.back_up",
            "schedule": 3600.0 * settings.BACKUP_EVERY_HOURS,
        }
    # Signed by the worker that holds the key, which beat need not: asked for always.
    sender.conf.beat_schedule["checkpoint-audit"] = {
        "task": "audit.tasks.checkpoint",
        "schedule": 60.0 * settings.AUDIT_CHECKPOINT_MINUTES,
    }


@worker_init.connect
def _trace(**kwargs) -> None:
    tracing.configure("airlock-worker")  # nothing unless OTEL_EXPORTER_OTLP_ENDPOINT is set


@worker_ready.connect
def _freeze_what_is_loaded(**kwargs) -> None:
    """As the web processes do (``console/asgi.py``): full collections skip the startup objects."""
    gc.freeze()
