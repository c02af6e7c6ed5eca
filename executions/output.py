"""Recording an execution's output: sequence, persist in batches, broadcast on commit."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from time import monotonic, sleep
from typing import TypeVar

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.db.models import F

from infrastructure.credentials import OutputMasker
from infrastructure.per_process import PerProcess

from .broadcast import broadcast_on_commit, execution_group
from .models import Execution, OutputChunk
from .sandboxes.base import OutputSink

FLUSH_INTERVAL_SECONDS = 0.05
FLUSH_BYTES = 64 * 1024
# What Django raises while the database is away (restarting, unreachable).
DATABASE_AWAY = (OperationalError, InterfaceError)
RETRY_PAUSE_SECONDS = 0.5

log = logging.getLogger(__name__)
T = TypeVar("T")


def until_committed(write: Callable[[], T], what: str) -> T:
    """Run ``write`` (one transaction) again while the database is away, for a while.

    A write that failed rolled back whole, so running it again is safe. Past
    WORKER_LOST_AFTER_SECONDS the sweeper may have declared the run lost: then
    the error stands. A worker thus outlives a database restart (PostgreSQL's
    takes seconds) with its run's output and result intact.
    """
    deadline = monotonic() + settings.WORKER_LOST_AFTER_SECONDS
    while True:
        try:
            close_old_connections()
            return write()
        except DATABASE_AWAY as exc:
            # SQLite is a file beside the process, never away: its errors are the answer.
            if connection.vendor == "sqlite" or monotonic() >= deadline:
                raise
            log.warning("%s: the database is away (%s); trying again", what, str(exc).strip())
            with contextlib.suppress(*DATABASE_AWAY):
                connection.close()
            sleep(RETRY_PAUSE_SECONDS)


MAX_CHUNK_CHARS = 64 * 1024
# A write's message carries its chunks up to this many characters; past it, only
# the sequence number they end at, and followers read them from the database. A
# burst's chunks were otherwise written twice (to their table and, encoded as
# JSON, to the embedded channel layer's), which held the stream of long lines
# to half the rate.
CARRIED_CHARS = 256 * 1024


def _size(chunks: Sequence[OutputChunk]) -> int:
    return sum(len(chunk.data.encode()) for chunk in chunks)


def chunks_message(chunks: Sequence[OutputChunk]) -> dict:
    """The broadcast of stored ``chunks``: ``last_seq``, and the chunks themselves unless
    they hold more than ``CARRIED_CHARS`` (then ``chunks`` is empty: read them)."""
    carried = sum(len(chunk.data) for chunk in chunks) <= CARRIED_CHARS
    return {
        "type": "output.chunks",
        "last_seq": chunks[-1].seq,
        "chunks": [chunk.as_message() for chunk in chunks] if carried else [],
    }


class FlushThreads:
    """Threads that run flush loops one after another, each keeping its database connection.

    A recorder's flusher runs on one of these instead of a thread of its own,
    so a run neither starts a thread nor gets a database connection for its
    output (SQLite: opened, with its pragmas; PostgreSQL: taken from the pool
    and checked) in the middle of the run. A thread idle for ``IDLE_SECONDS``
    closes its connection and ends.
    """

    IDLE_SECONDS = 60.0

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: list[_Slot] = []  # the most recently used last: its connection is warm

    def start(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle.pop().jobs.put(job)
                return
        slot = _Slot()
        slot.thread = threading.Thread(target=self._serve, args=(slot, job), daemon=True)
        slot.thread.name = "output-flusher"
        slot.thread.start()

    def release(self) -> None:
        """End the idle threads, closing their connections (a worker stopping, a test run's end)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for slot in idle:
            slot.jobs.put(None)
        for slot in idle:
            slot.thread.join()

    def _serve(self, slot: _Slot, job: Callable[[], None] | None) -> None:
        try:
            while job is not None:
                try:
                    job()
                except Exception:
                    log.exception("an output flusher failed")
                    with contextlib.suppress(*DATABASE_AWAY):
                        connection.close()  # whatever state it was left in
                with self._lock:
                    self._idle.append(slot)
                try:
                    job = slot.jobs.get(timeout=self.IDLE_SECONDS)
                except queue.Empty:
                    with self._lock:
                        if slot in self._idle:
                            self._idle.remove(slot)
                            return
                    job = slot.jobs.get()  # taken just now: its job is on the way
        finally:
            with contextlib.suppress(*DATABASE_AWAY):
                connection.close()


class _Slot:
    __slots__ = ("jobs", "thread")

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None


flush_threads = PerProcess(FlushThreads)  # this process's (a parent's threads are not a child's)


class ExecutionRecorder(OutputSink):
    """An output sink that buffers briefly, bulk-inserts chunks, then broadcasts them.

    ``emit`` only appends to a buffer (it runs on the sandbox's reader
    threads); a flusher thread writes, so slow storage never blocks a pipe.
    Output after a quiet spell is written at once (a first line reaches the
    browser without waiting); while output keeps coming, writes are at most
    one per ``FLUSH_INTERVAL_SECONDS``, sooner once ``FLUSH_BYTES`` wait.
    """

    def __init__(
        self,
        execution_id: int,
        cap_bytes: int,
        start_seq: int = 0,
        masker: Callable[[], OutputMasker] | None = None,
    ):
        super().__init__(cap_bytes)
        self.execution_id = execution_id
        # Credentials masked before anything is kept or told: one masker per stream.
        self._new_masker = masker or OutputMasker
        self._maskers: dict[str, OutputMasker] = {}
        self.seq = start_seq
        self.stored_bytes = 0  # of the chunks the flusher has committed
        self._pending: list[list[str]] = []  # [stream, text] pairs, merged when adjacent
        self._pending_chars = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._flushed = threading.Event()  # the flusher is done: set as it returns
        flush_threads().start(self._run)

    def emit(self, stream: str, text: str) -> None:
        masker = self._maskers.get(stream)
        if masker is None:
            masker = self._maskers[stream] = self._new_masker()
        text = masker.feed(text)  # on the stream's own reader thread
        if text:
            self._pend(stream, text)

    def _pend(self, stream: str, text: str) -> None:
        with self._wake:
            last = self._pending[-1] if self._pending else None
            if last and last[0] == stream and len(last[1]) + len(text) <= MAX_CHUNK_CHARS:
                last[1] += text
            else:
                self._pending.append([stream, text])
            was_empty = self._pending_chars == 0
            self._pending_chars += len(text)
            if was_empty or self._pending_chars >= FLUSH_BYTES:
                self._wake.notify()

    def stop(self) -> list[OutputChunk]:
        """Stop the flusher; answer what it had not written yet, numbered, to ``store``.

        The run's end stores it in the transaction that ends the execution:
        one commit instead of two, and the output is still told first.
        """
        self.close()
        for stream, masker in self._maskers.items():
            if rest := masker.flush():
                self._pend(stream, rest)
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._flushed.wait()
        with self._wake:
            batch, self._pending, self._pending_chars = self._pending, [], 0
        return self._numbered(batch)

    def store(self, chunks: Sequence[OutputChunk], counters: bool = True) -> None:
        """Insert ``chunks`` and tell them on commit (inside a transaction); with
        ``counters``, also move the execution's ``last_seq`` and ``output_bytes`` on
        (the run's end sets them in its own update instead: ``output_bytes_with``)."""
        if not chunks:
            return
        OutputChunk.objects.bulk_create(chunks)
        if counters:
            self.count(chunks)
        broadcast_on_commit(execution_group(self.execution_id), chunks_message(chunks))

    def count(self, chunks: Sequence[OutputChunk]) -> None:
        """The execution's counters moved on past ``chunks`` (inside their transaction)."""
        Execution.objects.filter(pk=self.execution_id).update(
            last_seq=chunks[-1].seq, output_bytes=F("output_bytes") + _size(chunks)
        )

    def output_bytes_with(self, chunks: Sequence[OutputChunk]) -> int:
        """The execution's ``output_bytes`` once ``chunks`` are stored too.

        The recorder is the only writer of its execution's output from the
        run's start, so what it has committed is the stored count."""
        return self.stored_bytes + _size(chunks)

    def _run(self) -> None:
        written_at = float("-inf")
        try:
            while True:
                with self._wake:
                    while not self._stopping and self._pending_chars < FLUSH_BYTES:
                        if not self._pending:
                            self._wake.wait()  # quiet: until the next emit
                            continue
                        due = written_at + FLUSH_INTERVAL_SECONDS - monotonic()
                        if due <= 0:
                            break
                        self._wake.wait(due)
                    if self._stopping:
                        return  # what is left is ``stop``'s to hand over
                    batch, self._pending, self._pending_chars = self._pending, [], 0
                self._write(self._numbered(batch))
                written_at = monotonic()
        finally:
            self._flushed.set()

    def _numbered(self, batch: list[list[str]]) -> list[OutputChunk]:
        chunks = []
        for stream, text in batch:
            self.seq += 1
            chunks.append(
                OutputChunk(execution_id=self.execution_id, seq=self.seq, stream=stream, data=text)
            )
        return chunks

    def _write(self, chunks: list[OutputChunk]) -> None:
        def write() -> None:
            with transaction.atomic():  # one write: the chunks, the counters, the message
                self.store(chunks)

        until_committed(write, f"output of execution {self.execution_id}")
        self.stored_bytes += _size(chunks)  # once committed (a retried write counts once)
