"""The one function that pushes to subscribers over the channel layer.

Callers save first and broadcast second (after commit): a subscriber that
misses a message catches up from the database, so a failed send is logged,
never raised. ``broadcast_on_commit`` is the same from inside a transaction.
"""

from __future__ import annotations

import asyncio
import logging
import threading

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.db import connection, transaction

from infrastructure.per_process import PerProcess

log = logging.getLogger(__name__)

PROPOSALS_GROUP = "proposals"
SEND_TIMEOUT_SECONDS = 5
REDIS_LAYERS = (RedisChannelLayer, RedisPubSubChannelLayer)


def execution_group(execution_id: int) -> str:
    return f"execution-{execution_id}"


def broadcast(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        # A layer that can send from a plain thread skips async_to_sync's
        # event loop and thread hops (the embedded one writes a row and rings).
        send_now = _own_method(layer, "group_send_from_thread")
        if send_now is not None and send_now(group, message):
            return
        if isinstance(layer, REDIS_LAYERS) and not _on_a_loop():
            # Queued for the process's sender loop, whose Redis connections
            # stay open (async_to_sync would make a loop, and so a connection,
            # per send), which sends in order while the caller goes on: a
            # request answers and a worker moves on without waiting for Redis.
            _sender().send(layer, group, message)
            return
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        log.exception("broadcast to %s failed", group)


def broadcast_on_commit(group: str, message: dict) -> None:
    """``broadcast`` once the current transaction commits, and not if it rolls back.

    A layer kept in the database writes the message with the transaction (one
    write instead of a second transaction after it; readers see it, and are
    rung, at the commit); any other layer sends after the commit.
    """
    layer = get_channel_layer()
    stage = _own_method(layer, "group_send_in_transaction")
    if stage is not None and connection.in_atomic_block:
        stage(group, message)
        return
    transaction.on_commit(lambda: broadcast(group, message))


def _own_method(layer, name: str):
    """The layer's method ``name`` if its class has one, else None.

    Asked of the class: the pub/sub layer answers any attribute it lacks from
    its per-loop layer, which a plain thread has none of (it would raise).
    """
    return getattr(layer, name) if hasattr(type(layer), name) else None


def _on_a_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Sender:
    """A loop on a thread of its own that sends queued broadcasts one after another."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        threading.Thread(target=self._run, name="broadcast", daemon=True).start()

    def send(self, layer, group: str, message: dict) -> None:
        self.loop.call_soon_threadsafe(self._queue.put_nowait, (layer, group, message))

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._drain())

    async def _drain(self) -> None:
        while True:
            layer, group, message = await self._queue.get()
            try:
                await asyncio.wait_for(layer.group_send(group, message), SEND_TIMEOUT_SECONDS)
            except Exception:  # subscribers catch up from the database
                log.exception("broadcast to %s failed", group)


_sender = PerProcess(_Sender)  # this process's sender (made again after a fork)
