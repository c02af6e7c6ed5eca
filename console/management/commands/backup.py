"""A consistent backup of the deployment, taken while it runs.

manage.py backup DEST            copy the database into the new directory DEST, with a
                                 manifest of checksums: SQLite's online backup and the
                                 secret key (embedded), or pg_dump of one snapshot (PostgreSQL)
manage.py backup DEST --verify   then restore it into a scratch data directory or database
                                 and check the audit chain there (verify_audit)
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from infrastructure.backups import deployments
from infrastructure.backups.manifest import BackupError


class Command(BaseCommand):
    help = "Back up the database (and the embedded key), consistently, while Airlock runs."

    def add_arguments(self, parser):
        parser.add_argument("destination", help="a new (or empty) directory")
        parser.add_argument(
            "--verify",
            action="store_true",
            help="restore the backup into a scratch place and verify its audit chain",
        )

    def handle(self, *args, destination: str, verify: bool, **options):
        try:
            manifest = deployments.back_up(Path(destination))
            self.stdout.write(
                f"backed up to {destination}: {len(manifest['files'])} file(s), audit chain up "
                f"to #{manifest['audit_last_seq']}; secret key {manifest['secret_key']}"
            )
            if verify:
                self.stdout.write(deployments.verify(Path(destination)))
        except BackupError as exc:
            raise CommandError(str(exc)) from None
