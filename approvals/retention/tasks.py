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


# The name messages already in a broker carry (the task was the core's).
@shared_task(name="approvals.tasks.index_text", ignore_result=True)
def index_text() -> int:
    """Periodic (every 10 s): bring the search index up to the proposals written, edited
    and deleted since, for up to 8 s a run (``infrastructure.text_index``; nothing to do
    on PostgreSQL). Not while a retention pass runs: the pass has the CPU, and searches
    are exact meanwhile; the runs after it drop what it deleted."""
    from approvals.models import Proposal

    if passes.running():
        return 0
    return Proposal.text_index.catch_up(seconds=8.0)
