"""The chain's old records moved to the archive, its continuity kept (``RETENTION_AUDIT_DAYS``).

Whole UTC days, oldest first, into ``audit/YYYY-MM-DD.jsonl.gz``: each line a
record exactly as stored (seq, time as hashed, actor, verb, object, data,
prev_hash, hash). For each day the file is written, then ``ChainArchive``
moves to its last record, then the rows up to it are deleted in short
batches; the next record in the database still names that one's hash as its
``prev_hash``, so ``verify_chain`` starts from ``ChainArchive`` and
``verify_archived`` checks the archived rows from the first and that they
end where the database begins. Never moved: the chain's last record (the
next append follows it), and any record a configured sink has not yet
acknowledged. A pass that stops after the file is written deletes the rest
next time.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from infrastructure.archive import Archive, cutoff, delete_batched

from .models import AuditEvent, ChainArchive, SinkPosition
from .services import GENESIS, ChainReport, _digester, chain_end, record
from .shipping.ship import configured

KIND = "audit"
BATCH = 1000  # rows per DELETE, each its own short transaction
_FIELDS = ("seq", "created_at", "actor", "verb", "object_type", "object_id", "data",
           "prev_hash", "hash")  # fmt: skip


@dataclass
class Summary:
    cutoff: datetime
    days: list[dict] = field(default_factory=list)
    records: int = 0


def archived_through() -> tuple[int, str]:
    """The last archived record's ``seq`` and ``hash``; ``(0, GENESIS)`` when none was."""
    row = ChainArchive.objects.values_list("through_seq", "through_hash").first()
    return row or (0, GENESIS)


def movable_through() -> int:
    """The last ``seq`` a pass may move: before the chain's end, and acknowledged by every sink."""
    limit = chain_end()[0] - 1
    for sink in configured():
        acknowledged = SinkPosition.objects.filter(name=sink.name).values_list("seq", flat=True)
        limit = min(limit, acknowledged.first() or 0)
    return limit


def run(days: int, archive: Archive, now: datetime | None = None) -> Summary:
    """Move every whole day of records before the cutoff (as far as may be moved)."""
    summary = Summary(cutoff=cutoff(days, now or timezone.now()))
    _delete_through(archived_through()[0])  # what a stopped pass left behind
    limit = movable_through()
    while True:
        # The chain is walked by seq alone (its times follow it): the next record, and the
        # first one of the day after its day, bound the day's records.
        start, _ = archived_through()
        first = AuditEvent.objects.filter(seq__gt=start).order_by("seq")
        first = first.values_list("seq", "created_at").first()
        if first is None or first[0] > limit or first[1] >= summary.cutoff:
            break
        day = first[1].astimezone(UTC).date()
        end = min(
            summary.cutoff,
            datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=UTC),
        )
        after = AuditEvent.objects.filter(seq__gt=start, created_at__gte=end).order_by("seq")
        after = after.values_list("seq", flat=True).first()
        through = min(limit, after - 1 if after else limit)
        last = (through, AuditEvent.objects.values_list("hash", flat=True).get(seq=through))
        entry = archive.write_day(KIND, day, _lines(start, last[0]), _by_seq)
        with transaction.atomic():
            ChainArchive.objects.update_or_create(
                pk=1,
                defaults={
                    "through_seq": last[0],
                    "through_hash": last[1],
                    "location": archive.location,
                },
            )
        _delete_through(last[0])
        with transaction.atomic():
            record("system", "retention.archived", None, kind=KIND, day=day.isoformat(),
                   records=last[0] - start, file=entry["file"], sha256=entry["sha256"])  # fmt: skip
        summary.days.append({"day": day.isoformat(), "records": last[0] - start})
        summary.records += last[0] - start
    return summary


def _lines(after: int, through: int) -> Iterator[dict]:
    """Records ``after``+1 .. ``through`` as stored, the time as it was hashed."""
    rows = AuditEvent.objects.filter(seq__gt=after, seq__lte=through).order_by("seq")
    for row in rows.values_list(*_FIELDS).iterator(chunk_size=2000):
        line = dict(zip(_FIELDS, row, strict=True))
        line["created_at"] = line["created_at"].isoformat()
        yield line


def _by_seq(kept: list[dict], new) -> Iterator[dict]:
    """A day written again: what the file held and what is new, each record once, in order."""
    lines = {line["seq"]: line for line in kept}
    lines.update((line["seq"], line) for line in new)
    return iter(lines[seq] for seq in sorted(lines))


def _delete_through(seq: int) -> None:
    delete_batched(AuditEvent.objects.filter(seq__lte=seq), BATCH)


def verify_archived(archive: Archive) -> ChainReport:
    """Check the archived records: from the first, each linked and unedited, ending exactly
    where the database's part begins (``ChainArchive``)."""
    through = archived_through()
    expected_seq, prev, checked = 1, GENESIS, 0
    digest = _digester(settings.SECRET_KEY)
    for day in archive.days(KIND):
        for line in archive.lines(KIND, day):
            seq = line["seq"]
            if seq != expected_seq:
                kind = "missing from" if seq > expected_seq else "repeated in"
                return ChainReport(
                    False, checked, expected_seq, f"row {expected_seq} {kind} the archive"
                )
            if line["prev_hash"] != prev:
                return ChainReport(
                    False, checked, seq, f"archived row {seq} does not follow row {seq - 1}"
                )
            data = line["data"] if isinstance(line["data"], dict) else json.loads(line["data"])
            computed = digest(prev, seq, line["created_at"], line["actor"], line["verb"],
                              line["object_type"], line["object_id"], data)  # fmt: skip
            if not hmac.compare_digest(computed, line["hash"]):
                return ChainReport(False, checked, seq, f"archived row {seq} was edited")
            expected_seq, prev, checked = seq + 1, line["hash"], checked + 1
    if expected_seq - 1 == through[0] and prev != through[1]:
        problem = f"archived row {through[0]} is not the one the database goes on from"
        return ChainReport(False, checked - 1, through[0], problem)
    if (expected_seq - 1, prev) != through:
        return ChainReport(
            False, checked, expected_seq,
            f"the archive ends at row {expected_seq - 1}, the database goes on after row {through[0]}",
        )  # fmt: skip
    return ChainReport(True, checked)


def archived_hashes(archive: Archive, wanted: set[int]) -> dict[int, str]:
    """The archived hash of each row ``wanted`` (for checkpoints older than the database's part)."""
    found: dict[int, str] = {}
    for day in archive.days(KIND):
        for line in archive.lines(KIND, day):
            if line["seq"] in wanted:
                found[line["seq"]] = line["hash"]
    return found
