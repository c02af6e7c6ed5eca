"""The embedded broker: a consumer polling the folder never reads a half-written message."""

from __future__ import annotations

import threading
from queue import Empty

from kombu import Connection

from infrastructure.broker import Transport

MESSAGES = 150
SIZE = 512 * 1024  # big enough that writing one takes a while


def race(transport, folder) -> tuple[list[int], list[str]]:
    """A producer writes while a consumer drains: (the numbers read, the errors seen)."""
    options = {
        "data_folder_in": str(folder),
        "data_folder_out": str(folder),
        "store_processed": False,
    }
    received: list[int] = []
    errors: list[str] = []
    done = threading.Event()

    def consume() -> None:
        with Connection("filesystem://", transport=transport, transport_options=options) as conn:
            channel = conn.channel()
            while not done.is_set() or len(received) < MESSAGES:
                try:
                    message = channel._get("race")
                except Empty:
                    if done.is_set() and len(received) + len(errors) >= MESSAGES:
                        return
                    continue
                except Exception as exc:  # what a worker would die of
                    errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                if message["body"] != "x" * SIZE:
                    errors.append(f"message {message['n']} came truncated")
                received.append(message["n"])

    consumer = threading.Thread(target=consume)
    consumer.start()
    with Connection("filesystem://", transport=transport, transport_options=options) as conn:
        channel = conn.channel()
        for n in range(MESSAGES):
            channel._put("race", {"n": n, "body": "x" * SIZE})
    done.set()
    consumer.join(timeout=60)
    return received, errors


def test_a_polling_consumer_reads_every_message_whole(tmp_path):
    received, errors = race(Transport, tmp_path)
    assert errors == []
    assert sorted(received) == list(range(MESSAGES))
    assert not list(tmp_path.glob("*.part"))
