"""The embedded database's backup: SQLite's online backup API, in one read transaction."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from infrastructure.text_index import sqlite as text_index

from .manifest import KEY, BackupError, checked, empty_or_new, write

DATABASE = "airlock.sqlite3"
KIND = "sqlite"


def back_up(database: Path, data_dir: Path, destination: Path) -> dict:
    """Copy ``database`` (and ``data_dir``'s secret key) to the new directory ``destination``."""
    if not database.exists():
        raise BackupError(f"there is no database at {database}")
    empty_or_new(destination)
    copy = destination / DATABASE
    source = sqlite3.connect(database, timeout=30)
    target = sqlite3.connect(copy)
    try:
        # In one step: one read transaction, which in WAL mode stalls no writer (copied in
        # steps, a write between two would start the copy again, and again).
        source.backup(target)
        last = target.execute("select coalesce(max(seq), 0) from audit_auditevent").fetchone()[0]
    finally:
        target.close()
        source.close()
    files = [copy]
    key = data_dir / KEY
    if key.exists():
        shutil.copyfile(key, destination / KEY)
        files.append(destination / KEY)
    return write(
        destination,
        KIND,
        files,
        source=str(database),
        audit_last_seq=last,
        secret_key="included" if key.exists() else "not included: SECRET_KEY is set apart",
    )


def _holds_rows(database: Path) -> bool:
    if not database.exists():
        return False
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True)
    try:
        tables = [
            name
            for (name,) in connection.execute(
                "select name from sqlite_master where type = 'table' and name not like 'sqlite_%'"
                " and name not like 'django_%'"
            )
        ]
        return any(connection.execute(f'select 1 from "{t}" limit 1').fetchone() for t in tables)
    finally:
        connection.close()


def restore(source: Path, database: Path, data_dir: Path, replace: bool = False) -> dict:
    """Put the backup ``source`` in place as ``database`` (and ``data_dir``'s key); its manifest."""
    manifest = checked(source, KIND)
    if _holds_rows(database) and not replace:
        raise BackupError(
            f"{database} already holds data; restore into an empty data directory, or pass "
            "--replace to overwrite it (stop Airlock first)"
        )
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        stale.unlink(missing_ok=True)
    for stale in text_index.index_files(str(database)):  # built again from the rows
        Path(stale).unlink(missing_ok=True)
    shutil.copyfile(source / DATABASE, database)
    os.chmod(database, 0o600)
    if KEY in manifest["files"]:
        shutil.copyfile(source / KEY, data_dir / KEY)
        os.chmod(data_dir / KEY, 0o600)
    return manifest
