"""Wake-ups between the processes of one host, so waiting costs no polling.

The embedded deployment has no server to push through: its broker is a folder
and its channel layer a table. A process that waits for one of them listens
on a *topic*: it binds a UNIX datagram socket (in the abstract namespace, so
no path length limit and nothing to clean up) and registers its name as an
empty file in ``DATA_DIR/bells/<topic>/``. Whoever writes a message rings the
topic: one datagram to every registered listener. A listener waits on its
socket with a timeout, and a slow poll stays as the safety net: a ring that
is lost (a full socket buffer, a listener that registered late) costs at
most one poll interval, never a message. A ring may carry a short note (the
channel layer sends the message itself, so a listener need not read the
table for it); a note too long for one datagram goes as a bare ring.

The registry lives in the data dir (0700), so only Airlock's own user rings;
a stale registration (a process that died) is removed by the next ring that
finds nobody listening.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import itertools
import os
import select
import socket
import threading
from pathlib import Path

from django.conf import settings

_counter = itertools.count()
RING = b"!"  # a ring without a note
MAX_NOTE = 60 * 1024  # a datagram the default socket buffers hold a few of


def _folder(topic: str) -> Path:
    return Path(settings.DATA_DIR) / "bells" / topic


def _address(name: str) -> bytes:
    # The data dir in the name keeps two deployments on one host apart.
    digest = hashlib.sha256(str(Path(settings.DATA_DIR).resolve()).encode()).hexdigest()[:16]
    return f"\0airlock-{digest}-{name}".encode()


def ring(topic: str, note: bytes = RING) -> None:
    """Wake every process listening on ``topic`` (best effort, never raises)."""
    if len(note) > MAX_NOTE:
        note = RING
    folder = _folder(topic)
    try:
        names = os.listdir(folder)
    except OSError:
        return
    if not names:
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.setblocking(False)
        for name in names:
            try:
                sender.sendto(note, _address(f"{topic}-{name}"))
            except BlockingIOError:
                pass  # its buffer is full of rings it has not read: it is awake anyway
            except (ConnectionRefusedError, FileNotFoundError):
                with contextlib.suppress(OSError):
                    (folder / name).unlink()  # nobody listens there any more
            except OSError:
                pass


class Bell:
    """One process's listener on a topic; ``wait`` returns early when someone rings."""

    def __init__(self, topic: str):
        self.topic = topic
        self.name = f"{os.getpid()}-{next(_counter)}"
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._socket.setblocking(False)
        self._socket.bind(_address(f"{topic}-{self.name}"))
        folder = _folder(topic)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._registration = folder / self.name
        self._registration.touch()
        self._lock = threading.Lock()
        self._owner = os.getpid()
        atexit.register(self.close)

    def fileno(self) -> int:
        return self._socket.fileno()

    def _drain(self) -> list[bytes]:
        """The notes of every ring queued so far (``RING`` for a bare one)."""
        notes = []
        while True:
            try:
                notes.append(self._socket.recv(MAX_NOTE + 1))
            except OSError:  # BlockingIOError: nothing more queued
                return notes

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True if rung (rings queued since are consumed)."""
        with self._lock:
            if self._drain():
                return True
            ready, _, _ = select.select([self._socket], [], [], max(timeout, 0))
            return bool(ready) and bool(self._drain())

    async def wait_async(self, timeout: float) -> bool:
        """``wait`` for the running event loop."""
        return bool(await self.notes(timeout))

    async def notes(self, timeout: float) -> list[bytes]:
        """Wait up to ``timeout`` seconds for rings; the notes they carried (none: not rung)."""
        notes = self._drain()
        if notes:
            return notes
        loop = asyncio.get_running_loop()
        rung = loop.create_future()
        loop.add_reader(self._socket, lambda: rung.done() or rung.set_result(True))
        try:
            await asyncio.wait_for(rung, timeout)
        except TimeoutError:
            return []
        finally:
            loop.remove_reader(self._socket)
        return self._drain() or [RING]

    def close(self) -> None:
        """Stop listening (a forked child leaves its parent's registration alone)."""
        if os.getpid() == self._owner:
            with contextlib.suppress(OSError):
                self._registration.unlink()
        self._socket.close()
