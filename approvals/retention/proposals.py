"""Finished proposals archived a file per day proposed (``proposals/YYYY-MM-DD.jsonl.gz``), then deleted.

Due: a proposal decided (approved, rejected, denied, expired) before the
cutoff whose execution, if it had one, finished and had its output archived
(``executions.retention`` runs first). A line holds the proposal's row, its
agent's name, its decisions and its execution's row: what its page showed.
Deleted ``PER_BATCH`` proposals per transaction (with their decisions and
review links, then their executions), a statement per table
(``infrastructure.archive.delete_set``: no row is read to be deleted), after
the day's file is stored; a pass that stops half-way writes the day again
with what is left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import transaction
from django.db.models import Q

from approvals.choices import TERMINAL
from approvals.models import Decision, Proposal
from approvals.review.overview import forget_tallies
from audit.services import record
from executions.models import Execution
from infrastructure.archive import Archive, cutoff, delete_set

KIND = "proposals"
PER_BATCH = 50  # proposals per delete transaction, with what refers to them


@dataclass
class Summary:
    cutoff: datetime
    days: list[dict] = field(default_factory=list)
    proposals: int = 0


def due(before: datetime):
    return Proposal.objects.filter(status__in=TERMINAL, decided_at__lt=before).filter(
        Q(execution__isnull=True)
        | Q(execution__output_archived_at__isnull=False, execution__finished_at__lt=before)
    )


def run(days: int, archive: Archive, now: datetime) -> Summary:
    summary = Summary(cutoff=cutoff(days, now))
    # By the day proposed (read along the created_at index: decided_at has none), the
    # days found in one read rather than one read per day.
    for start in due(summary.cutoff).datetimes("created_at", "day", tzinfo=UTC):
        day = start.date()
        ids = due(summary.cutoff).filter(
            created_at__gte=start, created_at__lt=start + timedelta(days=1)
        )
        ids = list(ids.order_by("pk").values_list("pk", flat=True))
        entry = archive.write_day(KIND, day, _lines(ids), _by_id)
        for first in range(0, len(ids), PER_BATCH):
            batch = ids[first : first + PER_BATCH]
            with transaction.atomic():
                executions = list(
                    Proposal.objects.filter(pk__in=batch, execution__isnull=False).values_list(
                        "execution_id", flat=True
                    )
                )
                delete_set(Proposal, batch)
                delete_set(Execution, executions)
        forget_tallies()  # the overview's settled days lost proposals
        with transaction.atomic():
            record("system", "retention.archived", None, kind=KIND, day=day.isoformat(),
                   proposals=len(ids), file=entry["file"], sha256=entry["sha256"])  # fmt: skip
        summary.days.append({"day": day.isoformat(), "proposals": len(ids)})
        summary.proposals += len(ids)
    return summary


def _plain(row: dict) -> dict:
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in row.items()
    }


def _lines(ids: list[int]) -> Iterator[dict]:
    for first in range(0, len(ids), PER_BATCH):
        batch = ids[first : first + PER_BATCH]
        proposals = Proposal.objects.filter(pk__in=batch).order_by("pk")
        agents = dict(proposals.values_list("pk", "agent__name"))
        decisions: dict[int, list] = {pk: [] for pk in batch}
        for row in (
            Decision.objects.filter(proposal_id__in=batch)
            .order_by("pk")
            .values("proposal_id", "reviewer__username", "kind", "comment", "created_at")
        ):
            decisions[row.pop("proposal_id")].append(_plain(row))
        rows = list(proposals.values())
        executions = {
            row["id"]: _plain(row)
            for row in Execution.objects.filter(
                pk__in=[r["execution_id"] for r in rows if r["execution_id"]]
            ).values()
        }
        for row in rows:
            yield {
                **_plain(row),
                "agent": agents[row["id"]],
                "decisions": decisions[row["id"]],
                "execution": executions.get(row["execution_id"]),
            }


def _by_id(kept: list[dict], new) -> Iterator[dict]:
    """A day written again: the proposals the file held, and the new ones, each once."""
    lines = {line["id"]: line for line in kept}
    lines.update((line["id"], line) for line in new)
    return iter(lines[pk] for pk in sorted(lines))


def archived(archive: Archive, proposal: int | None = None, execution: int | None = None):
    """The archived line of a proposal, or of the one that ran ``execution`` (searched day by
    day, newest first); None when the archive has none."""
    for day in reversed(archive.days(KIND)):
        for line in archive.lines(KIND, day):
            if line["id"] == proposal or (execution and line["execution_id"] == execution):
                return line
    return None
