"""Retention: old output archived a day per file with checksums, then removed; nothing lost."""

from __future__ import annotations

import gzip
import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from approvals.retention.tasks import RETAIN
from audit.models import AuditEvent
from audit.services import verify_chain
from console.celery import _schedule_periodic_tasks
from executions.choices import ExecutionStatus
from executions.models import Execution, OutputChunk
from executions.retention import prune
from infrastructure.archive import Archive

pytestmark = pytest.mark.django_db(transaction=True)
NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def finished(days_ago: float, lines: int = 3, status=ExecutionStatus.SUCCEEDED) -> Execution:
    at = NOW - timedelta(days=days_ago)
    execution = Execution.objects.create(
        action="script.execute",
        command_hash="0" * 64,
        status=status,
        finished_at=at if status != ExecutionStatus.RUNNING else None,
    )
    OutputChunk.objects.bulk_create(
        OutputChunk(
            execution=execution,
            seq=n + 1,
            stream="stderr" if n == 1 else "stdout",
            data=f"line {n} of {execution.pk}\n",
        )
        for n in range(lines)
    )
    return execution


@pytest.fixture
def archive(tmp_path, settings):
    settings.RETENTION_ARCHIVE = str(tmp_path / "archive")
    return Archive(str(tmp_path / "archive"))


def chunks_of(execution: Execution) -> list:
    return list(execution.chunks.order_by("seq").values_list("seq", "stream", "data"))


def test_old_output_is_archived_a_day_per_file_then_removed(archive):
    day_a = [finished(10.6), finished(10.7, lines=2500)]  # 2026-11-09; more than a delete batch
    day_b = [finished(9.9)]  # 2026-11-10
    recent = finished(1)
    running = finished(30, status=ExecutionStatus.RUNNING)
    before = {e.pk: chunks_of(e) for e in [*day_a, *day_b]}

    summary = prune.run(3, archive, now=NOW)

    assert [d["day"] for d in summary.days] == ["2026-11-09", "2026-11-10"]
    assert (summary.executions, summary.chunks) == (3, 3 + 2500 + 3)
    files = archive.manifest()["files"]
    assert set(files) == {"output/2026-11-09.jsonl.gz", "output/2026-11-10.jsonl.gz"}
    for execution in [*day_a, *day_b]:
        execution.refresh_from_db()
        assert execution.output_archived_at is not None and not execution.chunks.exists()
        day = execution.finished_at.date()
        [line] = [
            line for line in archive.lines("output", day) if line["execution_id"] == execution.pk
        ]
        assert [tuple(c[:3]) for c in line["chunks"]] == before[execution.pk]
    for kept in (recent, running):
        assert kept.chunks.count() == 3 and not Execution.objects.get(pk=kept.pk).output_archived_at
    assert list(
        AuditEvent.objects.filter(verb="retention.archived").values_list("data__day", flat=True)
    ) == ["2026-11-09", "2026-11-10"]
    assert verify_chain().ok

    again = prune.run(3, archive, now=NOW)  # nothing new is due
    assert (again.executions, again.days) == (0, [])


def test_an_archived_line_holds_the_execution_and_its_chunks_as_stored(archive):
    """The database writes the line: times in ISO 8601 with their offset, the flag as a flag,
    every character of the output as it was, the chunks in order."""
    execution = finished(40, lines=0)
    Execution.objects.filter(pk=execution.pk).update(truncated=True, output_bytes=7)
    for seq, data in ((2, 'ü "q"\t\\\n'), (1, "\u2028\x1b[0m\n"), (3, "")):
        OutputChunk.objects.create(execution=execution, seq=seq, stream="stdout", data=data)
    OutputChunk.objects.update(created_at=NOW)
    OutputChunk.objects.filter(seq=2).update(created_at=NOW.replace(microsecond=500000))
    execution.refresh_from_db()

    [line] = [json.loads(line) for line in prune._lines([execution.pk])]

    assert line == {
        "execution_id": execution.pk,
        "action": "script.execute",
        "status": "succeeded",
        "requested_by": execution.requested_by,
        "created_at": execution.created_at.isoformat(),
        "finished_at": execution.finished_at.isoformat(),
        "output_bytes": 7,
        "truncated": True,
        "chunks": [
            [seq, stream, data, at.isoformat()]
            for seq, stream, data, at in execution.chunks.order_by("seq").values_list(
                "seq", "stream", "data", "created_at"
            )
        ],
    }
    assert [chunk[3][11:] for chunk in line["chunks"]] == [
        "12:00:00+00:00", "12:00:00.500000+00:00", "12:00:00+00:00"
    ]  # fmt: skip


def test_a_pass_stopped_half_way_loses_nothing(archive):
    first, second = finished(10.1), finished(10.2)
    # A pass wrote the day with the first, deleted its chunks and stopped.
    archive.write_day("output", first.finished_at.date(), prune._lines([first.pk]), prune.merged)
    first_chunks = chunks_of(first)
    OutputChunk.objects.filter(execution=first).delete()

    prune.run(3, archive, now=NOW)

    lines = {
        line["execution_id"]: line for line in archive.lines("output", first.finished_at.date())
    }
    assert set(lines) == {first.pk, second.pk}
    assert [tuple(c[:3]) for c in lines[first.pk]["chunks"]] == first_chunks


def test_an_archived_output_reads_back_and_a_corrupt_file_is_named(archive, capsys):
    execution = finished(10)
    prune.run(3, archive, now=NOW)
    call_command("retention", "--output", str(execution.pk))
    said = capsys.readouterr()
    assert said.out == f"line 0 of {execution.pk}\nline 2 of {execution.pk}\n"
    assert said.err == f"line 1 of {execution.pk}\n"
    call_command("retention", "--check")
    assert "archive intact: 1 files match their checksums" in capsys.readouterr().out

    path = archive.store.root / "output" / f"{execution.finished_at.date()}.jsonl.gz"
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(
        CommandError, match="does not match its checksum: the archive file is corrupt"
    ):
        call_command("retention", "--check")
    with pytest.raises(CommandError, match="corrupt"):
        call_command("retention", "--output", str(execution.pk))


def test_the_command_prunes_only_when_told_how_long_to_keep(archive, settings, capsys):
    settings.RETENTION_DAYS = 0
    with pytest.raises(
        CommandError, match="RETENTION_DAYS and RETENTION_AUDIT_DAYS are 0 .*pass --days N"
    ):
        call_command("retention")
    old = finished((timezone.now() - NOW).days + 40)
    with pytest.raises(CommandError, match="--days and --audit-days must be 0 or more"):
        call_command("retention", "--days", "-1")
    call_command("retention", "--days", "30")
    assert "1 executions, 3 chunks archived and removed" in capsys.readouterr().out
    assert not old.chunks.exists()
    with pytest.raises(CommandError, match="in the database, not archived"):
        call_command("retention", "--output", str(finished(0).pk))


def test_beat_runs_a_pass_an_hour_only_when_retention_is_set(archive, settings):
    app = SimpleNamespace(conf=SimpleNamespace())
    settings.RETENTION_DAYS = 0
    _schedule_periodic_tasks(app)
    assert "retain" not in app.conf.beat_schedule
    settings.RETENTION_DAYS = 30
    _schedule_periodic_tasks(app)
    assert app.conf.beat_schedule["retain"] == {"task": RETAIN, "schedule": 3600.0}


def test_archive_files_are_plain_gzip_json_lines(archive):
    execution = finished(10)
    prune.run(3, archive, now=NOW)
    path = archive.store.root / "output" / f"{execution.finished_at.date()}.jsonl.gz"
    with gzip.open(path, "rt") as handle:
        [line] = [json.loads(text) for text in handle]
    assert line["execution_id"] == execution.pk and line["status"] == "succeeded"
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_thousands_of_executions_over_several_days_are_each_archived_once(archive):
    made = Execution.objects.bulk_create(
        Execution(
            action="script.execute",
            command_hash="0" * 64,
            status=ExecutionStatus.SUCCEEDED,
            finished_at=NOW - timedelta(days=10, minutes=n),  # 2026-11-10 noon back to 11-07
        )
        for n in range(2500 * 2)
    )
    OutputChunk.objects.bulk_create(
        OutputChunk(execution=e, seq=1, stream="stdout", data="x\n") for e in made
    )
    summary = prune.run(3, archive, now=NOW)
    assert (summary.executions, summary.chunks) == (5000, 5000)
    days = [d["day"] for d in summary.days]
    assert days == ["2026-11-07", "2026-11-08", "2026-11-09", "2026-11-10"]
    archived = [
        line["execution_id"]
        for day in summary.days
        for line in archive.lines("output", datetime.fromisoformat(day["day"]).date())
    ]
    assert sorted(archived) == sorted(e.pk for e in made)  # each once
    assert not OutputChunk.objects.exists()
    assert not Execution.objects.filter(output_archived_at__isnull=True).exists()
