"""Broadcasts from plain threads (views, the worker) over Redis, the scale deployment's layer."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest
from channels_redis.core import RedisChannelLayer
from channels_redis.pubsub import RedisPubSubChannelLayer

from executions import broadcast

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/14")


@pytest.mark.parametrize("layer_class", [RedisPubSubChannelLayer, RedisChannelLayer])
def test_thread_broadcasts_reach_a_subscriber_in_order_through_one_sender(monkeypatch, layer_class):
    layer = layer_class(hosts=[REDIS_URL], prefix=f"airlock-test-{uuid.uuid4().hex}")
    monkeypatch.setattr(broadcast, "get_channel_layer", lambda: layer)
    sent_on = []

    def send(n: int) -> None:  # as a request thread or a worker thread does
        broadcast.broadcast("watchers", {"type": "proposal.changed", "n": n})
        sent_on.append(broadcast._sender_instance)

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
