"""A day's deletes run a step behind its file: the next day is read and compressed meanwhile.

A retention pass spends its time in two places that can run at once: reading
and compressing a day's lines (a read, which stalls no writer), and deleting
the day before (short write transactions). ``StepBehind`` runs each day's
job in one worker thread, in order, on that thread's own database
connection, while the pass goes on to the next day's file; it waits for a
job before it takes the next, so a pass is at most one day ahead of its
deletes, and a job's error stops the pass where it happened. A pass inside
a transaction runs its jobs in turn on that transaction's connection: a
thread's own connection would not see its rows, and on SQLite would wait for
its writer lock forever.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from django.db import connection, connections


class StepBehind:
    def __init__(self) -> None:
        self._inline = connection.in_atomic_block
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="airlock-retention")
        self._last: Future | None = None

    def __enter__(self) -> StepBehind:
        return self

    def submit(self, job: Callable[[], object]) -> None:
        """Run ``job`` once the one before it has finished (raising what that one raised)."""
        if self._inline:
            job()
            return
        self.wait()
        self._last = self._pool.submit(job)

    def wait(self) -> None:
        last, self._last = self._last, None
        if last is not None:
            last.result()

    def __exit__(self, *failed) -> None:
        try:
            if failed[0] is None:
                self.wait()
            elif self._last is not None:  # the pass failed: its last job still ends first
                self._last.exception()
        finally:
            if not self._inline:
                self._pool.submit(connections.close_all).result()
            self._pool.shutdown()
