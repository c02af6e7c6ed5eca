"""Recording an execution's output: sequence, persist in batches, then broadcast."""

from __future__ import annotations

import threading

from django.db import close_old_connections, connection
from django.db.models import F

from .broadcast import broadcast, execution_group
from .models import Execution, OutputChunk
from .sandboxes.base import OutputSink

FLUSH_INTERVAL_SECONDS = 0.05
FLUSH_BYTES = 64 * 1024
MAX_CHUNK_CHARS = 64 * 1024


class ExecutionRecorder(OutputSink):
    """An output sink that buffers briefly, bulk-inserts chunks, then broadcasts them.

    ``emit`` only appends to a buffer (it runs on the sandbox's reader
    threads); a flusher thread writes every ``FLUSH_INTERVAL_SECONDS`` or
    when ``FLUSH_BYTES`` are waiting, so slow storage never blocks a pipe.
    """

    def __init__(self, execution_id: int, cap_bytes: int, start_seq: int = 0):
        super().__init__(cap_bytes)
        self.execution_id = execution_id
        self.seq = start_seq
        self._pending: list[list[str]] = []  # [stream, text] pairs, merged when adjacent
        self._pending_chars = 0
        self._wake = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(
            target=self._run, name=f"output-{execution_id}", daemon=True
        )
        self._thread.start()

    def emit(self, stream: str, text: str) -> None:
        with self._wake:
            last = self._pending[-1] if self._pending else None
            if last and last[0] == stream and len(last[1]) + len(text) <= MAX_CHUNK_CHARS:
                last[1] += text
            else:
                self._pending.append([stream, text])
            self._pending_chars += len(text)
            if self._pending_chars >= FLUSH_BYTES:
                self._wake.notify()

    def finish(self) -> None:
        """Flush everything and stop the flusher; call once, after the run."""
        self.close()
        with self._wake:
            self._stopping = True
            self._wake.notify()
        self._thread.join()

    def _take(self) -> list[list[str]]:
        with self._wake:
            batch, self._pending, self._pending_chars = self._pending, [], 0
            return batch

    def _run(self) -> None:
        try:
            while True:
                with self._wake:
                    if not self._stopping and self._pending_chars < FLUSH_BYTES:
                        self._wake.wait(FLUSH_INTERVAL_SECONDS)
                    stopping = self._stopping
                batch = self._take()
                if batch:
                    self._write(batch)
                if stopping and not self._pending:
                    return
        finally:
            connection.close()

    def _write(self, batch: list[list[str]]) -> None:
        close_old_connections()
        chunks = []
        for stream, text in batch:
            self.seq += 1
            chunks.append(
                OutputChunk(execution_id=self.execution_id, seq=self.seq, stream=stream, data=text)
            )
        OutputChunk.objects.bulk_create(chunks)
        Execution.objects.filter(pk=self.execution_id).update(
            last_seq=self.seq,
            output_bytes=F("output_bytes") + sum(len(c.data.encode()) for c in chunks),
        )
        broadcast(
            execution_group(self.execution_id),
            {"type": "output.chunks", "chunks": [c.as_message() for c in chunks]},
        )
