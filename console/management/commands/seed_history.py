"""Seed a realistic history in bulk: what Airlock holds after a year of use, in minutes.

    manage.py seed_history 1000000 [--days 365] [--chunks 3] [--add]

N proposals spread evenly over the last ``--days`` days by three agents and
three kinds of action: 1 % left unreviewed (waiting if proposed within the
review timeout, an hour; expired by the sweep before that), 70 % approved with an execution
that ran (9 in 10 succeeded) and its output (``--chunks`` chunks), 15 %
rejected by a reviewer, 10 % expired, 4 % denied by policy; a reviewer's
decision for each one reviewed; and the audit records such a history makes
(submitted, decided, finished), chained and keyed as every record is, so
that ``verify_audit`` passes; the proposals indexed for search, as the
periodic task keeps them. Written in batches of 5,000 proposals, each in
one transaction that holds the audit chain's append lock, one ``executemany``
per table (about 10,000 proposals a second on SQLite). Refuses a database
that already holds proposals unless ``--add``.
"""

from __future__ import annotations

import time
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.core.management.color import no_style
from django.db import connection, transaction
from django.db.models import Max
from django.utils import timezone

from approvals.choices import ProposalStatus
from approvals.models import Agent, Decision, Proposal
from approvals.review.overview import forget_tallies
from audit.models import AuditEvent
from audit.services import _CHAIN_END, GENESIS, _digester
from executions.models import Execution, OutputChunk
from infrastructure.appends import read_under_append_lock

BATCH = 5000
ACTIONS = [
    (
        "script.execute",
        {"language": "python", "code": "print('report')"},
        "python: print('report')",
    ),
    ("docker.inspect_container", {"container": "web-1"}, "inspect container web-1"),
    ("host.service_status", {"service_name": "nginx"}, "status of nginx"),
]
# Of every 100 proposals: (status, how many).
SHARES = [
    (ProposalStatus.PENDING, 1),
    (ProposalStatus.APPROVED, 70),
    (ProposalStatus.REJECTED, 15),
    (ProposalStatus.EXPIRED, 10),
    (ProposalStatus.DENIED, 4),
]
STATUS_OF = [status for status, share in SHARES for _ in range(share)]
REVIEW_TIMEOUT = timedelta(minutes=60)  # the policy's default
SEEDED = [Execution, OutputChunk, Proposal, Decision, AuditEvent]


class Command(BaseCommand):
    help = "Seed a realistic history of N proposals in bulk (to measure Airlock at scale)."

    def add_arguments(self, parser):
        parser.add_argument("count", type=int)
        parser.add_argument("--days", type=int, default=365)
        parser.add_argument("--chunks", type=int, default=3, help="output chunks per execution")
        parser.add_argument("--add", action="store_true", help="add to proposals already there")

    def handle(self, *args, count: int, days: int, chunks: int, add: bool, **options):
        if count < 1 or days < 1 or chunks < 0:
            raise CommandError("count and --days must be 1 or more, --chunks 0 or more")
        if Proposal.objects.exists() and not add:
            raise CommandError("this database already holds proposals: pass --add to add more")
        agents = [
            Agent.objects.get_or_create(
                name=f"seed-agent-{n}",
                defaults={"capabilities": ["*"], "token_hash": f"seed-{n}", "token_hint": "seed"},
            )[0]
            for n in range(3)
        ]
        reviewer = get_user_model().objects.get_or_create(username="seed-reviewer")[0]
        start = timezone.now() - timedelta(days=days)
        step = timedelta(seconds=days * 86400 / count)
        started = time.monotonic()
        self._prepare()
        self.now = timezone.now()
        for first in range(0, count, BATCH):
            with transaction.atomic():
                self._chain_end()
                self._batch(first, min(first + BATCH, count), start, step, agents, reviewer, chunks)
            Proposal.text_index.catch_up()  # what the periodic task would have done since
            if (first // BATCH) % 20 == 19:
                self.stdout.write(f"{first + BATCH} proposals ({time.monotonic() - started:.0f} s)")
        with connection.cursor() as cursor:  # PostgreSQL's sequences past the ids given here
            for sql in connection.ops.sequence_reset_sql(no_style(), SEEDED):
                cursor.execute(sql)
            forget_tallies()  # the overview's settled days were written into
            if connection.vendor == "postgresql":  # what autovacuum would soon do: fresh statistics
                cursor.execute("ANALYZE")
        self.stdout.write(f"seeded {count} proposals in {time.monotonic() - started:.0f} s")

    def _prepare(self) -> None:
        """The statements, the JSON values (a few, each made once) and the ids to go on from."""
        json_of = AuditEvent._meta.get_field("data").get_db_prep_save
        self.json = {"reasons": json_of(["seeded"], connection)}
        for kind, (_, parameters, _) in enumerate(ACTIONS):
            self.json["parameters", kind] = json_of(parameters, connection)
            self.json["data", kind] = json_of({"action": ACTIONS[kind][0]}, connection)
        for denied in (False, True):
            path = {"step": "deny" if denied else "review"}
            self.json["path", denied] = json_of(path, connection)
        self.tables = (
            _Table(Execution, "id", "action", "parameters", "status", "command_hash",
                   "requested_by", "backend", "exit_code", "started_at", "finished_at",
                   "created_at", "output_bytes", "last_seq"),
            _Table(OutputChunk, "id", "execution", "seq", "stream", "data", "created_at"),
            _Table(Proposal, "id", "agent", "action", "parameters", "summary", "reason",
                   "status", "risk_score", "risk_reasons", "decision_path", "policy_version",
                   "approvals_count", "execution", "created_at", "expires_at", "decided_at",
                   "updated_at"),
            _Table(Decision, "id", "proposal", "reviewer", "kind", "created_at"),
        )  # fmt: skip
        self.audit = _Table(AuditEvent, "id", "seq", "created_at", "actor", "verb",
                            "object_type", "object_id", "data", "prev_hash", "hash")  # fmt: skip
        self.ids = {
            name: model.objects.aggregate(top=Max("pk"))["top"] or 0
            for name, model in (("execution", Execution), ("chunk", OutputChunk),
                                ("proposal", Proposal), ("decision", Decision),
                                ("audit", AuditEvent))
        }  # fmt: skip
        self.digest = _digester(settings.SECRET_KEY)

    def _chain_end(self) -> None:
        """The chain's end, read under its append lock (held until the batch commits)."""
        end = read_under_append_lock(_CHAIN_END)
        self.seq, self.prev = end[0] if end else (0, GENESIS)

    def _batch(self, first, last, start, step, agents, reviewer, chunks) -> None:
        """Rows of proposals ``first``..``last`` (and what they made), one statement per table."""
        ids = self.ids
        dt = connection.ops.adapt_datetimefield_value
        executions, outputs, proposals, decisions = self.tables
        for i in range(first, last):
            kind = i % 3 if i % 5 else 0
            action, parameters, summary = ACTIONS[kind]
            status = STATUS_OF[(i * 37) % 100]
            created = start + step * i
            expired = status == ProposalStatus.PENDING and created + REVIEW_TIMEOUT <= self.now
            if expired:  # past its review timeout: the sweep expired it
                status = ProposalStatus.EXPIRED
            agent = agents[i % 3]
            execution_id = None
            if status == ProposalStatus.APPROVED:
                execution_id = ids["execution"] = ids["execution"] + 1
                succeeded = bool(i % 10)
                finished = created + timedelta(seconds=2)
                executions.add(
                    execution_id, action, self.json[("parameters", kind)],
                    "succeeded" if succeeded else "failed", f"{i:064x}", f"agent:{agent.name}",
                    "local", 0 if succeeded else 1, dt(created + timedelta(seconds=1)),
                    dt(finished), dt(created), chunks * 24, chunks,
                )  # fmt: skip
                for n in range(chunks):
                    ids["chunk"] += 1
                    outputs.add(
                        ids["chunk"], execution_id, n + 1, "stdout", f"line {n} of run\n",
                        dt(finished),
                    )  # fmt: skip
            proposal_id = ids["proposal"] = ids["proposal"] + 1
            decided = None if status == ProposalStatus.PENDING else created + step / 2
            if expired:
                decided = created + REVIEW_TIMEOUT
            proposals.add(
                proposal_id, agent.pk, action, self.json[("parameters", kind)], summary,
                f"routine check {i}", status, (i * 7) % 11, self.json["reasons"],
                self.json[("path", status == ProposalStatus.DENIED)], 1,
                1 if status == ProposalStatus.APPROVED and i % 2 else 0, execution_id,
                dt(created), dt(created + timedelta(hours=1)), dt(decided), dt(created),
            )  # fmt: skip
            if status == ProposalStatus.REJECTED or (status == ProposalStatus.APPROVED and i % 2):
                ids["decision"] += 1
                kind_of = "reject" if status == ProposalStatus.REJECTED else "approve"
                decisions.add(ids["decision"], proposal_id, reviewer.pk, kind_of, dt(decided))
            said = [(f"agent:{agent.name}", "proposal.submitted", "proposal", proposal_id, created)]
            if decided is not None:
                said.append(("user:seed-reviewer", f"proposal.{status}", "proposal", proposal_id,
                             decided))  # fmt: skip
            if execution_id is not None:
                said.append(("system", f"execution.{'succeeded' if succeeded else 'failed'}",
                             "execution", execution_id, finished))  # fmt: skip
            self._said(said, action, kind)
        with connection.cursor() as cursor:
            for table in (*self.tables, self.audit):
                table.flush(cursor)

    def _said(self, said, action, kind) -> None:
        """The records a proposal's history makes, chained on from the last one."""
        digest = self.digest
        for actor, verb, object_type, object_id, at in said:
            self.seq += 1
            moment = at.isoformat()
            object_id = str(object_id)
            data = self.json[("data", kind)]
            hashed = digest(self.prev, self.seq, moment, actor, verb, object_type, object_id,
                            {"action": action})  # fmt: skip
            self.ids["audit"] += 1
            self.audit.add(
                self.ids["audit"], self.seq, connection.ops.adapt_datetimefield_value(at), actor, verb,
                object_type, object_id, data, self.prev, hashed,
            )  # fmt: skip
            self.prev = hashed


class _Table:
    """Rows of one model written by ``executemany``: the named columns given per row, every
    other column at its default (``auto_now`` ones at the time the table was made).

    The ORM's ``bulk_create`` spends ~1 ms of Python per proposal building and
    compiling its rows; these statements are made once.
    """

    def __init__(self, model, *names: str):
        meta = model._meta
        given = [meta.get_field(name) for name in names]
        now = timezone.now()
        rest = [field for field in meta.concrete_fields if field not in given]
        self.fixed = tuple(
            field.get_db_prep_save(
                now if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False)
                else field.get_default(),
                connection,
            )
            for field in rest
        )  # fmt: skip
        quote = connection.ops.quote_name
        columns = ", ".join(quote(field.column) for field in [*given, *rest])
        marks = ", ".join(["%s"] * (len(given) + len(rest)))
        self.sql = f"INSERT INTO {quote(meta.db_table)} ({columns}) VALUES ({marks})"
        self.rows: list[tuple] = []

    def add(self, *values) -> None:
        self.rows.append(values + self.fixed)

    def flush(self, cursor) -> None:
        if self.rows:
            cursor.executemany(self.sql, self.rows)
            self.rows.clear()
