"""Finished proposals archived a file per day proposed (``proposals/YYYY-MM-DD.jsonl.gz``), then deleted.

Due: a proposal decided (approved, rejected, denied, expired) before the
cutoff whose execution, if it had one, finished and had its output archived
(``executions.retention`` runs first). A line holds the proposal's row, its
agent's name, its decisions and its execution's row: what its page showed,
written by the database a few hundred proposals at a time
(``infrastructure.archive.rows``: no model, no Python per value).
Deleted ``PER_BATCH`` proposals per transaction (with their decisions and
review links, then their executions), a statement per table
(``infrastructure.archive.delete_set``: no row is read to be deleted), after
the day's file is stored, a step behind (``StepBehind``: while the next
day's file is written); a pass that stops half-way writes the day again
with what is left.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cache, partial

from django.db import connection, transaction
from django.db.models import Q

from approvals.choices import TERMINAL
from approvals.models import Decision, Proposal
from approvals.review.overview import forget_tallies
from audit.services import record
from executions.models import Execution
from infrastructure.archive import (
    Archive,
    Columns,
    StepBehind,
    as_text,
    cutoff,
    days_of,
    delete_set,
    iso_time,
    json_object,
    json_row,
    json_rows,
    lines,
)

KIND = "proposals"
PER_BATCH = 200  # proposals per delete transaction, with what refers to them (about 10 ms)
PER_READ = 500  # proposals per read of the lines


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
    # By the day proposed, each day found along the created_at index (decided_at has none;
    # with the status in the read, SQLite would take its status index and sort what it
    # finds, for every day), its due proposals read along the status index.
    with StepBehind() as behind:
        for start in days_of(Proposal.objects.all(), "created_at", summary.cutoff):
            rows = due(summary.cutoff).filter(
                created_at__gte=start, created_at__lt=start + timedelta(days=1)
            )
            rows = list(rows.order_by("pk").values_list("pk", "execution_id"))
            if rows:
                entry = archive.write_day(
                    KIND, start.date(), _lines([pk for pk, _ in rows]), _by_id
                )
                behind.submit(partial(_remove, summary, start.date(), rows, entry))
    return summary


def _remove(summary: Summary, day: date, rows: list[tuple[int, int | None]], entry: dict) -> None:
    """The day's proposals deleted once its file is stored, with their executions."""
    for first in range(0, len(rows), PER_BATCH):
        batch = rows[first : first + PER_BATCH]
        with transaction.atomic():
            delete_set(Proposal, [pk for pk, _ in batch])
            delete_set(Execution, [execution for _, execution in batch if execution])
    forget_tallies()  # the overview's settled days lost proposals
    with transaction.atomic():
        record("system", "retention.archived", None, kind=KIND, day=day.isoformat(),
               proposals=len(rows), file=entry["file"], sha256=entry["sha256"])  # fmt: skip
    summary.days.append({"day": day.isoformat(), "proposals": len(rows)})
    summary.proposals += len(rows)


def _lines(ids: list[int]) -> Iterator[str]:
    """Each proposal's archive line, read a few hundred at a time."""
    return lines(_sql(), ids, PER_READ)


@cache
def _sql() -> str:
    """The read of a batch's lines, naming its proposals as ``{keys}``: each proposal's row,
    its agent's name, its decisions (with the reviewer's name) and its execution's row."""
    quote = connection.ops.quote_name
    agents = Proposal._meta.get_field("agent").related_model._meta.db_table
    users = Decision._meta.get_field("reviewer").related_model._meta.db_table
    decision = json_object([
        ("reviewer__username", f"u.{quote('username')}"),
        ("kind", "d.kind"),
        ("comment", "d.comment"),
        ("created_at", iso_time("d.created_at")),
    ])  # fmt: skip
    decisions = json_rows(
        decision,
        f"FROM {quote(Decision._meta.db_table)} d "
        f"LEFT JOIN {quote(users)} u ON u.id = d.reviewer_id WHERE d.proposal_id = p.id",
        order="d.id",
    )
    execution = json_row(
        f"SELECT {Columns(Execution).object('e')} FROM {quote(Execution._meta.db_table)} e "
        "WHERE e.id = p.execution_id"
    )
    line = Columns(Proposal).object(
        "p", [("agent", f"a.{quote('name')}"), ("decisions", decisions), ("execution", execution)]
    )
    return (
        f"SELECT {as_text(line)} FROM {quote(Proposal._meta.db_table)} p "
        f"JOIN {quote(agents)} a ON a.id = p.agent_id WHERE p.id IN ({{keys}}) ORDER BY p.id"
    )


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
