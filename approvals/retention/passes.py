"""The whole retention pass, in its order: output, then proposals, then audit records.

Output first, since a proposal leaves only once its execution's output has;
audit records last, so that the records of this pass's own days are in the
database when the next pass looks. Each part says what it moved.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.core.cache import cache
from django.utils import timezone

from audit import archive as audit_archive
from executions.retention import prune
from infrastructure.archive import Archive

from . import proposals


@dataclass(frozen=True)
class Keep:
    """Days kept in the database of each kind (None: kept forever; 0: none before today)."""

    output: int | None
    proposals: int | None
    audit: int | None


class Busy(Exception):
    """Another pass is running (a worker's, or a command's)."""


# One pass at a time over the whole deployment: two would write one day's file and the
# manifest at once. Held in the shared cache, for at most as long as a pass may take.
LOCK, LOCK_SECONDS = "retention:pass", 6 * 3600


def running() -> bool:
    """Whether a pass is under way (work that can wait, such as the search index's, waits)."""
    return cache.get(LOCK) is not None


def run(keep: Keep, archive: Archive, now: datetime | None = None) -> list[str]:
    token = uuid.uuid4().hex
    if not cache.add(LOCK, token, LOCK_SECONDS):
        raise Busy("another retention pass is running; try again when it has finished")
    try:
        return _run(keep, archive, now or timezone.now())
    finally:
        if cache.get(LOCK) == token:
            cache.delete(LOCK)


def _run(keep: Keep, archive: Archive, now: datetime) -> list[str]:
    said = []
    if keep.output is not None:
        done = prune.run(keep.output, archive, now=now)
        said.append(
            f"output of executions finished before {done.cutoff:%Y-%m-%d}: {done.executions} "
            f"executions, {done.chunks} chunks archived and removed"
        )
    if keep.proposals is not None:
        done = proposals.run(keep.proposals, archive, now)
        said.append(
            f"proposals decided before {done.cutoff:%Y-%m-%d}: {done.proposals} archived and removed"
        )
    if keep.audit is not None:
        done = audit_archive.run(keep.audit, archive, now)
        through = audit_archive.archived_through()[0]
        where = f"the database's part now starts after #{through}" if through else "none so far"
        said.append(
            f"audit records before {done.cutoff:%Y-%m-%d}: {done.records} moved to the archive "
            f"({where})"
        )
    return said
