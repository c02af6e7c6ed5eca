"""The scheduled backup, run by a worker when beat asks (``BACKUP_DIR`` set)."""

from pathlib import Path

from celery import shared_task
from django.conf import settings

from . import scheduled

BACK_UP = "infrastructure.backups.tasks.back_up"


@shared_task(name=BACK_UP, ignore_result=True)
def back_up() -> None:
    scheduled.run(Path(settings.BACKUP_DIR), settings.BACKUP_KEEP, settings.BACKUP_VERIFY)
