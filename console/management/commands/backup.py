"""A consistent backup of the embedded deployment, taken while it runs.

    manage.py backup DEST            copy the database (SQLite's online backup), the secret key
                                     and a manifest with checksums into the new directory DEST
    manage.py backup DEST --verify   then restore it into a scratch data directory and check
                                     the audit chain there (verify_audit)

The scale deployment's PostgreSQL is backed up with ``pg_dump`` (see the
operators' guide); this command says so rather than copy half of it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from infrastructure import backups


class Command(BaseCommand):
    help = "Back up the embedded deployment's database and key, consistently, while it runs."

    def add_arguments(self, parser):
        parser.add_argument("destination", help="a new (or empty) directory")
        parser.add_argument(
            "--verify",
            action="store_true",
            help="restore the backup into a scratch data directory and verify its audit chain",
        )

    def handle(self, *args, destination: str, verify: bool, **options):
        database = settings.DATABASES["default"]
        if database["ENGINE"] != "infrastructure.sqlite":
            raise CommandError(
                "this deployment runs on PostgreSQL: back it up with pg_dump (and keep "
                "SECRET_KEY); see docs/guides/operators.md"
            )
        try:
            made = backups.back_up(
                Path(database["NAME"]), Path(settings.DATA_DIR), Path(destination)
            )
        except backups.BackupError as exc:
            raise CommandError(str(exc)) from None
        manifest = made.manifest
        self.stdout.write(
            f"backed up to {made.directory}: {len(manifest['files'])} file(s), audit chain up to "
            f"#{manifest['audit_last_seq']}; secret key {manifest['secret_key']}"
        )
        if verify:
            self.stdout.write(verified(made.directory))


def verified(source: Path) -> str:
    """Restore ``source`` into a scratch data directory and verify the audit chain there."""
    with tempfile.TemporaryDirectory(prefix="airlock-verify-") as scratch:
        env = {**os.environ, "AIRLOCK_DATA_DIR": scratch}
        for variable in ("SQLITE_PATH", "DATABASE_URL"):
            env.pop(variable, None)
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        for step in (["restore", str(source)], ["verify_audit"]):
            done = subprocess.run([*manage, *step], env=env, capture_output=True, text=True)
            if done.returncode != 0:
                said = (done.stderr or done.stdout).strip().splitlines()[-1:]
                raise CommandError(f"the backup did not verify ({' '.join(step)}): {said}")
        return f"verified: restored into a scratch data directory; {done.stdout.strip()}"
