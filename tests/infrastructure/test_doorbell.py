"""Wake-ups between processes: a ring reaches every listener of its topic, at once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading

from kombu import Connection

from infrastructure import doorbell
from infrastructure.broker import Transport
from tests.serving import ROOT


def test_a_ring_wakes_a_waiting_bell_and_silence_does_not():
    bell = doorbell.Bell("test-topic")
    try:
        assert bell.wait(0.05) is False
        threading.Timer(0.1, doorbell.ring, args=("test-topic",)).start()
        assert bell.wait(30) is True
        assert bell.wait(0.05) is False  # the ring was consumed
    finally:
        bell.close()


def test_every_listener_of_a_topic_hears_it_and_no_other_topic_does():
    first, second, other = (doorbell.Bell(t) for t in ("shared", "shared", "elsewhere"))
    try:
        doorbell.ring("shared")
        assert first.wait(5) and second.wait(5)
        assert other.wait(0.05) is False
    finally:
        for bell in (first, second, other):
            bell.close()


def test_a_ring_from_another_process_wakes_this_one(settings):
    bell = doorbell.Bell("cross")
    code = (
        "import django; django.setup(); from infrastructure import doorbell; doorbell.ring('cross')"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "console.settings"}
    env["AIRLOCK_DATA_DIR"] = str(settings.DATA_DIR)
    try:
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)
        assert bell.wait(10) is True
    finally:
        bell.close()


def test_a_listener_that_is_gone_is_forgotten_by_the_next_ring(settings):
    bell = doorbell.Bell("stale")
    registration = bell._registration
    bell._socket.close()  # as if its process had died without unregistering
    doorbell.ring("stale")
    assert not registration.exists()


def test_an_asyncio_wait_wakes_on_a_ring():
    async def main():
        bell = doorbell.Bell("async")
        try:
            quiet = await bell.wait_async(0.05)
            asyncio.get_running_loop().call_later(0.05, doorbell.ring, "async")
            return quiet, await bell.wait_async(30)
        finally:
            bell.close()

    assert asyncio.run(main()) == (False, True)


def test_a_broker_consumer_is_woken_by_a_message_not_by_its_polling_interval(tmp_path):
    # With a polling interval of a minute, only the ring can deliver within the test.
    options = {
        "data_folder_in": str(tmp_path),
        "data_folder_out": str(tmp_path),
        "polling_interval": 60,
        "control_folder": str(tmp_path / "control"),
    }
    received = []
    with Connection("filesystem://", transport=Transport, transport_options=options) as consumer:
        queue = consumer.SimpleQueue("wake")

        def consume():
            message = queue.get(timeout=30)
            message.ack()
            received.append(message.payload)

        thread = threading.Thread(target=consume)
        thread.start()
        with Connection(
            "filesystem://", transport=Transport, transport_options=options
        ) as producer:
            producer.SimpleQueue("wake").put({"n": 1})
        thread.join(30)
        queue.close()
    assert received == [{"n": 1}]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".claimed", ".part", ".msg"))]
