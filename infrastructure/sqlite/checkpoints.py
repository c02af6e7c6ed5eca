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
with every page of it copied and no reader left reading from it, which
under a steady stream of commits never happens by itself. So once the log
is long, the round copies again, still without the lock, until a copy finds
few new pages, and then takes the writer lock for a last checkpoint that
copies those few and waits for no reader (``RESTART`` with no busy
timeout): when no reader is left on the log, the next writer starts it
over; when one is, the lock is given back at once and the round is tried
again ``BUSY_INTERVAL_SECONDS`` later. So the lock is held for a few pages'
copy, not for what a burst of commits (a retention pass's deletes) wrote
meanwhile: that held every writer 10–20 ms a round. A writer that starts
the log over also cuts the file back to ``LOG_SIZE_LIMIT`` bytes
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
BUSY_INTERVAL_SECONDS = 0.01  # between rounds while a long log could not be started over
RESTART_PAGES = 1000  # SQLite's own autocheckpoint threshold
LOCKED_PAGES = 256  # at most what is left to copy under the writer lock (about a millisecond)
CATCH_UP_ROUNDS = 8  # copies without the lock before the round gives up on a restart
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
        connection = sqlite3.connect(self.database, isolation_level=None, timeout=0)
        lock = open_writer_lock(self.database)
        interval = self.interval
        try:
            while not self._stop.wait(interval):
                try:
                    _, _, ready = self.checkpoint(connection, lock)
                except sqlite3.Error:
                    log.exception("checkpoint of %s failed", self.database)
                    ready = True
                interval = self.interval if ready else min(self.interval, BUSY_INTERVAL_SECONDS)
        finally:
            connection.close()
            os.close(lock)

    @staticmethod
    def checkpoint(connection: sqlite3.Connection, lock: int) -> tuple[int, int, bool]:
        """One round: (pages in the log, pages copied, whether the log is short or the next
        writer starts it over). ``connection`` should have no busy timeout: a reader in the
        way is waited for by the next round, not under the writer lock."""
        _, pages, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        if pages < RESTART_PAGES:
            return pages, copied, True
        # Writers went on committing while that copy ran: copy their pages as well, until a
        # copy finds few new ones, so that the round under the lock has only those left.
        for _ in range(CATCH_UP_ROUNDS):
            if copied < pages:
                return pages, copied, False  # a reader holds the copy back: no restart yet
            before = copied
            _, pages, copied = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            if copied == pages and pages - before <= LOCKED_PAGES:
                break
        else:
            return pages, copied, False  # the writers outran the copies
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            busy, pages, copied = connection.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        return pages, copied, not busy
