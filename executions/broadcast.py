"""The one function that pushes to subscribers over the channel layer.

Callers save first and broadcast second (after commit): a subscriber that
misses a message catches up from the database, so a failed send is logged,
never raised.
"""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

PROPOSALS_GROUP = "proposals"


def execution_group(execution_id: int) -> str:
    return f"execution-{execution_id}"


def broadcast(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        # A layer that can send from a plain thread skips async_to_sync's
        # event loop and thread hops (the embedded one writes a row and rings).
        send_now = getattr(layer, "group_send_from_thread", None)
        if send_now is not None and send_now(group, message):
            return
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        log.exception("broadcast to %s failed", group)
