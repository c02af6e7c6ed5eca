"""Celery tasks of the core: take a primary key, reload, check state, call one service."""

from celery import shared_task

from approvals.core import escalation, services


# Task names are the ones messages already in a broker carry: kept whatever the module.
@shared_task(name="approvals.tasks.expire_pending", ignore_result=True)
def expire_pending() -> dict:
    """Periodic: warn about proposals close to expiry, expire those past it, escalate those
    whose route's teams stayed silent (``escalation``)."""
    return {
        "warned": services.warn_expiring(),
        "expired": services.expire_pending(),
        "escalated": escalation.escalate_due(),
    }
