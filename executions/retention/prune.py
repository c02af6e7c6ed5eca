"""A retention pass: output of executions finished before the cutoff, archived, then deleted.

Whole days only (UTC): the cutoff is midnight ``days`` days ago, so each day
is archived in one pass into one file. For each day the pass writes the
file first (from a read, which stalls no writer), then deletes that day's
chunks ``BATCH`` rows per statement, each statement its own transaction, so
a write of the hot path waits at most one short batch behind it; then marks
the executions archived and records the day in the audit trail. A pass that
stops half-way leaves rows that are already in the file: the next pass
writes the day again with them, and deletes them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from django.db import transaction
from django.utils import timezone

from audit.services import record
from executions.choices import TERMINAL
from executions.models import Execution, OutputChunk
from infrastructure.archive import Archive, cutoff, delete_batched

KIND = "output"  # the archive's output/YYYY-MM-DD.jsonl.gz
BATCH = 1000  # chunk rows per DELETE: each one a short write transaction
EXECUTIONS_PER_READ = 200


@dataclass
class Summary:
    cutoff: datetime
    days: list[dict] = field(default_factory=list)
    executions: int = 0
    chunks: int = 0
    seconds: float = 0.0


def due():
    """Finished executions whose output is still in the database."""
    return Execution.objects.filter(status__in=TERMINAL, output_archived_at__isnull=True)


def run(days: int, archive: Archive, now: datetime | None = None) -> Summary:
    """Archive and delete the output of every whole day before the cutoff; what was done."""
    started = time.monotonic()
    summary = Summary(cutoff=cutoff(days, now or timezone.now()))
    for day, ids in _days(summary.cutoff):
        entry = archive.write_day(KIND, day, _lines(ids), merged)
        deleted = _delete_chunks(ids)
        archived_at = timezone.now()
        for start in range(0, len(ids), EXECUTIONS_PER_READ):  # within any database's parameters
            batch = ids[start : start + EXECUTIONS_PER_READ]
            Execution.objects.filter(pk__in=batch).update(output_archived_at=archived_at)
        with transaction.atomic():
            record(
                "system",
                "retention.archived",
                None,
                day=day.isoformat(),
                executions=len(ids),
                chunks=deleted,
                file=entry["file"],
                sha256=entry["sha256"],
            )
        summary.days.append({"day": day.isoformat(), "executions": len(ids), "chunks": deleted})
        summary.executions += len(ids)
        summary.chunks += deleted
    summary.seconds = time.monotonic() - started
    return summary


def _days(cutoff: datetime) -> Iterator[tuple[date, list[int]]]:
    """Each due day, oldest first, with the ids of its executions.

    Read a day at a time, each once its predecessor is done: no read stays open
    while the pass writes (SQLite does not keep a read on one connection apart
    from that connection's own writes to the rows it walks).
    """
    done: set[date] = set()
    while True:
        oldest = (
            due()
            .filter(finished_at__lt=cutoff)
            .order_by("finished_at")
            .values_list("finished_at", flat=True)
            .first()
        )
        if oldest is None:
            return
        day = oldest.astimezone(UTC).date()
        if day in done:  # its executions were not marked: never loop over it
            raise RuntimeError(f"retention: {day} is still due after it was archived")
        done.add(day)
        start = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        ids = list(
            due()
            .filter(finished_at__gte=start, finished_at__lt=min(start + timedelta(days=1), cutoff))
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        yield day, ids


def _lines(ids: list[int]) -> Iterator[dict]:
    """One archive line per execution, its chunks in order, read a few executions at a time."""
    for start in range(0, len(ids), EXECUTIONS_PER_READ):
        batch = ids[start : start + EXECUTIONS_PER_READ]
        executions = Execution.objects.in_bulk(batch)
        chunks: dict[int, list] = {pk: [] for pk in batch}
        rows = (
            OutputChunk.objects.filter(execution_id__in=batch)
            .order_by("execution_id", "seq")
            .values_list("execution_id", "seq", "stream", "data", "created_at")
        )
        for execution_id, seq, stream, data, created_at in rows.iterator(chunk_size=2000):
            chunks[execution_id].append([seq, stream, data, created_at.isoformat()])
        for pk in batch:
            execution = executions[pk]
            yield {
                "execution_id": pk,
                "action": execution.action,
                "status": execution.status,
                "requested_by": execution.requested_by,
                "created_at": execution.created_at.isoformat(),
                "finished_at": execution.finished_at.isoformat(),
                "output_bytes": execution.output_bytes,
                "truncated": execution.truncated,
                "chunks": chunks[pk],
            }


def _delete_chunks(ids: list[int]) -> int:
    """Delete the executions' chunks, ``BATCH`` rows per statement and transaction."""
    deleted = 0
    for start in range(0, len(ids), EXECUTIONS_PER_READ):
        batch = ids[start : start + EXECUTIONS_PER_READ]
        deleted += delete_batched(OutputChunk.objects.filter(execution_id__in=batch), BATCH)
    return deleted


def merged(kept: list[dict], new):
    """The new lines, then the kept ones they do not name; each execution once.

    An execution in both (a pass stopped after deleting part of its chunks)
    keeps every chunk either holds, in order.
    """
    seen = set()
    earlier = {line["execution_id"]: line for line in kept}
    for line in new:
        pk = line["execution_id"]
        seen.add(pk)
        if pk in earlier:
            chunks = {chunk[0]: chunk for chunk in earlier[pk]["chunks"]}
            chunks.update({chunk[0]: chunk for chunk in line["chunks"]})
            line = {**line, "chunks": [chunks[seq] for seq in sorted(chunks)]}
        yield line
    for line in kept:
        if line["execution_id"] not in seen:
            yield line


def output_of(archive: Archive, execution: Execution) -> dict | None:
    """The archived line of ``execution`` (its chunks), or None if the archive lacks it."""
    day = execution.finished_at.astimezone(UTC).date()
    return next(
        (line for line in archive.lines(KIND, day) if line["execution_id"] == execution.pk), None
    )
