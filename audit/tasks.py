"""The audit trail's periodic work: shipping to the sinks, signing checkpoints."""

from celery import shared_task

from .checkpoints import sign_head, signing_key
from .shipping.ship import ship_all


@shared_task(name="audit.tasks.ship", ignore_result=True)
def ship() -> None:
    ship_all()


@shared_task(name="audit.tasks.checkpoint", ignore_result=True)
def checkpoint() -> None:
    key = signing_key()
    if key is not None:  # a worker without the key signs nothing
        sign_head(key)
