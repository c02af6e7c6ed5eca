"""The periodic retention pass (any of the ``RETENTION_*_DAYS`` set), run by a worker when beat asks."""

from celery import shared_task
from django.conf import settings

from infrastructure.archive import Archive

from . import passes

RETAIN = "approvals.retention.tasks.retain"


def configured() -> passes.Keep:
    """What the settings keep (their 0, keep everything, is None here)."""
    days = (
        settings.RETENTION_DAYS,
        settings.RETENTION_PROPOSAL_DAYS,
        settings.RETENTION_AUDIT_DAYS,
    )
    return passes.Keep(*(n or None for n in days))


@shared_task(name=RETAIN, ignore_result=True)
def retain() -> None:
    keep = configured()
    if keep != passes.Keep(None, None, None):
        try:
            passes.run(keep, Archive(settings.RETENTION_ARCHIVE))
        except passes.Busy:
            pass  # the pass still running covers this hour's too
