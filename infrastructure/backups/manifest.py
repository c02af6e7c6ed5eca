"""A backup's manifest: what it holds, with checksums, checked before anything is restored."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

from infrastructure.files import sha256_of

MANIFEST = "manifest.json"
KEY = "secret_key"
FORMAT = 1


class BackupError(Exception):
    """A backup or a restore that cannot be made; the message says why."""


def empty_or_new(directory: Path) -> None:
    """Make ``directory`` (0700), refusing one that holds anything."""
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise BackupError(f"{directory} exists and is not an empty directory")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(directory, 0o700)


def write(destination: Path, database: str, files: list[Path], **fields) -> dict:
    """Write the manifest of ``files`` (all in ``destination``) and return it."""
    for path in files:
        os.chmod(path, 0o600)
    manifest = {
        "format": FORMAT,
        "database": database,
        "created_at": datetime.now(UTC).isoformat(),
        **fields,
        "files": {f.name: {"sha256": sha256_of(f), "bytes": f.stat().st_size} for f in files},
    }
    (destination / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    os.chmod(destination / MANIFEST, 0o600)
    return manifest


def checked(source: Path, database: str) -> dict:
    """The backup's manifest, once it is one of ``database`` and every file matches its checksum."""
    try:
        manifest = json.loads((source / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{source} is not a backup: no readable {MANIFEST} ({exc})") from None
    if manifest.get("format") != FORMAT:
        raise BackupError(f"{source}: a backup of another format ({manifest.get('format')})")
    if manifest.get("database") != database:
        raise BackupError(
            f"{source} is a backup of {manifest.get('database')}, and this deployment runs on "
            f"{database}"
        )
    for name, expected in manifest["files"].items():
        path = source / name
        if not path.exists():
            raise BackupError(f"{source}: {name} is missing")
        if sha256_of(path) != expected["sha256"]:
            raise BackupError(f"{source}: {name} does not match its checksum")
    return manifest
