"""Scheduled backups: one into ``BACKUP_DIR`` every ``BACKUP_EVERY_HOURS``, the newest N kept.

Each backup is a directory ``airlock-YYYYMMDD-HHMMSS`` there; with
``BACKUP_VERIFY`` it is restored into a scratch place and its audit chain
checked before it counts. One that fails is renamed ``…-failed`` and kept
for a look until it is older than every kept one.
"""

from __future__ import annotations

import logging
import shutil
from datetime import UTC, datetime
from pathlib import Path

from . import deployments
from .manifest import MANIFEST, BackupError

log = logging.getLogger(__name__)
PREFIX = "airlock-"
FAILED = "-failed"


def run(directory: Path, keep: int, verify: bool = True) -> Path:
    """Take one backup into ``directory`` and prune; the new backup's path."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    target = directory / f"{PREFIX}{datetime.now(UTC):%Y%m%d-%H%M%S-%f}"
    try:
        deployments.back_up(target)
        if verify:
            deployments.verify(target)
    except BackupError:
        if target.exists():
            target.rename(target.with_name(target.name + FAILED))
        raise
    prune(directory, keep)
    return target


def prune(directory: Path, keep: int) -> list[Path]:
    """Remove all but the newest ``keep`` good backups (and failed ones older than those)."""
    found = sorted(
        (path for path in directory.iterdir() if path.is_dir() and path.name.startswith(PREFIX)),
        key=lambda path: path.name.removesuffix(FAILED),
        reverse=True,
    )
    good = [p for p in found if not p.name.endswith(FAILED) and (p / MANIFEST).exists()]
    if len(good) <= keep:
        return []
    oldest_kept = good[keep - 1].name
    removed = [
        path
        for path in found
        if path.name.removesuffix(FAILED) < oldest_kept and path not in good[:keep]
    ]
    for path in removed:
        shutil.rmtree(path)
        log.info("removed the old backup %s", path)
    return removed
