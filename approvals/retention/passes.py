"""The whole retention pass, in its order: output, then proposals, then audit records.

Output first, since a proposal leaves only once its execution's output has;
audit records last, so that the records of this pass's own days are in the
database when the next pass looks. Each part says what it moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

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


def run(keep: Keep, archive: Archive, now: datetime | None = None) -> list[str]:
    now = now or timezone.now()
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
        said.append(
            f"audit records before {done.cutoff:%Y-%m-%d}: {done.records} moved to the archive "
            f"(the chain continues from #{audit_archive.archived_through()[0]})"
        )
    return said
