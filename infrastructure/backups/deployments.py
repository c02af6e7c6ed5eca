"""Back up, restore and verify the deployment in force, whichever database it runs on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings

from . import postgres, sqlite
from .manifest import BackupError


def _database() -> tuple[str, dict]:
    database = settings.DATABASES["default"]
    engine = database["ENGINE"]
    if engine == "infrastructure.sqlite":
        return sqlite.KIND, database
    if engine in ("infrastructure.postgres", "django.db.backends.postgresql"):
        return postgres.KIND, database
    raise BackupError(f"no backup for a database of {engine}")


def back_up(destination: Path) -> dict:
    """A consistent copy of the database (and the key, embedded) into the new ``destination``."""
    kind, database = _database()
    if kind == sqlite.KIND:
        return sqlite.back_up(Path(database["NAME"]), Path(settings.DATA_DIR), destination)
    return postgres.back_up(database, destination)


def restore(source: Path, replace: bool = False) -> dict:
    """Put the backup ``source`` in place of this deployment's (empty, or ``replace``) database."""
    kind, database = _database()
    if kind == sqlite.KIND:
        return sqlite.restore(source, Path(database["NAME"]), Path(settings.DATA_DIR), replace)
    return postgres.restore(source, database, replace)


def verify(source: Path) -> str:
    """Restore ``source`` into a scratch place and verify the audit chain there: what it said."""
    kind, database = _database()
    env = {k: v for k, v in os.environ.items() if k not in ("SQLITE_PATH", "DATABASE_URL")}
    if kind == sqlite.KIND:
        with tempfile.TemporaryDirectory(prefix="airlock-verify-") as scratch:
            env["AIRLOCK_DATA_DIR"] = scratch
            _manage(env, "restore", str(source))
            said = _manage(env, "verify_audit")
    else:
        with postgres.scratch_database(database) as name:
            postgres.restore(source, database, name=name)
            env["DATABASE_URL"] = postgres.url(database, name)
            env.setdefault("SECRET_KEY", settings.SECRET_KEY)
            said = _manage(env, "verify_audit")
    return f"verified: restored into a scratch {'data directory' if kind == 'sqlite' else 'database'}; {said}"


def _manage(env: dict, *step: str) -> str:
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    done = subprocess.run([*manage, *step], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()[-1:]
        raise BackupError(f"the backup did not verify ({' '.join(step)}): {said}")
    return done.stdout.strip()
