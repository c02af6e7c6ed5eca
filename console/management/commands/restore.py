"""Restore a backup made by ``manage.py backup`` into this install's data directory.

manage.py restore SRC              into an empty data directory (checksums checked first)
manage.py restore SRC --replace    over an existing database (stop Airlock first)
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from infrastructure import backups


class Command(BaseCommand):
    help = "Restore a backup of the embedded deployment (checksums checked first)."

    def add_arguments(self, parser):
        parser.add_argument("source", help="a directory made by manage.py backup")
        parser.add_argument(
            "--replace", action="store_true", help="overwrite a database that holds data"
        )

    def handle(self, *args, source: str, replace: bool, **options):
        database = settings.DATABASES["default"]
        if database["ENGINE"] != "infrastructure.sqlite":
            raise CommandError("this deployment runs on PostgreSQL: restore with pg_restore")
        try:
            manifest = backups.restore(
                Path(source), Path(database["NAME"]), Path(settings.DATA_DIR), replace
            )
        except backups.BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"restored {source} (taken {manifest['created_at']}, audit chain up to "
            f"#{manifest['audit_last_seq']}) into {settings.DATA_DIR}"
        )
