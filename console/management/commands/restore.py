"""Restore a backup made by ``manage.py backup`` into this deployment's database.

manage.py restore SRC              into an empty data directory or database (checksums first)
manage.py restore SRC --replace    over a database that holds data (stop Airlock first)
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from infrastructure.backups import deployments
from infrastructure.backups.manifest import BackupError


class Command(BaseCommand):
    help = "Restore a backup into an empty data directory or database (checksums checked first)."

    def add_arguments(self, parser):
        parser.add_argument("source", help="a directory made by manage.py backup")
        parser.add_argument(
            "--replace", action="store_true", help="overwrite a database that holds data"
        )

    def handle(self, *args, source: str, replace: bool, **options):
        try:
            manifest = deployments.restore(Path(source), replace)
        except BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"restored {source} (taken {manifest['created_at']}, audit chain up to "
            f"#{manifest['audit_last_seq']}) into this deployment's {manifest['database']} database"
        )
