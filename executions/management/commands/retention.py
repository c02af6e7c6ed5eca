"""Retention of execution output: a pass now, the archive checked, an archived output read back.

manage.py retention                 archive and remove the output of executions that
                                    finished before midnight RETENTION_DAYS days ago
manage.py retention --days N        the same with N days (0: every day before today)
manage.py retention --check         check every archive file against its checksum
manage.py retention --output ID     print the archived output of execution ID
"""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from executions.models import Execution
from executions.retention import prune
from executions.retention.archive import Archive, ArchiveError


class Command(BaseCommand):
    help = "Archive and remove old execution output; check the archive; read an output back."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, help="keep this many days (default RETENTION_DAYS)")
        parser.add_argument("--check", action="store_true", help="check the archive's checksums")
        parser.add_argument("--output", type=int, metavar="ID", help="print an archived output")

    def handle(self, *args, days: int | None, check: bool, output: int | None, **options):
        archive = Archive(Path(settings.RETENTION_ARCHIVE_DIR))
        try:
            if check:
                return self._check(archive)
            if output is not None:
                return self._output(archive, output)
            return self._run(archive, days)
        except ArchiveError as error:
            raise CommandError(str(error)) from None

    def _run(self, archive: Archive, days: int | None) -> None:
        if days is None:
            days = settings.RETENTION_DAYS
            if not days:
                raise CommandError(
                    "RETENTION_DAYS is 0 (keep everything): pass --days N to prune now"
                )
        if days < 0:
            raise CommandError("--days must be 0 or more")
        summary = prune.run(days, archive)
        for day in summary.days:
            self.stdout.write(
                f"{day['day']}: {day['executions']} executions, {day['chunks']} output chunks "
                "archived and removed"
            )
        self.stdout.write(
            f"retention: output of executions finished before {summary.cutoff:%Y-%m-%d} "
            f"({summary.executions} executions, {summary.chunks} chunks) in {archive.root}; "
            f"{summary.seconds:.1f} s"
        )

    def _check(self, archive: Archive) -> None:
        files, problems = archive.verify()
        if problems:
            raise CommandError("; ".join(problems))
        self.stdout.write(f"archive intact: {files} files match their checksums")

    def _output(self, archive: Archive, pk: int) -> None:
        execution = Execution.objects.filter(pk=pk).first()
        if execution is None:
            raise CommandError(f"there is no execution {pk}")
        if execution.output_archived_at is None:
            raise CommandError(f"execution {pk}'s output is in the database, not archived")
        day = execution.finished_at.astimezone(UTC).date()
        for line in archive.lines(day):
            if line["execution_id"] == pk:
                for _, stream, data, _ in line["chunks"]:
                    (self.stdout if stream == "stdout" else self.stderr).write(data, ending="")
                return
        raise CommandError(f"execution {pk} is not in {archive.name(day)}")
