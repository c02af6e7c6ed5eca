"""A channel layer for the embedded deployment: processes that share only the database.

Delivery inside a process is the in-memory layer's. A ``group_send`` is also
written to a table and rings the ``layer`` doorbell; each web process with
members in some group reads the table for messages other processes sent as
soon as it is rung, and every ``poll_interval`` seconds whatever happens (the
safety net). It is at-most-once like every channel layer: consumers catch up
from the database. The scale deployment uses channels-redis instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer
from django.db import close_old_connections, connection, transaction

from . import doorbell

log = logging.getLogger(__name__)
TOPIC = "layer"


class DatabaseChannelLayer(InMemoryChannelLayer):
    def __init__(self, expiry: int = 60, poll_interval: float = 0.5, **kwargs):
        super().__init__(expiry=expiry, **kwargs)
        self.poll_interval = poll_interval
        self.origin = uuid.uuid4().hex
        self._poller: asyncio.Task | None = None
        self._last_id: int | None = None
        self._last_cleanup = 0.0

    async def group_send(self, group: str, message: dict) -> None:
        # In-memory delivery only works on the loop the local consumers run on;
        # from any other loop (a worker thread) the message goes through the
        # table, and this process's own poller delivers it too.
        local = self._poller is not None and self._poller.get_loop() is asyncio.get_running_loop()
        if local:
            await super().group_send(group, message)
        await sync_to_async(self._store)(group, message, self.origin if local else "")

    def group_send_from_thread(self, group: str, message: dict) -> bool:
        """``group_send`` for a thread without an event loop; False to use the async path.

        The message goes through the table, and this process's own poller
        delivers it to local members too (as from any other process).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._store(group, message, "")
            return True
        return False

    def _store(self, group: str, message: dict, origin: str) -> None:
        from .models import LayerMessage

        LayerMessage.objects.create(group=group, origin=origin, payload=json.dumps(message))
        self._cleanup()  # by writers: the pollers only read, and never wait for a lock
        # Inside a transaction the row is not there for other connections yet:
        # ring once it is, or the poller reads too early and waits a whole interval.
        transaction.on_commit(lambda: doorbell.ring(TOPIC))

    async def group_add(self, group: str, channel: str) -> None:
        await super().group_add(group, channel)
        self._ensure_poller()

    def _ensure_poller(self) -> None:
        loop = asyncio.get_running_loop()
        if self._poller is None or self._poller.done() or self._poller.get_loop() is not loop:
            # A context of its own: started from within a request, the task would
            # otherwise keep that request's thread-sensitive executor, which is
            # gone once the request ends.
            self._poller = loop.create_task(self._poll_forever(), context=contextvars.Context())

    async def _poll_forever(self) -> None:
        loop = asyncio.get_running_loop()
        # Its own thread, so its own database connection.
        reader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="layer-poller")
        bell = doorbell.Bell(TOPIC)  # listening before the first read: no ring is missed
        try:
            while self.groups:
                try:
                    for group, message in await loop.run_in_executor(reader, self._fetch):
                        if group in self.groups:
                            await super().group_send(group, message)
                except Exception:  # a failed poll must not end live updates for good
                    log.exception("channel layer poll failed")
                await bell.wait_async(self.poll_interval)
        finally:
            bell.close()
            await loop.run_in_executor(reader, close_old_connection)
            reader.shutdown(wait=False)

    def _fetch(self) -> list[tuple[str, dict]]:
        from .models import LayerMessage

        close_old_connections()  # one the database dropped is replaced, not reused
        if self._last_id is None:
            self._last_id = (
                LayerMessage.objects.order_by("-id").values_list("id", flat=True).first() or 0
            )
        rows = list(
            LayerMessage.objects.filter(id__gt=self._last_id)
            .order_by("id")
            .values_list("id", "group", "origin", "payload")
        )
        if rows:
            self._last_id = rows[-1][0]
        return [
            (group, json.loads(payload))
            for _, group, origin, payload in rows
            if origin != self.origin
        ]

    def _cleanup(self) -> None:
        from django.utils import timezone

        from .models import LayerMessage

        if time.monotonic() - self._last_cleanup < 10:
            return
        self._last_cleanup = time.monotonic()
        cutoff = timezone.now() - timedelta(seconds=self.expiry)
        LayerMessage.objects.filter(created_at__lt=cutoff).delete()

    async def flush(self) -> None:
        await super().flush()
        self._last_id = None


def close_old_connection() -> None:
    """Close the calling thread's connection (the poller's, on its own thread)."""
    connection.close()
