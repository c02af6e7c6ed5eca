"""Broadcasts from plain threads (views, the worker) over Redis, the scale deployment's layer."""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid

import pytest
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from executions import broadcast
from infrastructure.channel_layers import RedisPubSubLayer

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/14")


@pytest.mark.parametrize("layer_class", [RedisPubSubChannelLayer, RedisChannelLayer])
def test_thread_broadcasts_reach_a_subscriber_in_order_through_one_sender(monkeypatch, layer_class):
    layer = layer_class(hosts=[REDIS_URL], prefix=f"airlock-test-{uuid.uuid4().hex}")
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: layer)
    sent_on = []

    def send(n: int) -> None:  # as a request thread or a worker thread does
        broadcast.broadcast("watchers", {"type": "proposal.changed", "n": n})
        sent_on.append(broadcast._sender())

    async def main() -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add("watchers", channel)
        try:
            for n in range(1, 21):
                await asyncio.to_thread(send, n)
            return [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(20)]
        finally:
            await layer.group_discard("watchers", channel)  # the layer closes with the loop

    received = asyncio.run(main())
    assert [m["n"] for m in received] == list(range(1, 21))
    assert len({id(sender) for sender in sent_on}) == 1, "a loop (and a connection) per send"


def test_airlock_s_layer_publishes_on_the_broadcasting_thread_in_order(monkeypatch):
    layer = RedisPubSubLayer(hosts=[REDIS_URL], prefix=f"airlock-test-{uuid.uuid4().hex}")
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: layer)

    def no_sender():
        raise AssertionError("handed to the sender loop instead of published on the thread")

    monkeypatch.setattr(broadcast, "_sender", no_sender)

    async def main() -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add("watchers", channel)
        try:
            for n in range(1, 21):  # as a request thread or a worker thread does
                await asyncio.to_thread(
                    broadcast.broadcast, "watchers", {"type": "proposal.changed", "n": n}
                )
            return [await asyncio.wait_for(layer.receive(channel), 5) for _ in range(20)]
        finally:
            await layer.group_discard("watchers", channel)

    received = asyncio.run(main())
    assert [m["n"] for m in received] == list(range(1, 21))


def test_with_redis_away_a_thread_s_broadcast_is_dropped_soon_and_then_not_tried(
    monkeypatch, caplog
):
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # nobody listens there once closed
    layer = RedisPubSubLayer(hosts=[f"redis://127.0.0.1:{port}/0"])
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: layer)
    started = time.monotonic()
    for n in range(3):
        broadcast.broadcast("watchers", {"type": "proposal.changed", "n": n})
    assert time.monotonic() - started < 2 * RedisPubSubLayer.TIMEOUT_SECONDS
    dropped = [r for r in caplog.records if "broadcast to watchers dropped" in r.getMessage()]
    assert len(dropped) == 1, [r.getMessage() for r in caplog.records]
