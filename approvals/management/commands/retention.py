"""Retention: a pass now, the archive checked, archived output or proposals read back.

manage.py retention                  archive and remove what the RETENTION_*_DAYS settings say:
                                     output, then finished proposals, then audit records
manage.py retention --days N         keep N days of output and proposals this time (0: every
                                     day before today); --audit-days N the same for audit records
manage.py retention --check          check every archive file against its checksum
manage.py retention --output ID      print the archived output of execution ID
manage.py retention --proposal ID    print archived proposal ID (its decisions, its execution)
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from approvals.models import Proposal
from approvals.retention import passes, proposals
from approvals.retention.tasks import configured
from executions.models import Execution
from executions.retention import prune
from infrastructure.archive import Archive, ArchiveError
from infrastructure.archive.store import StoreError


class Command(BaseCommand):
    help = (
        "Archive and remove old output, proposals and audit records; check the archive; read back."
    )

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, help="keep this many days of output and proposals")
        parser.add_argument("--audit-days", type=int, help="keep this many days of audit records")
        parser.add_argument("--check", action="store_true", help="check the archive's checksums")
        parser.add_argument("--output", type=int, metavar="ID", help="print an archived output")
        parser.add_argument("--proposal", type=int, metavar="ID", help="print an archived proposal")

    def handle(self, *args, days, audit_days, check, output, proposal, **options):
        try:
            archive = Archive(settings.RETENTION_ARCHIVE)
            if check:
                return self._check(archive)
            if output is not None:
                return self._output(archive, output)
            if proposal is not None:
                return self._proposal(archive, proposal)
            return self._run(archive, days, audit_days)
        except (ArchiveError, StoreError) as error:
            raise CommandError(str(error)) from None

    def _run(self, archive: Archive, days: int | None, audit_days: int | None) -> None:
        if (days or 0) < 0 or (audit_days or 0) < 0:
            raise CommandError("--days and --audit-days must be 0 or more")
        keep = configured()
        if days is not None:
            keep = replace(keep, output=days, proposals=days)
        if audit_days is not None:
            keep = replace(keep, audit=audit_days)
        if keep == passes.Keep(None, None, None):
            raise CommandError(
                "RETENTION_DAYS and RETENTION_AUDIT_DAYS are 0 (keep everything): "
                "pass --days N or --audit-days N to prune now"
            )
        try:
            said = passes.run(keep, archive)
        except passes.Busy as error:
            raise CommandError(str(error)) from None
        for line in said:
            self.stdout.write(line)
        self.stdout.write(f"retention: archive {archive.location}")

    def _check(self, archive: Archive) -> None:
        files, problems = archive.verify()
        if problems:
            raise CommandError("; ".join(problems))
        self.stdout.write(f"archive intact: {files} files match their checksums")

    def _output(self, archive: Archive, pk: int) -> None:
        execution = Execution.objects.filter(pk=pk).first()
        if execution is None:  # left with its proposal: the proposal's line says when it ended
            line = proposals.archived(archive, execution=pk)
            if line is None:
                raise CommandError(f"there is no execution {pk}")
            finished = datetime.fromisoformat(line["execution"]["finished_at"])
            execution = Execution(pk=pk, finished_at=finished)
        elif execution.output_archived_at is None:
            raise CommandError(f"execution {pk}'s output is in the database, not archived")
        line = prune.output_of(archive, execution)
        if line is None:
            raise CommandError(f"execution {pk} is not in the archive")
        for _, stream, data, _ in line["chunks"]:
            (self.stdout if stream == "stdout" else self.stderr).write(data, ending="")

    def _proposal(self, archive: Archive, pk: int) -> None:
        line = proposals.archived(archive, proposal=pk)
        if line is None:
            if Proposal.objects.filter(pk=pk).exists():
                raise CommandError(f"proposal {pk} is in the database, not archived")
            raise CommandError(f"there is no proposal {pk}")
        self.stdout.write(json.dumps(line, indent=1))
