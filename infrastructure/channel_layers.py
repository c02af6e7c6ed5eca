"""A channel layer for the embedded deployment: processes that share only the database.

Delivery inside a process is the in-memory layer's. A ``group_send`` is also
written to a table and, once committed, rings the ``layer`` doorbell with the
message as the ring's note. Each web process with members in some group
delivers what the notes carry when they continue its sequence of row ids,
and reads the table instead when one is missing (a gap, a note too long for a
datagram), and every ``poll_interval`` seconds whatever happens (the safety
net). It is at-most-once like every channel layer: consumers catch up from
the database. The scale deployment uses channels-redis instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import redis
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer, RedisPubSubLoopLayer
from channels_redis.utils import _consistent_hash, decode_hosts
from django.db import close_old_connections, connections, transaction

from . import doorbell
from .appends import take_append_lock
from .per_process import PerProcess
from .prepared import PreparedInsert

log = logging.getLogger(__name__)
TOPIC = "layer"


_append = PreparedInsert("infrastructure.LayerMessage")


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

    def group_send_in_transaction(self, group: str, message: dict) -> None:
        """Write the message with the caller's transaction: delivered if it commits."""
        self._store(group, message, "")

    def _store(self, group: str, message: dict, origin: str) -> None:
        payload = json.dumps(message)
        # Ids in commit order (see infrastructure.appends): pollers read past the newest id they saw.
        with transaction.atomic(savepoint=False):
            take_append_lock()
            row = _append.create(group=group, origin=origin, payload=payload)
        self._cleanup()  # by writers: the pollers only read, and never wait for a lock
        # Inside a transaction the row is not there for other connections yet:
        # ring once it is, or the poller reads too early and waits a whole interval.
        note = f"{row.pk}\n{group}\n{origin}\n{payload}".encode()
        transaction.on_commit(lambda: doorbell.ring(TOPIC, note))

    async def group_add(self, group: str, channel: str) -> None:
        if self._last_id is None:
            # Where this process starts reading, fixed before the caller goes
            # on: what it reads next covers what came before, the poller what
            # comes after. (Fixed at the poller's first read instead, a message
            # written in between, such as an execution's last status, was lost.)
            # Read before joining: a caller cancelled here leaves no member behind.
            # On a thread of its own: the caller's may be inside a transaction,
            # whose connection database_sync_to_async would close.
            newest = await asyncio.to_thread(self._newest_id_on_a_thread)
            if self._last_id is None:
                self._last_id = newest
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
        notes: list[bytes] = []  # none at first: read the table
        try:
            while self.groups:
                try:
                    messages, complete = self._from_notes(notes)
                    if not complete:
                        messages += await loop.run_in_executor(reader, self._fetch)
                    for group, message in messages:
                        if group in self.groups:
                            await super().group_send(group, message)
                except Exception:  # a failed poll must not end live updates for good
                    log.exception("channel layer poll failed")
                notes = await bell.notes(self.poll_interval)
        finally:
            # Before any await: a member that joins from now on starts a new
            # poller (while this one winds down, it would find one not done).
            if self._poller is asyncio.current_task():
                self._poller = None
            if not self.groups:
                # Nobody listens: a member who joins later starts at the newest message,
                # not at every one sent while nobody listened (stale notices on a page).
                self._last_id = None
            bell.close()
            await loop.run_in_executor(reader, connections.close_all)  # the reader's own
            reader.shutdown(wait=False)

    def _from_notes(self, notes: list[bytes]) -> tuple[list[tuple[str, dict]], bool]:
        """The messages the notes carry that continue this process's sequence of
        row ids, and whether that is all (False: a gap, a bare ring, or no ring
        at all: then the table has the rest).
        """
        if not notes or self._last_id is None:
            return [], False
        rows = []
        for note in notes:
            if note == doorbell.RING:
                return self._take(rows), False
            pk, group, origin, payload = note.decode().split("\n", 3)
            rows.append((int(pk), group, origin, payload))
        taken = self._take(rows)
        return taken, self._last_id >= max(row[0] for row in rows)

    def _take(self, rows: list[tuple[int, str, str, str]]) -> list[tuple[str, dict]]:
        """Advance through ``rows`` while their ids follow on; stop at a gap."""
        taken = []
        for pk, group, origin, payload in sorted(rows):
            if pk <= self._last_id:
                continue  # already read from the table
            if pk != self._last_id + 1:
                break
            self._last_id = pk
            if origin != self.origin:
                taken.append((group, json.loads(payload)))
        return taken

    def _fetch(self) -> list[tuple[str, dict]]:
        from .models import LayerMessage

        close_old_connections()  # one the database dropped is replaced, not reused
        if self._last_id is None:
            self._last_id = self._newest_id()
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

    @classmethod
    def _newest_id_on_a_thread(cls) -> int:
        try:
            return cls._newest_id()
        finally:
            connections.close_all()  # this thread's, which nothing else will close

    @staticmethod
    def _newest_id() -> int:
        from .models import LayerMessage

        return LayerMessage.objects.order_by("-id").values_list("id", flat=True).first() or 0

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


class RedisPubSubLayer(RedisPubSubChannelLayer):
    """channels-redis's pub/sub layer, with a plain thread's group send made on that thread.

    A view or a worker that has just committed broadcasts from a thread with
    no event loop. Handed to a loop on a thread of its own, the message waited
    for that thread to get the interpreter from the one that had committed and
    went on working: about a millisecond (p50) from a run's end to the
    long-poll hearing of it, against a twentieth of that on the embedded
    layer. Here it is one blocking ``PUBLISH`` on the committing thread (a
    tenth of a millisecond), over a client of the process's own, to the
    channel and in the format the layer's subscribers read.

    Broadcasts are at-most-once and subscribers read the database on a timer,
    so a publish that fails is dropped with a warning, and for
    ``AWAY_PAUSE_SECONDS`` after it none is tried: a Redis that does not
    answer costs a caller at most ``TIMEOUT_SECONDS`` once in a while.
    """

    TIMEOUT_SECONDS = 0.5
    AWAY_PAUSE_SECONDS = 5.0

    def __init__(self, hosts=None, prefix: str = "asgi", **kwargs):
        super().__init__(hosts=hosts, prefix=prefix, **kwargs)
        self._naming = RedisPubSubLoopLayer(hosts=hosts, prefix=prefix, channel_layer=self)
        self._hosts = decode_hosts(hosts)
        self._clients: PerProcess[dict[int, redis.Redis | None]] = PerProcess(dict)
        self._clients_lock = threading.Lock()
        self._away_until = 0.0

    def group_send_from_thread(self, group: str, message: dict) -> bool:
        """Publish ``message`` to ``group`` now; False: this host's kind needs the async path."""
        channel = self._naming._get_group_channel_name(group)
        index = _consistent_hash(channel, len(self._hosts))
        client = self._client(index)
        if client is None:
            return False
        if time.monotonic() < self._away_until:
            return True  # dropped: subscribers catch up from the database
        try:
            client.publish(channel, self.serialize(message))
        except redis.RedisError as error:
            self._away_until = time.monotonic() + self.AWAY_PAUSE_SECONDS
            log.warning(
                "broadcast to %s dropped: Redis did not take it (%s); none tried for %s s",
                group,
                error,
                self.AWAY_PAUSE_SECONDS,
            )
        return True

    def _client(self, index: int) -> redis.Redis | None:
        clients = self._clients()  # a forked child makes its own
        with self._clients_lock:
            if index not in clients:
                host = dict(self._hosts[index])
                options = {
                    "socket_timeout": self.TIMEOUT_SECONDS,
                    "socket_connect_timeout": self.TIMEOUT_SECONDS,
                }
                if "address" in host:
                    client = redis.Redis.from_url(host.pop("address"), **host, **options)
                elif "master_name" in host:
                    client = None  # Sentinel: the layer's own loop finds the master
                else:
                    client = redis.Redis(**host, **options)
                clients[index] = client
            return clients[index]
