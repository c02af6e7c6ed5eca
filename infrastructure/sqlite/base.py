"""SQLite for the embedded deployment: write transactions queue instead of backing off.

Every write transaction begins with ``BEGIN IMMEDIATE`` and so takes the
database's write lock. When two processes (web, worker) want it at once,
SQLite's busy handler puts the loser to sleep in growing steps (1, 2, 5, 10,
… up to 100 ms) and retries, which put p95 of a proposal under load at
300 ms although each transaction holds the lock for a few milliseconds.
Here a write transaction first takes an exclusive ``flock`` on a file beside
the database (one descriptor per connection, so threads queue too): the
kernel wakes the next writer the moment the lock is released. A process
that dies releases its lock with its descriptors. A write outside a
transaction (autocommit: one statement, its own transaction) takes the same
lock for that statement, or it would meet the others in the busy handler.
A writer waits as long as the one before it holds the lock, as a row lock
in PostgreSQL does (there, too, without a timeout by default).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re

from django.db.backends.sqlite3 import base

from .checkpoints import LOG_SIZE_LIMIT, open_writer_lock

_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE|REPLACE)\b", re.IGNORECASE)


class Cursor(base.SQLiteCursorWrapper):
    """Django's cursor; a write in autocommit mode queues on the writer lock."""

    wrapper: DatabaseWrapper

    def execute(self, query, params=None):
        if self.wrapper._writing or not _WRITE.match(query):
            return super().execute(query, params)
        with self.wrapper.writer_lock_for_a_statement():
            return super().execute(query, params)

    def executemany(self, query, param_list):
        if self.wrapper._writing or not _WRITE.match(query):
            return super().executemany(query, param_list)
        with self.wrapper.writer_lock_for_a_statement():
            return super().executemany(query, param_list)


class DatabaseWrapper(base.DatabaseWrapper):
    _writer_fd: int | None = None
    _writing = False

    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        # The log, once started over, is cut back to this (see checkpoints).
        connection.execute(f"PRAGMA journal_size_limit={LOG_SIZE_LIMIT}")
        return connection

    def create_cursor(self, name=None):
        cursor = self.connection.cursor(factory=Cursor)
        cursor.wrapper = self
        return cursor

    @contextlib.contextmanager
    def writer_lock_for_a_statement(self):
        """The writer lock around one writing statement outside a transaction."""
        fd = self._writer_lock()
        if fd is None:  # an in-memory database: one connection, nobody to queue behind
            yield
            return
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _start_transaction_under_autocommit(self):
        fd = self._writer_lock()
        if fd is not None and not self._writing:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._writing = True
        try:
            super()._start_transaction_under_autocommit()
        except BaseException:
            self._end_writing()
            raise

    def _commit(self):
        try:
            return super()._commit()
        finally:
            self._end_writing()

    def _rollback(self):
        try:
            return super()._rollback()
        finally:
            self._end_writing()

    def _close(self):
        try:
            return super()._close()
        finally:
            self._end_writing()
            if self._writer_fd is not None:
                os.close(self._writer_fd)
                self._writer_fd = None

    def _end_writing(self) -> None:
        if self._writing:
            self._writing = False
            fcntl.flock(self._writer_fd, fcntl.LOCK_UN)

    def _writer_lock(self) -> int | None:
        if self._writer_fd is None and not self.is_in_memory_db():
            self._writer_fd = open_writer_lock(self.settings_dict["NAME"])
        return self._writer_fd
