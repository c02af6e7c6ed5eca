"""Checkpoints of the write-ahead log, off the writers' path.

In WAL mode every commit appends pages to the log, and a *checkpoint* copies
them back into the database file so the log can start over. SQLite's
default runs it inside the commit that takes the log past 1,000 pages, and
there it holds the writer lock (``infrastructure.sqlite.base``): every 30th or so
proposal paid 4–5 ms instead of 0.1–0.3 ms, and everyone queued behind it,
about half of all the time commits took.

``serve`` runs a ``Checkpointer`` in its own process instead, and gives the
web processes and the worker a far larger ``wal_autocheckpoint`` as a
backstop (``SQLITE_WAL_AUTOCHECKPOINT``). Each round copies what the log
holds without any lock (a passive checkpoint: writers go on appending and
readers go on reading). A log is started over only by a writer that begins
with every page of it copied, which under a steady stream of commits never
happens by itself; so once the log is long, the round takes the writer lock
for a second passive checkpoint, which has only the pages committed in the
meantime to copy, and the next writer starts the log over. A writer that
starts it over also cuts the file back to ``LOG_SIZE_LIMIT`` bytes
(``journal_size_limit``): without it the file kept the size of its longest
burst, 30 MB after a minute of heavy load.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sqlite3
import threading

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 0.1
RESTART_PAGES = 1000  # SQLite's own autocheckpoint threshold
BACKSTOP_PAGES = 20_000  # what writers checkpoint at when no checkpointer runs (~80 MB)
# Bytes a log started over keeps: four times what it reaches between the
# checkpointer's restarts, so only a burst's log is cut (and grown again).
LOG_SIZE_LIMIT = 16 * 1024 * 1024


def writer_lock_path(database: str) -> str:
    """The file whose ``flock`` every writer of ``database`` queues on."""
    return f"{database}.writer-lock"


def open_writer_lock(database: str) -> int:
    """A descriptor of its own on ``database``'s writer lock (a ``flock`` is per descriptor)."""
    return os.open(writer_lock_path(database), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


class Checkpointer:
    """Checkpoints ``database`` every ``interval`` seconds on a thread of its own."""

    def __init__(self, database: str, interval: float = INTERVAL_SECONDS):
        self.database = database
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="wal-checkpoints", daemon=True)

    def start(self) -> Checkpointer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        connection = sqlite3.connect(self.database, isolation_level=None)
        lock = open_writer_lock(self.database)
        try:
            while not self._stop.wait(self.interval):
                try:
                    self.checkpoint(connection, lock)
                except sqlite3.Error:
                    log.exception("checkpoint of %s failed", self.database)
        finally:
            connection.close()
            os.close(lock)

    @staticmethod
    def checkpoint(connection: sqlite3.Connection, lock: int) -> tuple[int, int]:
        """One round: (pages in the log, pages copied) after it."""
        _, pages, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        # Copied up to a moment writers have long moved past: the log starts over
        # only for a writer that begins with every page of it copied.
        if pages >= RESTART_PAGES:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                _, pages, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
        return pages, copied
