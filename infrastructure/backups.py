"""Backups of the embedded deployment: a consistent copy taken while Airlock runs, and its restore.

A backup is a directory (0700): ``airlock.sqlite3``, copied with SQLite's
online backup API (a consistent snapshot, whatever the writers do meanwhile),
the install's ``secret_key`` (without it the audit chain cannot be verified)
when it lives in the data directory, and ``manifest.json``: when, from where,
each file's SHA-256 and size, and the audit chain's last sequence number.
Restoring checks every checksum first, and refuses a data directory that
already holds a database with rows unless told to replace it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

DATABASE = "airlock.sqlite3"
KEY = "secret_key"
MANIFEST = "manifest.json"
FORMAT = 1


class BackupError(Exception):
    """A backup or a restore that cannot be made; the message says why."""


@dataclass(frozen=True)
class Made:
    directory: Path
    manifest: dict


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _empty_or_new(directory: Path) -> None:
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupError(f"{directory} exists and is not an empty directory")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)


def back_up(database: Path, data_dir: Path, destination: Path) -> Made:
    """Copy ``database`` (and ``data_dir``'s secret key) to the new directory ``destination``."""
    if not database.exists():
        raise BackupError(f"there is no database at {database}")
    _empty_or_new(destination)
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
    os.chmod(copy, 0o600)
    files = [copy]
    key = data_dir / KEY
    if key.exists():
        shutil.copyfile(key, destination / KEY)
        os.chmod(destination / KEY, 0o600)
        files.append(destination / KEY)
    manifest = {
        "format": FORMAT,
        "database": "sqlite",
        "created_at": datetime.now(UTC).isoformat(),
        "source": str(database),
        "audit_last_seq": last,
        "secret_key": "included" if key.exists() else "not included: SECRET_KEY is set apart",
        "files": {f.name: {"sha256": _sha256(f), "bytes": f.stat().st_size} for f in files},
    }
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    os.chmod(destination / MANIFEST, 0o600)
    return Made(destination, manifest)


def checked(source: Path) -> dict:
    """The backup's manifest, once every file it names matches its checksum."""
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source} is not a backup: no readable {MANIFEST} ({exc})") from None
    if manifest.get("format") != FORMAT or manifest.get("database") != "sqlite":
        raise BackupError(f"{source}: a backup of another kind (format {manifest.get('format')})")
    for name, expected in manifest["files"].items():
        path = source / name
        if not path.exists():
            raise BackupError(f"{source}: {name} is missing")
        if _sha256(path) != expected["sha256"]:
            raise BackupError(f"{source}: {name} does not match its checksum")
    return manifest


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
    manifest = checked(source)
    if _holds_rows(database) and not replace:
        raise BackupError(
            f"{database} already holds data; restore into an empty data directory, or pass "
            "--replace to overwrite it (stop Airlock first)"
        )
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        stale.unlink(missing_ok=True)
    shutil.copyfile(source / DATABASE, database)
    os.chmod(database, 0o600)
    if KEY in manifest["files"]:
        shutil.copyfile(source / KEY, data_dir / KEY)
        os.chmod(data_dir / KEY, 0o600)
    return manifest
