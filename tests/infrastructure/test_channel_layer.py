"""The embedded channel layer: a member hears every message sent after it joined."""

from __future__ import annotations

import asyncio
import threading

import pytest
from channels.db import database_sync_to_async
from django.db import connections, transaction

from infrastructure.channel_layers import DatabaseChannelLayer

pytestmark = pytest.mark.django_db(transaction=True)


def send_and_close(layer: DatabaseChannelLayer, group: str, message: dict) -> None:
    try:
        assert layer.group_send_from_thread(group, message)
    finally:
        connections.close_all()


async def test_a_message_sent_before_the_poller_first_reads_still_arrives():
    layer = DatabaseChannelLayer(poll_interval=3600)  # only the doorbell wakes it
    channel = await layer.new_channel()
    await layer.group_add("execution-1", channel)
    # Sent before this coroutine yields, so before the new poller's first read,
    # from a thread without a loop, as a worker sends an execution's last status.
    sender = threading.Thread(
        target=send_and_close,
        args=(layer, "execution-1", {"type": "execution.status", "terminal": True}),
    )
    sender.start()
    sender.join()  # blocks the loop: the poller cannot run meanwhile
    try:
        message = await asyncio.wait_for(layer.receive(channel), 10)
        assert message == {"type": "execution.status", "terminal": True}
    finally:
        await layer.group_discard("execution-1", channel)
        layer._poller.cancel()
        await asyncio.gather(layer._poller, return_exceptions=True)
        await database_sync_to_async(connections.close_all)()


async def test_a_message_arrives_from_its_ring_without_a_read_of_the_table(monkeypatch):
    layer = DatabaseChannelLayer(poll_interval=3600)  # only rings wake it
    reads = []
    fetch = layer._fetch
    monkeypatch.setattr(layer, "_fetch", lambda: reads.append(1) or fetch())
    channel = await layer.new_channel()
    await layer.group_add("execution-2", channel)
    try:
        # The first message may follow a gap (ids go on after rows were deleted).
        await asyncio.to_thread(send_and_close, layer, "execution-2", {"n": 0})
        assert (await asyncio.wait_for(layer.receive(channel), 10))["n"] == 0
        first_reads = len(reads)
        for n in (1, 2):
            await asyncio.to_thread(
                send_and_close, layer, "execution-2", {"type": "output.chunks", "n": n}
            )
        received = [await asyncio.wait_for(layer.receive(channel), 10) for _ in range(2)]
        assert [m["n"] for m in received] == [1, 2]
        assert len(reads) == first_reads, "the table was read for messages the rings carried"

        # A ring whose id does not follow on (one was missed): the table has it.
        await database_sync_to_async(store_without_ringing)("execution-2", {"n": 3})
        await asyncio.to_thread(
            send_and_close, layer, "execution-2", {"type": "output.chunks", "n": 4}
        )
        received = [await asyncio.wait_for(layer.receive(channel), 10) for _ in range(2)]
        assert [m["n"] for m in received] == [3, 4]
        assert len(reads) == first_reads + 1
    finally:
        await layer.group_discard("execution-2", channel)
        layer._poller.cancel()
        await asyncio.gather(layer._poller, return_exceptions=True)
        await database_sync_to_async(connections.close_all)()


async def test_a_message_whose_transaction_commits_last_is_not_skipped():
    """Of two writers, the one that inserted first commits last: both messages arrive.

    On PostgreSQL ids are drawn at insert, so without the append lock the later
    writer's row (a higher id) is read first and the poller moves past the other.
    """
    layer = DatabaseChannelLayer(poll_interval=0.05)
    channel = await layer.new_channel()
    await layer.group_add("execution-3", channel)
    inserted, release = threading.Event(), threading.Event()

    def slow_writer():  # inserts first and keeps its transaction open
        try:
            with transaction.atomic():
                layer.group_send_in_transaction("execution-3", {"n": "slow"})
                inserted.set()
                release.wait(10)
        finally:
            connections.close_all()

    slow = threading.Thread(target=slow_writer)
    slow.start()
    fast = threading.Thread(target=send_and_close, args=(layer, "execution-3", {"n": "fast"}))
    try:
        assert await asyncio.to_thread(inserted.wait, 10)
        fast.start()
        await asyncio.sleep(0.5)  # the poller reads the table several times meanwhile
        release.set()
        received = {(await asyncio.wait_for(layer.receive(channel), 10))["n"] for _ in range(2)}
        assert received == {"slow", "fast"}
    finally:
        release.set()
        await asyncio.to_thread(slow.join, 10)
        if fast.is_alive() or fast.ident is not None:
            await asyncio.to_thread(fast.join, 10)
        await layer.group_discard("execution-3", channel)
        layer._poller.cancel()
        await asyncio.gather(layer._poller, return_exceptions=True)
        await database_sync_to_async(connections.close_all)()


def store_without_ringing(group: str, message: dict) -> None:
    import json

    from infrastructure.models import LayerMessage

    LayerMessage.objects.create(group=group, origin="", payload=json.dumps(message))


async def test_a_member_that_joins_while_the_last_poller_winds_down_still_hears(monkeypatch):
    """The poller ends when its last member leaves; one who joins meanwhile gets a new one."""
    import time

    from infrastructure import channel_layers

    class SlowToClose:  # widens the poller's wind-down to half a second
        def close_all(self):
            time.sleep(0.5)
            connections.close_all()

    monkeypatch.setattr(channel_layers, "connections", SlowToClose())
    layer = DatabaseChannelLayer(poll_interval=0.05)
    first, second = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("proposals", first)
    await asyncio.sleep(0.2)
    old = layer._poller
    await layer.group_discard("proposals", first)
    await asyncio.sleep(0.2)  # the poller saw nobody left and winds down
    assert not old.done()
    await layer.group_add("proposals", second)
    try:
        await asyncio.to_thread(send_and_close, layer, "proposals", {"type": "x", "n": 1})
        message = await asyncio.wait_for(layer.receive(second), 5)
        assert message["n"] == 1
    finally:
        await layer.group_discard("proposals", second)
        for poller in (old, layer._poller):
            if poller is not None:
                poller.cancel()
        await asyncio.gather(old, layer._poller or old, return_exceptions=True)
        await database_sync_to_async(connections.close_all)()


async def test_a_member_who_joins_after_everyone_left_hears_only_what_comes_next():
    """The poller ends with its last member; what was sent while nobody listened is not
    handed to the next one to join (a page opened later would show stale notices)."""
    layer = DatabaseChannelLayer(poll_interval=0.05)
    first, second = await layer.new_channel(), await layer.new_channel()
    await layer.group_add("proposals", first)
    await asyncio.sleep(0.2)
    old = layer._poller
    await layer.group_discard("proposals", first)
    await asyncio.wait_for(asyncio.gather(old, return_exceptions=True), 5)
    for n in (1, 2):  # while nobody listens
        await asyncio.to_thread(send_and_close, layer, "proposals", {"type": "x", "n": n})
    await layer.group_add("proposals", second)
    try:
        await asyncio.to_thread(send_and_close, layer, "proposals", {"type": "x", "n": 3})
        message = await asyncio.wait_for(layer.receive(second), 5)
        assert message["n"] == 3
    finally:
        await layer.group_discard("proposals", second)
        if layer._poller is not None:
            layer._poller.cancel()
            await asyncio.gather(layer._poller, return_exceptions=True)
        await database_sync_to_async(connections.close_all)()
