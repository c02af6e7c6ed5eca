"""The periodic retention pass (``RETENTION_DAYS`` set), run by a worker when beat asks."""

from pathlib import Path

from celery import shared_task
from django.conf import settings

from . import prune
from .archive import Archive

RETAIN = "executions.retention.tasks.retain"


@shared_task(name=RETAIN, ignore_result=True)
def retain() -> None:
    if settings.RETENTION_DAYS:
        prune.run(settings.RETENTION_DAYS, Archive(Path(settings.RETENTION_ARCHIVE_DIR)))
