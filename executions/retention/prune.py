"""A retention pass: output of executions finished before the cutoff, archived, then deleted.

Whole days only (UTC): the cutoff is midnight ``days`` days ago, so each day
is archived in one pass into one file. For each day the pass writes the
file first (from a read, which stalls no writer; the database writes the
lines), then deletes that day's chunks ``BATCH`` rows per statement, each
statement its own transaction, so a write of the hot path waits at most one
short batch behind it; a few hundred executions are marked archived in the
transaction of their last chunks; then the day is recorded in the audit
trail. The deletes run a step behind (``StepBehind``), while the next day's
file is written. A pass that stops half-way leaves rows that are already in
the file: the next pass writes the day again with them, and deletes them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import cache, partial

from django.db import connection, transaction
from django.utils import timezone

from audit.services import record
from executions.choices import TERMINAL
from executions.models import Execution, OutputChunk
from infrastructure.archive import (
    Archive,
    StepBehind,
    as_text,
    cutoff,
    days_of,
    delete_batched,
    flag,
    iso_time,
    json_array,
    json_object,
    json_rows,
    lines,
)

KIND = "output"  # the archive's output/YYYY-MM-DD.jsonl.gz
BATCH = 1000  # chunk rows per DELETE: each one a short write transaction
EXECUTIONS_PER_READ = 300  # about BATCH chunks at three a run; within any database's parameters


@dataclass
class Summary:
    cutoff: datetime
    days: list[dict] = field(default_factory=list)
    executions: int = 0
    chunks: int = 0
    seconds: float = 0.0


def run(days: int, archive: Archive, now: datetime | None = None) -> Summary:
    """Archive and delete the output of every whole day before the cutoff; what was done."""
    started = time.monotonic()
    summary = Summary(cutoff=cutoff(days, now or timezone.now()))
    # Along the index of executions whose output is kept: a filter on the status in the
    # query would have SQLite walk its status index instead, every execution ever finished.
    kept = Execution.objects.filter(output_archived_at__isnull=True)
    with StepBehind() as behind:
        for start in days_of(kept, "finished_at", summary.cutoff):
            rows = kept.filter(finished_at__gte=start, finished_at__lt=start + timedelta(days=1))
            rows = rows.order_by("pk").values_list("pk", "status")
            ids = [pk for pk, status in rows if status in TERMINAL]
            if ids:
                entry = archive.write_day(KIND, start.date(), _lines(ids), merged)
                behind.submit(partial(_remove, summary, start.date(), ids, entry))
    summary.seconds = time.monotonic() - started
    return summary


def _remove(summary: Summary, day: date, ids: list[int], entry: dict) -> None:
    """The day's chunks deleted once its file is stored, and its executions marked archived
    in the transaction of their last chunks."""
    deleted = 0
    archived_at = timezone.now()
    for start in range(0, len(ids), EXECUTIONS_PER_READ):
        batch = ids[start : start + EXECUTIONS_PER_READ]
        marked = Execution.objects.filter(pk__in=batch)
        deleted += delete_batched(
            OutputChunk.objects.filter(execution_id__in=batch),
            BATCH,
            last=partial(marked.update, output_archived_at=archived_at),
        )
    with transaction.atomic():
        record("system", "retention.archived", None, day=day.isoformat(), executions=len(ids),
               chunks=deleted, file=entry["file"], sha256=entry["sha256"])  # fmt: skip
    summary.days.append({"day": day.isoformat(), "executions": len(ids), "chunks": deleted})
    summary.executions += len(ids)
    summary.chunks += deleted


def _lines(ids: list[int]) -> Iterator[str]:
    """Each execution's archive line, read a few hundred at a time."""
    return lines(_sql(), ids, EXECUTIONS_PER_READ)


@cache
def _sql() -> str:
    """The read of a batch's lines, naming its executions as ``{keys}``: one line per
    execution, with its chunks in order."""
    quote = connection.ops.quote_name
    chunks = json_rows(
        json_array(["c.seq", "c.stream", "c.data", iso_time("c.created_at")]),
        f"FROM {quote(OutputChunk._meta.db_table)} c WHERE c.execution_id = e.id",
        order="c.seq",
    )
    line = json_object([
        ("execution_id", "e.id"),
        ("action", "e.action"),
        ("status", "e.status"),
        ("requested_by", "e.requested_by"),
        ("created_at", iso_time("e.created_at")),
        ("finished_at", iso_time("e.finished_at")),
        ("output_bytes", "e.output_bytes"),
        ("truncated", flag("e.truncated")),
        ("chunks", chunks),
    ])  # fmt: skip
    return (
        f"SELECT {as_text(line)} FROM {quote(Execution._meta.db_table)} e "
        "WHERE e.id IN ({keys}) ORDER BY e.id"
    )


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
